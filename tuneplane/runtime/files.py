"""The job side's one atomic writer: a file, or a folder, is seen whole or not at all.

Standard library only (it runs in training images); the developer side's writer is `lab.fs`, which
also keeps a file's mode and batches a commit's worth of files.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path


def write_text_atomic(path: Path, text: str) -> None:
    """`text` into a temporary file beside `path`, flushed to disk, then renamed over it: a reader sees
    the old file or the new one, never half; a failure leaves the old one and no temporary file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name[:64]}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="\n") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())  # the rename must not land before the bytes do
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def publish_dir(staged: Path, target: Path) -> None:
    """Move a folder filled under another name (`staged`, beside `target`) into place in one rename.
    `target` must not exist: a caller that replaces one removes it first, so a reader never finds
    half a folder where a whole one is expected."""
    os.replace(staged, target)
