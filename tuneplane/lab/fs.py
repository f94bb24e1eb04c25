"""The one way a lab file is read, and the one way one is written.

Reading (`read_bytes`, `read_text`): everything tp reads from a lab or a clone goes through here.
Only regular files are read; FIFOs, devices, sockets and directories are refused from `lstat`/`stat`
without being opened for reading, so nothing can block or stream forever. A symlink is followed only
while its target stays inside the lab root, and never under `runs/`, `status/` or `plugins/` (what is
reviewed, written by the bot, or shipped must be the file itself). The size is checked before the
open and again with `fstat`, and at most limit+1 bytes are read. Each refusal is a LoadFailed carrying
a Problem that names the file.

Writing (`atomic_write`, `publish_dir`: `runtime.files`, the one writer both sides use): a temp file
in the same directory, fsync, then `os.replace`; a folder filled under another name goes into place
whole. Here too: a commit's worth of files at one sync (`atomic_write_all`) and a new file that never
replaces one (`write_new`).

Finding the lab (`find_lab_root`) lives here too, so a command that only needs the root (an idle
`tp bot` run) imports neither the models nor the YAML readers.
"""

from __future__ import annotations

import errno
import json
import os
import stat
from collections.abc import Mapping
from pathlib import Path

from tuneplane.errors import UsageError
from tuneplane.problems import Problem
from tuneplane.runtime.files import atomic_write as atomic_write  # the one writer, re-exported
from tuneplane.runtime.files import publish_dir as publish_dir
from tuneplane.runtime.files import staged

LAB_FILE = "tuneplane.yaml"
LEGACY_LAB_FILE = "starforge.yaml"

MAX_BYTES = 2 * 1024 * 1024  # a lab file bigger than this is a mistake, not a config
NO_LINK_AREAS = ("runs", "status", "plugins")
_CHUNK = 1 << 20


class LoadFailed(Exception):
    """The file cannot be read as data; `problem` says where and why."""

    def __init__(self, problem: Problem) -> None:
        super().__init__(problem.message)
        self.problem = problem


def _refuse(rel: str, rule: str, message: str, hint: str, line: int = 0) -> LoadFailed:
    return LoadFailed(Problem(rel, line, 1 if line else 0, rule, message, hint=hint))


def unreadable(rel: str, exc: OSError) -> LoadFailed:
    """Why a file could not be read, with the fix that fits the reason (a missing file is no permission issue)."""
    if exc.errno in (errno.ENOENT, errno.ENOTDIR):
        return _refuse(rel, "unreadable", "no such file", "check the path: is it spelled as the lab has it?")
    if exc.errno in (errno.EACCES, errno.EPERM):
        return _refuse(rel, "unreadable", f"cannot read file: {exc.strerror}", "check its permissions")
    return _refuse(rel, "unreadable", f"cannot read file: {exc.strerror or exc}", "check the file and its folder")


