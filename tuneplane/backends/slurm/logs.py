"""`tp job logs [-f]` for Slurm runs: the job's output file on the shared filesystem."""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Iterator
from pathlib import Path

from tuneplane.backends.base import BackendError, BackendRef

POLL = 0.5
FOLLOW_LIMIT = 7 * 24 * 3600.0  # seconds: a follow ends at the latest after a week


def log_path(ref: BackendRef) -> Path:
    return Path(ref.namespace) / "logs" / f"slurm-{ref.uid}.out"


def read_log(ref: BackendRef, tail: int | None, follow: bool, finished: Callable[[], bool]) -> Iterator[str]:
    path = log_path(ref)
    if not follow and not path.exists():
        raise BackendError(f"job {ref.uid} has no output yet ({path}): it may still be pending")
    return _lines(path, tail, follow, finished)


def _lines(path: Path, tail: int | None, follow: bool, finished: Callable[[], bool]) -> Iterator[str]:
    deadline = time.monotonic() + FOLLOW_LIMIT
    while follow and not path.exists():
        if finished() or time.monotonic() > deadline:
            return
        time.sleep(POLL)
    with open(path, encoding="utf-8", errors="replace") as handle:
        lines: Iterator[str] = iter(deque(handle, maxlen=tail)) if tail else iter(handle)
        for line in lines:
            yield line.rstrip("\n")
        if not follow:
            return
        partial = ""
        while time.monotonic() < deadline:
            chunk = handle.readline()
            if chunk:
                partial += chunk
                if partial.endswith("\n"):
                    yield partial.rstrip("\n")
                    partial = ""
                continue
            if finished():
                rest = handle.read()
                for line in (partial + rest).splitlines():
                    yield line
                return
            time.sleep(POLL)
