"""The twin's KubeRay controller: RayJob → RayCluster (head and worker pods) → submitter Job."""

from __future__ import annotations

import copy
import json
import shlex
import urllib.request
from typing import TYPE_CHECKING, Any

from twin_controllers import DASHBOARD_PORT, SUBMITTER_CONTAINER, _cond, _owner

if TYPE_CHECKING:
    from twin_controllers import Cluster

ORIGIN = {"ray.io/originated-from-crd": "RayJob"}


def _cluster_of(cluster: Cluster, rayjob: dict[str, Any]) -> dict[str, Any] | None:
    name = (rayjob.get("status") or {}).get("rayClusterName")
    return cluster.kube.objects.get(("RayCluster", rayjob["metadata"]["namespace"], name)) if name else None


def _submitter_of(cluster: Cluster, rayjob: dict[str, Any]) -> dict[str, Any] | None:
    job = cluster.kube.objects.get(("Job", rayjob["metadata"]["namespace"], rayjob["metadata"]["name"]))
    return (
        job
        if job is not None
        and any(o.get("uid") == rayjob["metadata"]["uid"] for o in job["metadata"].get("ownerReferences") or [])
        else None
    )


def _set(cluster: Cluster, obj: dict[str, Any], **values: Any) -> None:
    status = obj.setdefault("status", {})
    if any(status.get(k) != v for k, v in values.items()):
        status.update(values)
        cluster._touch(obj)


def reconcile_rayjob(cluster: Cluster, rayjob: dict[str, Any]) -> None:
    spec, status = rayjob["spec"], rayjob.setdefault("status", {})
    deployment = status.get("jobDeploymentStatus", "")
    if deployment in ("Complete", "Failed"):
        _shutdown_after_finish(cluster, rayjob)
        return
    if spec.get("suspend"):
        for obj in (_cluster_of(cluster, rayjob), _submitter_of(cluster, rayjob)):
            if obj is not None:
                cluster._remove(obj)
        _set(cluster, rayjob, jobDeploymentStatus="Suspended", rayClusterName="", jobStatus="")
        return
    if deployment in ("", "New", "Suspended"):
        name = cluster._name(rayjob["metadata"]["name"])
        labels = {**ORIGIN, "ray.io/originated-from-cr-name": rayjob["metadata"]["name"]}
        cluster._make(
            {
                "apiVersion": "ray.io/v1",
                "kind": "RayCluster",
                "metadata": {
                    "name": name,
                    "namespace": rayjob["metadata"]["namespace"],
                    "labels": labels,
                    "ownerReferences": [_owner(rayjob)],
                },
                "spec": copy.deepcopy(spec["rayClusterSpec"]),
                "status": {},
            }
        )
        _set(
            cluster,
            rayjob,
            jobDeploymentStatus="Initializing",
            rayClusterName=name,
            jobId=status.get("jobId") or cluster._name(rayjob["metadata"]["name"]),
            startTime=status.get("startTime") or cluster.stamp(),
        )
        return
    ray_cluster = _cluster_of(cluster, rayjob)
    if ray_cluster is None:
        _set(
            cluster,
            rayjob,
            jobDeploymentStatus="Failed",
            reason="RayClusterNotFound",
            message="the RayCluster of this RayJob was deleted",
            endTime=cluster.stamp(),
        )
        return
    if deployment == "Initializing" and (ray_cluster.get("status") or {}).get("state") == "ready":
        _create_submitter(cluster, rayjob, ray_cluster)
        _set(
            cluster,
            rayjob,
            jobDeploymentStatus="Running",
            dashboardURL=f"{ray_cluster['metadata']['name']}-head-svc.{rayjob['metadata']['namespace']}.svc:"
            f"{DASHBOARD_PORT}",
        )
        return
    if deployment == "Running":
        _follow_submitter(cluster, rayjob)


