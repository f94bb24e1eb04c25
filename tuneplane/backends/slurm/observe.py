"""Observing a Slurm job: `scontrol show job` while Slurm remembers it, `sacct` when accounting exists,
and the markers the batch script writes (start, exit code and end time) when it has forgotten.

Slurm states → our phases:
  PENDING, CONFIGURING, RESV_DEL_HOLD → Pending (Slurm's reason)
  REQUEUED, REQUEUE_HOLD, REQUEUE_FED, or PENDING after a restart → Running, reason REQUEUED (phases
      never go back; the message says it waits to start again)
  RUNNING, COMPLETING, SUSPENDED, STAGE_OUT, SIGNALING, RESIZING → Running
  COMPLETED → Succeeded
  FAILED, NODE_FAIL, OUT_OF_MEMORY, TIMEOUT, BOOT_FAIL, DEADLINE, PREEMPTED, SPECIAL_EXIT, REVOKED →
      Failed, with the state as the reason (`NonZeroExitCode` for FAILED)
  CANCELLED → Cancelled
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tuneplane.backends.base import BackendError, BackendRef, Observation
from tuneplane.backends.slurm.commands import SlurmCommands, SlurmUnavailable, first_line, parse_fields
from tuneplane.constants import CANCELLED, FAILED, PENDING, RUNNING, SUCCEEDED, UNKNOWN, as_utc
from tuneplane.render.slurm import STATE_DIR

SLURM_PENDING = frozenset({"PENDING", "CONFIGURING", "REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED", "RESV_DEL_HOLD"})
SLURM_RUNNING = frozenset({"RUNNING", "COMPLETING", "SUSPENDED", "STAGE_OUT", "SIGNALING", "RESIZING"})
SLURM_FAILED = frozenset({"FAILED", "NODE_FAIL", "OUT_OF_MEMORY", "TIMEOUT", "BOOT_FAIL", "DEADLINE", "PREEMPTED",
                    "SPECIAL_EXIT", "REVOKED"})
MESSAGES = {
    "TIMEOUT": "Slurm stopped the job at its time limit (the run's timeout)",
    "NODE_FAIL": "a node of the job failed or was set DOWN while it ran",
    "OUT_OF_MEMORY": "the job ran out of memory (raise memory_per_node)",
    "PREEMPTED": "a job of higher priority preempted this one",
    "BOOT_FAIL": "a node of the job failed to boot",
    "DEADLINE": "the job reached its deadline",
}
NOT_FOUND = "invalid job id"
_UNSET = ("", "Unknown", "None", "N/A")


def observe(commands: SlurmCommands, ref: BackendRef, accounting: bool) -> Observation:
    state = Path(ref.namespace) / STATE_DIR
    marker = read_marker(state, "exit", ref.uid)
    try:
        fields = show_job(commands, ref.uid)
        if fields is None and accounting:
            fields = sacct_job(commands, ref.uid)
    except SlurmUnavailable:
        if marker is None:
            raise
        fields = None  # the controller is away, but the job told us how it ended
    if fields is None:
        return from_marker(ref, state, marker)
    return from_fields(fields, read_marker(state, "started", ref.uid), marker)


def show_job(commands: SlurmCommands, job_id: str) -> dict[str, str] | None:
    result = commands.run("scontrol", "show", "job", "--oneliner", job_id)
    if result.code:
        if NOT_FOUND in result.err.lower():
            return None
        raise BackendError(f"scontrol show job {job_id} failed ({result.code}): {first_line(result.err)}")
    lines = [line for line in result.out.splitlines() if line.strip()]
    return parse_fields(lines[0]) if lines else None


def sacct_job(commands: SlurmCommands, job_id: str) -> dict[str, str] | None:
    """The job's accounting record (State, ExitCode, Start, End), in scontrol's field names."""
    result = commands.run("sacct", "--noheader", "--parsable2", "--allocations", f"--jobs={job_id}",
                          "--format=State,ExitCode,Start,End,Reason")
    if result.code:
        return None
    for line in result.out.splitlines():
        parts = line.strip().split("|")
        if len(parts) >= 5 and parts[0]:
            return {"JobState": parts[0].split()[0], "ExitCode": parts[1], "StartTime": parts[2],
                    "EndTime": parts[3], "Reason": parts[4]}
    return None


def accounting_enabled(commands: SlurmCommands) -> bool:
    """Whether the cluster keeps accounting records (`sacct` answers)."""
    try:
        result = commands.run("scontrol", "show", "config")
    except BackendError:
        return False
    for line in result.out.splitlines():
        key, _, value = line.partition("=")
        if key.strip() == "AccountingStorageType":
            return value.strip() not in ("accounting_storage/none", "(null)", "")
    return False


def from_fields(fields: dict[str, str], started: dict[str, Any] | None,
                marker: dict[str, Any] | None) -> Observation:
    state = fields.get("JobState", "").split("+")[0].upper()
    reason = fields.get("Reason", "")
    start = _time(fields.get("StartTime")) or (started or {}).get("started_at")
    end = _time(fields.get("EndTime"))
    code = exit_code(fields.get("ExitCode", ""))
    if marker is not None and isinstance(marker.get("exit_code"), int):
        code = marker["exit_code"]  # the script's own view: the entrypoint's code, not bash's
    restarts = int(fields.get("Restarts", "0")) if fields.get("Restarts", "0").isdigit() else 0
    if state in SLURM_PENDING and (restarts or state.startswith("REQUEUE")):
        # phases never go back: a requeued job stays Running in the status, and says why it waits
        return Observation(RUNNING, reason="REQUEUED", started_at=start,
                           message=f"Slurm requeued the job (restart {restarts}); it waits to start again: {reason}")
    if state in SLURM_PENDING:
        shown = "None" if reason in _UNSET else reason
        return Observation(PENDING, reason="" if shown == "None" else reason,
                           message=f"waiting in the Slurm queue: {shown}" if shown != "None" else "")
    if state in SLURM_RUNNING:
        return Observation(RUNNING, reason=state if state != "RUNNING" else "", started_at=start)
    if state == "COMPLETED":
        return Observation(SUCCEEDED, started_at=start, finished_at=end, exit_code=0 if code is None else code)
    if state == "CANCELLED":
        return Observation(CANCELLED, reason="Cancelled", message="the Slurm job was cancelled",
                           started_at=start, finished_at=end, exit_code=code)
    if state in SLURM_FAILED:
        why = "NonZeroExitCode" if state == "FAILED" else state
        message = MESSAGES.get(state) or f"the job exited with code {code}"
        return Observation(FAILED, reason=why, message=message, started_at=start, finished_at=end, exit_code=code)
    return Observation(UNKNOWN, message=f"Slurm reports state {state or '(none)'} for the job")


def from_marker(ref: BackendRef, state: Path, marker: dict[str, Any] | None) -> Observation:
    """Slurm has forgotten the job: what the script wrote, or a lost job."""
    started = read_marker(state, "started", ref.uid)
    if marker is None:
        return Observation(FAILED, reason="Lost",
                           message=f"Slurm no longer knows job {ref.uid} and the job left no exit marker "
                                   f"in {state} (it ended without running its exit trap)",
                           started_at=(started or {}).get("started_at"))
    code = marker.get("exit_code")
    code = code if isinstance(code, int) else None
    return Observation(SUCCEEDED if code == 0 else FAILED, reason="" if code == 0 else "NonZeroExitCode",
                       message="" if code == 0 else f"the job exited with code {code}",
                       started_at=(started or {}).get("started_at"), finished_at=marker.get("finished_at"),
                       exit_code=code)


def read_marker(state: Path, kind: str, job_id: str) -> dict[str, Any] | None:
    try:
        data = json.loads((state / f"{kind}.{job_id}").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) and str(data.get("job_id")) == job_id else None


def exit_code(text: str) -> int | None:
    """`ExitCode=7:0` → 7; a job killed by a signal (`0:15`) → 128 + signal, as a shell reports it."""
    code, _, signal = text.partition(":")
    if not code.isdigit():
        return None
    if int(code) == 0 and signal.isdigit() and int(signal):
        return 128 + int(signal)
    return int(code)


def _time(value: str | None) -> str | None:
    """Slurm's local `2026-01-02T03:04:05` as ISO-8601 UTC (the controller's clock, in UTC)."""
    if not value or value in _UNSET:
        return None
    return as_utc(value, local=True)