def _kind(mode: int) -> str:
    for test, name in (
        (stat.S_ISDIR, "a directory"),
        (stat.S_ISFIFO, "a FIFO (named pipe)"),
        (stat.S_ISSOCK, "a socket"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
    ):
        if test(mode):
            return name
    return "not a regular file"


def describe(path: Path) -> str:
    """What sits at `path`, in words ("a FIFO (named pipe)", "a broken symlink", …)."""
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return "a broken symlink" if os.path.islink(path) else "missing"
    return "a regular file" if stat.S_ISREG(mode) else _kind(mode)


def display(path: Path, root: Path | None) -> str:
    """`path` relative to `root` as written (a link is shown where it sits), else as given."""
    if root is not None:
        try:
            return Path(os.path.abspath(path)).relative_to(os.path.abspath(root)).as_posix()
        except ValueError:
            pass
    return Path(path).as_posix()


def present(path: Path) -> bool:
    """Anything at all at `path`, a broken link or a FIFO included: the reader judges what it is."""
    return os.path.lexists(path)


def find_lab_root(start: Path | None = None) -> Path:
    """The nearest directory at or above `start` holding `tuneplane.yaml` (or a StarForge marker)."""
    try:
        here = (start or Path.cwd()).resolve()
    except FileNotFoundError:
        raise UsageError(
            "the current directory no longer exists (it was deleted or moved)",
            hint='cd into the lab again, e.g. `cd "$PWD"` after it was recreated',
        ) from None
    for candidate in (here, *here.parents):
        if present(candidate / LAB_FILE) or (candidate / LEGACY_LAB_FILE).is_file():
            return candidate  # whatever sits at tuneplane.yaml is judged by the reader, not skipped
    raise UsageError(
        f"not inside a TunePlane lab: no {LAB_FILE} in {here} or above",
        hint="run `tp init` to create a lab, or cd into one",
    )


def check_entry(path: Path, root: Path | None = None, rel: str | None = None) -> os.stat_result:
    """The stat of a regular file that may be opened; LoadFailed for anything else. Opens nothing."""
    rel = rel or display(path, root)
    try:
        link = os.lstat(path)
    except OSError as exc:
        raise unreadable(rel, exc) from None
    is_link = stat.S_ISLNK(link.st_mode)
    if root is not None:
        _check_links(Path(path), Path(root), rel, is_link)
    try:
        st = os.stat(path)
    except OSError as exc:
        target = os.readlink(path) if is_link else ""
        raise _refuse(
            rel,
            "not-regular",
            f"is a broken symlink (to {target}): {exc.strerror}",
            "point it at a file inside the lab, or replace it with the file",
        ) from None
    if not stat.S_ISREG(st.st_mode):
        via = f" (a symlink to {os.readlink(path)})" if is_link else ""
        raise _refuse(
            rel,
            "not-regular",
            f"is {_kind(st.st_mode)}{via}, not a regular file; it was not read",
            "replace it with an ordinary file",
        )
    return st


def _check_links(path: Path, root: Path, rel: str, is_link: bool) -> None:
    inside = os.path.relpath(os.path.abspath(path), os.path.abspath(root))
    real_root = os.path.realpath(root)
    real = os.path.realpath(path)
    shown = os.readlink(path) if is_link else real
    area = Path(inside).parts[0] if inside != "." else ""
    if area in NO_LINK_AREAS and real != os.path.normpath(os.path.join(real_root, inside)):
        raise _refuse(
            rel,
            "symlink",
            f"is a symlink (to {shown}); symlinks are not followed under {area}/",
            f"commit the file itself under {area}/, not a link",
        )
    if real != real_root and not real.startswith(real_root + os.sep):
        raise _refuse(
            rel,
            "symlink",
            f"is a symlink to {shown}, outside the lab; it was not read",
            "keep every lab file inside the lab: copy it in instead of linking",
        )


def read_bytes(path: Path, limit: int = MAX_BYTES, root: Path | None = None, rel: str | None = None) -> bytes:
    """The bytes of a regular lab file of at most `limit` bytes, or LoadFailed with a Problem.

    Judged before the open, opened non-blocking (a FIFO swapped in cannot hang it), judged again
    with fstat, and never more than limit+1 bytes read.
    """
    rel = rel or display(path, root)
    _check_size(check_entry(path, root, rel).st_size, limit, rel)
    flags = os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(path, flags)
    except OSError as exc:
        raise unreadable(rel, exc) from None
    chunks: list[bytes] = []
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):  # replaced between the check and the open
            raise _refuse(
                rel,
                "not-regular",
                f"is {_kind(st.st_mode)}, not a regular file; it was not read",
                "replace it with an ordinary file",
            )
        _check_size(st.st_size, limit, rel)
        left = limit + 1
        while left > 0 and (chunk := os.read(fd, min(left, _CHUNK))):
            chunks.append(chunk)
            left -= len(chunk)
    except OSError as exc:
        raise unreadable(rel, exc) from None
    finally:
        os.close(fd)
    data = b"".join(chunks)
    _check_size(len(data), limit, rel)
    return data


