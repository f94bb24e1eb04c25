"""What a job object's status says, per kind, and the observation of a run: phase, reason, times, exit code.

The job object's own status decides first (Job conditions, JobSet conditions and restarts, RayJob
`jobStatus`/`jobDeploymentStatus`); a suspended object is explained by its Kueue Workload; pods add the
detail a person needs (an image that cannot be pulled, the container that failed first, its exit code
and its last log lines). Every message leaves `observe` without the values of the run's Secret.
"""

from __future__ import annotations

import base64
import json
import logging
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import cast

from tuneplane.backends.base import AttemptReport, BackendError, BackendRef, Observation
from tuneplane.backends.kubernetes import kueue
from tuneplane.backends.kubernetes.apply import SECRET_SUFFIX
from tuneplane.backends.kubernetes.attempts import (
    job_attempts,
    ledger_attempts,
    ray_attempts,
    ray_exit_code,
    ray_overrun,
)
from tuneplane.backends.kubernetes.backoff import decided_failure
from tuneplane.backends.kubernetes.client import JOB, JOBSET, RAYJOB, SECRET, Kind, Rest, clip, redact_text
from tuneplane.backends.kubernetes.pods import (
    Refused,
    default_container,
    earliest_start,
    failed_container,
    find_pods,
    pod_phase,
    pod_problem,
    refused_creates,
    stuck_pod,
    termination_line,
)
from tuneplane.backends.kubernetes.types import (
    CONDITION_FAILED,
    DEPLOYMENT_FAILED,
    POD_RUNNING,
    Condition,
    JobObject,
    Pod,
    Secret,
)
from tuneplane.constants import (
    ATTEMPT_REASONS,
    CANCELLED,
    FAILED,
    PENDING,
    RUNNING,
    STAMP_FORMAT,
    SUCCEEDED,
    TERMINAL,
    AttemptReason,
    epoch_of,
    observed_phase,
)
from tuneplane.runtime.records import FrozenRecord, Record, field

log = logging.getLogger("tuneplane.backends.kubernetes")
CANCEL_ANNOTATION = "tuneplane.dev/cancelled"
STOPPED_ANNOTATION = "tuneplane.dev/stopped"  # why tuneplane deleted a job (a pod that cannot start, a spent budget)


class Stuck(FrozenRecord):
    """How long a pod may wait on an image or a Secret before its attempt ends, and how its job is deleted."""

    after: float = 600.0  # seconds since the kubelet took the pod (`cluster.stuck_after`)
    propagation: str = "Foreground"


DEFAULT_STUCK = Stuck()


class _State(Record):
    """What a job object's own status says, before pods and queues add detail."""

    phase: str
    reason: str = ""
    message: str = ""
    started_at: str | None = None
    finished_at: str | None = None
    suspended: bool = False
    running_hint: bool = False  # the controller counts ready workers
    failing: bool = False  # the controller decided the object fails and stops its pods (`_failing_state`)
    pods_decide: bool = False  # Pending until a pod runs (Job, JobSet); a RayJob reports its own phase
    notes: list[str] = field(default_factory=list)


# ==================================================================== job object states
def _true_conditions(obj: JobObject) -> dict[str, Condition]:
    conds = (obj.get("status") or {}).get("conditions") or []
    return {c.get("type", ""): c for c in conds if c.get("status") == "True"}


def _job_state(obj: JobObject) -> _State:
    status, conds = obj.get("status") or {}, _true_conditions(obj)
    started = status.get("startTime")
    if "Complete" in conds:
        return _State(
            SUCCEEDED,
            started_at=started,
            finished_at=status.get("completionTime") or _ltt(conds["Complete"]),
        )
    if CONDITION_FAILED in conds:
        failed = conds[CONDITION_FAILED]
        return _State(FAILED, failed.get("reason", ""), failed.get("message", ""), started, _ltt(failed))
    if "FailureTarget" in conds:
        return _failing_state(conds["FailureTarget"], "the Job fails", started)
    if "Suspended" in conds or (obj.get("spec") or {}).get("suspend"):
        return _State(PENDING, started_at=started, suspended=True)
    return _State(PENDING, started_at=started, running_hint=bool(status.get("ready")), pods_decide=True)


