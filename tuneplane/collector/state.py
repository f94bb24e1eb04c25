"""The collector's offsets file, `<out>/.tuneplane/collector-state.json`, read and written so that
nothing found at its path can hang, crash or fill memory: a FIFO there is not waited on (opening it
to read blocks until a writer comes), a folder or device is not read, a file over `MAX_STATE` is not
read at all, and a write that fails is told, not raised (the points still go; a restart re-sends)."""

from __future__ import annotations

import json
import os
import stat
from collections.abc import Callable
from pathlib import Path

from tuneplane.runtime.files import atomic_write

# ~100 bytes an event file: 64 MiB is some 500,000 files, far past a job's (100,000 made 14 MB)
MAX_STATE = 64 * 1024 * 1024
# entries read at most: twice the 100,000 files of a long job; 64 MiB of `"k":{}` would be millions
MAX_ENTRIES = 200_000


class Unreadable(ValueError):
    """The state cannot be used; the message says why."""


def read(path: str) -> dict[str, object] | None:
    """The `files` object of the state at `path`, None when there is none; raises Unreadable."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise Unreadable(exc.strerror or type(exc).__name__) from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise Unreadable("not a regular file")
        if info.st_size > MAX_STATE:
            raise Unreadable(f"over {MAX_STATE >> 20} MiB")
        with os.fdopen(fd, "rb", closefd=False) as handle:
            raw = json.loads(handle.read(MAX_STATE + 1), object_pairs_hook=_counted())
        entries = raw.get("files") if isinstance(raw, dict) else None
        if not isinstance(entries, dict):
            raise Unreadable("no files object")
        for name, entry in entries.items():
            if not isinstance(entry, dict) or not all(type(entry.get(k)) is int for k in ("offset", "ino")):
                raise Unreadable(f"entry {name[:200]!r} is not an object with an integer offset and ino")
        return entries
    except (OSError, ValueError, RecursionError) as exc:
        raise Unreadable(str(exc) or type(exc).__name__) from None
    finally:
        os.close(fd)


def _counted() -> Callable[[list[tuple[str, object]]], dict[str, object]]:
    """A JSON object hook that stops the parse past `MAX_ENTRIES` objects, so memory stays bounded."""
    seen = [0]

    def hook(pairs: list[tuple[str, object]]) -> dict[str, object]:
        seen[0] += 1
        if seen[0] > MAX_ENTRIES + 2:  # the entries, the files object, the top
            raise ValueError(f"over {MAX_ENTRIES} entries")
        return dict(pairs)

    return hook


def write(path: str, files: dict[str, dict[str, object]]) -> str:
    """Write the state atomically; '' when done, else why not."""
    try:
        target = Path(path)
        # its folder, not the out dir: one gone is the run's storage out of sight (a mount missing),
        # and a tree laid on the disk beneath the mount point would be hidden again when it returns
        target.parent.mkdir(exist_ok=True)
        atomic_write(target, json.dumps({"version": 1, "files": files}, separators=(",", ":")), parents=False)
    except OSError as exc:
        return exc.strerror or type(exc).__name__
    return ""


def dir_problem(out_dir: str, name: str) -> str | None:
    """Why the out dir's `.tuneplane` folder must not be used, or None. The collector writes its lock
    and offsets there and removes the unsent files it delivered: through a link, those would be
    another folder's files."""
    folder = os.path.join(out_dir, name)
    root = os.path.realpath(out_dir)
    if os.path.islink(folder) or os.path.dirname(os.path.realpath(folder)) != root:
        return (
            f"{folder} is a link out of the out dir; not collecting (remove the link: the collector "
            "keeps its state there and removes what it delivered)"
        )
    return None


def gone(path: str) -> bool:
    """Whether nothing is at `path` (an error that cannot tell says no: keep its offset)."""
    try:
        os.lstat(path)
    except FileNotFoundError:
        return True
    except OSError:
        return False  # cannot tell: keep its offset
    return False
