"""Observing a Slurm job, one attempt at a time: the phase and reason come only from the newest
attempt's own evidence.

Evidence, in order of authority:
1. Slurm's word while it knows the job (`scontrol show job`, else `sacct` where accounting exists):
   its state, its restart count (attempt = restarts + 1), times and exit code;
2. the batch script's markers of each attempt in `<run dir>/.tuneplane/slurm/`:
   `<job>.<attempt>.started` and `<job>.<attempt>.exit` (exit code, the signal that ended the attempt,
   and Slurm's state at that moment), cleared when an attempt starts, so an older attempt's end never
   decides a newer one's;
3. each node's launcher record (`runtime.attempts`): which rank failed first, on which node, with
   which error line and log tail;
4. the job's output (`logs/slurm-<job>.out`, per-rank labelled): slurmstepd's memory kill and srun's
   word on which task failed, for ranks killed before they could write.

A controller that does not answer gives `Unknown` (nothing is decided until it answers), never a
verdict read from files alone: that is how a paused slurmctld turned a requeued run `Succeeded`.

Slurm states → the newest attempt's reason (and the run's phase):
  PENDING, CONFIGURING… → Pending (Slurm's queue reason); after a restart: the run Pending again, reason
      REQUEUED, until the next attempt starts
  RUNNING, COMPLETING, SUSPENDED… → Running
  COMPLETED → Completed (Succeeded)
  CANCELLED → Cancelled (Cancelled)
  TIMEOUT, DEADLINE → Timeout; NODE_FAIL, BOOT_FAIL → NodeFailure; PREEMPTED → Preempted;
  OUT_OF_MEMORY → OutOfMemory; FAILED → OutOfMemory when slurmstepd killed a step for memory, Signal
      when the failing rank died of a signal, else Error (all Failed)
An attempt that Slurm requeued ended Preempted, unless its marker names a better cause.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any, cast

from tuneplane.backends.base import AttemptReport, BackendError, BackendRef, Observation
from tuneplane.backends.slurm.commands import SlurmCommands, SlurmUnavailable, first_line, parse_fields
from tuneplane.constants import (
    CANCELLED,
    FAILED,
    PENDING,
    RUNNING,
    SUCCEEDED,
    UNKNOWN,
    AttemptReason,
    ObservedPhase,
    as_utc,
)
from tuneplane.render.slurm import STATE_DIR
from tuneplane.runtime import attempts as records
from tuneplane.runtime.records import Record, field

SLURM_PENDING = frozenset({"PENDING", "CONFIGURING", "REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED", "RESV_DEL_HOLD"})
SLURM_RUNNING = frozenset({"RUNNING", "COMPLETING", "SUSPENDED", "STAGE_OUT", "SIGNALING", "RESIZING"})
REASONS: dict[str, AttemptReason] = {
    "COMPLETED": "Completed",
    "CANCELLED": CANCELLED,  # the reason reads as the phase it leads to
    "TIMEOUT": "Timeout",
    "DEADLINE": "Timeout",
    "NODE_FAIL": "NodeFailure",
    "BOOT_FAIL": "NodeFailure",
    "PREEMPTED": "Preempted",
    "OUT_OF_MEMORY": "OutOfMemory",
    "SPECIAL_EXIT": "Error",
    "REVOKED": CANCELLED,
}
MESSAGES: dict[str, str] = {
    "Timeout": "Slurm stopped the job at its time limit (the run's timeout, or its profile's time_limit)",
    "NodeFailure": "a node of the job failed or was set DOWN while it ran",
    "OutOfMemory": "a rank ran out of memory (raise memory_per_node, or use less)",
    "Preempted": "Slurm preempted or requeued the job",
    CANCELLED: "the Slurm job was cancelled",
    "Lost": "the job ended without writing its end marker",
    "GpuOveruse": "the GPU watchdog stopped the job (cluster.gpu_watchdog: stop)",
}
MEMORY_KILL = ("exceeded memory limit", "exceeded job memory limit", "oom-kill", "oom_kill", "out of memory")
NOT_FOUND = "invalid job id"
LOG_READ = 256 * 1024  # bytes read from the end of the job's output
_UNSET = ("", "Unknown", "None", "N/A")
_MARKER = re.compile(r"^(?P<job>[0-9]+(?:_[0-9]+)?)\.(?P<attempt>[0-9]+)\.(?P<kind>started|exit)$")
_SRUN_TASK = re.compile(
    r"srun: error: (?P<node>\S+): tasks? (?P<rank>\d+)(?:-\d+)?: "
    r"(?:Exited with exit code (?P<code>\d+)|(?P<killed>Killed|Terminated))"
)
_LABEL = re.compile(r"^\s*(\d+): ")
_STEPD_END = re.compile(
    r"\*\*\* (?P<what>JOB|STEP) \S+ ON \S+ CANCELLED AT \S+"
    r"(?: DUE TO (?P<why>[A-Z ]+)[^*]*)? \*\*\*"
)
_NODE_FAILURE = re.compile(r"srun: error: Node failure on (?P<node>\S+)")
STEPD_CAUSES: dict[str, AttemptReason] = {
    "TIME LIMIT": "Timeout",
    "JOB REQUEUE": "Preempted",
    "PREEMPTION": "Preempted",
    "NODE FAILURE": "NodeFailure",
}


def observe(commands: SlurmCommands, ref: BackendRef, accounting: bool) -> Observation:
    try:
        fields = show_job(commands, ref.uid)
        if fields is None and accounting:
            fields = sacct_job(commands, ref.uid)
    except SlurmUnavailable as exc:
        return Observation(
            UNKNOWN,
            reason="ControllerUnavailable",
            message=f"{exc}; the run's state is decided once slurmctld answers again",
        )
    evidence = Evidence.read(Path(ref.run_dir), ref.uid)
    return from_slurm(fields, evidence) if fields is not None else from_evidence(evidence, ref)


# ── evidence on the shared filesystem ──────────────────────────────────────────────────────────────


class Evidence(Record):
    """What the job left in its run directory, by attempt."""

    started: dict[int, dict[str, Any]] = field(default_factory=dict)
    ended: dict[int, dict[str, Any]] = field(default_factory=dict)
    nodes: dict[int, list[dict[str, Any]]] = field(default_factory=dict)  # launcher records by node rank
    log: dict[int, list[str]] = field(default_factory=dict)  # each attempt's part of the job's output

    @classmethod
    def read(cls, run_dir: Path, job_id: str) -> Evidence:
        log = _log_sections(run_dir / "logs" / f"slurm-{job_id}.out", job_id)
        nodes = {number: [dict(record) for record in ranks] for number, ranks in records.read_all(run_dir).items()}
        found = cls(nodes=nodes, log=log)
        state = run_dir / STATE_DIR
        try:
            names = os.listdir(state)
        except OSError:
            names = []
        for name in names:
            match = _MARKER.match(name)
            if match is None or match["job"] != job_id:
                continue
            data = _read_json(state / name)
            if data is not None:
                target = found.started if match["kind"] == "started" else found.ended
                target[int(match["attempt"])] = data
        return found

    def newest(self) -> int:
        return max([*self.started, *self.ended, *self.nodes, 0])

    def stepd_cause(self, attempt: int) -> AttemptReason | None:
        """Why slurmstepd says it stopped the attempt (`*** JOB 7 ON n1 CANCELLED AT … DUE TO TIME LIMIT ***`):
        the batch script, signalled while Slurm is ending the job, only sees the state COMPLETING."""
        for line in reversed(self.log.get(attempt, [])):
            match = _STEPD_END.search(line)
            if match:
                return STEPD_CAUSES.get((match["why"] or "").strip(), CANCELLED)
        return None

    def failed_node(self, attempt: int) -> str:
        """The node srun says failed under the attempt, or ''."""
        found = (_NODE_FAILURE.search(line) for line in self.log.get(attempt, []))
        return next((match["node"] for match in found if match), "")

    def memory_killed(self, attempt: int) -> bool:
        return any(needle in line.lower() for line in self.log.get(attempt, []) for needle in MEMORY_KILL)


def _read_json(path: Path) -> dict[str, Any] | None:
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            data = json.loads(handle.read(records.RECORD_LIMIT))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def _log_sections(path: Path, job_id: str) -> dict[int, list[str]]:
    """The job's output split at each attempt's first line (`tuneplane: job <id> attempt <n> started`)."""
    try:
        with open(path, "rb") as handle:
            handle.seek(max(0, os.fstat(handle.fileno()).st_size - LOG_READ))
            text = handle.read().decode("utf-8", "replace")
    except OSError:
        return {}
    head = re.compile(rf"^tuneplane: job {re.escape(job_id)} attempt (\d+) started$")
    sections: dict[int, list[str]] = {}
    current = 0
    for line in text.splitlines():
        match = head.match(line)
        if match:
            current = int(match.group(1))
            continue
        if current:
            sections.setdefault(current, []).append(line)
    return sections


# ── one attempt ────────────────────────────────────────────────────────────────────────────────────


def report(
    evidence: Evidence,
    number: int,
    reason: AttemptReason | None,
    slurm_code: int | None = None,
    start: str | None = None,
    end: str | None = None,
) -> AttemptReport:
    """Attempt `number` as its evidence tells it, ended for `reason` (None: under way)."""
    started, ended = evidence.started.get(number, {}), evidence.ended.get(number, {})
    failing = failing_rank(evidence, number) if reason not in (None, "Completed") else {}
    if reason == "NodeFailure":  # the node that failed, not a rank Slurm stopped because of it
        failing = {"node": evidence.failed_node(number)} if evidence.failed_node(number) else {}
    code = failing.get("exit_code")
    if code is None and reason is not None:
        code = ended.get("exit_code") if isinstance(ended.get("exit_code"), int) else slurm_code
    signal = failing.get("signal") or (ended.get("signal") or None)
    if reason is not None and signal is None and code is not None and code > 128:
        signal = code - 128
    nodes = tuple(n for n in str(started.get("nodes", "")).split(",") if n)
    tail = failing.get("log_tail") or ([] if reason in (None, "Completed") else evidence.log.get(number, [])[-20:])
    return AttemptReport(
        number=number,
        started_at=start or _str(started.get("started_at")) or _first_start(evidence, number),
        finished_at=(end or _str(ended.get("finished_at"))) if reason is not None else None,
        where=nodes or tuple(sorted({str(r.get("node")) for r in evidence.nodes.get(number, []) if r.get("node")})),
        exit_code=code if reason is not None else None,
        signal=signal if reason is not None else None,
        reason=reason,
        message=str(failing.get("error", "")) or _watchdog_warning(evidence, number),
        failed_node=str(failing.get("node", "")),
        failed_rank=failing.get("node_rank") if isinstance(failing.get("node_rank"), int) else None,
        log_tail=tuple(str(line) for line in tail),
        gpus=int(started["gpus"]) if isinstance(started.get("gpus"), int) else 0,
    )


def failing_rank(evidence: Evidence, number: int) -> dict[str, Any]:
    """The rank that failed first: one whose GPU watchdog stopped it, else one that ended non-zero on its
    own (not by a signal srun or Slurm sent when another rank failed), else the task srun names, else
    one that died of a signal."""
    nodes = evidence.nodes.get(number, [])
    stopped = [r for r in nodes if r.get("reason") == "GpuOveruse"]
    if stopped:
        return min(stopped, key=lambda r: str(r.get("finished_at")))
    own = [r for r in nodes if r.get("finished_at") and r.get("exit_code") not in (None, 0) and not r.get("signal")]
    if own:
        return min(own, key=lambda r: str(r.get("finished_at")))
    srun = _srun_failure(evidence.log.get(number, []))
    if srun:
        same = next((r for r in nodes if r.get("node_rank") == srun["node_rank"]), {})
        return {
            **srun,
            **{k: v for k, v in same.items() if k in ("error",)},
            "log_tail": _rank_lines(evidence.log.get(number, []), srun["node_rank"]),
        }
    signalled = [r for r in nodes if r.get("finished_at") and r.get("signal")]
    return min(signalled, key=lambda r: str(r.get("finished_at"))) if signalled else {}


def _srun_failure(lines: list[str]) -> dict[str, Any]:
    for line in lines:
        match = _SRUN_TASK.search(line)
        if match:
            code = int(match["code"]) if match["code"] else 137 if match["killed"] == "Killed" else 143
            found: dict[str, Any] = {"node": match["node"], "node_rank": int(match["rank"]), "exit_code": code}
            if code > 128:  # killed, or a launcher passing on the signal it got (128 + N)
                found["signal"] = code - 128
            return found
    return {}


def _rank_lines(lines: list[str], rank: int) -> list[str]:
    """The last lines of one rank's output (`--label` prefixes each with its task number) and slurmstepd's."""
    kept = [line for line in lines if (m := _LABEL.match(line)) is None or int(m.group(1)) == rank]
    return kept[-records.LOG_TAIL_LINES :]


def _watchdog_warning(evidence: Evidence, number: int) -> str:
    """The GPU watchdog's warning of the first node rank that has one, for a run it did not stop."""
    warned = [records.said(cast(records.AttemptRecord, r)) for r in evidence.nodes.get(number, []) if r.get("warning")]
    return warned[0] if warned else ""