def _failing_state(
    target: Condition, what: str, started: str | None = None, then: str = "its pods are stopping"
) -> _State:
    """A Job whose controller wrote `FailureTarget` (its backoffLimit exceeded, its deadline passed, a
    podFailurePolicy FailJob rule) but not yet `Failed`: it starts no pod again and deletes those still
    running, and writes `Failed` (same reason) only once none runs. Ranks that save on SIGTERM hold
    their nodes until then, minutes for a large run. The run reads `Running` in between, its attempt
    ended (`_finishing`): `Failed` would end it before its GPUs are free (and let the bot's retry start
    the next attempt beside them), `Pending` would read as a requeue that never comes. The same holds
    before that write, once a failed pod decided it (`_unsynced_failure`)."""
    reason, message = target.get("reason", ""), target.get("message", "")
    words = f"{what} ({reason}: {message}); {then}" if message else f"{what}; {then}"
    return _State(PENDING, reason, words, started, pods_decide=True, failing=True)


UNSYNCED = "its controller stops its pods at its next sync"


def _unsynced_failure(kind: Kind, obj: JobObject, state: _State, pods: list[Pod]) -> _State:
    """A Job with no end yet whose failed pod its controller will not replace (`backoff.decided_failure`:
    a FailJob rule, or its backoffLimit spent), read before the controller synced: its next sync writes
    `FailureTarget`, so the run reads as that condition will make it (`_failing_state`), not as a Job
    that replaces the pod (a requeue that never comes)."""
    if kind is not JOB or not state.pods_decide or state.failing:
        return state
    target = decided_failure(obj, pods)
    return state if target is None else _failing_state(target, "the Job fails", state.started_at, UNSYNCED)


def _jobset_state(obj: JobObject) -> _State:
    status, conds = obj.get("status") or {}, _true_conditions(obj)
    restarts = int(status.get("restarts") or 0)
    notes = [f"the JobSet restarted {restarts} time{'s' if restarts != 1 else ''}"] if restarts else []
    if "Completed" in conds:
        return _State(SUCCEEDED, finished_at=_ltt(conds["Completed"]), notes=notes)
    if CONDITION_FAILED in conds:
        failed = conds[CONDITION_FAILED]
        return _State(FAILED, failed.get("reason", ""), failed.get("message", ""), None, _ltt(failed), notes=notes)
    if "Suspended" in conds or (obj.get("spec") or {}).get("suspend"):
        return _State(PENDING, suspended=True, notes=notes)
    replicated = status.get("replicatedJobsStatus") or []
    ready = any(int(r.get("ready") or 0) > 0 for r in replicated)
    return _State(PENDING, running_hint=ready, pods_decide=True, notes=notes)


_RAY_PHASES = {
    "PENDING": PENDING,
    "RUNNING": RUNNING,
    "SUCCEEDED": SUCCEEDED,
    "FAILED": FAILED,
    "STOPPED": CANCELLED,
}


def _rayjob_state(obj: JobObject) -> _State:
    status = obj.get("status") or {}
    job_status, deployment = status.get("jobStatus") or "", status.get("jobDeploymentStatus") or ""
    started, ended = status.get("startTime"), status.get("endTime")
    reason, message = str(status.get("reason") or ""), str(status.get("message") or "")
    if job_status in {"SUCCEEDED", "FAILED", "STOPPED"}:
        phase = _RAY_PHASES[job_status]
        return _State(phase, reason or (job_status.title() if phase != SUCCEEDED else ""), message, started, ended)
    if deployment in {DEPLOYMENT_FAILED, "ValidationFailed"}:
        return _State(
            FAILED,
            reason or deployment,
            message or f"RayJob deployment status {deployment}",
            started,
            ended,
        )
    if deployment in {"Suspended", "Suspending"} or (obj.get("spec") or {}).get("suspend"):
        return _State(PENDING, suspended=True)
    if job_status == "RUNNING":
        return _State(RUNNING, started_at=started)
    waiting = "Ray cluster starting" if deployment in {"", "New", "Initializing"} else f"RayJob {deployment}"
    return _State(PENDING, reason=deployment or "Initializing", message=waiting, started_at=started)


