"""The one atomic writer, for both sides: a file, or a folder, is seen whole or not at all.

Standard library only (it runs in training images). The developer side reaches it through `lab.fs`,
which adds the batch of a commit's worth of files and the new file that never replaces one.
"""

from __future__ import annotations

import os
from pathlib import Path


def file_mode(path: Path) -> int:
    """The mode an ordinary new file would get (0666 less the umask), or the existing file's mode."""
    try:
        return os.stat(path).st_mode & 0o777
    except OSError:
        mask = os.umask(0)
        os.umask(mask)
        return 0o666 & ~mask


def staged(path: Path, content: str | bytes, mode: int | None = None, sync: bool = True, parents: bool = True) -> str:
    """`content` in a new temporary file beside `path`, with the mode `mode`, else `path`'s own (a new
    file's: 0666 less the umask), flushed to disk unless `sync` is off (a batch syncs once). Without
    `parents`, `path`'s folder must be there already (FileNotFoundError if not): a writer into a run's
    folder that has gone out of sight (a mount gone) must not make it again on the disk beneath."""
    if parents:
        path.parent.mkdir(parents=True, exist_ok=True)
    # lazy: tempfile imports shutil, bz2 and lzma, which `tp validate` (it writes nothing) need not pay for
    import tempfile

    fd, tmp = tempfile.mkstemp(prefix=f".{path.name[:64]}.", suffix=".tmp", dir=path.parent)
    try:
        os.fchmod(fd, file_mode(path) if mode is None else mode)  # mkstemp makes 0600; a report is shared
        with os.fdopen(fd, "wb") as handle:
            handle.write(content if isinstance(content, bytes) else content.encode("utf-8"))
            if sync:
                handle.flush()
                os.fsync(handle.fileno())  # the rename must not land before the bytes do
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return tmp


def atomic_write(path: Path, content: str | bytes, mode: int | None = None, parents: bool = True) -> None:
    """A temporary file beside `path`, flushed to disk, then renamed over it: a reader sees the old file
    or the new one, never half; a failure leaves the old one and no temporary file. `mode` (0o600 for a
    secret) is set before a byte is written; by default the file keeps its mode. `parents`: as `staged`."""
    tmp = staged(path, content, mode, parents=parents)
    try:
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def publish_dir(staged_dir: Path, target: Path) -> None:
    """Move a folder filled under another name (`staged_dir`, beside `target`) into place in one rename.
    `target` must not exist: a caller that replaces one removes it first (a run's work tree), one that
    must not (a new experiment) has refused already, so a reader never finds half a folder."""
    os.replace(staged_dir, target)
