"""`tp job logs [-f]` for Slurm runs: the job's output file on the shared filesystem."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

from tuneplane.backends.base import BackendError, BackendRef
from tuneplane.backends.rundir import follow_log

POLL = 0.5  # seconds between looks at a followed log (on a shared filesystem)


def log_path(ref: BackendRef) -> Path:
    return Path(ref.run_dir) / "logs" / f"slurm-{ref.uid}.out"


def read_log(ref: BackendRef, tail: int | None, follow: bool, finished: Callable[[], bool]) -> Iterator[str]:
    path = log_path(ref)
    if not follow and not path.exists():
        raise BackendError(f"job {ref.uid} has no output yet ({path}): it may still be pending")
    return follow_log(path, tail, follow, finished, poll=POLL)
