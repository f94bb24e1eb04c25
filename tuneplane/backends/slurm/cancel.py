"""Cancelling a Slurm run: `scancel` by job id, and by the run's name for a job whose id was never recorded."""

from __future__ import annotations

from tuneplane.backends.base import BackendError, BackendRef
from tuneplane.backends.slurm.commands import SlurmCommands, first_line


def cancel(commands: SlurmCommands, ref: BackendRef) -> None:
    if ref.uid:
        result = commands.run("scancel", ref.uid)
        if result.code and "invalid job id" not in result.err.lower():
            raise BackendError(f"scancel {ref.uid} failed ({result.code}): {first_line(result.err)}")
    if ref.name:
        result = commands.run("scancel", f"--name={ref.name}")
        if result.code:
            raise BackendError(f"scancel --name={ref.name} failed ({result.code}): {first_line(result.err)}")