def _first_start(evidence: Evidence, number: int) -> str | None:
    starts = [str(r["started_at"]) for r in evidence.nodes.get(number, []) if r.get("started_at")]
    return min(starts) if starts else None


def _str(value: object) -> str | None:
    return value if isinstance(value, str) and value else None


def ended_reason(evidence: Evidence, number: int, slurm_state: str = "") -> AttemptReason:
    """Why attempt `number` ended, from Slurm's state (now, or as the attempt's marker saw it) and the
    attempt's own evidence."""
    ended = evidence.ended.get(number, {})
    state = (slurm_state or str(ended.get("slurm_state", ""))).split("+")[0].upper()
    if state in REASONS and state != "COMPLETED":
        return REASONS[state]
    if evidence.memory_killed(number):
        return "OutOfMemory"
    said = None if slurm_state else evidence.stepd_cause(number)
    if said and said != CANCELLED:
        return said
    if state in SLURM_PENDING or state.startswith("REQUEUE"):
        return "Preempted"
    code = ended.get("exit_code")
    if state == "COMPLETED" or (not state and code == 0 and not ended.get("signal")):
        return "Completed"
    failing = failing_rank(evidence, number)
    if failing.get("reason") == "GpuOveruse":
        return "GpuOveruse"
    if said == CANCELLED and (failing.get("signal") or not failing):
        return CANCELLED  # a rank that failed on its own ends its step as cancelled too
    if failing.get("signal") and not failing.get("error"):
        return "Signal"
    if ended.get("signal") and not failing:
        return "Signal"
    return "Error"


