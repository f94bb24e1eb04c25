"""The bot's retries: when a run's next attempt is due, the job it runs as, and the status once submitted.

`tp bot sync` leaves a run whose newest attempt failed for a reason its retry policy covers `Pending`
with reason `RetryBackoff` (see `observe`); `tp bot reconcile` submits attempt N + 1 once
`backoff_seconds` have passed since attempt N ended, under the deterministic object name
`attempt_name(name, N + 1)` and with `TUNEPLANE_ATTEMPT=N+1` in the job's environment. Racing bots and
a bot restarted after a crash derive the same name from the same committed status, and the backend
adopts an object of that name, so attempt N + 1 is created once. The count comes from the status's
attempts, which the engine's own restarts are part of, so it never resets.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from tuneplane.backends.base import BackendRef
from tuneplane.constants import ATTEMPT_ENV, PENDING, epoch_of
from tuneplane.models.base import RetryPolicy
from tuneplane.models.run import Attempt, RunStatus, Transition
from tuneplane.plan.names import attempt_name
from tuneplane.runs.observe import RETRY_WAIT, backend_object, profile_gpus

if TYPE_CHECKING:
    from tuneplane.lab.load import Lab
    from tuneplane.runs.prepare import PreparedRun


def retry_at(status: RunStatus) -> float | None:
    """When the next attempt of a run waiting for the bot's retry is due (seconds since the epoch)."""
    if status.phase != PENDING or status.reason != RETRY_WAIT or not status.attempts:
        return None
    ended = epoch_of(status.attempts[-1].finished_at)
    return (ended or 0.0) + (status.retry or RetryPolicy()).backoff_seconds


def next_attempt(status: RunStatus) -> int:
    """The number of the attempt the bot submits next."""
    return (status.attempts[-1].number if status.attempts else 1) + 1


def attempt_run(lab: Lab, run: PreparedRun, number: int) -> PreparedRun:
    """`run` as its attempt `number`: its own object name, `TUNEPLANE_ATTEMPT` in the job's
    environment, the manifests rendered again from both."""
    from tuneplane.plan.adapters import compile_plan  # lazy: as the submit pipeline is
    from tuneplane.runs.prepare import rendered

    meta = run.spec.metadata.model_copy(update={"name": attempt_name(run.spec.metadata.name, number)})
    spec = run.spec.model_copy(update={"metadata": meta})
    compiled = compile_plan(spec)  # names derived from the object's (a rendezvous host) follow it
    plan = compiled.replace(env={**compiled.env, ATTEMPT_ENV: str(number)})
    return rendered(lab, run.request, spec, plan, run.warnings).replace(config=run.config)


def resubmitted(previous: RunStatus, ref: BackendRef, now: str) -> RunStatus:
    """The status once the bot submitted the next attempt: the attempt recorded (under way) with its
    object, the run Pending again and its backend the new object."""
    number = next_attempt(previous)
    old = previous.backend.name if previous.backend else ""
    earlier = [a if a.object else a.model_copy(update={"object": old}) for a in previous.attempts]
    held = previous.attempts[-1].gpus if previous.attempts else 0
    attempt = Attempt(number=number, object=ref.name, gpus=held or profile_gpus(previous.profile))
    return previous.model_copy(
        update={
            "reason": "",
            "message": f"attempt {number} submitted to {ref.backend} as {ref.kind} {ref.name}",
            "backend": backend_object(ref),
            "finished_at": None,
            "exit_code": None,
            "attempts": [*earlier, attempt],
            "history": [*previous.history, Transition(phase=PENDING, at=now)],
        }
    )


def kept_attempts(previous: RunStatus, ended: RunStatus) -> RunStatus:
    """`ended` (a refusal of the next attempt) written over `previous` without losing its attempts."""
    if not previous.attempts:
        return ended
    return previous.model_copy(
        update={
            "phase": ended.phase,
            "reason": ended.reason,
            "message": ended.message,
            "finished_at": ended.finished_at,
            "history": [*previous.history, *ended.history[-1:]],
        }
    )
