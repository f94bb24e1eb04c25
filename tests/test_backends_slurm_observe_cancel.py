"""A Slurm job cancelled in the second between its batch script's start and its step's: srun is refused
(the job is already completing), the script exits 1 before any signal reaches it, and slurmstepd writes
that it cancelled the job. The run is Cancelled with the exit code the script gave, and no signal is made
up for it, while Slurm knows the job and once it has forgotten it. The evidence is what a real cluster left
(seen once on the two-node cluster of `test_backends_slurm_attempts.py`, whose cancel now waits for the
trainer so that it exercises a signal)."""

from __future__ import annotations

from pathlib import Path

from tuneplane.backends.base import BackendRef
from tuneplane.backends.slurm.batch import KIND
from tuneplane.backends.slurm.observe import Evidence, from_evidence, from_slurm

LOG = [
    "srun: error: Unable to create step for job 14: Job/step already completing or completed",
    "slurmstepd-n1: error: *** JOB 14 ON n1 CANCELLED AT 2026-12-03T16:05:16 ***",
]


def _evidence() -> Evidence:
    return Evidence(
        started={1: {"started_at": "2026-12-03T16:05:15Z", "nodes": "n1"}},
        ended={1: {"finished_at": "2026-12-03T16:05:16Z", "exit_code": 1, "signal": 0, "slurm_state": ""}},
        log={1: list(LOG)},
    )


def test_a_job_cancelled_before_its_step_started_is_cancelled_while_slurm_knows_it() -> None:
    seen = from_slurm({"JobState": "CANCELLED", "ExitCode": "1:0", "Restarts": "0"}, _evidence())

    (attempt,) = seen.attempts
    assert (seen.phase, seen.reason, seen.exit_code) == ("Cancelled", "Cancelled", 1), seen
    assert (attempt.reason, attempt.exit_code, attempt.signal) == ("Cancelled", 1, None), attempt
    assert seen.message == "the Slurm job was cancelled", seen.message
    assert attempt.log_tail == tuple(LOG)


def test_a_job_cancelled_before_its_step_started_is_still_cancelled_once_slurm_forgets_it(tmp_path: Path) -> None:
    ref = BackendRef(backend="slurm", kind=KIND, name="r", run_dir=str(tmp_path), uid="14")
    seen = from_evidence(_evidence(), ref)

    (attempt,) = seen.attempts
    assert (seen.phase, seen.reason, seen.exit_code) == ("Cancelled", "Cancelled", 1), seen
    assert (attempt.reason, attempt.signal, attempt.finished_at) == ("Cancelled", None, "2026-12-03T16:05:16Z")
