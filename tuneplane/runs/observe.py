"""Observe: fold what a backend and the ingest receiver report into a run's status, legally.

A run has one or more attempts (an engine's requeue or pod replacement, the bot's retry), recorded
oldest first, and its phase is the newest attempt's truth: a new attempt starting moves the run back to
Pending or Running (written down in its history and attempts); a terminal phase comes only from the
newest attempt's own ending, never from an older attempt's exit marker nor from an engine that did not
answer (`Unknown` keeps the phase). Within one attempt phases only move forward (Submitted → Pending →
Running → an end, steps may be skipped), so a backend that cannot tell attempts apart and reports a
stale phase (two bots a moment apart) changes nothing. A status the bot wrote terminal stays so here;
`reopened` is the one way back, for a run its engine shows running again.

The engine's own next attempts (Slurm's requeue, a replaced pod, a Kueue re-admission) count against the
run's retry policy as the bot's do: one the policy does not allow is an `Overrun` (`overrun`), and the
bot stops the engine's object before it records the run ended (see `tuneplane.bot.sync`).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from tuneplane.backends.base import (
    NO_HEARTBEAT,
    AttemptReport,
    Backend,
    BackendError,
    BackendRef,
    HasRunDir,
    Observation,
)
from tuneplane.backends.factory import backend_kind
from tuneplane.constants import (
    ATTEMPT_REASONS,
    CANCELLED,
    FAILED,
    PENDING,
    PHASE_RANK,
    RUNNING,
    SUCCEEDED,
    TERMINAL,
    UNDER_WAY,
    epoch_of,
)
from tuneplane.metrics.overview import overview
from tuneplane.metrics.vocab import Vocabulary, counts
from tuneplane.models.base import RetryPolicy
from tuneplane.models.run import Artifact, Attempt, BackendObject, RunStatus, Transition
from tuneplane.runtime.records import FrozenRecord

HISTORY_POINTS = 20  # values kept per metric for the sparklines, spread over the whole run
FALLBACK_METRICS = 6  # metrics a status keeps beyond the primary ones, up to this many in all …
STATUS_METRICS = 24  # … and more, one per namespace the run reported (`env/`, `eval/`), up to this many
MESSAGE_LIMIT = 4000
LOG_TAIL = 20  # a failing rank's log lines an attempt keeps
# Status reasons of what the bot decided, not the engine: such a status is never reopened.
CANCEL_REQUESTED = "CancelRequested"
RETRIES_SPENT = "RetriesExhausted"
RETRY_WAIT = "RetryBackoff"  # Pending until the bot submits the next attempt
REQUEUED = "Requeued"  # Pending until the engine starts its next attempt
BOT_DECIDED = frozenset({CANCEL_REQUESTED, RETRIES_SPENT})
_ENDING = {"Completed": SUCCEEDED, CANCELLED: CANCELLED}  # attempt reason → phase; any other: Failed


class IllegalTransition(ValueError):
    """A phase change the lifecycle forbids (only raised by `check_transition`)."""


def is_legal(old: str | None, new: str) -> bool:
    """Whether a status may go from `old` (None: no status yet) to `new` within one attempt."""
    if old is None:
        return new in PHASE_RANK
    if old in TERMINAL:
        return new == old
    return PHASE_RANK[new] >= PHASE_RANK[old]


def check_transition(old: str | None, new: str) -> None:
    if not is_legal(old, new):
        raise IllegalTransition(f"a run cannot go from {old} to {new}")


def transition(status: RunStatus, phase: str, at: str, **changes: Any) -> RunStatus:
    """`status` moved to `phase` (recorded in its history), with other fields changed."""
    check_transition(status.phase, phase)
    history = list(status.history)
    if phase != status.phase:
        history.append(Transition(phase=phase, at=at))  # type: ignore[arg-type, unused-ignore]
    return status.model_copy(update={"phase": phase, "history": history, **changes})


def backend_ref(status: RunStatus) -> BackendRef | None:
    """The backend's reference to the run's object, as its status records it (None: never submitted)."""
    obj = status.backend
    if obj is None:
        return None
    return BackendRef(
        backend=obj.backend, kind=obj.kind, name=obj.name, namespace=obj.namespace, uid=obj.uid, run_dir=obj.run_dir
    )


def backend_object(ref: BackendRef) -> BackendObject:
    """What a status records of the backend's reference to the run's object."""
    return BackendObject(
        backend=ref.backend, kind=ref.kind, name=ref.name, namespace=ref.namespace, run_dir=ref.run_dir, uid=ref.uid
    )


class Overrun(FrozenRecord):
    """The engine going on with a run past its retry policy: after `attempt` ended, it requeued the job,
    replaced its pods or re-admitted it by itself, and the policy allows no attempt after that one."""

    attempt: Attempt  # the last attempt the run may have
    why: str  # which attempt ended how, of how many, and what the engine did
    stopped: bool = False  # the engine's object was stopped (as `cancel: true` stops it)
    outcome: str = "`tp bot sync` stops the job"  # what became of it, when not stopped


def overrun(status: RunStatus, obs: Observation, now: str) -> Overrun | None:
    """The ended attempt the engine goes on after although the run's retry policy allows no attempt after
    it; None when the engine is not going on or may. The count is the status's attempts with what the
    engine says, so it never resets."""
    if obs.phase not in UNDER_WAY or not obs.attempts or obs.ending:
        return None
    current = status.backend.name if status.backend else ""
    mine = [a for a in merged_attempts(status, obs, now) or [] if a.object in (current, "")]
    policy = status.retry or RetryPolicy()
    for index, attempt in enumerate(mine):
        followed = index + 1 < len(mine)
        if attempt.reason and not _may_go_on(attempt, followed, policy):
            return Overrun(attempt, _overrun_words(attempt, followed, policy))
    return None


def _may_go_on(attempt: Attempt, followed: bool, policy: RetryPolicy) -> bool:
    """Whether the policy allows an attempt after `attempt` (ended): its number is below `retry.attempts`
    and its reason is in `retry.on`, a requeue with no other cause (it completed) counting as `Preempted`.
    Before the engine's next attempt is in sight, only a requeue past the budget counts: an attempt that
    completed or failed while its object is under way for a moment more (a pod's end before its Job's)
    is no requeue, and the next look decides."""
    if not followed:
        return attempt.reason not in policy.on or attempt.number < policy.attempts
    counted = "Preempted" if attempt.reason == "Completed" else attempt.reason
    return attempt.number < policy.attempts and counted in policy.on


def _overrun_words(attempt: Attempt, followed: bool, policy: RetryPolicy) -> str:
    went_on = f"the engine started attempt {attempt.number + 1} itself" if followed else "the engine requeued it"
    if attempt.number >= policy.attempts:
        return (
            f"attempt {attempt.number} of {policy.attempts} ended {attempt.reason}; {went_on}, "
            "but the retry budget is spent"
        )
    return (
        f"attempt {attempt.number} ended {attempt.reason}, which the retry policy does not retry "
        f"(retry.on: {', '.join(policy.on)}); {went_on}"
    )


def apply_observation(
    status: RunStatus,
    obs: Observation,
    now: str,
    *,
    retry: bool = False,
    lost_after: float | None = None,
    over: Overrun | None = None,
) -> RunStatus:
    """The status after `obs`: its attempts recorded, the phase from the newest one. Unknown keeps the
    phase (the message says why); a terminal status is left as it is. With `retry` (the bot), a failed
    attempt the run's retry policy covers leaves the run Pending for the bot's next attempt, and one
    that spent the budget ends it `RetriesExhausted`. With `lost_after`, a run only another machine
    can see whose last heartbeat is older than that many seconds ends with a `Lost` attempt. With `over`
    (see `overrun`), the run ends `RetriesExhausted` once its object was stopped; until then the message
    says why and what became of the stop."""
    if status.phase in TERMINAL:
        return status
    return _fold(status, obs, now, retry, lost_after, over)


def reopened(status: RunStatus, obs: Observation, now: str, *, retry: bool = False) -> RunStatus | None:
    """A status recorded terminal whose engine shows the run going again (a later attempt, or under
    way while it claimed an end), put back to the truth; None when it stays as it is. What the bot
    decided (a cancel, a spent retry budget) stays terminal whatever the engine says."""
    if status.phase not in TERMINAL or status.reason in BOT_DECIDED or obs.phase not in PHASE_RANK:
        return None
    newest = status.attempts[-1].number if status.attempts else 1
    later = any(r.number > newest for r in obs.attempts)
    if obs.phase not in UNDER_WAY and not later:
        return None
    open_ = status.model_copy(update={"phase": RUNNING if status.started_at else PENDING})
    new = _fold(open_, obs, now, retry, None)
    if new.phase in TERMINAL:
        return None
    going = f"{new.phase.lower()} again (attempt {new.attempts[-1].number})" if later else f"still {new.phase.lower()}"
    message = (
        f"the status said {status.phase}, but the job is {going} on "
        f"{status.backend.backend if status.backend else 'its backend'}: corrected by tp bot sync "
        "(the cluster is the truth; edit a run's fate with `cancel: true`)"
    )
    history = [*status.history, Transition(phase=new.phase, at=now)]  # type: ignore[arg-type, unused-ignore]
    return new.model_copy(
        update={"reason": "Corrected", "message": message, "history": history, "finished_at": None, "exit_code": None}
    )


def _fold(
    status: RunStatus,
    obs: Observation,
    now: str,
    retry: bool,
    lost_after: float | None,
    over: Overrun | None = None,
) -> RunStatus:
    if obs.phase not in PHASE_RANK:
        if lost_after is not None and obs.reason == NO_HEARTBEAT and _silent(status, obs, now, lost_after):
            return _fold(status, _lost(status, obs, now, lost_after), now, retry, None)
        return status.model_copy(update={"message": _clip(obs.message)}) if obs.message else status
    attempts = merged_attempts(status, obs, now)
    if attempts is None:
        return status  # a report-less backend's stale phase: the same attempt never goes back
    if over is not None and over.stopped:
        attempts = _stopped_attempts(attempts, over, now)
        phase, reason, message = FAILED, RETRIES_SPENT, _stopped_words(over)
    else:
        phase, reason, message = _verdict(status, obs, attempts[-1], retry)
        if over is not None:
            message = f"{message}\n{over.why}: {over.outcome}" if message else f"{over.why}: {over.outcome}"
    newest = attempts[-1]
    changes: dict[str, Any] = {"reason": reason, "message": _clip(message), "attempts": attempts}
    first = attempts[0].started_at or obs.started_at
    if first and not status.started_at:
        changes["started_at"] = first
    # the run's exit code, once it ended: under way (an attempt ended, the next or the object's end to
    # come) "exit code 0" beside Running would say it ended; each attempt keeps its own
    exit_code = (newest.exit_code if obs.attempts else obs.exit_code) if phase in TERMINAL else None
    if exit_code is not None or obs.attempts or status.exit_code is not None:
        changes["exit_code"] = exit_code
    changes["finished_at"] = (newest.finished_at or obs.finished_at or now) if phase in TERMINAL else None
    before = status.attempts[-1].number if status.attempts else 1
    if phase == status.phase and newest.number <= before:
        return status.model_copy(update=changes)
    if (
        phase in TERMINAL
        and phase != CANCELLED
        and newest.started_at
        and (PHASE_RANK[status.phase] < PHASE_RANK[RUNNING] or newest.number > before)
    ):
        status = _moved(status, RUNNING, newest.started_at)  # it ran between two looks
    when = (
        changes["finished_at"]
        if phase in TERMINAL
        else newest.started_at
        if phase == RUNNING and newest.started_at
        else now
    )
    return _moved(status, phase, when, **changes)


def _moved(status: RunStatus, phase: str, at: str, **changes: Any) -> RunStatus:
    history = [*status.history, Transition(phase=phase, at=at)]  # type: ignore[arg-type, unused-ignore]
    return status.model_copy(update={"phase": phase, "history": history, **changes})


def _verdict(status: RunStatus, obs: Observation, newest: Attempt, retry: bool) -> tuple[str, str, str]:
    """The run's phase, reason and message from its newest attempt (and what the engine says of it)."""
    if not newest.reason:  # under way
        going = obs.phase if obs.phase in UNDER_WAY else RUNNING if newest.started_at else PENDING
        return going, obs.reason, obs.message
    ended = f"attempt {newest.number} ended {newest.reason}"
    why = _why(newest.message, obs.message)
    if obs.phase == RUNNING and newest.reason == "Completed" and not obs.requeued:
        # its object ends a moment after its attempt (a pod's Succeeded before its Job's Complete): no
        # requeue, and no end yet either; the next look decides
        return RUNNING, obs.reason, obs.message
    if obs.phase in UNDER_WAY and obs.ending:
        # its object's end is decided and its pods are stopping (a Job's FailureTarget before its Failed):
        # no requeue comes, nor an end (or a retry) before they stopped; the next look decides
        return obs.phase, obs.reason, f"{ended}: {why}" if why else ended
    if obs.phase in UNDER_WAY:  # the engine requeued it and starts the next attempt itself
        return PENDING, obs.reason or REQUEUED, f"{ended}: {why}" if why else ended
    # the engine's word for the whole object: stopped on request is no failure to retry
    phase = CANCELLED if obs.phase == CANCELLED else _ENDING.get(newest.reason, FAILED)
    if phase != FAILED:
        return phase, obs.reason, why  # an attempt that completed (or was stopped) needs no reason shown
    if not retry:
        return phase, obs.reason or newest.reason, why
    policy = status.retry or RetryPolicy()
    if newest.reason not in policy.on:
        return phase, obs.reason or newest.reason, why
    if newest.number >= policy.attempts:
        note = f"{ended}, attempt {newest.number} of {policy.attempts}: no retry left"
        return FAILED, RETRIES_SPENT, f"{why}\n{note}" if why else note
    note = (
        f"{ended}; attempt {newest.number + 1} of {policy.attempts} is submitted "
        f"{policy.backoff_seconds} s after it ended"
    )
    return PENDING, RETRY_WAIT, f"{why}\n{note}" if why else note


