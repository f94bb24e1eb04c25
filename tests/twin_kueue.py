"""The twin's Kueue: a Workload per queued job object, admission against ClusterQueue quotas."""

from __future__ import annotations

import hashlib
from typing import TYPE_CHECKING, Any

from twin_controllers import JOB_UID_LABEL, QUEUE_LABEL, _cond, _owned_by, quantity

if TYPE_CHECKING:
    from twin_controllers import Cluster

QUEUED_KINDS = ("Job", "JobSet", "RayJob")
PRIORITY_LABEL = "kueue.x-k8s.io/priority-class"
FLAVOR = "default-flavor"


def workload_name(kind: str, name: str, uid: str) -> str:
    digest = hashlib.sha1(f"{name}/{uid}/{kind}".encode()).hexdigest()[:5]
    return f"{kind.lower()}-{name}"[:57] + f"-{digest}"


def _requests(template: dict[str, Any]) -> dict[str, float]:
    total: dict[str, float] = {}
    for container in (template.get("spec") or {}).get("containers") or []:
        resources = container.get("resources") or {}
        wanted = {**(resources.get("limits") or {}), **(resources.get("requests") or {})}
        for key, value in wanted.items():
            total[key] = total.get(key, 0.0) + quantity(value)
    return total


# Kueue's pod set for a RayJob's submitter when the RayJob gives no template: KubeRay's default submitter
_DEFAULT_SUBMITTER = {
    "spec": {
        "restartPolicy": "Never",
        "containers": [
            {
                "name": "ray-job-submitter",
                "resources": {"requests": {"cpu": "500m", "memory": "200Mi"}, "limits": {"cpu": "1", "memory": "1Gi"}},
            }
        ],
    }
}


def pod_sets(obj: dict[str, Any]) -> list[dict[str, Any]]:
    """Kueue's pod sets of a queued object: a Job's pods, each replicated Job's, a RayJob's head, worker
    groups and (in `K8sJobMode`, the default) its submitter."""
    spec = obj["spec"]
    if obj["kind"] == "Job":
        return [{"name": "main", "count": int(spec.get("parallelism", 1)), "template": spec["template"]}]
    if obj["kind"] == "JobSet":
        return [
            {
                "name": r["name"],
                "template": r["template"]["spec"]["template"],
                "count": int(r.get("replicas", 1)) * int(r["template"]["spec"].get("parallelism", 1)),
            }
            for r in spec["replicatedJobs"]
        ]
    cluster = spec["rayClusterSpec"]
    sets = [{"name": "head", "count": 1, "template": cluster["headGroupSpec"]["template"]}]
    sets += [
        {"name": g["groupName"], "count": int(g.get("replicas", 1)), "template": g["template"]}
        for g in cluster.get("workerGroupSpecs") or []
    ]
    if spec.get("submissionMode", "K8sJobMode") == "K8sJobMode":  # the submitter Job's pod takes quota too
        template = spec.get("submitterPodTemplate") or _DEFAULT_SUBMITTER
        sets.append({"name": "submitter", "count": 1, "template": template})
    return sets


def _usage(workload: dict[str, Any]) -> dict[str, float]:
    total: dict[str, float] = {}
    for pod_set in workload["spec"]["podSets"]:
        for key, value in _requests(pod_set["template"]).items():
            total[key] = total.get(key, 0.0) + value * pod_set["count"]
    return total


def _finished(obj: dict[str, Any]) -> bool:
    status = obj.get("status") or {}
    return bool(
        _cond(obj, "Complete")
        or _cond(obj, "Failed")
        or _cond(obj, "Completed")
        or status.get("jobDeploymentStatus") in ("Complete", "Failed")
    )


def reconcile_kueue(cluster: Cluster) -> None:
    for kind in QUEUED_KINDS:
        for obj in cluster._all(kind):
            queue = (obj["metadata"].get("labels") or {}).get(QUEUE_LABEL)
            if queue and not obj["metadata"].get("ownerReferences"):
                _ensure_workload(cluster, obj, queue)
    for workload in cluster._all("Workload"):
        owner = _owner_of(cluster, workload)
        if owner is not None and _finished(owner) and not _cond(workload, "Finished"):
            _condition(cluster, workload, "Finished", "True", "Succeeded", "Job finished")
    # Kueue's queueing order: higher priority first, then the older Workload
    for workload in sorted(
        cluster._all("Workload"),
        key=lambda w: (-_priority(w), w["metadata"]["creationTimestamp"], w["metadata"]["name"]),
    ):
        if not _cond(workload, "QuotaReserved") and not _cond(workload, "Finished") and _try_admit(cluster, workload):
            break  # a preemption: the next pass admits in priority order again, the preemptor first


