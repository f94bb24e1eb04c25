"""Observe: fold what a backend and the ingest receiver report into a run's status, legally.

Phases only move forward: Submitted → Pending → Running → one of Succeeded, Failed, Cancelled (any step
may be skipped: a fast job goes from Submitted straight to Succeeded). A terminal phase never changes,
and a backward report (a requeued pod saying Pending after Running) keeps the later phase, so a status
file tells the truth even when two bots observe the same run a moment apart.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from tuneplane.backends.base import Backend, BackendError, BackendRef, HasRunDir, Observation
from tuneplane.constants import CANCELLED, PHASE_RANK, RUNNING, TERMINAL
from tuneplane.metrics.vocab import Vocabulary, counts
from tuneplane.models.run import Artifact, BackendObject, RunStatus, Transition

HISTORY_POINTS = 20  # values kept per metric for the dashboard's sparklines
FALLBACK_METRICS = 6  # metrics a status keeps beyond the primary ones, up to this many in all
MESSAGE_LIMIT = 4000


class IllegalTransition(ValueError):
    """A phase change the lifecycle forbids (only raised by `check_transition`)."""


def is_legal(old: str | None, new: str) -> bool:
    """Whether a status may go from `old` (None: no status yet) to `new`."""
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
    obj = status.backend
    if obj is None:
        return None
    return BackendRef(backend=obj.backend, kind=obj.kind, name=obj.name, namespace=obj.namespace, uid=obj.uid)


def backend_object(ref: BackendRef) -> BackendObject:
    return BackendObject(
        backend=ref.backend, kind=ref.kind, name=ref.name, namespace=ref.namespace, uid=ref.uid
    )


def apply_observation(status: RunStatus, obs: Observation, now: str) -> RunStatus:
    """The status after `obs`. Unknown keeps the phase (the message says why); going backwards is ignored."""
    if status.phase in TERMINAL:
        return status
    if obs.phase not in PHASE_RANK:
        return status.model_copy(update={"message": _clip(obs.message)}) if obs.message else status
    if not is_legal(status.phase, obs.phase):
        return status
    changes: dict[str, Any] = {"reason": obs.reason, "message": _clip(obs.message)}
    if obs.started_at and not status.started_at:
        changes["started_at"] = obs.started_at
    if obs.exit_code is not None:
        changes["exit_code"] = obs.exit_code
    if obs.phase in TERMINAL:
        changes["finished_at"] = obs.finished_at or now
    if obs.phase == status.phase:
        return status.model_copy(update=changes)
    if (
        obs.phase in TERMINAL
        and obs.phase != CANCELLED
        and PHASE_RANK[status.phase] < PHASE_RANK[RUNNING]
        and changes.get("started_at")
    ):
        status = transition(status, RUNNING, changes["started_at"])  # it ran between two looks
    when = (
        changes.get("finished_at")
        if obs.phase in TERMINAL
        else obs.started_at
        if obs.phase == RUNNING
        else None
    ) or now
    return transition(status, obs.phase, when, **changes)


def observe_run(backend: Backend, status: RunStatus, now: str) -> RunStatus:
    """Ask the backend about a non-terminal run; a backend failure becomes a message, not a crash."""
    ref = backend_ref(status)
    if ref is None or status.phase in TERMINAL:
        return status
    try:
        obs = backend.observe(ref)
    except BackendError as exc:
        return status.model_copy(update={"message": _clip(f"could not observe the run: {exc}")})
    return apply_observation(status, obs, now)


def with_metrics(
    status: RunStatus,
    summary: Mapping[str, Mapping[str, Any]],
    series: Mapping[str, list[float]],
    primary: list[str],
    vocab: Vocabulary | None = None,
) -> RunStatus:
    """Last values of the metrics under their canonical names (primary first, hardware last), and
    their recent history. Raw keys (`loss`, `eval_loss`) are named by the recipe's vocabulary."""
    vocab = vocab or Vocabulary.of(primary=primary)
    chosen = vocab.pick(summary, counts(summary))
    leading = [k for k in chosen if vocab.is_primary(k)]
    rest = [k for k in chosen if k not in leading]  # in reading order: hardware last
    keys = leading + rest[: max(0, FALLBACK_METRICS - len(leading))]
    metrics = {k: float(summary[chosen[k]]["last"]) for k in keys if _is_number(summary[chosen[k]].get("last"))}
    history = {  # four significant digits draw the same sparkline and keep status files (and git) small
        k: [_round(float(v)) for v in series.get(chosen[k], [])][-HISTORY_POINTS:]
        for k in metrics if series.get(chosen[k])
    }
    if metrics == status.metrics and history == status.metric_history:
        return status
    return status.model_copy(update={"metrics": metrics, "metric_history": history})


def with_artifacts(status: RunStatus, items: list[dict[str, Any]]) -> RunStatus:
    artifacts = [Artifact.model_validate(item) for item in items]
    return status if artifacts == status.artifacts else status.model_copy(update={"artifacts": artifacts})


def _round(value: float) -> float:
    return float(f"{value:.4g}") if value == value and value not in (float("inf"), float("-inf")) else value


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and value == value


def _clip(text: str) -> str:
    return text if len(text) <= MESSAGE_LIMIT else "…" + text[-(MESSAGE_LIMIT - 1) :]


def elsewhere(backend: Backend, ref: BackendRef) -> bool:
    """A local run whose storage is not on this machine (`tp submit --local` on a laptop, its status
    pushed while it ran): not even the folders above its run directory exist here. Such a run is not
    lost; this machine just cannot see it, and must not record it as `Lost` over what its own machine
    writes. (A run directory removed on this machine, its folders still there, is still reported.)"""
    if not isinstance(backend, HasRunDir) or ref.backend != "local":
        return False
    where = Path(backend.run_dir(ref))
    return not any(p.exists() for p in (where, where.parent, where.parent.parent))