def older_reports(evidence: Evidence, newest: int) -> list[AttemptReport]:
    """Every attempt before the newest: each ended, Preempted unless its own evidence says better."""
    out = []
    for number in range(1, newest):
        reason = ended_reason(evidence, number)
        if reason not in ("NodeFailure", "OutOfMemory", "Timeout", "Preempted"):
            reason = "Preempted"  # Slurm requeued it (a cancel, an exit would have ended the job)
        out.append(report(evidence, number, reason))
    return out


# ── the run ────────────────────────────────────────────────────────────────────────────────────────


def from_slurm(fields: dict[str, str], evidence: Evidence) -> Observation:
    state = fields.get("JobState", "").split("+")[0].upper()
    restarts = int(fields["Restarts"]) if fields.get("Restarts", "").isdigit() else 0
    newest = restarts + 1
    older = older_reports(evidence, newest)
    start, end = _time(fields.get("StartTime")), _time(fields.get("EndTime"))
    queue_reason = fields.get("Reason", "")
    shown = "" if queue_reason in _UNSET else queue_reason
    # a requeued job still ending its last attempt reads COMPLETING with the restart already counted:
    # the next attempt has not started until its own start marker says so
    requeuing = state == "COMPLETING" and restarts > 0 and newest not in evidence.started
    if requeuing or (state in SLURM_PENDING and (restarts or state.startswith("REQUEUE"))):
        # the job is under way again: the bot's fold puts the run back to Pending (reason REQUEUED) with
        # the ended attempts, until attempt `newest` starts; the message says why it waits
        waits = f"attempt {newest} waits to start" + (f": {shown}" if shown else "")
        return Observation(
            RUNNING,
            reason="REQUEUED",
            requeued=True,
            started_at=_run_start(older, start),
            message=f"Slurm requeued the job (restart {restarts}); {waits}",
            attempts=tuple(older),
        )
    if state in SLURM_PENDING:
        return Observation(PENDING, reason=shown, message=f"waiting in the Slurm queue: {shown}" if shown else "")
    if state in SLURM_RUNNING:
        current = report(evidence, newest, None, start=start)
        return Observation(
            RUNNING,
            reason=state if state != "RUNNING" else "",
            started_at=_run_start(older, start),
            attempts=(*older, current),
        )
    if state in REASONS or state == "FAILED":
        reason = ended_reason(evidence, newest, state)
        last = report(evidence, newest, reason, exit_code(fields.get("ExitCode", "")), start, end)
        return concluded((*older, last))
    return Observation(UNKNOWN, message=f"Slurm reports state {state or '(none)'} for the job", attempts=tuple(older))