_STATE_READERS: dict[str, Callable[[JobObject], _State]] = {
    "Job": _job_state,
    "JobSet": _jobset_state,
    "RayJob": _rayjob_state,
}


def _ltt(condition: Condition) -> str | None:
    value = condition.get("lastTransitionTime")
    return str(value) if value else None


def _observation(state: _State, exit_code: int | None = None, attempts: tuple[AttemptReport, ...] = ()) -> Observation:
    message = state.message
    if state.notes and state.phase != FAILED:
        message = "; ".join(m for m in [message, *state.notes] if m)
    return Observation(
        phase=observed_phase(state.phase),
        reason=state.reason,
        message=clip(message),
        started_at=state.started_at,
        finished_at=state.finished_at,
        exit_code=exit_code,
        attempts=attempts,
        ending=state.failing,
    )


def observe(
    rest: Rest, ref: BackendRef, kind: Kind, ns: str, cancelled: bool, log_tail: int, stuck: Stuck = DEFAULT_STUCK
) -> Observation:
    """Read the job object, then its pods or Kueue Workload as its state calls for; every word the cluster
    wrote (KubeRay's copy of the driver's last lines, termination messages, conditions, events, log
    tails) leaves here without the run's secret values, on its way to a status file in git."""
    seen = _observe(rest, ref, kind, ns, cancelled, log_tail, stuck)
    return _redacted(seen, secret_values(rest, ns, ref.name) if _words(seen) else ())


def _words(seen: Observation) -> bool:
    return bool(seen.message or seen.reason or any(a.message or a.log_tail for a in seen.attempts))


def _redacted(seen: Observation, secrets: tuple[str, ...]) -> Observation:
    if not secrets:
        return seen
    attempts = tuple(
        a.replace(
            message=redact_text(a.message, secrets),
            log_tail=tuple(redact_text(line, secrets) for line in a.log_tail),
        )
        for a in seen.attempts
    )
    return seen.replace(
        reason=redact_text(seen.reason, secrets), message=redact_text(seen.message, secrets), attempts=attempts
    )


def _observe(
    rest: Rest, ref: BackendRef, kind: Kind, ns: str, cancelled: bool, log_tail: int, stuck: Stuck
) -> Observation:
    obj = cast(JobObject | None, rest.get(kind, ns, ref.name))
    meta = (obj or {}).get("metadata") or {}
    if obj is None or (ref.uid and meta.get("uid") != ref.uid):
        return _vanished(ref, kind, ns, replaced=obj is not None, cancelled=cancelled)
    if meta.get("deletionTimestamp"):
        return _deleting(ref, kind, ns, obj, cancelled)
    pods = _pods_or_none(rest, kind, ns, obj)
    state = _unsynced_failure(kind, obj, _STATE_READERS[kind.kind](obj), pods or [])
    tried = _attempts(rest, kind, ns, obj, state, pods or [])
    if kind is RAYJOB and state.phase not in TERMINAL:
        overrun = _stop_if_overrun(rest, kind, ns, obj, tried, stuck)
        if overrun is not None:
            return overrun
    if state.phase == SUCCEEDED:
        if kind is JOBSET:
            state.started_at = _child_jobs_start(rest, ns, obj)
        return _observation(state, exit_code=0, attempts=tried)
    if state.suspended:
        state.reason, state.message = kueue.queue_reason(rest, kind, ns, obj)
        return _observation(state, attempts=tried)
    if state.phase == FAILED:
        return _failure(rest, kind, ns, obj, state, pods or [], log_tail, tried)
    if kind is JOBSET and _failed_attempt(tried):
        _child_job_failing(rest, ns, obj, state, pods or [])
    refused = _refused(rest, ns, obj, state, pods or [], tried)
    return _stop_if_stuck(rest, kind, ns, obj, pods or [], tried, stuck, refused) or _progress(
        state, pods or [], tried, refused
    )


