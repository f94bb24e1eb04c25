"""A run's attempts on Kubernetes: each pod replacement and each Kueue eviction ends one, with its reason.

The evidence, strongest first:

- a pod: the trainer's end record in its termination message (`tuneplane.runtime.attempts`: exit code,
  signal, error line, node, log tail), its `DisruptionTarget` condition (why the cluster deleted it),
  its container's terminated state;
- the Kueue Workload: `schedulingStats.evictions` counts every eviction by reason, and the `Evicted`
  condition keeps the newest one's message (as `Previously: …` once re-admitted);
- the Job's `status.failed`: a failed pod the controller counted but whose object is gone (a deleted
  pod disappears once the controller accounted for it) is an attempt nobody can explain any more;
- the ledger: ended attempts the backend already classified, kept in an annotation on the job object,
  because a preempted or evicted pod is gone minutes later and its reason with it.

Attempts of one rank replaced keep the other ranks' pods: an attempt is the n-th pod of every completion
index (within one JobSet restart), ended when any of its pods failed or all succeeded.
"""

from __future__ import annotations

import json
import logging
import re
from typing import Any

from tuneplane.backends.base import AttemptReport, BackendError
from tuneplane.backends.kubernetes.client import Kind, Rest
from tuneplane.backends.kubernetes.types import (
    CONDITION_FAILED,
    POD_FAILED,
    POD_SUCCEEDED,
    JobObject,
    Pod,
    PodTemplate,
    Workload,
)
from tuneplane.constants import (
    ATTEMPT_ENV,
    ATTEMPT_REASONS,
    CANCELLED,
    CONFIG_ERROR_EXIT,
    FAILED,
    JOBSPEC_ENV,
    SUCCEEDED,
    TERMINAL,
    AttemptReason,
)
from tuneplane.models.base import RetryPolicy
from tuneplane.runtime.attempts import decode, said
from tuneplane.runtime.records import FrozenRecord

log = logging.getLogger("tuneplane.backends.kubernetes")

LEDGER_ANNOTATION = "tuneplane.dev/attempts"
LEDGER_LIMIT = 50  # ended attempts kept; a retry policy allows at most 100, most far fewer
TAIL_KEPT = 5  # log lines of an attempt kept in the ledger (the annotation stays small)
LEDGER_DEFAULTS = frozenset({"gpus", "kueue"})  # a ledger row's keys left out when 0 or false
MESSAGE_KEPT = 300
INDEX_LABEL = "batch.kubernetes.io/job-completion-index"
RESTART_LABEL = "jobset.sigs.k8s.io/restart-attempt"
GPU = "nvidia.com/gpu"
RAY_NODE_TYPE = "ray.io/node-type"  # KubeRay's label on a Ray pod: head or worker


# DisruptionTarget reasons (the Kubernetes pod disruption conditions), by who took the pod away
DISRUPTIONS: dict[str, AttemptReason] = {
    "PreemptionByScheduler": "Preempted",
    "PreemptionByKubeScheduler": "Preempted",  # the name before Kubernetes 1.27
    "EvictionByEvictionAPI": "Evicted",  # a drain, or anyone calling the Eviction API
    "TerminationByKubelet": "Evicted",  # node-pressure eviction or a graceful node shutdown
    "DeletionByTaintManager": "Evicted",  # a NoExecute taint: a node drained or going away
    "DeletionByPodGC": "NodeFailure",  # the pod's node is gone
}
# the Job conditions that end the attempt under way without a pod of its own to tell it
JOB_ENDINGS: dict[str, AttemptReason] = {"DeadlineExceeded": "Timeout"}


class _Seen(FrozenRecord):
    """One ended or running attempt as the evidence shows it, before numbering."""

    report: AttemptReport
    pods: tuple[str, ...] = ()
    kueue: bool = False
    sort_key: str = ""