def _create_submitter(cluster: Cluster, rayjob: dict[str, Any], ray_cluster: dict[str, Any]) -> None:
    """The submitter Job, as KubeRay writes it: our template or its default, its command filled in."""
    spec, status = rayjob["spec"], rayjob["status"]
    head = ray_cluster["spec"]["headGroupSpec"]["template"]["spec"]["containers"][0]
    template = copy.deepcopy(spec.get("submitterPodTemplate")) or {
        "spec": {
            "restartPolicy": "Never",
            "containers": [
                {
                    "name": SUBMITTER_CONTAINER,
                    "image": head["image"],
                    "resources": {
                        "limits": {"cpu": "1", "memory": "1Gi"},
                        "requests": {"cpu": "500m", "memory": "200Mi"},
                    },
                }
            ],
        }
    }
    address = (
        f"http://{ray_cluster['metadata']['name']}-head-svc.{rayjob['metadata']['namespace']}.svc:{DASHBOARD_PORT}"
    )
    container = template["spec"]["containers"][0]
    job_id = status["jobId"]
    if not container.get("command"):  # KubeRay fills in its own only where the template has none
        container["command"] = ["/bin/bash", "-ce", "--"]
        container["args"] = [_default_submit_command(address, job_id, spec["entrypoint"])]
    env = container.setdefault("env", [])
    env.extend(
        [
            {"name": "PYTHONUNBUFFERED", "value": "1"},
            {"name": "RAY_DASHBOARD_ADDRESS", "value": address.removeprefix("http://")},
            {"name": "RAY_JOB_SUBMISSION_ID", "value": job_id},
        ]
    )
    template["spec"].setdefault("restartPolicy", "Never")
    labels = {
        **ORIGIN,
        "ray.io/originated-from-cr-name": rayjob["metadata"]["name"],
        "app.kubernetes.io/created-by": "kuberay-operator",
    }
    backoff = int((spec.get("submitterConfig") or {}).get("backoffLimit", 2))
    cluster._make(
        {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": {
                "name": rayjob["metadata"]["name"],
                "namespace": rayjob["metadata"]["namespace"],
                "labels": labels,
                "ownerReferences": [_owner(rayjob)],
            },
            "spec": {"backoffLimit": backoff, "template": template},
            "status": {},
        }
    )


def _default_submit_command(address: str, job_id: str, entrypoint: str) -> str:
    """KubeRay 1.7's submitter command (K8sJobMode): first a loop that waits for the dashboard's GCS health
    endpoint through `python -c`, then submit unless already submitted, then follow the driver's log. The
    loop's own failures are silenced, so an image without `python` on PATH waits in it forever."""
    health = (
        "python -c \"import urllib.request; r=urllib.request.urlopen('"
        f"{address}/api/gcs_healthz', timeout=10); exit(0 if b'success' in r.read() else 1)\""
    )
    return (
        f"until {health} >/dev/null 2>&1 ; do echo "
        f'"Waiting for Ray Dashboard GCS to become healthy at {address} ..." ; sleep 2 ; done ; '
        f"if ! ray job status --address {address} {job_id} >/dev/null 2>&1 ; then ray job submit "
        f"--address {address} --no-wait --submission-id {job_id} -- {entrypoint.strip()} ; fi ; "
        f"ray job logs --address {address} --follow {job_id}"
    )


def ray_job_submit_command(pod: dict[str, Any]) -> list[str]:
    """The submitter's argv, for a pod runner."""
    container = pod["spec"]["containers"][0]
    return [*container.get("command", []), *container.get("args", [])]