def _priority(workload: dict[str, Any]) -> int:
    return int(workload["spec"].get("priority") or 0)


def workload_of(cluster: Cluster, obj: dict[str, Any]) -> dict[str, Any] | None:
    return next((w for w in cluster._all("Workload") if _owned_by(w, obj)), None)


def evict(cluster: Cluster, workload: dict[str, Any], reason: str, cause: str, message: str) -> None:
    """Kueue's eviction: `Evicted` (and `Preempted` for a preemption), the quota given back, the owner
    suspended (its Job controller deletes the pods), and `schedulingStats.evictions` counted by reason."""
    _condition(cluster, workload, "Evicted", "True", reason, message)
    if reason == "Preempted":
        _condition(cluster, workload, "Preempted", "True", cause, message)
    _condition(cluster, workload, "QuotaReserved", "False", "Pending", f"Evicted: {message}")
    _condition(cluster, workload, "Admitted", "False", "NoReservation", "The workload has no reservation")
    workload["status"].pop("admission", None)
    stats = workload["status"].setdefault("schedulingStats", {}).setdefault("evictions", [])
    row = next((r for r in stats if (r["reason"], r["underlyingCause"]) == (reason, cause)), None)
    if row is None:
        stats.append({"reason": reason, "underlyingCause": cause, "count": 1})
    else:
        row["count"] += 1
    owner = _owner_of(cluster, workload)
    if owner is not None and not owner["spec"].get("suspend"):
        owner["spec"]["suspend"] = True
        cluster._touch(owner)
    cluster._touch(workload)


def _preempt_for(cluster: Cluster, workload: dict[str, Any], cq_name: str, quota: dict[str, float]) -> bool:
    """Within-ClusterQueue preemption of lower-priority Workloads, lowest and newest first; True if it did."""
    if cq_name not in cluster.cq_preemption:
        return False
    admitted = [
        w
        for w in cluster._all("Workload")
        if w is not workload
        and _cond(w, "QuotaReserved")
        and not _cond(w, "Finished")
        and (w["status"].get("admission") or {}).get("clusterQueue") == cq_name
    ]
    lower = sorted(
        (w for w in admitted if _priority(w) < _priority(workload)),
        key=lambda w: (_priority(w), w["metadata"]["creationTimestamp"]),
        reverse=False,
    )
    chosen: list[dict[str, Any]] = []
    for victim in lower:
        chosen.append(victim)
        used = _used(cluster, cq_name, exclude=[workload, *chosen])
        if all(v <= quota.get(k, 0.0) - used.get(k, 0.0) + 1e-9 for k, v in _usage(workload).items()):
            uid = workload["metadata"]["uid"]
            for target in chosen:
                evict(
                    cluster,
                    target,
                    "Preempted",
                    "InClusterQueue",
                    f"Preempted to accommodate a workload (UID: {uid}) due to prioritization in the ClusterQueue",
                )
            return True
    return False


def _used(cluster: Cluster, cq_name: str, exclude: list[dict[str, Any]]) -> dict[str, float]:
    used: dict[str, float] = {}
    for other in cluster._all("Workload"):
        if any(other is e for e in exclude):
            continue
        if (
            _cond(other, "QuotaReserved")
            and not _cond(other, "Finished")
            and (other["status"].get("admission") or {}).get("clusterQueue") == cq_name
        ):
            for key, value in _usage(other).items():
                used[key] = used.get(key, 0.0) + value
    return used


def _owner_of(cluster: Cluster, workload: dict[str, Any]) -> dict[str, Any] | None:
    for ref in workload["metadata"].get("ownerReferences") or []:
        obj = cluster.kube.objects.get((ref["kind"], workload["metadata"]["namespace"], ref["name"]))
        if obj is not None and obj["metadata"]["uid"] == ref["uid"]:
            return obj
    return None