def job_attempts(
    rest: Rest, kind: Kind, ns: str, obj: JobObject, pods: list[Pod], workload: Workload | None, job_failure: str = ""
) -> tuple[AttemptReport, ...]:
    """Every attempt of a Job or JobSet, oldest first; records newly ended ones in the ledger."""
    ledger = read_ledger(obj)
    known_pods = {p for entry in ledger for p in entry.pods}
    if (obj.get("spec") or {}).get("suspend"):
        # pods a suspension deletes (Kueue's eviction) end the attempt the eviction accounts for
        pods = [p for p in pods if not (p.get("metadata") or {}).get("deletionTimestamp") or _disrupted(p)]
    groups = _pod_groups(pods)
    ended = [seen for seen in (_group_attempt(g) for g in groups) if seen.report.reason is not None]
    new = [s for s in ended if not set(s.pods) & known_pods]
    new += _kueue_evictions(workload, sum(1 for e in ledger if e.kueue))
    new += _unexplained_failures(obj, pods, ledger, new)
    new.sort(key=lambda s: s.sort_key)
    done = ledger + [s.replace(report=s.report.replace(number=len(ledger) + i + 1)) for i, s in enumerate(new)]
    under_way = [s for s in (_group_attempt(g) for g in groups) if s.report.reason is None]
    reports = [s.report for s in done]
    if under_way:
        reports.append(under_way[-1].report.replace(number=len(done) + 1))
    reports = _job_ending(reports, obj, job_failure)
    reports = _job_completed(reports, obj)
    if new and not _finished(obj):
        _write_ledger(rest, kind, ns, obj, done)
    return tuple(reports)


# ==================================================================== pods → attempts
def _pod_groups(pods: list[Pod]) -> list[list[Pod]]:
    """The n-th pod of every completion index (per JobSet restart) together, oldest attempt first."""
    by_slot: dict[tuple[int, int], list[Pod]] = {}
    for pod in pods:
        labels = (pod.get("metadata") or {}).get("labels") or {}
        slot = (_int(labels.get(RESTART_LABEL)), _int(labels.get(INDEX_LABEL)))
        by_slot.setdefault(slot, []).append(pod)
    groups: dict[tuple[int, int], list[Pod]] = {}
    for (restart, _), members in by_slot.items():
        members.sort(
            key=lambda p: (
                (p.get("metadata") or {}).get("creationTimestamp", ""),
                (p.get("metadata") or {}).get("name", ""),
            )
        )
        for ordinal, pod in enumerate(members):
            groups.setdefault((restart, ordinal), []).append(pod)
    return [groups[key] for key in sorted(groups)]


def _group_attempt(group: list[Pod]) -> _Seen:
    ends = [_pod_end(p) for p in group]
    failed = sorted((e for e in ends if e is not None and e.reason != "Completed"), key=lambda e: e.finished_at or "~")
    starts = [s for p in group if (s := (p.get("status") or {}).get("startTime"))]
    where = tuple(dict.fromkeys(_where(p) for p in group))
    names = tuple(str((p.get("metadata") or {}).get("name", "")) for p in group)
    gpus = sum(_gpus(p) for p in group)
    first_start = min(starts, default=None)
    if failed:
        report = failed[0].replace(where=where, gpus=gpus, started_at=failed[0].started_at or first_start)
    elif ends and all(e is not None for e in ends):
        last = max((e for e in ends if e is not None), key=lambda e: e.finished_at or "")
        report = last.replace(where=where, gpus=gpus, started_at=first_start)
    else:
        report = AttemptReport(number=0, started_at=first_start, where=where, gpus=gpus)
    return _Seen(report, names, sort_key=report.finished_at or report.started_at or "~")


def _disrupted(pod: Pod) -> bool:
    return any(
        c.get("type") == "DisruptionTarget" and c.get("status") == "True"
        for c in (pod.get("status") or {}).get("conditions") or []
    )


def _pod_end(pod: Pod) -> AttemptReport | None:
    """How one pod ended, or None while it has not."""
    status = pod.get("status") or {}
    disruption = next(
        (
            c
            for c in status.get("conditions") or []
            if c.get("type") == "DisruptionTarget" and c.get("status") == "True"
        ),
        None,
    )
    if status.get("phase") not in (POD_FAILED, POD_SUCCEEDED) and disruption is None:
        return None
    terminated, init_failed = _terminated(pod)
    record = decode(str(terminated.get("message") or "")) or {}
    exit_code = record.get("exit_code", terminated.get("exitCode"))
    signal = record.get("signal", terminated.get("signal"))
    reason = _reason(disruption, terminated, exit_code, signal, init_failed)
    if record.get("reason") == "GpuOveruse" and disruption is None:  # the launcher's GPU watchdog stopped it
        reason = "GpuOveruse"
    message = said(record)
    if not message and disruption is not None:
        message = str(disruption.get("message") or disruption.get("reason") or "")
    if not message and init_failed:
        message = f"init container {init_failed!r} exited with code {exit_code}"
    node = str(record.get("node") or (pod.get("spec") or {}).get("nodeName") or "")
    finished = (
        record.get("finished_at")
        or terminated.get("finishedAt")
        or (disruption or {}).get("lastTransitionTime")
        or (pod.get("metadata") or {}).get("deletionTimestamp")
    )
    return AttemptReport(
        number=0,
        started_at=record.get("started_at") or status.get("startTime"),
        finished_at=finished,
        exit_code=exit_code,
        signal=signal,
        reason=reason,
        message=message[: MESSAGE_KEPT * 2],
        failed_node=node if reason != "Completed" else "",
        failed_rank=_failed_rank(pod, reason),
        log_tail=tuple(record.get("log_tail") or ()),
    )


