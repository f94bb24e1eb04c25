"""The twin's Job and JobSet controllers (see twin_controllers for what they model)."""

from __future__ import annotations

import copy
import hashlib
from typing import TYPE_CHECKING, Any

from twin_controllers import INDEX, JS, _cond, _owner

if TYPE_CHECKING:
    from twin_controllers import Cluster

JOB_NAME = "batch.kubernetes.io/job-name"
CONTROLLER_UID = "batch.kubernetes.io/controller-uid"
STOPPED = "twin/stopped-by-job"  # a pod the Job controller deleted as its Job failed


def _condition(cluster: Cluster, ctype: str, reason: str, message: str) -> dict[str, Any]:
    return {
        "type": ctype,
        "status": "True",
        "reason": reason,
        "message": message,
        "lastTransitionTime": cluster.stamp(),
        "lastProbeTime": cluster.stamp(),
    }


def _default_job(job: dict[str, Any]) -> bool:
    """What the API server adds on create: defaults, the selector and the controller's labels."""
    spec = job["spec"]
    if spec.get("selector"):
        return False
    uid, name = job["metadata"]["uid"], job["metadata"]["name"]
    spec.setdefault("parallelism", 1)
    spec.setdefault("completions", spec["parallelism"] if spec.get("completionMode") == "Indexed" else 1)
    spec.setdefault("backoffLimit", 6)
    spec.setdefault("completionMode", "NonIndexed")
    spec.setdefault("suspend", False)
    spec["selector"] = {"matchLabels": {CONTROLLER_UID: uid}}
    labels = spec["template"].setdefault("metadata", {}).setdefault("labels", {})
    labels.update({CONTROLLER_UID: uid, JOB_NAME: name, "controller-uid": uid, "job-name": name})
    return True


def reconcile_job(cluster: Cluster, job: dict[str, Any]) -> None:
    if _default_job(job):
        cluster._touch(job)
    spec, status = job["spec"], job.setdefault("status", {})
    if _cond(job, "Complete") or _cond(job, "Failed"):
        _stop_pods(cluster, job)
        return
    if _cond(job, "SuccessCriteriaMet"):
        _complete(cluster, job)
        return
    if _cond(job, "FailureTarget"):
        _failed_once_stopped(cluster, job)
        return
    pods = cluster._children("Pod", job)
    if spec.get("suspend"):
        _stop_pods(cluster, job)
        if not _cond(job, "Suspended"):
            status.setdefault("conditions", []).append(
                _condition(cluster, "Suspended", "JobSuspended", "Job suspended")
            )
            status["active"] = 0
            cluster._touch(job)
        return
    if _cond(job, "Suspended"):
        # resumed: the deadline's clock starts again (the controller resets startTime)
        status["conditions"] = [c for c in status["conditions"] if c["type"] != "Suspended"]
        status["startTime"] = cluster.stamp()
        cluster._touch(job)
    if not status.get("startTime"):
        status["startTime"] = cluster.stamp()
        cluster._touch(job)
    if _count_failures(cluster, job, pods):
        return
    deadline = spec.get("activeDeadlineSeconds")
    if deadline is not None and cluster.now() >= cluster.seconds(status["startTime"]) + int(deadline):
        _fail(cluster, job, "DeadlineExceeded", "Job was active longer than specified deadline")
        return
    pods = cluster._children("Pod", job)
    if _check_success(cluster, job, pods):
        return
    _create_pods(cluster, job, pods)
    _update_counts(cluster, job, cluster._children("Pod", job))


def _stop_pods(cluster: Cluster, job: dict[str, Any]) -> None:
    for pod in cluster._children("Pod", job):
        if pod["status"].get("phase") not in ("Succeeded", "Failed"):
            cluster._remove(pod)


def _exit_codes(pod: dict[str, Any]) -> list[tuple[str, int]]:
    out = []  # init containers too: a rule's containerName may name one
    statuses = (pod["status"].get("initContainerStatuses") or []) + (pod["status"].get("containerStatuses") or [])
    for cs in statuses:
        terminated = (cs.get("state") or {}).get("terminated")
        if terminated is not None:
            out.append((cs["name"], int(terminated.get("exitCode", 0))))
    return out