def _follow_submitter(cluster: Cluster, rayjob: dict[str, Any]) -> None:
    """The Ray job's status as KubeRay reads it: from the dashboard's job table, never from the submitter.

    The submitter only follows the driver's log (`ray job logs --follow` exits 0 when the driver ends,
    whatever its exit code); a submitter pod that fails (a dropped log stream) is retried by its Job
    (`submitterConfig.backoffLimit`) and re-attaches; only a failed submitter Job fails the RayJob.
    """
    job = _submitter_of(cluster, rayjob)
    if job is None:
        return
    driver = driver_state(cluster, rayjob)
    status = str(driver.get("status") or "")
    if status == "SUCCEEDED":
        _set(
            cluster, rayjob, jobStatus="SUCCEEDED", jobDeploymentStatus="Complete", endTime=cluster.stamp(), succeeded=1
        )
    elif status in ("FAILED", "STOPPED"):
        _set(
            cluster,
            rayjob,
            jobStatus=status,
            jobDeploymentStatus="Failed",
            reason="AppFailed",
            message=str(driver.get("message") or ""),
            endTime=cluster.stamp(),
            failed=1,
        )
    elif _cond(job, "Failed"):
        _set(
            cluster,
            rayjob,
            jobDeploymentStatus="Failed",
            reason="SubmissionFailed",
            message="Job submission has failed. Reason: the submitter Job reached its backoff limit",
            endTime=cluster.stamp(),
            failed=1,
        )
    elif any(p["status"].get("phase") == "Running" for p in cluster._children("Pod", job)):
        _set(cluster, rayjob, jobStatus="RUNNING")


def driver_state(cluster: Cluster, rayjob: dict[str, Any]) -> dict[str, Any]:
    """The dashboard's word on the Ray job: a real dashboard's `/api/jobs/<id>` when the test maps one."""
    key = (rayjob["metadata"]["namespace"], rayjob["metadata"]["name"])
    address = str((rayjob.get("status") or {}).get("dashboardURL") or "")
    real = cluster.ray_dashboards.get(address)
    if real is None or key in cluster.ray_drivers:
        return cluster.ray_drivers.get(key, {})
    try:
        with urllib.request.urlopen(f"http://{real}/api/jobs/{rayjob['status']['jobId']}", timeout=5) as answer:
            found = json.loads(answer.read())
    except (OSError, ValueError):
        return {}
    return found if isinstance(found, dict) else {}


def ray_failure_message(code: int, log: str) -> str:
    """Ray's own message for a driver that exited non-zero (what KubeRay copies into the RayJob)."""
    return (
        f"Job entrypoint command failed with exit code {code}, last available logs (truncated to 20,000 "
        f"chars):\n{log[-20000:]}"
    )


def _shutdown_after_finish(cluster: Cluster, rayjob: dict[str, Any]) -> None:
    """KubeRay at `ttlSecondsAfterFinished` deletes the Ray cluster only: the submitter Job (and its
    completed pod) stays so the driver's log can still be read, and the RayJob stays (KubeRay deletes it
    only when the operator runs with `DELETE_RAYJOB_CR_AFTER_JOB_FINISHES`, off by default)."""
    spec = rayjob["spec"]
    if not spec.get("shutdownAfterJobFinishes"):
        return
    ttl = int(spec.get("ttlSecondsAfterFinished", 0))
    ended = rayjob["status"].get("endTime")
    ray_cluster = _cluster_of(cluster, rayjob)
    if ended and ray_cluster is not None and cluster.now() >= cluster.seconds(ended) + ttl:
        cluster._remove(ray_cluster)


def _gone(pod: dict[str, Any]) -> bool:
    """A pod being deleted, or one that ended: KubeRay deletes an ended Ray pod and makes a new one."""
    return bool(pod["metadata"].get("deletionTimestamp")) or pod["status"].get("phase") in ("Succeeded", "Failed")


def _head_lost(cluster: Cluster, ray_cluster: dict[str, Any], head: dict[str, Any]) -> None:
    """Without GCS fault tolerance the Ray job table lives in the head: a lost head takes the driver
    with it, and every submitter following the driver's log sees its stream break (exit 1)."""
    annotations = head["metadata"].setdefault("annotations", {})
    if annotations.get("twin/head-lost"):
        return
    annotations["twin/head-lost"] = "true"
    ns = ray_cluster["metadata"]["namespace"]
    for owner in ray_cluster["metadata"].get("ownerReferences") or []:
        if owner.get("kind") != "RayJob":
            continue
        cluster.ray_drivers.pop((ns, owner["name"]), None)
        rayjob = cluster.kube.objects.get(("RayJob", ns, owner["name"]))
        job = _submitter_of(cluster, rayjob) if rayjob is not None else None
        for pod in cluster._children("Pod", job) if job is not None else []:
            if pod["status"].get("phase") == "Running":
                _stream_broken(cluster, pod)