def _reason(disruption: Any, terminated: Any, exit_code: Any, signal: Any, init_failed: str) -> AttemptReason:
    if disruption is not None:
        return DISRUPTIONS.get(str(disruption.get("reason") or ""), "Evicted")
    if terminated.get("reason") == "OOMKilled":
        return "OutOfMemory"
    if exit_code == 0 and not init_failed:
        return "Completed"
    if exit_code == CONFIG_ERROR_EXIT:
        return "ConfigError"
    if signal:
        return "Signal"
    return "Error"


def _terminated(pod: Pod) -> tuple[dict[str, Any], str]:
    """The trainer's terminated state, or a failed init container's (then its name)."""
    status = pod.get("status") or {}
    for cs in status.get("initContainerStatuses") or []:
        ended = (cs.get("state") or {}).get("terminated") or {}
        if ended and ended.get("exitCode", 0) != 0:
            return dict(ended), str(cs.get("name", ""))
    statuses = status.get("containerStatuses") or []
    main = ((pod.get("spec") or {}).get("containers") or [{}])[0].get("name")
    for cs in sorted(statuses, key=lambda s: s.get("name") != main):
        ended = (cs.get("state") or {}).get("terminated") or {}
        if ended:
            return dict(ended), ""
    return {}, ""


def _failed_rank(pod: Pod, reason: str) -> int | None:
    if reason == "Completed":
        return None
    labels = (pod.get("metadata") or {}).get("labels") or {}
    return _int(labels.get(INDEX_LABEL)) if INDEX_LABEL in labels else None


def _where(pod: Pod) -> str:
    return str((pod.get("spec") or {}).get("nodeName") or (pod.get("metadata") or {}).get("name", ""))


def _gpus(pod: Pod | PodTemplate) -> int:
    total = 0
    for container in (pod.get("spec") or {}).get("containers") or []:
        limits = (container.get("resources") or {}).get("limits") or {}
        total += _int(limits.get(GPU))
    return total


# ==================================================================== what pods no longer show
def _kueue_evictions(workload: Workload | None, known: int) -> list[_Seen]:
    """Kueue evictions not yet in the ledger; each ended the attempt whose pods it deleted."""
    if workload is None:
        return []
    status = workload.get("status") or {}
    counts: list[tuple[str, int]] = [
        (str(r.get("reason") or ""), _int(r.get("count")))
        for r in (status.get("schedulingStats") or {}).get("evictions") or []
    ]
    evicted = next((c for c in status.get("conditions") or [] if c.get("type") == "Evicted"), None)
    if not counts and evicted is not None:  # a Kueue before schedulingStats: the newest eviction only
        counts = (
            [(str(evicted.get("reason") or "Evicted"), 1)]
            if evicted.get("status") == "True" or str(evicted.get("message") or "").startswith("Previously: ")
            else []
        )
    total = sum(n for _, n in counts)
    if total <= known:
        return []
    newest_reason = str((evicted or {}).get("reason") or "")
    message = str((evicted or {}).get("message") or "").removeprefix("Previously: ")
    at = (evicted or {}).get("lastTransitionTime")
    out = []
    reasons = [reason for reason, n in counts for _ in range(n)]
    for index in range(known, total):
        why = reasons[index] if newest_reason in ("", "QuotaReserved") or index < total - 1 else newest_reason
        last = index == total - 1
        text = message if last else f"evicted by Kueue ({why})"
        out.append(
            _Seen(
                AttemptReport(
                    number=0,
                    finished_at=at if last else None,
                    reason="Preempted" if why == "Preempted" else "Evicted",
                    message=f"Kueue: {text}"[: MESSAGE_KEPT * 2],
                ),
                kueue=True,
                sort_key=str(at or "") if last else "",
            )
        )
    return out