def _refused(
    rest: Rest, ns: str, obj: JobObject, state: _State, pods: list[Pod], attempts: tuple[AttemptReport, ...]
) -> Refused | None:
    """For a run that waits: whether the API server refuses what its controllers create for it (a policy
    webhook, a quota, a validation the job object's own did not reach). Read only while it waits (an
    Event stays an hour after the refusal: a run whose pods ran, or were created, since is past it), and
    never failing the observation (a Role from before Events were read degrades the detail)."""
    if state.phase != PENDING or _runs(state, _live(pods), attempts):
        return None
    try:
        refused = refused_creates(rest, ns, str((obj.get("metadata") or {}).get("name", "")))
    except BackendError as exc:
        log.warning("the Events of %s could not be read: %s", ref_name(obj), exc)
        return None
    return None if refused is None or _created_since(pods, refused.last) else refused


def _created_since(pods: list[Pod], at: float | None) -> bool:
    """Whether a pod of the run was created after `at` (the newest refusal): the controller's creates go
    through again, so the refusal is past (a replacement that waits for a node is no refused create).
    Both are whole seconds: a pod of the refusal's own second tells nothing."""
    if at is None:
        return False
    created = (epoch_of((p.get("metadata") or {}).get("creationTimestamp")) for p in pods)
    return any(c is not None and c > at for c in created)


def _attempts(
    rest: Rest, kind: Kind, ns: str, obj: JobObject, state: _State, pods: list[Pod]
) -> tuple[AttemptReport, ...]:
    """The run's attempts; reading them never fails an observation (the phase stands without them)."""
    try:
        if kind is RAYJOB:
            return ray_attempts(
                rest, kind, ns, obj, pods, (state.phase, state.reason, state.started_at, state.finished_at)
            )
        workload = kueue.find_workload(rest, ns, obj) if kueue.queued(obj) else None
        failure = state.reason if state.phase == FAILED or state.failing else ""
        return job_attempts(rest, kind, ns, obj, pods, workload, failure)
    except BackendError as exc:
        log.warning("the attempts of %s %s could not be read: %s", kind.kind, ref_name(obj), exc)
        return ()


def ref_name(obj: JobObject) -> str:
    meta = obj.get("metadata") or {}
    return f"{meta.get('namespace', '')}/{meta.get('name', '')}"


def _vanished(ref: BackendRef, kind: Kind, ns: str, replaced: bool, cancelled: bool) -> Observation:
    if cancelled:
        return Observation(phase=CANCELLED, reason="Cancelled", message="cancelled by tuneplane")
    how = "was replaced by another object of the same name" if replaced else "was deleted outside tuneplane"
    return Observation(
        phase=FAILED,
        reason="Disappeared",
        message=(
            f"job object disappeared: {kind.kind} {ns}/{ref.name} (uid {ref.uid or 'unknown'}) {how}, "
            "e.g. by kubectl delete, a namespace cleanup or a TTL; its pods and logs may be gone too"
        ),
    )


def _deleting(ref: BackendRef, kind: Kind, ns: str, obj: JobObject, cancelled: bool) -> Observation:
    notes = (obj.get("metadata") or {}).get("annotations") or {}
    if notes.get(CANCEL_ANNOTATION) == "true" or cancelled:
        return Observation(phase=CANCELLED, reason="Cancelled", message="cancelled by tuneplane; pods are stopping")
    stopped = _stopped_note(notes.get(STOPPED_ANNOTATION, ""), obj)
    if stopped is not None:
        return stopped
    return Observation(
        phase=FAILED,
        reason="Deleting",
        message=f"job object disappeared: {kind.kind} {ns}/{ref.name} is being deleted outside tuneplane",
    )


def _stop_if_stuck(
    rest: Rest,
    kind: Kind,
    ns: str,
    obj: JobObject,
    pods: list[Pod],
    tried: tuple[AttemptReport, ...],
    stuck: Stuck,
    refused: Refused | None = None,
) -> Observation | None:
    """A pod that waited past the grace period on an image or its configuration ends its attempt, as does
    a run whose pods the API server refused to create for as long. Nothing in the cluster ends either (the
    kubelet and the controllers retry forever), so tuneplane deletes the job object, as a cancel does, and
    its pods with it: their GPUs and queue quota go back. The reason is noted on the object first, so an
    observation while its deletion runs tells the same story."""
    now = rest.now()
    found = stuck_pod(_live(pods), now, stuck.after) or _refused_too_long(kind, refused, now, stuck.after)
    if found is None:
        return None
    reason, words = found
    at = datetime.fromtimestamp(now, UTC).strftime(STAMP_FORMAT)
    message = clip(
        f"{words}\nIt waited longer than cluster.stuck_after ({stuck.after:g} s): the {kind.kind} was "
        "deleted to give its GPUs back; fix the cause, then submit the run again."
    )
    if not _stop(rest, kind, ns, obj, {"reason": reason, "message": message, "at": at}, stuck.propagation):
        return None
    return Observation(
        phase=FAILED, reason=reason, message=message, finished_at=at, attempts=_ended(tried, reason, words, at)
    )


