"""A run's pods: finding them, the leader whose log `tp job logs` shows, and what a person must fix.

Pods are found by our run label and, for pods a controller makes from its own template (an older
RayJob's default submitter), by the controller's labels too. The leader is the pod whose log tells the
run's story: the RayJob submitter (the Ray driver's output), else the Ray head, else replicated job 0 /
completion index 0; among pods of the same place, the newest live one (a replacement, not the pod it
replaced).
"""

from __future__ import annotations

import re
from typing import Any, cast

from tuneplane.backends.kubernetes.apply import RUN_LABEL
from tuneplane.backends.kubernetes.client import EVENT, JOBSET, POD, RAYJOB, Kind, Rest
from tuneplane.backends.kubernetes.types import (
    POD_FAILED,
    POD_SUCCEEDED,
    ContainerStateTerminated,
    ContainerStatus,
    Event,
    JobObject,
    Pod,
)
from tuneplane.constants import AttemptReason, epoch_of
from tuneplane.runtime.records import FrozenRecord

JOB_NAME_LABEL = "batch.kubernetes.io/job-name"
DEFAULT_CONTAINER_ANNOTATION = "kubectl.kubernetes.io/default-container"
IMAGE_REASONS = frozenset({"ErrImagePull", "ImagePullBackOff", "InvalidImageName", "ErrImageNeverPull"})
CONFIG_REASONS = frozenset({"CreateContainerConfigError", "CreateContainerError", "RunContainerError"})
POD_ENDED = frozenset({POD_SUCCEEDED, POD_FAILED})  # Kubernetes' pod phases (a pod is never Cancelled)
# waiting reasons that never clear by themselves → the reason of the attempt they end after the grace period
STUCK: dict[str, AttemptReason] = {
    **{reason: "ImagePull" for reason in IMAGE_REASONS},
    **{reason: "ConfigError" for reason in CONFIG_REASONS},
}


def find_pods(rest: Rest, kind: Kind, ns: str, obj: JobObject) -> list[Pod]:
    """The job's pods, leader first."""
    run = ((obj.get("metadata") or {}).get("labels") or {}).get(RUN_LABEL)
    seen: dict[str, Pod] = {}
    selectors = ([f"{RUN_LABEL}={run}"] if run else []) + _controller_selectors(kind, obj)
    for selector in selectors:
        for pod in cast(list[Pod], rest.list(POD, ns, selector)):
            seen.setdefault(pod_name(pod), pod)
    return leader_first(list(seen.values()), kind, obj)


def _controller_selectors(kind: Kind, obj: JobObject) -> list[str]:
    """Labels the controllers put on pods whatever their template says."""
    name = (obj.get("metadata") or {}).get("name", "")
    if kind is JOBSET:
        return [f"jobset.sigs.k8s.io/jobset-name={name}"]
    if kind is RAYJOB:
        cluster = (obj.get("status") or {}).get("rayClusterName")
        return [f"{JOB_NAME_LABEL}={name}"] + ([f"ray.io/cluster={cluster}"] if cluster else [])
    return [f"{JOB_NAME_LABEL}={name}"]


def leader_first(pods: list[Pod], kind: Kind, obj: JobObject) -> list[Pod]:
    newest_first = sorted(pods, key=lambda p: (p.get("metadata") or {}).get("creationTimestamp", ""), reverse=True)
    return sorted(newest_first, key=lambda p: _leader_key(p, kind, obj))


def _leader_key(pod: Pod, kind: Kind, obj: JobObject) -> tuple[Any, ...]:
    meta = pod.get("metadata") or {}
    labels = meta.get("labels") or {}
    order = [r.get("name") for r in ((obj.get("spec") or {}).get("replicatedJobs") or [])]
    replicated = labels.get("jobset.sigs.k8s.io/replicatedjob-name")
    if kind is RAYJOB and labels.get(JOB_NAME_LABEL) == (obj.get("metadata") or {}).get("name"):
        role = 0  # the submitter pod carries the Ray driver's output
    else:
        role = 1 if labels.get("ray.io/node-type") == "head" else 2
    return (
        role,
        order.index(replicated) if replicated in order else len(order),
        _int(labels.get("jobset.sigs.k8s.io/job-index")),
        _int(labels.get("batch.kubernetes.io/job-completion-index")),
        -_int(labels.get("jobset.sigs.k8s.io/restart-attempt")),
        pod_phase(pod) in POD_ENDED,  # a replaced pod goes after its replacement
        bool(meta.get("deletionTimestamp")),
    )


