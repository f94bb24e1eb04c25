"""What the engines that keep a run in a directory share (local, and Slurm on its shared filesystem).

The artifact scan (the recipe's globs over the out dir, each match realpath-checked to stay inside it,
CONTRACT §10), an exclusive lock on a file for the length of a block, reading a run's log, with
`--tail` and `--follow`, and finding the trainer's own last exception in it. The engines may not import
each other, so this is their one copy.
"""

from __future__ import annotations

import contextlib
import fcntl
import glob
import os
import re
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from pathlib import Path

from tuneplane.runtime.jsonvalue import JSONObject

STEP = re.compile(r"(?:step|checkpoint|ckpt|epoch|iter)[-_]?(\d+)", re.IGNORECASE)
ARTIFACTS_FILE = "artifacts.json"  # what the local supervisor writes into the out dir; never an artifact
FOLLOW_LIMIT = 7 * 24 * 3600.0  # seconds: a follow ends at the latest after a week
TAIL_BYTES = 1024 * 1024  # of a log read for its last exception: a traceback is near the end
# Exceptions that only say a child process failed: a launcher's (accelerate's CalledProcessError,
# torchrun's ChildFailedError), never the trainer's own reason when the trainer's traceback is there too.
WRAPPERS = ("CalledProcessError", "ChildFailedError", "SystemExit", "KeyboardInterrupt")
RANK_PREFIX = re.compile(r"^\[(?:rank|default)\d*\]:\s?")  # torch.distributed prefixes each rank's lines


# ── artifacts ────────────────────────────────────────────────────────────────────────────────────


def collect_artifacts(out_dir: Path, globs: Sequence[Mapping[str, object]]) -> list[JSONObject]:
    """Matches of the recipe's globs that really are inside the out dir (symlinks out are dropped)."""
    root = os.path.realpath(out_dir)
    found: list[JSONObject] = []
    seen: set[str] = set()
    for item in globs:
        for match in sorted(glob.glob(os.path.join(glob.escape(str(out_dir)), str(item["pattern"])))):
            real, rel = os.path.realpath(match), os.path.relpath(match, out_dir).replace(os.sep, "/")
            if rel in seen or rel == ARTIFACTS_FILE or not _inside(real, root):
                continue
            seen.add(rel)
            entry: JSONObject = {
                "kind": str(item["kind"]),
                "path": rel,
                "format": str(item.get("format") or _format(real)),
                "size_bytes": _size(real, root),
            }
            step = STEP.search(os.path.basename(match))
            if step:
                entry["step"] = int(step.group(1))
            found.append(entry)
    return found


def _inside(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip(os.sep) + os.sep)


def _format(path: str) -> str:
    return "directory" if os.path.isdir(path) else (os.path.splitext(path)[1].lstrip(".") or "file")


def _size(path: str, root: str) -> int:
    if os.path.isfile(path):
        return os.path.getsize(path)
    total = 0
    for base, _dirs, files in os.walk(path):
        for name in files:
            real = os.path.realpath(os.path.join(base, name))
            if _inside(real, root) and os.path.isfile(real):
                total += os.path.getsize(real)
    return total


# ── locks ────────────────────────────────────────────────────────────────────────────────────────


@contextlib.contextmanager
def locked(path: Path) -> Iterator[None]:
    """An exclusive lock on `path`, held for the block (serialises the submitters of one run)."""
    with open(path, "a+") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


# ── logs ─────────────────────────────────────────────────────────────────────────────────────────


def follow_log(path: Path, tail: int | None, follow: bool, finished: Callable[[], bool], poll: float) -> Iterator[str]:
    """The log's lines (the last `tail` when positive); with `follow`, then what is appended until
    `finished()` says the run is over (and what it printed last), or a week has passed.

    With `follow`, a log not written yet is waited for; memory is bounded by `tail`, not the log.
    """
    deadline = time.monotonic() + FOLLOW_LIMIT
    while follow and not path.exists():
        if finished() or time.monotonic() > deadline:
            return
        time.sleep(poll)
    with open(path, encoding="utf-8", errors="replace") as handle:
        lines: Iterable[str] = deque(handle, maxlen=tail) if tail is not None and tail > 0 else handle
        partial = ""
        for line in lines:
            if follow and not line.endswith("\n"):
                partial = line  # the job is still writing this line: it is finished below
                break
            yield line.rstrip("\n")
        if not follow:
            return
        while time.monotonic() < deadline:
            chunk = handle.readline()
            if chunk:
                partial += chunk
                if partial.endswith("\n"):
                    yield partial.rstrip("\n")
                    partial = ""
                continue
            if finished():
                rest = handle.read()  # what the job printed between the last read and its end
                yield from (partial + rest).splitlines()
                return
            time.sleep(poll)


# ── the trainer's last exception ─────────────────────────────────────────────────────────────────


def read_tail(path: Path, limit: int = TAIL_BYTES) -> list[str]:
    """The lines of the last `limit` bytes of `path` (none when it cannot be read)."""
    try:
        with open(path, "rb") as handle:
            handle.seek(0, os.SEEK_END)
            size = handle.tell()
            handle.seek(max(0, size - limit))
            data = handle.read(limit)
    except OSError:
        return []
    lines = data.decode("utf-8", "replace").splitlines()
    return lines[1:] if size > limit else lines  # the first line may be cut


def last_exception(lines: Iterable[str]) -> str:
    """The last exception line of the last Python traceback in `lines` that is not a wrapper's.

    A trainer started by a launcher dies twice in its log: its own traceback (`FileNotFoundError: …`),
    then the launcher's (`subprocess.CalledProcessError: Command '[…]' returned non-zero exit status
    1`). A person can act on the first; the wrapper's is taken only when nothing else is there.
    """
    found: list[str] = []
    in_trace = False
    for raw in lines:
        line = RANK_PREFIX.sub("", raw.rstrip())
        if line.startswith("Traceback (most recent call last)"):
            in_trace = True
        elif in_trace and line and not line[0].isspace():
            found.append(line)
            in_trace = False
    own = [line for line in found if not _is_wrapper(line)]
    return (own or found or [""])[-1]


def _is_wrapper(line: str) -> bool:
    name = line.split(":", 1)[0].strip().rsplit(".", 1)[-1]
    return name in WRAPPERS