def _stop_if_overrun(
    rest: Rest, kind: Kind, ns: str, obj: JobObject, tried: tuple[AttemptReport, ...], stuck: Stuck
) -> Observation | None:
    """A Ray head lost past the run's retry policy ends the run (see `attempts.ray_overrun`): KubeRay
    would make a new head and the driver start again, without limit. tuneplane deletes the RayJob, as a
    cancel does, and its Ray cluster with it; the note on the object first, so an observation while its
    deletion runs tells the same story."""
    overrun = ray_overrun(obj, tried)
    if overrun is None:
        return None
    count, why = overrun
    ended = tried[count - 1]
    message = clip(
        f"{why}: the {kind.kind} was deleted with its Ray cluster, so KubeRay starts no new head and no "
        "new driver (retry: in the run request, its profile or tuneplane.yaml sets the budget)"
    )
    reason = ended.reason or "Error"
    note = {"reason": reason, "message": message, "at": ended.finished_at, "attempts": count}
    if not _stop(rest, kind, ns, obj, note, stuck.propagation):
        return None
    return Observation(
        phase=FAILED, reason=reason, message=message, finished_at=ended.finished_at, attempts=tried[:count]
    )


def _stop(rest: Rest, kind: Kind, ns: str, obj: JobObject, note: Mapping[str, object], propagation: str) -> bool:
    """Note why on the object, then delete it with its pods; False when it is gone already or the cluster
    refused (the next observation tries again)."""
    name = str((obj.get("metadata") or {}).get("name", ""))
    try:
        if rest.merge(kind, ns, name, {"metadata": {"annotations": {STOPPED_ANNOTATION: json.dumps(note)}}}) is None:
            return False
        rest.delete(kind, ns, name, propagation)
    except BackendError as exc:
        log.warning("could not delete %s %s/%s (%s): %s", kind.kind, ns, name, note.get("reason"), exc)
        return False
    return True


def _refused_too_long(
    kind: Kind, refused: Refused | None, now: float, grace: float
) -> tuple[AttemptReason, str] | None:
    if refused is None or refused.since is None or now - refused.since < grace:
        return None
    return "ConfigError", f"the API server refuses what the {kind.kind} creates ({refused.reason}): {refused.message}"


def _ended(tried: tuple[AttemptReport, ...], reason: AttemptReason, words: str, at: str) -> tuple[AttemptReport, ...]:
    """The attempts with the one under way ended (a new one when none is: its pods never started)."""
    if tried and tried[-1].reason is None:
        return (*tried[:-1], tried[-1].replace(reason=reason, message=words, finished_at=at))
    number = tried[-1].number + 1 if tried else 1
    return (*tried, AttemptReport(number=number, reason=reason, message=words, finished_at=at))


def _stopped_note(text: str, obj: JobObject) -> Observation | None:
    """The observation the note of a job tuneplane stopped stands for, while its deletion runs; None for
    no (or a damaged) note. A note that counts `attempts` (a spent retry budget) ended the run with the
    ledger's first ones."""
    try:
        note = json.loads(text) if text else None
    except ValueError:
        return None
    if not isinstance(note, dict) or note.get("reason") not in ATTEMPT_REASONS:
        return None
    count = note.get("attempts")
    return Observation(
        phase=FAILED,
        reason=str(note["reason"]),
        message=clip(str(note.get("message") or "")),
        finished_at=str(note.get("at") or "") or None,
        attempts=ledger_attempts(obj, count) if isinstance(count, int) and not isinstance(count, bool) else (),
    )