def _stopped_attempts(attempts: list[Attempt], over: Overrun, now: str) -> list[Attempt]:
    """The run's attempts once the engine's object was stopped: those past `over.attempt` that never
    started are none of the run's; one that started (the engine ran it between two looks) held its GPUs
    until the stop, and ended `Cancelled` by it."""
    kept = [a for a in attempts if a.number <= over.attempt.number or a.started_at]
    return [
        a
        if a.number <= over.attempt.number or a.reason
        else a.model_copy(
            update={
                "reason": CANCELLED,
                "finished_at": now,
                "message": "stopped by tp: past the run's retry policy",
                "gpu_seconds": gpu_seconds(a.gpus, a.started_at, now),
            }
        )
        for a in kept
    ]


def _stopped_words(over: Overrun) -> str:
    """Why a run whose engine went on past its retry policy ended: what the engine did, that the job was
    stopped, and the ended attempt's own words."""
    head = f"{over.why}: the job was stopped (retry: in the run request, its profile or tuneplane.yaml sets the policy)"
    said = over.attempt.message
    return f"{head}\n{said}" if said else head


def _why(said: str, engine: str) -> str:
    """What a person reads of an ended attempt: the trainer's own words first, then the engine's (its
    exit and the log's last lines), once: an engine message that already quotes the trainer is enough."""
    if not said or said in engine:
        return engine or said
    return f"{said}\n{engine}" if engine else said


