"""What a local run directory says of its run: the phase, and every attempt, from this machine's view.

The supervisor's file lock is authoritative on the machine that holds it only. A run of this machine
whose supervisor is gone is `Failed` with reason `Lost` (the newest attempt's own evidence); a run
supervised by another machine, or whose storage is not here, is `Unknown` with reason `NotReachable` and
the last heartbeat this machine can see: an engine that did not answer never makes a phase terminal.
"""

from __future__ import annotations

import time
from pathlib import Path

from tuneplane.backends.base import NO_HEARTBEAT, Observation
from tuneplane.backends.local.attempts import attempt_reports
from tuneplane.backends.local.files import (
    START_GRACE,
    attempt_of,
    elsewhere,
    log_name,
    read_heartbeat,
    read_state,
    supervisor_alive,
)
from tuneplane.constants import FAILED, PENDING, TERMINAL, UNKNOWN, epoch_of, observed_phase, utc_now
from tuneplane.runtime.jsonvalue import JSONObject, JSONValue


def observe_run_dir(run_dir: Path, uid: str = "") -> Observation:
    """The run in `run_dir` as its files and its supervisor's lock say; `uid` the submission asked about."""
    state = read_state(run_dir)
    if state is None:
        if not _storage_here(run_dir):  # another machine's disk: nothing here says how it went
            return Observation(
                UNKNOWN, reason=NO_HEARTBEAT, message=f"the run directory {run_dir} is not on this machine"
            )
        return Observation(
            FAILED,
            reason="Lost",
            message=f"the run directory {run_dir} has no state (deleted, or another storage root?)",
        )
    if uid and state.get("uid") and state["uid"] != uid:
        return Observation(FAILED, reason="Replaced", message=f"{run_dir} now holds another submission of this run")
    heartbeat = _text((read_heartbeat(run_dir) or {}).get("at"))
    phase = str(state.get("phase", PENDING))
    if phase not in TERMINAL and not supervisor_alive(run_dir):
        host = elsewhere(state)
        if host:  # its lock means nothing here: only its heartbeat tells whether it lives
            return _out_of_reach(run_dir, state, host, heartbeat)
        lost = _lost(run_dir, state)
        if lost is not None:
            return _with_attempts(lost, run_dir, state, heartbeat)
    found = Observation(
        observed_phase(phase),
        reason=str(state.get("reason", "")),
        message=str(state.get("message", "")),
        started_at=_text(state.get("started_at")),
        finished_at=_text(state.get("finished_at")),
        exit_code=_code(state.get("exit_code")),
    )
    return _with_attempts(found, run_dir, state, heartbeat)


def _lost(run_dir: Path, state: JSONObject) -> Observation | None:
    """A non-terminal run of this machine nobody supervises: still starting, or lost with its supervisor."""
    if not state.get("supervisor_started"):
        submitted = epoch_of(state.get("attempt_submitted_at") or state.get("submitted_at"))
        if submitted is None or time.time() - submitted < START_GRACE:
            return None
        return Observation(
            FAILED,
            reason="Lost",
            finished_at=utc_now(),
            message=f"the local supervisor never started; see {run_dir / 'supervisor.log'}",
        )
    return Observation(
        FAILED,
        reason="Lost",
        started_at=_text(state.get("started_at")),
        finished_at=utc_now(),
        message="the local supervisor stopped without recording how the run ended "
        f"(machine restarted or process killed); see {run_dir / log_name(attempt_of(state))}",
    )


def _out_of_reach(run_dir: Path, state: JSONObject, host: str, heartbeat: str | None) -> Observation:
    """Another machine's run: its phase as last written, never an end this machine cannot witness."""
    age = epoch_of(heartbeat)
    seen = (
        f"its last heartbeat was {time.time() - age:.0f} s ago ({heartbeat})"
        if age is not None
        else "no heartbeat of it is here"
    )
    found = Observation(
        UNKNOWN,
        reason=NO_HEARTBEAT,
        message=f"supervised on {host}, not this machine: {seen}; "
        f"it was {state.get('phase', PENDING)} when {run_dir / 'state.json'} was last written",
        started_at=_text(state.get("started_at")),
    )
    return _with_attempts(found, run_dir, state, heartbeat)


def _with_attempts(found: Observation, run_dir: Path, state: JSONObject, heartbeat: str | None) -> Observation:
    return found.replace(attempts=attempt_reports(run_dir, state, found), heartbeat_at=heartbeat)


def _text(value: JSONValue) -> str | None:
    """A time the state or heartbeat file records (they are ours: anything else is not one)."""
    return value if isinstance(value, str) else None


def _code(value: JSONValue) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _storage_here(run_dir: Path) -> bool:
    """Whether the folders the run directory lives in exist here (else: another machine's storage)."""
    return any(p.exists() for p in (run_dir, run_dir.parent, run_dir.parent.parent))