def _unexplained_failures(obj: JobObject, pods: list[Pod], ledger: list[_Seen], new: list[_Seen]) -> list[_Seen]:
    """Failed pods a Job counted whose objects are gone before anyone read why (a Job's pods only)."""
    if obj.get("kind") != "Job":
        return []
    counted = _int((obj.get("status") or {}).get("failed"))
    failed_now = sum(1 for p in pods if (p.get("status") or {}).get("phase") == POD_FAILED)
    visible = {str((p.get("metadata") or {}).get("name", "")) for p in pods}
    remembered = sum(1 for e in ledger if not e.kueue and e.report.reason != "Completed" and not set(e.pods) & visible)
    missing = counted - failed_now - remembered - sum(1 for s in new if s.report.reason == "Lost")
    return [
        _Seen(
            AttemptReport(
                number=0,
                reason="Lost",
                message="its pod was deleted (a preemption, an eviction or a lost node) before "
                "tuneplane saw why; the Job counted it as failed",
            )
        )
        for _ in range(max(0, missing))
    ]


def _job_ending(reports: list[AttemptReport], obj: JobObject, job_failure: str) -> list[AttemptReport]:
    """A Job failure that ends the attempt under way by itself (a deadline), whose pods are deleted."""
    reason = JOB_ENDINGS.get(job_failure)
    if reason is None:
        return reports
    conds = (obj.get("status") or {}).get("conditions") or []
    at = next((c.get("lastTransitionTime") for c in conds if c.get("type") == CONDITION_FAILED), None)
    if reports and reports[-1].reason in (None, "Signal", "Error"):
        return [*reports[:-1], reports[-1].replace(reason=reason, finished_at=reports[-1].finished_at or at)]
    start = (obj.get("status") or {}).get("startTime")
    return [
        *reports,
        AttemptReport(
            number=len(reports) + 1,
            started_at=start,
            finished_at=at,
            reason=reason,
            message="the run's time limit (activeDeadlineSeconds) passed",
        ),
    ]


def _job_completed(reports: list[AttemptReport], obj: JobObject) -> list[AttemptReport]:
    """A Job its controller marked Complete ended its newest attempt with it, whatever a pod not yet
    updated (or already gone) still says: the controller counted the pods that succeeded."""
    status = obj.get("status") or {}
    complete = any(
        c.get("type") in ("Complete", "Completed") and c.get("status") == "True" for c in status.get("conditions") or []
    )
    if not complete or not reports or reports[-1].reason is not None:
        return reports
    newest = reports[-1]
    code = 0 if newest.exit_code is None else newest.exit_code
    ended = newest.finished_at or status.get("completionTime")
    return [*reports[:-1], newest.replace(reason="Completed", exit_code=code, finished_at=ended)]


def _finished(obj: JobObject) -> bool:
    conds = (obj.get("status") or {}).get("conditions") or []
    return any(
        c.get("type") in ("Complete", CONDITION_FAILED, "Completed") and c.get("status") == "True" for c in conds
    )


# ==================================================================== the ledger
def read_ledger(obj: JobObject) -> list[_Seen]:
    """The ended attempts recorded on the object; a damaged or foreign annotation is no ledger."""
    text = ((obj.get("metadata") or {}).get("annotations") or {}).get(LEDGER_ANNOTATION, "")
    try:
        rows = json.loads(text) if text else []
    except ValueError:
        return []
    if not isinstance(rows, list):
        return []
    out = []
    for number, row in enumerate(rows[:LEDGER_LIMIT], start=1):
        seen = _from_row(row, number)
        if seen is not None:
            out.append(seen)
    return out


def _from_row(row: object, number: int) -> _Seen | None:
    if not isinstance(row, dict) or row.get("reason") not in ATTEMPT_REASONS:
        return None
    text = _strings(row.get("tail"))
    report = AttemptReport(
        number=number,
        started_at=_str(row.get("start")),
        finished_at=_str(row.get("end")),
        where=_strings(row.get("where")),
        exit_code=_opt_int(row.get("exit")),
        signal=_opt_int(row.get("signal")),
        reason=row["reason"],
        message=str(row.get("message") or "")[:MESSAGE_KEPT],
        failed_node=str(row.get("node") or ""),
        failed_rank=_opt_int(row.get("rank")),
        log_tail=text,
        gpus=_int(row.get("gpus")),
    )
    return _Seen(report, _strings(row.get("pods")), kueue=bool(row.get("kueue")))