def merged_attempts(status: RunStatus, obs: Observation, now: str) -> list[Attempt] | None:
    """The run's attempts with what `obs` says of the current backend object's; None when `obs`
    (from a backend that reports no attempts) goes back within the one it stands for."""
    current = status.backend.name if status.backend else ""
    mine = [a for a in status.attempts if a.object in (current, "")]
    others = [a for a in status.attempts if a.object not in (current, "")]
    base = mine[0].number if mine else max((a.number for a in others), default=0) + 1
    if obs.attempts:
        shift = base - 1 if max(r.number for r in obs.attempts) < base else 0  # numbered per object
        fresh = [_attempt(r, r.number + shift, current, status, now) for r in obs.attempts]
    else:
        last = mine[-1] if mine else None
        if (
            last is not None
            and not last.reason
            and obs.phase in UNDER_WAY
            and PHASE_RANK[obs.phase] < PHASE_RANK[status.phase]
        ):
            return None
        fresh = [_derived(obs, last.number if last else base, current, status, now)]
    by_number = {a.number: a for a in [*others, *mine]}
    for attempt in fresh:
        by_number[attempt.number] = _merge(by_number.get(attempt.number), attempt)
    return [by_number[n] for n in sorted(by_number)]


def _attempt(report: AttemptReport, number: int, current: str, status: RunStatus, now: str) -> Attempt:
    finished = report.finished_at or (now if report.reason else None)
    gpus = report.gpus or profile_gpus(status.profile)  # else what the status recorded at submit (`_merge`)
    return Attempt(
        number=number,
        started_at=report.started_at,
        finished_at=finished,
        where=list(report.where),
        exit_code=report.exit_code,
        signal=report.signal,
        reason=report.reason or "",
        message=_clip(report.message),
        failed_node=report.failed_node,
        failed_rank=report.failed_rank,
        log_tail=list(report.log_tail)[-LOG_TAIL:],
        gpus=gpus,
        gpu_seconds=gpu_seconds(gpus, report.started_at, finished),
        object=current,
    )