def _int(value: Any) -> int:
    try:
        return int(value)
    except (TypeError, ValueError):
        return 0


def pod_phase(pod: Pod) -> str:
    return str((pod.get("status") or {}).get("phase") or "")


def earliest_start(pods: list[Pod]) -> str | None:
    """When the first pod started: the start of a run whose controller keeps no start time (JobSet)."""
    starts = [str(s) for p in pods if (s := (p.get("status") or {}).get("startTime"))]
    return min(starts) if starts else None


def default_container(pod: Pod) -> str:
    annotated = ((pod.get("metadata") or {}).get("annotations") or {}).get(DEFAULT_CONTAINER_ANNOTATION)
    containers = (pod.get("spec") or {}).get("containers") or [{}]
    return str(annotated or containers[0].get("name", ""))


def container_statuses(pod: Pod) -> list[tuple[ContainerStatus, bool]]:
    """Container statuses, init containers first (they run first), each flagged `is_init`."""
    status = pod.get("status") or {}
    inits = [(s, True) for s in status.get("initContainerStatuses") or []]
    return inits + [(s, False) for s in status.get("containerStatuses") or []]


def pod_name(pod: Pod) -> str:
    """`namespace/name`, as the controllers' messages name a pod."""
    meta = pod.get("metadata") or {}
    return f"{meta.get('namespace', '')}/{meta.get('name', '')}"


def pod_problem(pods: list[Pod]) -> tuple[str, str] | None:
    """The first thing a person must fix: an image pull, a crash loop, bad config, no room to schedule."""
    for pod in pods:
        for status, is_init in container_statuses(pod):
            found = _container_problem(pod_name(pod), status, is_init)
            if found is not None:
                return found
        for cond in (pod.get("status") or {}).get("conditions") or []:
            if cond.get("type") == "PodScheduled" and cond.get("status") == "False":
                reason = cond.get("reason") or "Unschedulable"
                return reason, f"pod {pod_name(pod)} cannot be scheduled: {cond.get('message', reason)}"
    return None


def _container_problem(pod: str, status: ContainerStatus, is_init: bool) -> tuple[str, str] | None:
    waiting = (status.get("state") or {}).get("waiting") or {}
    reason, detail = waiting.get("reason", ""), waiting.get("message", "")
    which = f"{'init container' if is_init else 'container'} {status.get('name')!r} in pod {pod}"
    if reason in IMAGE_REASONS:
        image = status.get("image", "")
        return reason, (
            f"{which} cannot pull image {image!r} ({reason}){': ' + detail if detail else ''}. Check that "
            "the image name and tag exist and that the cluster may pull from that registry "
            "(imagePullSecrets)."
        )
    if reason == "CrashLoopBackOff":
        last: ContainerStateTerminated = (status.get("lastState") or {}).get("terminated") or {}
        code = f"; last exit code {last['exitCode']} ({last.get('reason', 'Error')})" if "exitCode" in last else ""
        return reason, f"{which} keeps crashing (restarted {status.get('restartCount', 0)} times{code})"
    if reason in CONFIG_REASONS:
        return reason, (
            f"{which} cannot start ({reason}){': ' + detail if detail else ''}. A Secret or ConfigMap it "
            "references may be missing."
        )
    return None