def _row(seen: _Seen) -> dict[str, Any]:
    r = seen.report
    row: dict[str, Any] = {
        "reason": r.reason,
        "start": r.started_at,
        "end": r.finished_at,
        "where": list(r.where),
        "exit": r.exit_code,
        "signal": r.signal,
        "message": r.message[:MESSAGE_KEPT],
        "node": r.failed_node,
        "rank": r.failed_rank,
        "tail": list(r.log_tail[-TAIL_KEPT:]),
        "gpus": r.gpus,
        "pods": list(seen.pods),
        "kueue": seen.kueue,
    }
    # an exit code, signal or rank of 0 is said (a trainer that exited 0, rank 0); no GPUs and no Kueue
    # eviction are what a row without them reads as
    return {k: v for k, v in row.items() if v not in (None, "", []) and (v or k not in LEDGER_DEFAULTS)}


def _write_ledger(rest: Rest, kind: Kind, ns: str, obj: JobObject, done: list[_Seen]) -> None:
    name = str((obj.get("metadata") or {}).get("name", ""))
    text = json.dumps([_row(s) for s in done[-LEDGER_LIMIT:]], separators=(",", ":"), ensure_ascii=False)
    try:
        rest.merge(kind, ns, name, {"metadata": {"annotations": {LEDGER_ANNOTATION: text}}})
    except BackendError as exc:  # the next observation writes it again; what it reports now stays true
        log.warning("could not record the attempts of %s %s/%s: %s", kind.kind, ns, name, exc)


def _int(value: object) -> int:
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, int | float | str):
        try:
            return int(value)
        except ValueError:
            return 0
    return 0