def _policy_action(job: dict[str, Any], pod: dict[str, Any]) -> tuple[str, int, str]:
    """(action, rule index, message) of the first podFailurePolicy rule matching a failed pod."""
    rules = ((job["spec"].get("podFailurePolicy") or {}).get("rules")) or []
    for index, rule in enumerate(rules):
        codes = rule.get("onExitCodes")
        if codes:
            for container, code in _exit_codes(pod):
                if codes.get("containerName") not in (None, container) or code == 0:
                    continue
                inside = code in codes.get("values", [])
                if inside == (codes.get("operator") == "In"):
                    ns, name = pod["metadata"]["namespace"], pod["metadata"]["name"]
                    return (
                        rule["action"],
                        index,
                        (
                            f"Container {container} for pod {ns}/{name} failed with exit "
                            f"code {code} matching {rule['action']} rule at index {index}"
                        ),
                    )
        for wanted in rule.get("onPodConditions") or []:
            for cond in pod["status"].get("conditions") or []:
                if cond.get("type") == wanted["type"] and cond.get("status") == wanted.get("status", "True"):
                    return rule["action"], index, f"Pod matched {rule['action']} rule at index {index}"
    return "Count", -1, ""


def _count_failures(cluster: Cluster, job: dict[str, Any], pods: list[dict[str, Any]]) -> bool:
    """Account failed pods once each; True when the Job failed."""
    status = job["status"]
    for pod in pods:
        notes = pod["metadata"].setdefault("annotations", {})
        if pod["status"].get("phase") != "Failed" or notes.get("twin/counted"):
            continue
        notes["twin/counted"] = "true"
        action, _, message = _policy_action(job, pod)
        if action == "FailJob":
            return _fail(cluster, job, "PodFailurePolicy", message)
        if action == "Ignore":
            continue  # not counted against backoffLimit; the index gets a new pod, the failed one stays
        status["failed"] = int(status.get("failed", 0)) + 1
        cluster._touch(job)
        if status["failed"] > int(job["spec"].get("backoffLimit", 6)):
            return _fail(cluster, job, "BackoffLimitExceeded", "Job has reached the specified backoff limit")
    return False


def _fail(cluster: Cluster, job: dict[str, Any], reason: str, message: str) -> bool:
    """The first of the two status writes that fail a Job: `FailureTarget` with the reason, and every pod
    still running deleted (`_terminate`), counted as `terminating`, not `active` or `ready`. The
    controller writes `Failed` (`_failed_once_stopped`) only once none of them runs any more; a rank that
    saves on SIGTERM holds its node until then. One settle makes both writes while the pods stop at
    once; `Cluster.hold_jobs` shows a reader each, `Cluster.slow_stops` the pods stopping."""
    job["status"].setdefault("conditions", []).append(_condition(cluster, "FailureTarget", reason, message))
    _terminate(cluster, job)
    return True


def _failed_once_stopped(cluster: Cluster, job: dict[str, Any]) -> None:
    """The second write: `Failed`, with the reason and message of `FailureTarget`, once no pod of the Job
    runs; a pod past its grace period is killed first, as the kubelet does. The pods it deleted are gone
    with their tracking finalizers; those that failed by themselves (or were disrupted) stay as before."""
    if _terminate(cluster, job):
        return
    status = job["status"]
    target = next(c for c in status["conditions"] if c["type"] == "FailureTarget")
    status["conditions"].append(_condition(cluster, "Failed", target["reason"], target["message"]))
    status["terminating"] = 0
    cluster._touch(job)
    for pod in cluster._children("Pod", job):
        if (pod["metadata"].get("annotations") or {}).get(STOPPED):
            cluster._remove(pod)


def _terminate(cluster: Cluster, job: dict[str, Any]) -> int:
    """Delete the Job's pods that still run and count them in `status.terminating`; returns how many
    run. The kubelet sends each SIGTERM: its containers exit 143 at once, unless `Cluster.slow_stops`
    (a rank saving) keeps one running until a test ends it or its grace period passes (SIGKILL, 137)."""
    status, at = job["status"], cluster.stamp()
    running = [p for p in cluster._children("Pod", job) if p["status"].get("phase") not in ("Succeeded", "Failed")]
    for pod in running:
        meta = pod["metadata"]
        if not meta.get("deletionTimestamp"):
            meta.setdefault("annotations", {})[STOPPED] = "true"
            meta["deletionTimestamp"] = at
            meta["deletionGracePeriodSeconds"] = int(pod["spec"].get("terminationGracePeriodSeconds", 30))
            cluster._touch(pod)
        grace_end = cluster.seconds(meta["deletionTimestamp"]) + int(meta.get("deletionGracePeriodSeconds") or 30)
        if not cluster.slow_stops or pod["status"].get("phase") != "Running":
            _killed(cluster, pod, 143)
        elif cluster.now() >= grace_end:
            _killed(cluster, pod, 137)
    still = sum(1 for p in running if p["status"].get("phase") not in ("Succeeded", "Failed"))
    counts = {"active": 0, "ready": 0, "terminating": still}
    if any(status.get(k) != v for k, v in counts.items()):
        status.update(counts)
        cluster._touch(job)
    return still


