"""Why a suspended job object waits: its Kueue Workload's QuotaReserved / Admitted / Evicted conditions.

The Workload is found by the label Kueue puts on it, `kueue.x-k8s.io/job-uid=<uid of the job object>`,
so one list request reads only this run's Workloads, however many the namespace holds.
"""

from __future__ import annotations

from typing import Any, cast

from tuneplane.backends.base import BackendError
from tuneplane.backends.kubernetes.client import LOCALQUEUES, WORKLOADS, Kind, Rest
from tuneplane.backends.kubernetes.types import Condition, JobObject, LocalQueue, Workload

JOB_UID_LABEL = "kueue.x-k8s.io/job-uid"


def queue_reason(rest: Rest, kind: Kind, ns: str, obj: JobObject) -> tuple[str, str]:
    try:
        workload = find_workload(rest, ns, obj)
        if workload is None:
            return "Suspended", (
                f"the {kind.kind} is suspended and no Kueue Workload owns it yet; if this lasts, check "
                "that its kueue.x-k8s.io/queue-name label names a LocalQueue in this namespace"
            )
        return _workload_reason(rest, kind, ns, workload)
    except BackendError as exc:
        return "Suspended", f"the {kind.kind} is suspended; its Kueue Workload could not be read: {exc}"


QUEUE_LABEL = "kueue.x-k8s.io/queue-name"


def queued(obj: JobObject) -> bool:
    """Kueue manages the object: it names a queue (Kueue's webhook acts on that label only)."""
    return bool(((obj.get("metadata") or {}).get("labels") or {}).get(QUEUE_LABEL))


def find_workload(rest: Rest, ns: str, obj: JobObject) -> Workload | None:
    uid = (obj.get("metadata") or {}).get("uid", "")
    if not uid:
        return None
    found = [cast(Workload, w) for w in _workloads(rest, ns, f"{JOB_UID_LABEL}={uid}")]
    mine = [
        w for w in found if any(o.get("uid") == uid for o in (w.get("metadata") or {}).get("ownerReferences") or [])
    ]
    mine.sort(key=lambda w: (w.get("metadata") or {}).get("creationTimestamp", ""))
    return mine[-1] if mine else None


def _workloads(rest: Rest, ns: str, selector: str) -> list[dict[str, Any]]:
    """Workloads at the newest version the server serves (none served: no Kueue, no Workloads)."""
    known = rest.served.get("Workload")
    for kind in [known] if known is not None else WORKLOADS:
        items = rest.list_if_served(kind, ns, selector)
        if items is not None:
            rest.served["Workload"] = kind
            return items
    return []


def _message(conds: dict[str, Condition], kind: str) -> str:
    return str((conds.get(kind) or {}).get("message") or "")


def _workload_reason(rest: Rest, kind: Kind, ns: str, workload: Workload) -> tuple[str, str]:
    status = workload.get("status") or {}
    conds = {c.get("type", ""): c for c in status.get("conditions") or []}
    holds = {t for t, c in conds.items() if c.get("status") == "True"}
    local_queue = (workload.get("spec") or {}).get("queueName", "")
    cluster_queue = (status.get("admission") or {}).get("clusterQueue") or _cluster_queue(rest, ns, local_queue)
    if cluster_queue is None:
        return f"Queued: LocalQueue {local_queue} does not exist", (
            f"the {kind.kind} names LocalQueue {local_queue!r}, which namespace {ns} does not have; "
            "fix the kueue.x-k8s.io/queue-name label or ask an administrator to create the queue"
        )
    where = f"ClusterQueue {cluster_queue}" if cluster_queue else f"LocalQueue {local_queue or '(none)'}"
    if "Admitted" in holds:
        return "Admitted", f"admitted by {where}; waiting for the {kind.kind} to start"
    if "QuotaReserved" in holds:
        return f"Queued: quota reserved in {where}, waiting for admission checks", _message(conds, "Admitted")
    evicted = conds.get("Evicted") if "Evicted" in holds else None
    message = _message(conds, "QuotaReserved") or "Kueue has not considered the Workload yet"
    if evicted is not None:
        reason = f"Queued: evicted ({evicted.get('reason', 'Evicted')}), waiting for quota in {where}"
        return reason, "; ".join(m for m in (evicted.get("message", ""), message) if m)
    return f"Queued: waiting for quota in {where}", message


def _cluster_queue(rest: Rest, ns: str, local_queue: str) -> str | None:
    """The ClusterQueue behind a LocalQueue; None when the LocalQueue is missing, "" when unreadable."""
    if not local_queue:
        return ""
    try:
        kind = LOCALQUEUES[(rest.served.get("Workload") or WORKLOADS[0]).api_version]
        lq = cast(LocalQueue | None, rest.get(kind, ns, local_queue))
    except BackendError:
        return ""
    return None if lq is None else str((lq.get("spec") or {}).get("clusterQueue", ""))
