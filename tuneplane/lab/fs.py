"""The lab's file system edge on the developer side: every atomic write goes through here.

A person's file or a status file is never half-written: text goes to a temporary file in the same
directory, is flushed to disk, and replaces the target in one rename.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any


def write_json(path: Path, data: Any) -> None:
    """2-space indent, sorted keys, UTF-8, trailing newline, atomically."""
    atomic_write(path, json.dumps(data, indent=2, sort_keys=True, ensure_ascii=False) + "\n")


def file_mode(path: Path) -> int:
    """The mode an ordinary new file would get (0666 less the umask), or the existing file's mode."""
    try:
        return os.stat(path).st_mode & 0o777
    except OSError:
        mask = os.umask(0)
        os.umask(mask)
        return 0o666 & ~mask


def atomic_write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        os.fchmod(fd, file_mode(path))  # mkstemp makes 0600; a lab file must stay readable by the team
        with os.fdopen(fd, "w", encoding="utf-8", newline="\n") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())  # the rename must not land before the bytes do
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