def _killed(cluster: Cluster, pod: dict[str, Any], code: int) -> None:
    """The kubelet ends a deleted pod: its running containers exit `code`, the pod is `Failed`."""
    status, at = pod["status"], cluster.stamp()
    for cs in status.get("containerStatuses") or []:
        running = (cs.get("state") or {}).get("running")
        if running is not None:
            ended = {"exitCode": code, "reason": "Error", "startedAt": running.get("startedAt", at), "finishedAt": at}
            cs.update(state={"terminated": ended}, ready=False)
    status["phase"] = "Failed"
    status["conditions"] = [c for c in status.get("conditions") or [] if c.get("type") != "Ready"]
    cluster._touch(pod)


def _indexes_done(pods: list[dict[str, Any]]) -> set[int]:
    return {
        int(p["metadata"]["annotations"][INDEX])
        for p in pods
        if p["status"].get("phase") == "Succeeded" and INDEX in (p["metadata"].get("annotations") or {})
    }


def _check_success(cluster: Cluster, job: dict[str, Any], pods: list[dict[str, Any]]) -> bool:
    """The first of the two status writes that finish a Job that succeeded: `SuccessCriteriaMet`, the
    active and ready counts brought up to date, and the succeeded pods not yet counted (their UIDs in
    `uncountedTerminatedPods`; an Indexed Job counts its completed indexes at once). The controller
    counts them once it removed their tracking finalizers, and only then writes `Complete`
    (`_complete`): a reader in between sees the pods `Succeeded` under a Job with no terminal
    condition. One settle makes both writes; `Cluster.hold_jobs` shows a reader each."""
    spec, status = job["spec"], job["status"]
    completions = int(spec.get("completions", 1))
    succeeded = [p for p in pods if p["status"].get("phase") == "Succeeded"]
    if spec.get("completionMode") == "Indexed":
        done = len(_indexes_done(pods)) >= completions
    else:
        done = len(succeeded) >= completions
    if not done:
        return False
    _update_counts(cluster, job, pods)
    if spec.get("completionMode") == "Indexed":
        status["succeeded"] = completions
    else:
        status["uncountedTerminatedPods"] = {"succeeded": [p["metadata"]["uid"] for p in succeeded]}
    status.setdefault("conditions", []).append(
        _condition(cluster, "SuccessCriteriaMet", "CompletionsReached", "Reached expected number of succeeded pods")
    )
    cluster._touch(job)
    return True


def _complete(cluster: Cluster, job: dict[str, Any]) -> None:
    """The second write: the succeeded pods counted (their finalizers gone), then `Complete`."""
    status = job["status"]
    uncounted = (status.get("uncountedTerminatedPods") or {}).get("succeeded") or []
    status["succeeded"] = int(status.get("succeeded", 0)) + len(uncounted)
    status["uncountedTerminatedPods"] = {}
    status.setdefault("conditions", []).append(
        _condition(cluster, "Complete", "CompletionsReached", "Reached expected number of succeeded pods")
    )
    status["completionTime"] = cluster.stamp()
    status["active"] = 0
    cluster._touch(job)
    _stop_pods(cluster, job)


def _create_pods(cluster: Cluster, job: dict[str, Any], pods: list[dict[str, Any]]) -> None:
    spec = job["spec"]
    live = [p for p in pods if p["status"].get("phase") not in ("Succeeded", "Failed")]
    if spec.get("completionMode") == "Indexed":
        busy = {int(p["metadata"]["annotations"][INDEX]) for p in live} | _indexes_done(pods)
        for index in range(int(spec.get("completions", 1))):
            if index not in busy and len(live) < int(spec.get("parallelism", 1)):
                if (pod := _new_pod(cluster, job, index)) is None:
                    return  # refused by the API server: the controller's Event says why; it tries again later
                live.append(pod)
        return
    succeeded = sum(1 for p in pods if p["status"].get("phase") == "Succeeded")
    while len(live) < min(int(spec.get("parallelism", 1)), int(spec.get("completions", 1)) - succeeded):
        if (pod := _new_pod(cluster, job, None)) is None:
            return
        live.append(pod)


