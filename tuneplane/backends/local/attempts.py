"""A local run's attempts as the engine reports them: the launcher's records first, else state.json.

The launcher writes `attempts/<attempt>-<node rank>.json` in the run directory when it starts and when
the trainer ends (`tuneplane.runtime.attempts`): those are the job side's own words (its exit code and
signal, the trainer's last exception line, the log's tail), so they are preferred. The supervisor
records every attempt's end in `state.json` (`attempts`), with the reason only it can know (a cancel,
the run's own time limit, GPUs that never came); a run whose launcher writes no records reads right
from that alone, and a run of an earlier tp with neither is read from its run-level state and its log.
"""

from __future__ import annotations

import typing
from pathlib import Path
from typing import Any

from tuneplane.backends.base import AttemptReport, Observation
from tuneplane.backends.local.files import MESSAGE_LINES, attempt_of, log_name
from tuneplane.backends.rundir import last_exception, read_tail
from tuneplane.constants import (
    ATTEMPT_REASONS,
    CANCELLED,
    FAILED,
    STOPPED_ON_REQUEST,
    SUCCEEDED,
    TERMINAL,
    AttemptReason,
)
from tuneplane.runtime.attempts import AttemptRecord, read_all, said

# A run-level reason of a run recorded before attempts were, as the attempt's reason.
_RUN_REASONS: dict[str, AttemptReason] = {
    "DeadlineExceeded": "Timeout",
    "ConfigError": "ConfigError",
    "Unschedulable": "Unschedulable",
    "Lost": "Lost",
    "GpuOveruse": "GpuOveruse",
    CANCELLED: STOPPED_ON_REQUEST,
}


def attempt_reports(run_dir: Path, state: dict[str, Any], found: Observation) -> tuple[AttemptReport, ...]:
    """Every attempt of the run, oldest first; the newest is the one `found` (the run's phase) is about."""
    ended = {a["number"]: a for a in state.get("attempts") or [] if _is_entry(a)}
    records = read_all(run_dir)
    newest = attempt_of(state)
    reports = []
    for number in sorted(set(ended) | set(records) | {newest}):
        entry = ended.get(number) or _current(run_dir, state, found, number == newest)
        record = (records.get(number) or [{}])[0]
        if number == newest and number not in ended and found.phase not in TERMINAL:
            record = _started_only(record)
        reports.append(_report(number, entry, record))
    return tuple(reports)


def _started_only(record: AttemptRecord) -> AttemptRecord:
    """The launcher's record of an attempt whose end the supervisor has not recorded yet, as of its start.

    The launcher writes its end record the moment the trainer exits; the supervisor records the run's
    end after that (the collector's last pass, artifacts, and a cancel or a time limit only it knows).
    Between the two, an attempt shown ended while its run is under way would read as a requeue (Slurm
    reports one so), so the newest attempt stays under way until the supervisor's own word."""
    started: AttemptRecord = {}
    if "started_at" in record:
        started["started_at"] = record["started_at"]
    if "node" in record:
        started["node"] = record["node"]
    return started


def record_cancel(state: dict[str, Any], message: str, at: str) -> list[dict[str, Any]]:
    """`state`'s attempts with the current one ended as cancelled (by a canceller, no supervisor left)."""
    number = attempt_of(state)
    earlier = [a for a in state.get("attempts") or [] if _is_entry(a) and a["number"] != number]
    return [
        *earlier,
        {
            "number": number,
            "started_at": state.get("started_at"),
            "finished_at": at,
            "reason": STOPPED_ON_REQUEST,
            "message": message,
        },
    ]


def _current(run_dir: Path, state: dict[str, Any], found: Observation, newest: bool) -> dict[str, Any]:
    """The newest attempt, not recorded as ended in state.json: under way, lost, or of an earlier tp."""
    if not newest:
        return {}
    entry: dict[str, Any] = {"started_at": found.started_at or state.get("started_at")}
    if found.phase not in TERMINAL:
        return entry
    entry.update(finished_at=found.finished_at, exit_code=found.exit_code, reason=_reason_of(found))
    if found.phase == FAILED and found.reason not in ("Lost", "ConfigError", "Unschedulable"):
        entry["message"] = last_exception(read_tail(run_dir / log_name(attempt_of(state))))
    else:
        entry["message"] = found.message.split("\n", 1)[0]
    entry["log_tail"] = read_tail(run_dir / log_name(attempt_of(state)), 64 * 1024)[-MESSAGE_LINES:]
    return entry


def _reason_of(found: Observation) -> AttemptReason:
    if found.phase == SUCCEEDED:
        return "Completed"
    if found.phase == CANCELLED:
        return STOPPED_ON_REQUEST
    return _RUN_REASONS.get(found.reason, "Error")


def _report(number: int, entry: dict[str, Any], record: AttemptRecord) -> AttemptReport:
    """One attempt: the launcher's record over the supervisor's entry, field by field."""
    exit_code = _int(record.get("exit_code"), entry.get("exit_code"))
    # A record that has the exit code has the signal too (absent: none); else the supervisor's word
    signal = _int(record.get("signal"), None) if "exit_code" in record else _int(entry.get("signal"), None)
    reason = _reason(entry.get("reason"), record, exit_code, signal)
    node = record.get("node")
    return AttemptReport(
        number=number,
        started_at=record.get("started_at") or entry.get("started_at"),
        finished_at=record.get("finished_at") or entry.get("finished_at"),
        where=(node,) if node else tuple(str(w) for w in entry.get("where") or ()),
        exit_code=exit_code,
        signal=signal,
        reason=reason,
        message=said(record) or str(entry.get("message") or ""),
        log_tail=tuple(record.get("log_tail") or entry.get("log_tail") or ()),
        gpus=_int(entry.get("gpus"), 0) or 0,
    )


def _reason(told: object, record: AttemptRecord, exit_code: int | None, signal: int | None) -> AttemptReason | None:
    """The supervisor's reason (it alone knows a cancel or a timeout), unless the launcher's record
    names the cause the exit hides (the GPU watchdog stopped it); from the record's end otherwise."""
    if record.get("reason") == "GpuOveruse" and told not in (STOPPED_ON_REQUEST, "Timeout"):
        return "GpuOveruse"
    if isinstance(told, str) and told in ATTEMPT_REASONS:
        if told == "Error" and signal is not None:
            return "Signal"  # the launcher saw the signal the supervisor could not
        return typing.cast(AttemptReason, told)
    if "finished_at" not in record or exit_code is None:
        return None  # under way, as far as anything here can tell
    if signal is not None:
        return "Signal"
    return "Completed" if exit_code == 0 else "Error"


def _int(first: object, second: object) -> int | None:
    for value in (first, second):
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    return None


def _is_entry(value: object) -> bool:
    return isinstance(value, dict) and isinstance(value.get("number"), int) and value["number"] >= 1