def _progress(
    state: _State, pods: list[Pod], attempts: tuple[AttemptReport, ...], refused: Refused | None = None
) -> Observation:
    """Pending or Running: say why a run is not making progress, when a pod, or the Event of a create
    the API server refused, shows it."""
    if _runs(state, pods, attempts):
        state.phase = RUNNING
    state.started_at = state.started_at or earliest_start(pods)
    problem = pod_problem(_live(pods))
    if problem is not None:
        state.reason, state.message = problem
    elif refused is not None and state.phase == PENDING:
        state.reason, state.message = refused.reason, clip(refused.message)
    return _observation(state, attempts=attempts)


def _runs(state: _State, pods: list[Pod], attempts: tuple[AttemptReport, ...]) -> bool:
    """Whether a Job or JobSet with no end yet runs, by its pods: its controller counts ready workers, a
    pod runs, or the newest attempt ended on the object's way to its end (`_finishing`)."""
    running = state.running_hint or _finishing(state, attempts) or any(pod_phase(p) == POD_RUNNING for p in pods)
    return state.pods_decide and running


def _finishing(state: _State, attempts: tuple[AttemptReport, ...]) -> bool:
    """The newest attempt ended while the object names no end yet, and its controller is on its way
    there, a sync or more later: the attempt's pods all succeeded (a Job's `SuccessCriteriaMet` and its
    pods' tracking finalizers before `Complete`, a JobSet after its child Jobs), or its failure is
    decided and its pods are stopping (`_failing_state`). The run still runs until then; read Pending,
    with nothing active or ready, it would pass for a requeue. No Job or JobSet starts a pod again after
    all of an attempt's succeeded, nor once its failure is decided."""
    if not attempts or attempts[-1].reason is None:
        return False
    return attempts[-1].reason == "Completed" or state.failing


def _failed_attempt(attempts: tuple[AttemptReport, ...]) -> bool:
    return bool(attempts) and attempts[-1].reason not in (None, "Completed")


def _child_job_failing(rest: Rest, ns: str, obj: JobObject, state: _State, pods: list[Pod]) -> None:
    """A JobSet whose newest attempt failed, with a child Job whose failure is decided (`FailureTarget`,
    `Failed` before the JobSet controller caught up, or a failed pod of it before the Job controller
    synced: `backoff.decided_failure`) and no restart left (`failurePolicy.maxRestarts`): the JobSet
    fails once that Job is `Failed`, and starts nothing again. Read only then, one list of its Jobs; an
    unreadable list leaves the state as it is."""
    spec, status = obj.get("spec") or {}, obj.get("status") or {}
    if int(status.get("restarts") or 0) < int((spec.get("failurePolicy") or {}).get("maxRestarts") or 0):
        return  # the JobSet restarts its Jobs: that is the next attempt
    selector = f"jobset.sigs.k8s.io/jobset-name={(obj.get('metadata') or {}).get('name')}"
    try:
        jobs = cast(list[JobObject], rest.list(JOB, ns, selector))
    except BackendError as exc:
        log.warning("%s", exc)
        return
    for job in jobs:
        conds = _true_conditions(job)
        target = conds.get("FailureTarget") or conds.get(CONDITION_FAILED)
        then = "its pods are stopping"
        if target is None:
            target, then = decided_failure(job, _owned(pods, job)), UNSYNCED
        if target is not None:
            name = (job.get("metadata") or {}).get("name", "")
            failing = _failing_state(target, f"the JobSet fails with its Job {name}", then=then)
            state.reason, state.message, state.failing = failing.reason, failing.message, True
            return


def _owned(pods: list[Pod], owner: JobObject) -> list[Pod]:
    uid = (owner.get("metadata") or {}).get("uid")
    return [p for p in pods if any(o.get("uid") == uid for o in (p.get("metadata") or {}).get("ownerReferences") or [])]


def _live(pods: list[Pod]) -> list[Pod]:
    """Pods not being deleted: a disrupted pod's last word is its attempt's, not the run's."""
    return [p for p in pods if not (p.get("metadata") or {}).get("deletionTimestamp")]