def _new_pod(cluster: Cluster, job: dict[str, Any], index: int | None) -> dict[str, Any] | None:
    template = copy.deepcopy(job["spec"]["template"])
    meta = template.get("metadata") or {}
    name = job["metadata"]["name"]
    labels = dict(meta.get("labels") or {})
    notes = dict(meta.get("annotations") or {})
    spec = template["spec"]
    if index is not None:
        labels[INDEX] = notes[INDEX] = str(index)
        spec["hostname"] = f"{name}-{index}"
    stem = f"{name}-{index}" if index is not None else name
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": cluster._name(stem),
            "namespace": job["metadata"]["namespace"],
            "labels": labels,
            "annotations": notes,
            "ownerReferences": [_owner(job)],
        },
        "spec": spec,
        "status": {"phase": "Pending"},
    }
    return cluster._make(pod)


def _update_counts(cluster: Cluster, job: dict[str, Any], pods: list[dict[str, Any]]) -> None:
    status = job["status"]
    active = [p for p in pods if p["status"].get("phase") in ("Pending", "Running")]
    ready = [
        p
        for p in pods
        if any(c.get("type") == "Ready" and c.get("status") == "True" for c in p["status"].get("conditions") or [])
    ]
    counts = {"active": len(active), "ready": len(ready)}
    if any(status.get(k) != v for k, v in counts.items()):
        status.update(counts)
        cluster._touch(job)


# ==================================================================== JobSet
def _job_key(ns: str, name: str) -> str:
    return hashlib.sha1(f"{ns}/{name}".encode()).hexdigest()


def reconcile_jobset(cluster: Cluster, jobset: dict[str, Any]) -> None:
    spec, status = jobset["spec"], jobset.setdefault("status", {})
    if status.get("terminalState"):
        return
    network = spec.get("network") or {}
    subdomain = network.get("subdomain") or jobset["metadata"]["name"]
    if network.get("enableDNSHostnames", True):
        _ensure_service(cluster, jobset, subdomain, network.get("publishNotReadyAddresses", True))
    jobs = cluster._children("Job", jobset)
    if any(_cond(j, "Failed") for j in jobs):
        _jobset_failed(cluster, jobset, jobs)
        return
    if _jobset_succeeded(jobset, jobs):
        status.setdefault("conditions", []).append(
            _condition(cluster, "Completed", "AllJobsCompleted", "jobset completed successfully")
        )
        status["terminalState"] = "Completed"
        cluster._touch(jobset)
        return
    existing = {j["metadata"]["name"] for j in jobs}
    suspended = bool(spec.get("suspend"))
    for rjob in spec["replicatedJobs"]:
        for index in range(int(rjob.get("replicas", 1))):
            name = f"{jobset['metadata']['name']}-{rjob['name']}-{index}"
            if name not in existing:
                _child_job(
                    cluster,
                    jobset,
                    rjob,
                    index,
                    name,
                    subdomain if network.get("enableDNSHostnames", True) else "",
                    suspended,
                )
    for job in cluster._children("Job", jobset):
        if bool(job["spec"].get("suspend")) != suspended:
            job["spec"]["suspend"] = suspended
            cluster._touch(job)
    _jobset_counts(cluster, jobset, cluster._children("Job", jobset))


def _ensure_service(cluster: Cluster, jobset: dict[str, Any], name: str, not_ready: bool) -> None:
    ns = jobset["metadata"]["namespace"]
    if ("Service", ns, name) in cluster.kube.objects:
        return
    cluster._make(
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": name, "namespace": ns, "ownerReferences": [_owner(jobset)]},
            "spec": {
                "clusterIP": "None",
                "publishNotReadyAddresses": not_ready,
                "selector": {f"{JS}jobset-name": jobset["metadata"]["name"]},
            },
        }
    )