def _check_size(size: int, limit: int, rel: str) -> None:
    if size > limit:
        shown = f"{limit // (1024 * 1024)} MiB" if limit >= 1024 * 1024 else f"{limit} bytes"
        raise _refuse(
            rel,
            "too-large",
            f"file is {size / 1e6:.1f} MB; files over {shown} are refused",
            "keep data out of lab files; point at it with a path instead",
            line=1,
        )


def read_text(path: Path, limit: int = MAX_BYTES, root: Path | None = None, rel: str | None = None) -> str:
    """`read_bytes` decoded as UTF-8; a NUL byte or a bad byte is a Problem at its line and column."""
    rel = rel or display(path, root)
    return decode(read_bytes(path, limit, root, rel), rel)


def decode(raw: bytes, rel: str) -> str:
    if b"\0" in raw:
        _nul(raw, rel)
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line, col = _place(raw, exc.start)
        raise LoadFailed(
            Problem(
                rel,
                line,
                col,
                "encoding",
                f"not valid UTF-8 (byte 0x{raw[exc.start]:02x})",
                hint="re-save the file with UTF-8 encoding",
            )
        ) from None


def _nul(raw: bytes, rel: str) -> None:
    sample = raw[:8192]
    controls = sum(1 for b in sample if b < 32 and b not in (9, 10, 13))
    if controls * 4 > len(sample) or not _is_utf8(sample):  # mostly control bytes: not text at all
        raise LoadFailed(
            Problem(rel, 1, 1, "binary", "this is a binary file, not text", hint="save the file as UTF-8 text")
        )
    at = raw.index(b"\0")
    line, col = _place(raw, at)
    raise LoadFailed(
        Problem(
            rel,
            line,
            col,
            "nul-byte",
            "a NUL byte (\\0) is in the text; text files cannot hold one",
            hint="delete the invisible character at this place (an editor or a tool put it there)",
        )
    )


def _is_utf8(sample: bytes) -> bool:
    try:
        sample.decode("utf-8")
    except UnicodeDecodeError as exc:
        return exc.start >= len(sample) - 3  # a character cut at the sample's end is still text
    return True


def _place(raw: bytes, offset: int) -> tuple[int, int]:
    before = raw[:offset]
    return before.count(b"\n") + 1, offset - (before.rfind(b"\n") + 1) + 1


# ── writing ─────────────────────────────────────────────────────────────────────────────────────────


def write_json(path: Path, data: object, parents: bool = True) -> None:
    """2-space indent, sorted keys, UTF-8, trailing newline, atomically (`parents`: as `atomic_write`)."""
    atomic_write(path, json.dumps(data, indent=2, sort_keys=True, ensure_ascii=False) + "\n", parents=parents)


def write_new(path: Path, content: str | bytes) -> None:
    """`content` as a new file at `path`, whole or not at all, and never over a file that is there, even
    one that appeared since the caller looked: staged beside it, then hard-linked to the name, which
    fails if the name is taken (an exclusive create where the file system has no hard links).
    FileExistsError when it is taken; the mode is that of any new file (0666 less the umask)."""
    tmp = staged(path, content, None)
    try:
        try:
            os.link(tmp, path)
        except OSError as exc:
            if exc.errno not in (errno.EPERM, errno.EOPNOTSUPP, errno.ENOTSUP, errno.EMLINK):
                raise
            with open(path, "xb") as out:  # no hard links here: still never over a file
                out.write(content.encode("utf-8") if isinstance(content, str) else content)
    finally:
        Path(tmp).unlink(missing_ok=True)


def atomic_write_all(files: Mapping[Path, str]) -> None:
    """Many files at one durability cost: each staged beside its target, one `sync`, then the renames.
    A reader (or a process killed half way) sees each file old or new, never half written; a failure
    before the renames leaves every target as it was."""
    moves: list[tuple[str, Path]] = []
    try:
        for path, text in files.items():
            moves.append((staged(path, text, None, sync=False), path))
        if moves:
            os.sync()
        for tmp, path in moves:
            os.replace(tmp, path)
        moves = []
    finally:
        for tmp, _path in moves:
            Path(tmp).unlink(missing_ok=True)