def _derived(obs: Observation, number: int, current: str, status: RunStatus, now: str) -> Attempt:
    """The one attempt a backend that reports none stands for."""
    reason = ""
    if obs.phase == SUCCEEDED:
        reason = "Completed"
    elif obs.phase == CANCELLED:
        reason = CANCELLED  # the attempt reason of that name
    elif obs.phase == FAILED:
        reason = obs.reason if obs.reason in ATTEMPT_REASONS else "Error"
    report = AttemptReport(
        number=number,
        started_at=obs.started_at,
        finished_at=obs.finished_at,
        exit_code=obs.exit_code,
        reason=reason,  # type: ignore[arg-type]
        message=obs.message if reason else "",
    )
    return _attempt(report, number, current, status, now)


def _merge(old: Attempt | None, new: Attempt) -> Attempt:
    """`new`, keeping what `old` knew that the engine no longer says (its pods gone, a record pruned)."""
    if old is None:
        return new
    kept = {k: v for k, v in old.model_dump().items() if v not in (None, "", [])}
    fresh = {k: v for k, v in new.model_dump().items() if v not in (None, "", [])}
    if new.reason == "" and old.reason:  # the engine says it is under way again: its word wins
        kept = {k: v for k, v in kept.items() if k not in ("reason", "finished_at", "exit_code", "signal")}
    merged = Attempt.model_validate(
        {**kept, **fresh, "object": old.object or new.object, "gpus": new.gpus or old.gpus}
    )  # 0: the engine did not say
    return merged.model_copy(update={"gpu_seconds": gpu_seconds(merged.gpus, merged.started_at, merged.finished_at)})