def _child_job(
    cluster: Cluster,
    jobset: dict[str, Any],
    rjob: dict[str, Any],
    index: int,
    name: str,
    subdomain: str,
    suspended: bool,
) -> None:
    ns, js_name = jobset["metadata"]["namespace"], jobset["metadata"]["name"]
    restarts = int((jobset.get("status") or {}).get("restarts", 0))
    order = [r["name"] for r in jobset["spec"]["replicatedJobs"]]
    before = sum(int(r.get("replicas", 1)) for r in jobset["spec"]["replicatedJobs"][: order.index(rjob["name"])])
    marks = {
        f"{JS}jobset-name": js_name,
        f"{JS}replicatedjob-name": rjob["name"],
        f"{JS}replicatedjob-replicas": str(rjob.get("replicas", 1)),
        f"{JS}job-index": str(index),
        f"{JS}job-global-index": str(before + index),
        f"{JS}restart-attempt": str(restarts),
        f"{JS}job-key": _job_key(ns, name),
        f"{JS}jobset-uid": jobset["metadata"]["uid"],
    }
    template = copy.deepcopy(rjob["template"])
    meta = template.setdefault("metadata", {})
    meta["labels"] = {**(meta.get("labels") or {}), **marks}
    meta["annotations"] = {**(meta.get("annotations") or {}), **marks}
    pod_template = template["spec"]["template"]
    pod_meta = pod_template.setdefault("metadata", {})
    pod_meta["labels"] = {**(pod_meta.get("labels") or {}), **marks}
    pod_meta["annotations"] = {**(pod_meta.get("annotations") or {}), **marks}
    if subdomain:
        pod_template["spec"]["subdomain"] = subdomain
    job = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": name,
            "namespace": ns,
            "labels": meta["labels"],
            "annotations": meta["annotations"],
            "ownerReferences": [_owner(jobset)],
        },
        "spec": {**template["spec"], "suspend": suspended},
        "status": {},
    }
    cluster._make(job)


def _jobset_failed(cluster: Cluster, jobset: dict[str, Any], jobs: list[dict[str, Any]]) -> None:
    status = jobset["status"]
    restarts = int(status.get("restarts", 0))
    if restarts < int((jobset["spec"].get("failurePolicy") or {}).get("maxRestarts", 0)):
        for job in jobs:
            cluster._remove(job)
        status["restarts"] = restarts + 1
        cluster._touch(jobset)
        return
    failed = next(j for j in jobs if _cond(j, "Failed"))
    status.setdefault("conditions", []).append(
        _condition(
            cluster,
            "Failed",
            "FailedJobs",
            f"jobset failed due to one or more job failures (first: {failed['metadata']['name']})",
        )
    )
    status["terminalState"] = "Failed"
    cluster._touch(jobset)
    for job in jobs:
        if not (_cond(job, "Complete") or _cond(job, "Failed")):
            cluster._remove(job)  # the controller deletes the active Jobs (their pods with them)


def _jobset_succeeded(jobset: dict[str, Any], jobs: list[dict[str, Any]]) -> bool:
    policy = jobset["spec"].get("successPolicy") or {}
    targets = policy.get("targetReplicatedJobs") or [r["name"] for r in jobset["spec"]["replicatedJobs"]]
    wanted = [j for j in jobs if j["metadata"]["labels"].get(f"{JS}replicatedjob-name") in targets]
    expected = sum(int(r.get("replicas", 1)) for r in jobset["spec"]["replicatedJobs"] if r["name"] in targets)
    complete = [j for j in wanted if _cond(j, "Complete")]
    if policy.get("operator") == "Any":
        return bool(complete)
    return bool(expected) and len(complete) == expected


def _jobset_counts(cluster: Cluster, jobset: dict[str, Any], jobs: list[dict[str, Any]]) -> None:
    rows = []
    for rjob in jobset["spec"]["replicatedJobs"]:
        mine = [j for j in jobs if j["metadata"]["labels"].get(f"{JS}replicatedjob-name") == rjob["name"]]
        rows.append(
            {
                "name": rjob["name"],
                "ready": sum(1 for j in mine if int((j.get("status") or {}).get("ready") or 0) > 0),
                "succeeded": sum(1 for j in mine if _cond(j, "Complete")),
                "failed": sum(1 for j in mine if _cond(j, "Failed")),
                "active": sum(1 for j in mine if int((j.get("status") or {}).get("active") or 0) > 0),
                "suspended": sum(1 for j in mine if j["spec"].get("suspend")),
            }
        )
    if jobset["status"].get("replicatedJobsStatus") != rows:
        jobset["status"]["replicatedJobsStatus"] = rows
        cluster._touch(jobset)