def _stream_broken(cluster: Cluster, pod: dict[str, Any]) -> None:
    at = cluster.stamp()
    for cs in pod["status"].get("containerStatuses") or []:
        started = (cs.get("state") or {}).get("running", {}).get("startedAt", at)
        cs.update(
            state={"terminated": {"exitCode": 1, "reason": "Error", "startedAt": started, "finishedAt": at}},
            ready=False,
        )
    pod["status"]["phase"] = "Failed"
    key = (pod["metadata"]["namespace"], pod["metadata"]["name"], pod["spec"]["containers"][0]["name"])
    cluster.kube.logs[key] = cluster.kube.logs.get(key, "") + "error: lost the connection to the Ray head\n"
    cluster._touch(pod)


def reconcile_raycluster(cluster: Cluster, ray_cluster: dict[str, Any]) -> None:
    spec, name, ns = ray_cluster["spec"], ray_cluster["metadata"]["name"], ray_cluster["metadata"]["namespace"]
    pods = cluster._children("Pod", ray_cluster)
    heads = [p for p in pods if p["metadata"]["labels"].get("ray.io/node-type") == "head"]
    for head in heads:
        if _gone(head):
            _head_lost(cluster, ray_cluster, head)
    if not any(not _gone(p) for p in heads):
        _ray_pod(cluster, ray_cluster, spec["headGroupSpec"], "head", "headgroup", f"{name}-head")
    if not cluster.kube.objects.get(("Service", ns, f"{name}-head-svc")):
        cluster._make(
            {
                "apiVersion": "v1",
                "kind": "Service",
                "metadata": {"name": f"{name}-head-svc", "namespace": ns, "ownerReferences": [_owner(ray_cluster)]},
                "spec": {
                    "selector": {"ray.io/cluster": name, "ray.io/node-type": "head"},
                    "ports": [{"name": "dashboard", "port": DASHBOARD_PORT}],
                },
            }
        )
    for group in spec.get("workerGroupSpecs") or []:
        mine = [
            p
            for p in pods
            if p["metadata"]["labels"].get("ray.io/group") == group["groupName"]
            and p["status"].get("phase") not in ("Succeeded", "Failed")
        ]
        for _ in range(int(group.get("replicas", 1)) - len(mine)):
            _ray_pod(cluster, ray_cluster, group, "worker", group["groupName"], f"{name}-{group['groupName']}-worker")
    pods = [p for p in cluster._children("Pod", ray_cluster) if not _gone(p)]
    ready = bool(pods) and all(p["status"].get("phase") == "Running" for p in pods)
    _set(cluster, ray_cluster, state="ready" if ready else "")


def _ray_pod(
    cluster: Cluster, ray_cluster: dict[str, Any], group: dict[str, Any], node_type: str, group_name: str, stem: str
) -> None:
    template = copy.deepcopy(group["template"])
    meta = template.get("metadata") or {}
    name = ray_cluster["metadata"]["name"]
    labels = {
        **(meta.get("labels") or {}),
        "ray.io/cluster": name,
        "ray.io/node-type": node_type,
        "ray.io/group": group_name,
        "ray.io/is-ray-node": "yes",
        "ray.io/identifier": f"{name}-{node_type}",
    }
    container = template["spec"]["containers"][0]
    params = " ".join(f"--{k}={shlex.quote(str(v))}" for k, v in sorted((group.get("rayStartParams") or {}).items()))
    start = "ray start --head" if node_type == "head" else f"ray start --address={name}-head-svc:6379"
    if not container.get("command"):
        container["command"] = ["/bin/bash", "-lc", "--"]
        container["args"] = [f"ulimit -n 65536; {start} {params} --block".strip()]
    cluster._make(
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": cluster._name(stem),
                "namespace": ray_cluster["metadata"]["namespace"],
                "labels": labels,
                "annotations": dict(meta.get("annotations") or {}),
                "ownerReferences": [_owner(ray_cluster)],
            },
            "spec": template["spec"],
            "status": {"phase": "Pending"},
        }
    )