def from_evidence(evidence: Evidence, ref: BackendRef) -> Observation:
    """Slurm has forgotten the job: the newest attempt's own markers and records decide."""
    newest = evidence.newest()
    state_dir = Path(ref.run_dir) / STATE_DIR
    if newest == 0:
        return Observation(
            FAILED,
            reason="Lost",
            message=f"Slurm no longer knows job {ref.uid} and the job left no marker in "
            f"{state_dir} (it never started, or ended without running its script)",
        )
    older = older_reports(evidence, newest)
    if newest not in evidence.ended:
        lost = report(evidence, newest, "Lost")
        return concluded(
            (*older, lost),
            f"Slurm no longer knows job {ref.uid} and attempt {newest} left no end "
            f"marker in {state_dir} (it was killed before its script could write it)",
        )
    return concluded((*older, report(evidence, newest, ended_reason(evidence, newest))))


def concluded(attempts: tuple[AttemptReport, ...], message: str = "") -> Observation:
    """The run as its newest (ended) attempt tells it."""
    last = attempts[-1]
    if last.reason == "Completed":
        return Observation(
            SUCCEEDED,
            started_at=_run_start(list(attempts), last.started_at),
            finished_at=last.finished_at,
            exit_code=0,
            attempts=attempts,
        )
    phase: ObservedPhase = CANCELLED if last.reason == CANCELLED else FAILED
    return Observation(
        phase,
        reason=last.reason or "",
        message=message or describe(last),
        started_at=_run_start(list(attempts), last.started_at),
        finished_at=last.finished_at,
        exit_code=last.exit_code,
        attempts=attempts,
    )