def stuck_pod(pods: list[Pod], now: float, grace: float) -> tuple[AttemptReason, str] | None:
    """A pod whose container has waited on an image it cannot pull or on its configuration (a missing
    Secret or key) for `grace` seconds or more since the kubelet took it: the attempt's reason and the
    kubelet's words. Such a pod never starts by itself, and it holds its GPUs and quota while it waits."""
    for pod in pods:
        status = pod.get("status") or {}
        since = epoch_of(status.get("startTime") or (pod.get("metadata") or {}).get("creationTimestamp"))
        if since is None or now - since < grace:
            continue
        for container, is_init in container_statuses(pod):
            reason = ((container.get("state") or {}).get("waiting") or {}).get("reason", "")
            found = _container_problem(pod_name(pod), container, is_init) if reason in STUCK else None
            if found is not None:
                return STUCK[reason], found[1]
    return None


def failed_container(pods: list[Pod]) -> tuple[Pod, str, ContainerStateTerminated] | None:
    """The container that failed first (init containers and earliest finish win): the root cause."""
    found: list[tuple[str, int, int, Pod, str, ContainerStateTerminated]] = []
    for number, pod in enumerate(pods):
        for status, is_init in container_statuses(pod):
            terminated = (status.get("state") or {}).get("terminated") or {}
            if terminated and terminated.get("exitCode", 0) != 0:
                found.append(
                    (
                        terminated.get("finishedAt") or "~",
                        0 if is_init else 1,
                        number,
                        pod,
                        status.get("name", ""),
                        terminated,
                    )
                )
    if not found:
        return None
    found.sort(key=lambda f: (f[0], f[1], f[2]))
    _, _, _, pod, container, terminated = found[0]
    return pod, container, terminated


def termination_line(pod: Pod, container: str, terminated: ContainerStateTerminated) -> str:
    reason = terminated.get("reason") or "Error"
    line = f"container {container!r} in pod {pod_name(pod)} exited with code {terminated.get('exitCode')} ({reason})"
    if reason == "OOMKilled":
        line += "; it ran out of memory: raise the memory limit or lower the batch size"
    extra = str(terminated.get("message") or "").strip()
    return line + (f": {extra[:500]}" if extra else "")


# what a controller's Warning Event says when the API server refused an object it creates for a run: the
# Job controller's pods, JobSet's child Jobs, KubeRay's RayCluster, Ray pods and submitter Job
CREATE_REFUSED = frozenset(
    {
        "FailedCreate",
        "JobCreationFailed",
        "FailedToCreateRayCluster",
        "FailedToCreateHeadPod",
        "FailedToCreateWorkerPod",
        "FailedToCreateRayJobSubmitter",
    }
)
_LATER_ATTEMPT = re.compile(r"-a[0-9]+(-|$)")  # `<name>-a2`: the object of a later attempt, not ours


class Refused(FrozenRecord):
    """The API server refuses what the run's controllers create: the controller's words, since when, and
    when it last did (a controller's retries update one Event)."""

    reason: str
    message: str
    since: float | None
    last: float | None = None


def refused_creates(rest: Rest, ns: str, name: str) -> Refused | None:
    """The newest such Event on the job object `name` or an object made for it (`<name>-…`: child Jobs,
    the RayCluster); None when there is none. Nothing else tells why such a run waits: it has no pod."""
    events = cast(list[Event], rest.list(EVENT, ns, None, fields="type=Warning"))
    ours = [e for e in events if e.get("reason") in CREATE_REFUSED and _for(e, name)]
    if not ours:
        return None
    newest = max(ours, key=lambda e: e.get("lastTimestamp") or e.get("eventTime") or "")
    starts = [t for e in ours if (t := epoch_of(e.get("firstTimestamp") or e.get("eventTime"))) is not None]
    return Refused(
        str(newest.get("reason", "")),
        str(newest.get("message", "")),
        min(starts) if starts else None,
        epoch_of(newest.get("lastTimestamp") or newest.get("eventTime")),
    )


def _for(event: Event, name: str) -> bool:
    involved = str((event.get("involvedObject") or {}).get("name", ""))
    rest = involved[len(name) :] if involved.startswith(name) else None
    return rest is not None and (rest == "" or (rest.startswith("-") and not _LATER_ATTEMPT.match(rest)))