def _ensure_workload(cluster: Cluster, obj: dict[str, Any], queue: str) -> None:
    if any(_owned_by(w, obj) for w in cluster._all("Workload")):
        return
    meta = obj["metadata"]
    owner = {
        "apiVersion": obj["apiVersion"],
        "kind": obj["kind"],
        "name": meta["name"],
        "uid": meta["uid"],
        "controller": True,
        "blockOwnerDeletion": True,
    }
    sets = pod_sets(obj)
    priority_class = (meta.get("labels") or {}).get(PRIORITY_LABEL) or next(
        (
            s["template"]["spec"].get("priorityClassName")
            for s in sets
            if s["template"]["spec"].get("priorityClassName")
        ),
        "",
    )
    cluster._make(
        {
            "apiVersion": "kueue.x-k8s.io/v1beta2",
            "kind": "Workload",
            "metadata": {
                "name": workload_name(obj["kind"], meta["name"], meta["uid"]),
                "namespace": meta["namespace"],
                "labels": {JOB_UID_LABEL: meta["uid"]},
                "ownerReferences": [owner],
            },
            "spec": {"queueName": queue, "podSets": sets, "priority": cluster.priority_classes.get(priority_class, 0)},
            "status": {"conditions": []},
        }
    )


def _condition(cluster: Cluster, workload: dict[str, Any], ctype: str, status: str, reason: str, message: str) -> None:
    conds = [c for c in workload["status"].get("conditions") or [] if c["type"] != ctype]
    new = {"type": ctype, "status": status, "reason": reason, "message": message, "lastTransitionTime": cluster.stamp()}
    old = next((c for c in workload["status"].get("conditions") or [] if c["type"] == ctype), None)
    if old is not None and (old["status"], old["reason"], old["message"]) == (status, reason, message):
        return
    workload["status"]["conditions"] = [*conds, new]
    cluster._touch(workload)


def _try_admit(cluster: Cluster, workload: dict[str, Any]) -> bool:
    """Admit `workload` if its ClusterQueue has room; True when it preempted others to make room."""
    ns = workload["metadata"]["namespace"]
    local = cluster.kube.objects.get(("LocalQueue", ns, workload["spec"]["queueName"]))
    if local is None:
        _condition(
            cluster,
            workload,
            "QuotaReserved",
            "False",
            "Inadmissible",
            f"LocalQueue {workload['spec']['queueName']} doesn't exist",
        )
        return False
    cq_name = local["spec"]["clusterQueue"]
    quota = cluster.cluster_queues.get(cq_name)
    if quota is None:
        _condition(cluster, workload, "QuotaReserved", "False", "Inadmissible", f"ClusterQueue {cq_name} doesn't exist")
        return False
    used = _used(cluster, cq_name, exclude=[workload])
    for key, value in sorted(_usage(workload).items()):
        free = quota.get(key, 0.0) - used.get(key, 0.0)
        if value > free + 1e-9:
            more = value - free
            shown = f"{more:g}" if key != "memory" else f"{more / 2**30:g}Gi"
            pod_set = workload["spec"]["podSets"][0]["name"]
            if _preempt_for(cluster, workload, cq_name, quota):
                return True  # admitted on a later pass, once the victims gave their quota back
            _condition(
                cluster,
                workload,
                "QuotaReserved",
                "False",
                "Pending",
                f"couldn't assign flavors to pod set {pod_set}: insufficient unused quota for {key} in "
                f"flavor {FLAVOR}, {shown} more needed",
            )
            return False
    workload["status"]["admission"] = {
        "clusterQueue": cq_name,
        "podSetAssignments": [
            {"name": p["name"], "count": p["count"], "flavors": {k: FLAVOR for k in _requests(p["template"])}}
            for p in workload["spec"]["podSets"]
        ],
    }
    _condition(cluster, workload, "QuotaReserved", "True", "QuotaReserved", f"Quota reserved in ClusterQueue {cq_name}")
    for ctype in ("Evicted", "Preempted"):  # re-admitted: Kueue keeps the earlier eviction, as False
        old = next((c for c in workload["status"]["conditions"] if c["type"] == ctype and c["status"] == "True"), None)
        if old is not None:
            _condition(cluster, workload, ctype, "False", "QuotaReserved", f"Previously: {old['message']}")
    _condition(cluster, workload, "Admitted", "True", "Admitted", "The workload is admitted")
    owner = _owner_of(cluster, workload)
    if owner is not None and owner["spec"].get("suspend"):
        owner["spec"]["suspend"] = False
        cluster._touch(owner)
    return False