def describe(attempt: AttemptReport) -> str:
    """What a person reads first: why it ended, where, and the trainer's own error line."""
    parts = [MESSAGES.get(attempt.reason or "", "")]
    if attempt.failed_rank is None and attempt.failed_node:
        parts.append(f"node {attempt.failed_node}")  # a node that failed: no rank of it ended on its own
    elif attempt.failed_rank is not None:
        how = (
            f"killed by signal {attempt.signal}"
            if attempt.signal and attempt.reason != "Error"
            else f"exited with code {attempt.exit_code}"
        )
        parts.append(f"rank {attempt.failed_rank} on {attempt.failed_node or '?'} {how}")
    elif not parts[0]:
        parts.append(f"the job exited with code {attempt.exit_code}")
    if attempt.message:
        parts.append(attempt.message)
    return ": ".join(part for part in parts if part)


def _run_start(attempts: list[AttemptReport], fallback: str | None) -> str | None:
    starts = [a.started_at for a in attempts if a.started_at]
    return starts[0] if starts else fallback


# ── Slurm's commands ───────────────────────────────────────────────────────────────────────────────


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
    result = commands.run(
        "sacct",
        "--noheader",
        "--parsable2",
        "--allocations",
        f"--jobs={job_id}",
        "--format=State,ExitCode,Start,End,Reason,Restarts",
    )
    if result.code:
        return None
    for line in result.out.splitlines():
        parts = line.strip().split("|")
        if len(parts) >= 5 and parts[0]:
            return {
                "JobState": parts[0].split()[0],
                "ExitCode": parts[1],
                "StartTime": parts[2],
                "EndTime": parts[3],
                "Reason": parts[4],
                "Restarts": parts[5] if len(parts) > 5 else "0",
            }
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