def _opt_int(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _str(value: object) -> str | None:
    return value if isinstance(value, str) and value else None


def _strings(value: object) -> tuple[str, ...]:
    return tuple(v for v in value if isinstance(v, str)) if isinstance(value, list) else ()


# ==================================================================== RayJob
RAY_EXIT = re.compile(r"exit code (-?[0-9]+)")  # Ray's words: "Job entrypoint command failed with exit code 3"


def ray_exit_code(obj: JobObject) -> int | None:
    """The driver's exit code, as Ray's job table says it (the submitter only follows the driver's log)."""
    found = RAY_EXIT.search(str((obj.get("status") or {}).get("message") or ""))
    return int(found.group(1)) if found else None


def ray_attempts(
    rest: Rest,
    kind: Kind,
    ns: str,
    obj: JobObject,
    pods: list[Pod],
    state: tuple[str, str, str | None, str | None],
) -> tuple[AttemptReport, ...]:
    """A RayJob's attempts: each Ray head lost while the run ran ends one, and the driver's run on Ray's
    job table (its phase, reason, start and end in `state`) is the newest.

    Without GCS fault tolerance the job table lives in the head: KubeRay makes a new head, the submitter
    submits the driver again, and it starts over from its newest checkpoint, while the RayJob itself
    never leaves Running. tp renders `backoffLimit: 0`, so KubeRay makes no other attempt of its own;
    the submitter's own retries (a dropped log stream) are no attempts. Lost heads are kept in the
    ledger, because an evicted pod is gone minutes later. Every attempt held the GPU workers' GPUs."""
    phase, reason, started, finished = state
    if not started:
        return ()
    ledger = read_ledger(obj)
    known = {p for entry in ledger for p in entry.pods}
    gpus = ray_gpus(obj)
    heads = [p for p in pods if ((p.get("metadata") or {}).get("labels") or {}).get(RAY_NODE_TYPE) == "head"]
    lost = [] if phase in TERMINAL else [s for s in (_head_lost(h, gpus) for h in heads) if s is not None]
    new = sorted((s for s in lost if not set(s.pods) & known), key=lambda s: s.sort_key)
    done = ledger + [s.replace(report=s.report.replace(number=len(ledger) + i + 1)) for i, s in enumerate(new)]
    if new:
        _write_ledger(rest, kind, ns, obj, done)
    live = [h for h in heads if _pod_end(h) is None]
    since = max((s for h in live if (s := (h.get("status") or {}).get("startTime"))), default=None)
    newest = _driver_attempt(obj, phase, reason, (since if done else None) or started, finished)
    return (*(s.report for s in done), newest.replace(number=len(done) + 1, gpus=gpus))


def ray_gpus(obj: JobObject) -> int:
    """The GPUs a RayJob's Ray cluster holds: its worker groups' (the head runs without GPUs)."""
    groups = ((obj.get("spec") or {}).get("rayClusterSpec") or {}).get("workerGroupSpecs") or []
    return sum(_int(g.get("replicas", 1)) * _gpus(g.get("template") or {}) for g in groups)


def ray_overrun(obj: JobObject, attempts: tuple[AttemptReport, ...]) -> tuple[int, str] | None:
    """The first lost head that the run's retry policy allows no next attempt after, as how many of
    `attempts` the run ended with and why; None while the policy allows KubeRay's new head.

    Nothing in the cluster bounds KubeRay's head replacements, so tp does what a Job's `backoffLimit`
    and `podFailurePolicy` do for a Job, under the policy the RayJob was rendered with. The count starts
    at the object's own first attempt (`TUNEPLANE_ATTEMPT`, the bot's retry of an earlier object) and
    goes on with the ledger's lost heads, so neither a restarted bot nor a pruned pod resets it."""
    policy, first = _rendered_retry(obj)
    for index, head in enumerate(attempts):
        if head.reason is None:
            break
        number = first + head.number - 1
        ended = f"attempt {number} of {policy.attempts} ended {head.reason}"
        if head.reason not in policy.on:
            return index + 1, f"{ended}, which the retry policy does not retry (retry.on: {', '.join(policy.on)})"
        if number >= policy.attempts:
            return index + 1, f"{ended}; the retry budget is spent"
    return None


def _rendered_retry(obj: JobObject) -> tuple[RetryPolicy, int]:
    """The retry policy in the JobSpec the RayJob carries (its checkout's `TUNEPLANE_JOBSPEC`) and the
    object's first attempt number; the default policy where the JobSpec names none (it leaves the
    default out) or cannot be read."""
    head = (((obj.get("spec") or {}).get("rayClusterSpec") or {}).get("headGroupSpec") or {}).get("template") or {}
    pod = head.get("spec") or {}
    env = {
        e.get("name", ""): e.get("value", "")
        for c in [*(pod.get("initContainers") or []), *(pod.get("containers") or [])[:1]]
        for e in c.get("env") or []
    }
    try:
        document = json.loads(env.get(JOBSPEC_ENV) or "{}")
        retry = (document.get("spec") or {}).get("retry") if isinstance(document, dict) else None
        policy = RetryPolicy.model_validate(retry) if isinstance(retry, dict) else RetryPolicy()
    except ValueError as exc:  # pydantic's ValidationError too
        log.warning("the retry policy of RayJob %s could not be read, the default applies: %s", _name(obj), exc)
        policy = RetryPolicy()
    return policy, max(1, _int(env.get(ATTEMPT_ENV) or 1))


def _name(obj: JobObject) -> str:
    return str((obj.get("metadata") or {}).get("name", ""))


def ledger_attempts(obj: JobObject, count: int) -> tuple[AttemptReport, ...]:
    """The first `count` ended attempts the object's ledger recorded."""
    return tuple(s.report for s in read_ledger(obj)[:count])


def _head_lost(pod: Pod, gpus: int) -> _Seen | None:
    """A Ray head that a disruption took, or that ended (a Ray head runs until its cluster goes); the
    attempt it ended held the workers' `gpus`."""
    end = _pod_end(pod)
    if end is None:
        return None
    name = str((pod.get("metadata") or {}).get("name", ""))
    message = end.message or f"the Ray head {name} ended; the driver started again on a new head"
    report = end.replace(where=(_where(pod),), reason=end.reason if end.reason != "Completed" else "Error", gpus=gpus)
    return _Seen(report.replace(message=message), (name,), sort_key=end.finished_at or "~")


def _driver_attempt(obj: JobObject, phase: str, reason: str, started: str, finished: str | None) -> AttemptReport:
    """The driver's run on Ray's job table: under way, or ended with the RayJob's phase."""
    code = ray_exit_code(obj)
    message = str((obj.get("status") or {}).get("message") or "").split("\n", 1)[0][:MESSAGE_KEPT]
    ended: AttemptReason | None = None
    if phase == SUCCEEDED:
        ended, code = "Completed", 0
    elif phase == CANCELLED:
        ended = CANCELLED  # the reason is spelled as the phase it ends in
    elif phase == FAILED:
        ended = "Timeout" if reason == "DeadlineExceeded" else "ConfigError" if code == CONFIG_ERROR_EXIT else "Error"
    return AttemptReport(
        number=1,
        started_at=started,
        finished_at=finished if ended else None,
        exit_code=code,
        reason=ended,
        message=message if ended not in (None, "Completed") else "",
    )