def gpu_seconds(gpus: int, started: str | None, finished: str | None) -> float:
    """GPUs held times wall time; 0 until the attempt has both ends (a running one is not rewritten
    on every sync)."""
    start, end = epoch_of(started), epoch_of(finished)
    if not gpus or start is None or end is None or end < start:
        return 0.0
    return round(gpus * (end - start), 1)


def profile_gpus(profile: str) -> int:
    """The GPU count a profile names (`h200:8` → 8); 0 when it names none."""
    count = profile.partition(":")[2]
    return int(count) if count.isdigit() else 0


def _silent(status: RunStatus, obs: Observation, now: str, lost_after: float) -> bool:
    """Whether the run's last heartbeat is older than `lost_after`. Only a heartbeat counts: a run whose
    heartbeat nobody can see here (a laptop's run, its storage out of sight) is not evidence of loss,
    and a status must not say Lost on a guess."""
    last = epoch_of(obs.heartbeat_at)
    at = epoch_of(now)
    return last is not None and at is not None and at - last > lost_after


def _lost(status: RunStatus, obs: Observation, now: str, lost_after: float) -> Observation:
    """The final `Lost` attempt of a run nobody has heard of for longer than `lost_after` seconds."""
    newest = status.attempts[-1] if status.attempts else None
    number = newest.number if newest is not None and not newest.reason else (newest.number + 1 if newest else 1)
    beat = obs.heartbeat_at or "never"
    message = (
        f"no heartbeat for more than {int(lost_after)} s (last: {beat}); {obs.message}".rstrip("; ")
        + " — the machine that ran it is gone or cut off (cluster.local.lost_after)"
    )
    report = AttemptReport(
        number=number,
        started_at=newest.started_at if newest else status.started_at,
        finished_at=now,
        reason="Lost",
        message=message,
    )
    return Observation(FAILED, reason="Lost", message=message, finished_at=now, attempts=(report,))


