"""Whether a Job's controller can still replace a failed pod, read from the Job and its pods alone.

The Job controller syncs a Job a while after its pods' events: a reader in between sees a failed pod
under a Job that still counts it active and ready, with no condition. Whether a replacement comes is
already decided by the Job's own spec: a failure that matches a `podFailurePolicy` `FailJob` rule, or
one that takes the Job's failures past `spec.backoffLimit`, makes the next sync write `FailureTarget`
(and start no pod again). `decided_failure` says so before that sync, as that condition would.

A failure is counted once: in `status.failed`, then in `status.uncountedTerminatedPods.failed` while the
controller removes the pod's `batch.kubernetes.io/job-tracking` finalizer, and before that by the
finalizer alone. Every failed pod the Job still lists counts as well (a cluster without the finalizer),
so the count is the larger of the two: both are never more than the controller's. A pod being deleted
is left out (the controller decides how a suspension's or a preemption's pods count), as is one an
`Ignore` rule matches; a Job with `backoffLimitPerIndex` fails by its indexes, not by this count.
"""

from __future__ import annotations

from tuneplane.backends.kubernetes.pods import container_statuses, pod_name, pod_phase
from tuneplane.backends.kubernetes.types import POD_FAILED, Condition, JobObject, Pod, PodFailurePolicyRule

JOB_TRACKING = "batch.kubernetes.io/job-tracking"  # the finalizer of a pod the Job has not counted yet


def decided_failure(job: JobObject, pods: list[Pod]) -> Condition | None:
    """The `FailureTarget` a Job's next sync writes for its failed pods (a `FailJob` rule's, or its
    backoff limit spent), None while the controller may still replace them. `pods` are the Job's own."""
    spec, status = job.get("spec") or {}, job.get("status") or {}
    failed = [p for p in pods if _failed(p)]
    counted: list[Pod] = []
    for pod in failed:
        action, message = _policy_action(job, pod)
        if action == "FailJob":
            return {"type": "FailureTarget", "status": "True", "reason": "PodFailurePolicy", "message": message}
        if action != "Ignore":
            counted.append(pod)
    limit = spec.get("backoffLimit")
    if limit is None or spec.get("backoffLimitPerIndex") is not None:
        return None
    uncounted = set((status.get("uncountedTerminatedPods") or {}).get("failed") or [])
    tracked = [p for p in counted if JOB_TRACKING in _finalizers(p) and _uid(p) not in uncounted]
    failures = max(int(status.get("failed") or 0) + len(uncounted) + len(tracked), len(counted))
    if failures <= int(limit):
        return None
    return {
        "type": "FailureTarget",
        "status": "True",
        "reason": "BackoffLimitExceeded",
        "message": "Job has reached the specified backoff limit",
    }


def _failed(pod: Pod) -> bool:
    return pod_phase(pod) == POD_FAILED and not (pod.get("metadata") or {}).get("deletionTimestamp")


def _finalizers(pod: Pod) -> list[str]:
    return (pod.get("metadata") or {}).get("finalizers") or []


def _uid(pod: Pod) -> str:
    return str((pod.get("metadata") or {}).get("uid", ""))


def _policy_action(job: JobObject, pod: Pod) -> tuple[str, str]:
    """The action of the first `podFailurePolicy` rule a failed pod matches ("Count" for none), and the
    controller's words for it."""
    rules = ((job.get("spec") or {}).get("podFailurePolicy") or {}).get("rules") or []
    for index, rule in enumerate(rules):
        action = str(rule.get("action", ""))
        container = _exit_match(rule, pod)
        if container is not None:
            name, code = container
            return action, (
                f"Container {name} for pod {pod_name(pod)} failed with exit code {code} matching {action} rule "
                f"at index {index}"
            )
        if _condition_match(rule, pod):
            return action, f"Pod {pod_name(pod)} has condition matching {action} rule at index {index}"
    return "Count", ""


def _exit_match(rule: PodFailurePolicyRule, pod: Pod) -> tuple[str, int] | None:
    """The (container, exit code) an `onExitCodes` rule matches: a container that exited non-zero."""
    codes = rule.get("onExitCodes")
    if not codes:
        return None
    for cs, _is_init in container_statuses(pod):
        terminated = (cs.get("state") or {}).get("terminated")
        if terminated is None or codes.get("containerName") not in (None, cs.get("name")):
            continue
        code = int(terminated.get("exitCode") or 0)
        if code != 0 and (code in (codes.get("values") or [])) == (codes.get("operator") == "In"):
            return str(cs.get("name", "")), code
    return None


def _condition_match(rule: PodFailurePolicyRule, pod: Pod) -> bool:
    conditions = (pod.get("status") or {}).get("conditions") or []
    return any(
        c.get("type") == want.get("type") and c.get("status") == want.get("status", "True")
        for want in rule.get("onPodConditions") or []
        for c in conditions
    )
