"""The twin's scheduler and disruptions: nodes, binding by requests, priority preemption, evictions.

Without nodes (`Cluster.nodes` empty) every pod runs where it is, as before; once a test adds nodes, a
pod runs only when a node fits it, as kube-scheduler decides:

- a node fits when its labels match the pod's `nodeSelector`, the pod tolerates the node's taints, and
  the node's allocatable resources minus the requests of the live pods bound to it cover the pod's
  requests (limits stand in for missing requests, as the API server defaults them);
- a pod that fits nowhere is `PodScheduled=False`, reason `Unschedulable`, with the scheduler's
  "0/N nodes are available" message, unless preempting lower-priority pods on one node makes room: then
  those victims get the `DisruptionTarget` condition (reason `PreemptionByScheduler`) and are deleted;
- a deleted pod (preemption, the Eviction API, the taint manager) terminates as the kubelet ends it:
  its containers exit 143 (SIGTERM), its phase is `Failed`, and its object stays for the grace period
  (on the twin's clock) so its owner's controller can account for it, then it is gone.

Priorities come from `spec.priority`, else `Cluster.priority_classes[spec.priorityClassName]`, else 0.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from twin_controllers import quantity

if TYPE_CHECKING:
    from twin_controllers import Cluster

GRACE_SECONDS = 30
TERMINAL = ("Succeeded", "Failed")
SCHEDULER_MESSAGE = "default-scheduler: preempting to accommodate a higher priority pod"


def requests_of(pod: dict[str, Any]) -> dict[str, float]:
    total: dict[str, float] = {}
    for container in (pod.get("spec") or {}).get("containers") or []:
        resources = container.get("resources") or {}
        wanted = {**(resources.get("limits") or {}), **(resources.get("requests") or {})}
        for key, value in wanted.items():
            total[key] = total.get(key, 0.0) + quantity(value)
    return total


def priority_of(cluster: Cluster, pod: dict[str, Any]) -> int:
    spec = pod.get("spec") or {}
    if spec.get("priority") is not None:
        return int(spec["priority"])
    return int(cluster.priority_classes.get(str(spec.get("priorityClassName") or ""), 0))


def _tolerated(pod: dict[str, Any], taint: dict[str, Any]) -> bool:
    for toleration in (pod.get("spec") or {}).get("tolerations") or []:
        if toleration.get("key") not in (None, "", taint["key"]):
            continue
        if toleration.get("effect") not in (None, "", taint.get("effect")):
            continue
        if toleration.get("operator") == "Exists" or toleration.get("value") == taint.get("value"):
            return True
    return False


def _matches(pod: dict[str, Any], node: dict[str, Any]) -> bool:
    selector = (pod.get("spec") or {}).get("nodeSelector") or {}
    if any(node["labels"].get(k) != v for k, v in selector.items()):
        return False
    if _avoided(pod, node):
        return False
    return all(_tolerated(pod, t) for t in node["taints"] if t.get("effect") in ("NoSchedule", "NoExecute"))


def _avoided(pod: dict[str, Any], node: dict[str, Any]) -> bool:
    """Required node affinity, the `NotIn`/`DoesNotExist`/`In`/`Exists` operators of its terms."""
    affinity = ((pod.get("spec") or {}).get("affinity") or {}).get("nodeAffinity") or {}
    required = (affinity.get("requiredDuringSchedulingIgnoredDuringExecution") or {}).get("nodeSelectorTerms")
    if not required:
        return False
    return not any(all(_expression(node["labels"], e) for e in term.get("matchExpressions") or []) for term in required)


def _expression(labels: dict[str, str], expr: dict[str, Any]) -> bool:
    value, operator, values = labels.get(expr["key"]), expr["operator"], expr.get("values") or []
    if operator == "In":
        return value in values
    if operator == "NotIn":
        return value not in values
    if operator == "Exists":
        return value is not None
    if operator == "DoesNotExist":
        return value is None
    raise ValueError(f"the twin does not model node affinity operator {operator}")


def _bound(cluster: Cluster, node: str) -> list[dict[str, Any]]:
    return [
        p
        for p in cluster._all("Pod")
        if (p.get("spec") or {}).get("nodeName") == node and p["status"].get("phase") not in TERMINAL
    ]


def _free(
    cluster: Cluster, name: str, without: list[dict[str, Any]] | None = None, claimant: dict[str, Any] | None = None
) -> dict[str, float]:
    """What is left on a node; room a preemptor was promised (`nominatedNodeName`) is not left to others."""
    free = dict(cluster.nodes[name]["allocatable"])
    nominated = [
        p
        for p in cluster._all("Pod")
        if p["status"].get("nominatedNodeName") == name and not p["spec"].get("nodeName") and p is not claimant
    ]
    for pod in _bound(cluster, name) + nominated:
        if any(pod is other for other in without or []):
            continue
        for key, value in requests_of(pod).items():
            free[key] = free.get(key, 0.0) - value
    return free


def _fits(wanted: dict[str, float], free: dict[str, float]) -> bool:
    return all(value <= free.get(key, 0.0) + 1e-9 for key, value in wanted.items())


def schedule(cluster: Cluster, pod: dict[str, Any]) -> bool:
    """Bind `pod` to a node (True), or preempt for it or say why it waits (False)."""
    wanted = requests_of(pod)
    candidates = [n for n in sorted(cluster.nodes) if _matches(pod, cluster.nodes[n])]
    for name in candidates:
        if _fits(wanted, _free(cluster, name, claimant=pod)):
            pod["spec"]["nodeName"] = name
            pod["status"].pop("nominatedNodeName", None)
            cluster._touch(pod)
            return True
    mine = priority_of(cluster, pod)
    for name in candidates:
        victims = sorted(
            (p for p in _bound(cluster, name) if priority_of(cluster, p) < mine), key=lambda p: priority_of(cluster, p)
        )
        chosen: list[dict[str, Any]] = []
        for victim in victims:
            chosen.append(victim)
            if _fits(wanted, _free(cluster, name, chosen, claimant=pod)):
                for target in chosen:
                    disrupt(cluster, target, "PreemptionByScheduler", SCHEDULER_MESSAGE)
                pod["status"]["nominatedNodeName"] = name
                cluster._touch(pod)
                return False
    _unschedulable(cluster, pod, wanted, candidates)
    return False


def _unschedulable(cluster: Cluster, pod: dict[str, Any], wanted: dict[str, float], candidates: list[str]) -> None:
    total = len(cluster.nodes)
    short = sorted(
        {key for n in candidates for key, value in wanted.items() if value > _free(cluster, n).get(key, 0.0) + 1e-9}
    )
    parts = [f"{len(candidates)} Insufficient {key}" for key in short]
    if total - len(candidates):
        parts.append(f"{total - len(candidates)} node(s) didn't match Pod's node affinity/selector")
    message = (
        f"0/{total} nodes are available: {', '.join(parts)}. preemption: 0/{total} nodes are available: "
        f"{total} No preemption victims found for incoming pod."
    )
    wanted_cond = {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": message}
    conds = pod["status"].get("conditions") or []
    if wanted_cond not in [{k: c.get(k) for k in wanted_cond} for c in conds]:
        pod["status"].update(
            phase="Pending",
            conditions=[
                *[c for c in conds if c.get("type") != "PodScheduled"],
                {**wanted_cond, "lastTransitionTime": cluster.stamp()},
            ],
        )
        cluster._touch(pod)


def disrupt(cluster: Cluster, pod: dict[str, Any], reason: str, message: str, *, record: str = "") -> None:
    """Delete a pod as a disruption does: `DisruptionTarget`, then the kubelet's SIGTERM (exit 143).

    `record` is what the trainer wrote to its termination message on the way out (the launcher's end record).
    """
    status = pod["status"]
    if pod["metadata"].get("deletionTimestamp"):
        return
    at = cluster.stamp()
    status["conditions"] = [
        c for c in status.get("conditions") or [] if c.get("type") not in ("Ready", "DisruptionTarget")
    ]
    status["conditions"].append(
        {"type": "DisruptionTarget", "status": "True", "reason": reason, "message": message, "lastTransitionTime": at}
    )
    pod["metadata"]["deletionTimestamp"] = at
    pod["metadata"]["deletionGracePeriodSeconds"] = GRACE_SECONDS
    if status.get("phase") == "Running":
        for cs in status.get("containerStatuses") or []:
            if "running" in (cs.get("state") or {}):
                ended = {
                    "exitCode": 143,
                    "reason": "Error",
                    "startedAt": cs["state"]["running"].get("startedAt", at),
                    "finishedAt": at,
                }
                if record:
                    ended["message"] = record
                cs.update(state={"terminated": ended}, ready=False)
    status["phase"] = "Failed"
    cluster._touch(pod)


def reap(cluster: Cluster) -> None:
    """Remove deleted pods once they ended, their owner accounted for them and the grace period is over."""
    for pod in cluster._all("Pod"):
        meta = pod["metadata"]
        deleted = meta.get("deletionTimestamp")
        if not deleted or pod["status"].get("phase") not in TERMINAL:
            continue
        owned_by_job = any(o.get("kind") == "Job" for o in meta.get("ownerReferences") or [])
        if owned_by_job and not (meta.get("annotations") or {}).get("twin/counted"):
            continue
        if cluster.now() >= cluster.seconds(deleted) + int(meta.get("deletionGracePeriodSeconds") or 0):
            cluster._remove(pod)