def observe_run(backend: Backend, status: RunStatus, now: str) -> RunStatus:
    """Ask the backend about a non-terminal run; a backend failure becomes a message, not a crash."""
    ref = backend_ref(status)
    if ref is None or status.phase in TERMINAL or status.reason == RETRY_WAIT:
        return status  # (waiting for the bot's next attempt: its last object's end is on record)
    try:
        obs = backend.observe(ref)
    except BackendError as exc:
        return status.model_copy(update={"message": _clip(f"could not observe the run: {exc}")})
    return apply_observation(status, obs, now, over=overrun(status, obs, now))  # only looks: the bot stops it


def with_metrics(
    status: RunStatus,
    summary: Mapping[str, Mapping[str, Any]],
    series: Mapping[str, list[float]],
    primary: list[str],
    vocab: Vocabulary | None = None,
) -> RunStatus:
    """Last values of the metrics under their canonical names (primary first, hardware last), and
    each one's whole history in a few points (`series`: every value, by step). Raw keys (`loss`,
    `eval_loss`) are named by the recipe's vocabulary."""
    vocab = vocab or Vocabulary.of(primary=primary)
    chosen = vocab.pick(summary, counts(summary))
    leading = [k for k in chosen if vocab.is_primary(k)]
    rest = [k for k in chosen if k not in leading]  # in reading order: hardware last
    keys = leading + _kept(leading, rest)
    metrics = {k: float(summary[chosen[k]]["last"]) for k in keys if _is_number(summary[chosen[k]].get("last"))}
    history = {  # four significant digits draw the same sparkline and keep status files (and git) small
        k: [_round(float(v)) for v in overview(series.get(chosen[k], []), HISTORY_POINTS)]
        for k in metrics
        if series.get(chosen[k])
    }
    if metrics == status.metrics and history == status.metric_history:
        return status
    return status.model_copy(update={"metrics": metrics, "metric_history": history})


def _kept(leading: list[str], rest: list[str]) -> list[str]:
    """Which of `rest` (in reading order) a status keeps beside the primary metrics: the first few, and
    the first of every namespace not shown yet (a guide's own `env/tool_success_rate` is not dropped for
    a sixth `train/` key), in reading order, within STATUS_METRICS in all."""
    seen = {_namespace(k) for k in leading}
    kept: list[str] = []
    for key in rest:
        if len(leading) + len(kept) >= STATUS_METRICS:
            break
        if len(leading) + len(kept) < FALLBACK_METRICS or _namespace(key) not in seen:
            kept.append(key)
            seen.add(_namespace(key))
    return kept


def _namespace(key: str) -> str:
    return key.split("/", 1)[0] if "/" in key else ""


def with_artifacts(status: RunStatus, items: list[dict[str, Any]]) -> RunStatus:
    artifacts = [Artifact.model_validate(item) for item in items]
    return status if artifacts == status.artifacts else status.model_copy(update={"artifacts": artifacts})


def _round(value: float) -> float:
    return float(f"{value:.4g}") if value == value and value not in (float("inf"), float("-inf")) else value


def _is_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and value == value


def _clip(text: str) -> str:
    return text if len(text) <= MESSAGE_LIMIT else "…" + text[-(MESSAGE_LIMIT - 1) :]


def elsewhere(backend: Backend, ref: BackendRef) -> bool:
    """A local run whose storage is not on this machine (`tp submit --local` on a laptop, its status
    pushed while it ran): not even the folders above its run directory exist here. Such a run is not
    lost; this machine just cannot see it, and must not record it as `Lost` over what its own machine
    writes. (A run directory removed on this machine, its folders still there, is still reported.)"""
    if not isinstance(backend, HasRunDir) or not backend_kind(ref.backend).runs_here:
        return False
    where = Path(backend.run_dir(ref))
    return not any(p.exists() for p in (where, where.parent, where.parent.parent))