def _failure(
    rest: Rest,
    kind: Kind,
    ns: str,
    obj: JobObject,
    state: _State,
    pods: list[Pod],
    log_tail: int,
    attempts: tuple[AttemptReport, ...],
) -> Observation:
    """Failed: name the failing container, its exit code, and its last log lines."""
    if kind is RAYJOB and ray_exit_code(obj) is not None:
        return _driver_failure(rest, ns, obj, state, pods, log_tail, attempts)
    culprit = failed_container(pods)
    state.started_at = state.started_at or earliest_start(pods)
    exit_code = None
    parts = [f"{kind.kind} failed" + (f" ({state.reason}: {state.message})" if state.reason else "")]
    if culprit is not None:
        pod, container, terminated = culprit
        exit_code = terminated.get("exitCode")
        parts.append(termination_line(pod, container, terminated))
        if terminated.get("reason") not in (None, "", "Error"):
            state.reason = str(terminated.get("reason"))
        parts.append(_last_lines(rest, ns, pod, container, log_tail))
    else:
        problem = pod_problem(pods)
        if problem is not None:
            parts.append(problem[1])
    parts.extend(state.notes)
    state.message = clip("\n".join(p for p in parts if p))
    return _observation(state, exit_code=exit_code, attempts=attempts)


def _driver_failure(
    rest: Rest,
    ns: str,
    obj: JobObject,
    state: _State,
    pods: list[Pod],
    log_tail: int,
    attempts: tuple[AttemptReport, ...],
) -> Observation:
    """A Ray driver that exited non-zero: its exit code is Ray's word (the submitter that followed its log
    exited 0), its last lines are in the submitter's log."""
    headline = state.message.split("\n", 1)[0]
    parts = [f"RayJob failed ({state.reason}: {headline})"]
    if pods:
        parts.append(_last_lines(rest, ns, pods[0], default_container(pods[0]), log_tail))
    parts.extend(state.notes)
    state.message = clip("\n".join(p for p in parts if p))
    state.started_at = state.started_at or earliest_start(pods)
    return _observation(state, exit_code=ray_exit_code(obj), attempts=attempts)


def _last_lines(rest: Rest, ns: str, pod: Pod, container: str, tail: int) -> str:
    name = (pod.get("metadata") or {}).get("name", "")
    try:
        data = rest.pod_log(ns, name, container, tail, follow=False, read=True)
        text = bytes(data).decode("utf-8", "replace")
    except BackendError as exc:
        return f"(its logs could not be read: {exc})"
    lines = [line[:300] for line in text.splitlines()[-tail:]]
    if not lines:
        return "(it wrote no log lines)"
    body = "\n".join("  " + line for line in lines)
    return f"last {len(lines)} log lines:\n{body}"


def secret_values(rest: Rest, ns: str, name: str) -> tuple[str, ...]:
    """The values of the run's Secret (its job token, the lab's tokens copied for it), so a job that printed
    one cannot leak it into a status file."""
    try:
        secret = cast(Secret | None, rest.get(SECRET, ns, f"{name}{SECRET_SUFFIX}"))
    except BackendError:
        return ()
    values = (secret or {}).get("data") or {}
    return tuple(base64.b64decode(v).decode("utf-8", "replace") for v in values.values() if v)


def _child_jobs_start(rest: Rest, ns: str, obj: JobObject) -> str | None:
    """A JobSet keeps no start time; its child Jobs do (and outlive their pods)."""
    selector = f"jobset.sigs.k8s.io/jobset-name={(obj.get('metadata') or {}).get('name')}"
    try:
        jobs = cast(list[JobObject], rest.list(JOB, ns, selector))
    except BackendError as exc:
        log.warning("%s", exc)
        return None
    starts = [s for j in jobs if (s := (j.get("status") or {}).get("startTime"))]
    return min(starts) if starts else None


def _pods_or_none(rest: Rest, kind: Kind, ns: str, obj: JobObject) -> list[Pod] | None:
    """The job's pods, leader first; an unreadable pod list degrades the detail, not the phase."""
    try:
        return find_pods(rest, kind, ns, obj)
    except BackendError as exc:
        log.warning("%s", exc)
        return None
