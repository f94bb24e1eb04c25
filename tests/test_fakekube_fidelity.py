"""The twin fails where a real cluster fails: scheduling and preemption, Kueue eviction, deadlines,
deletion as a real API server propagates it, finalizers, upstream immutability, JobSet and KubeRay
failure handling. Each is driven through the real `kubernetes` client, as the backend drives it.
"""

from __future__ import annotations

import copy
import json
from typing import TYPE_CHECKING, Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

if TYPE_CHECKING:
    from fakekube import FakeKube
    from twin_controllers import Cluster

pytest_plugins = ("fakekube",)

NS = "team-a"
JOBSET = ("jobset.x-k8s.io", "v1alpha2", NS, "jobsets")
MERGE = "application/merge-patch+json"


def _job(name: str, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name},
        "spec": {
            "template": {
                "spec": {
                    "restartPolicy": "Never",
                    "containers": [{"name": "trainer", "image": "busybox:1.36", "command": ["train"]}],
                }
            },
            **spec,
        },
    }


def _jobset(name: str, replicas: int = 1) -> dict[str, Any]:
    return {
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": {"name": name},
        "spec": {
            "replicatedJobs": [
                {
                    "name": "workers",
                    "replicas": replicas,
                    "template": {
                        "spec": {
                            "backoffLimit": 0,
                            "template": {
                                "spec": {
                                    "restartPolicy": "Never",
                                    "containers": [{"name": "w", "image": "busybox:1.36", "command": ["work"]}],
                                }
                            },
                        }
                    },
                }
            ]
        },
    }


def _create_job(kube_client: Any, body: dict[str, Any]) -> None:
    client.BatchV1Api(kube_client).create_namespaced_job(NS, body, _preload_content=False)


def _patch_job(kube_client: Any, name: str, patch: dict[str, Any]) -> None:
    client.BatchV1Api(kube_client).patch_namespaced_job(name, NS, patch, _content_type=MERGE, _preload_content=False)


# ── deletion ───────────────────────────────────────────────────────────────────────────────────
def test_deleting_a_batch_v1_job_without_a_policy_orphans_its_pods(cluster: Cluster, kube_client: Any) -> None:
    _create_job(kube_client, _job("j"))
    (pod,) = cluster.pods(NS)
    client.BatchV1Api(kube_client).delete_namespaced_job("j", NS, _preload_content=False)
    assert cluster.kube.get("Job", NS, "j") is None
    kept = cluster.kube.get("Pod", NS, pod["metadata"]["name"])
    assert kept is not None, "batch/v1 Jobs default to orphaning their pods (kubectl sets a policy, the API does not)"


def test_an_explicit_background_deletion_collects_the_pods(cluster: Cluster, kube_client: Any) -> None:
    _create_job(kube_client, _job("j"))
    client.BatchV1Api(kube_client).delete_namespaced_job(
        "j", NS, propagation_policy="Background", _preload_content=False
    )
    assert cluster.pods(NS) == []


def test_finalizers_hold_a_deleted_object_until_they_are_removed(cluster: Cluster, kube_client: Any) -> None:
    body = _job("j")
    body["metadata"]["finalizers"] = ["example.com/keep"]
    _create_job(kube_client, body)
    client.BatchV1Api(kube_client).delete_namespaced_job(
        "j", NS, propagation_policy="Background", _preload_content=False
    )
    held = cluster.kube.get("Job", NS, "j")
    assert held is not None and held["metadata"].get("deletionTimestamp")
    _patch_job(kube_client, "j", {"metadata": {"finalizers": None}})
    assert cluster.kube.get("Job", NS, "j") is None and cluster.pods(NS) == []


# ── immutability as upstream's validation has it ───────────────────────────────────────────────
def test_a_suspended_jobs_template_takes_scheduling_directives_only(cluster: Cluster, kube_client: Any) -> None:
    _create_job(kube_client, _job("j", suspend=True))
    _patch_job(
        kube_client,
        "j",
        {"spec": {"template": {"spec": {"nodeSelector": {"pool": "a"}}, "metadata": {"labels": {"kueue": "x"}}}}},
    )
    changed = copy.deepcopy(cluster.kube.get("Job", NS, "j")["spec"]["template"])  # type: ignore[index]
    changed["spec"]["containers"][0]["command"] = ["other"]
    with pytest.raises(ApiException) as refused:
        _patch_job(kube_client, "j", {"spec": {"template": changed}})
    assert refused.value.status == 422 and "field is immutable" in json.loads(refused.value.body)["message"]


def test_a_suspended_jobsets_replicated_jobs_take_scheduling_directives_only(
    cluster: Cluster, kube_client: Any
) -> None:
    custom = client.CustomObjectsApi(kube_client)
    body = _jobset("js")
    body["spec"]["suspend"] = True
    custom.create_namespaced_custom_object(*JOBSET, body)
    patched = copy.deepcopy(body["spec"]["replicatedJobs"])
    patched[0]["template"]["spec"]["template"]["spec"]["nodeSelector"] = {"pool": "a"}
    custom.patch_namespaced_custom_object(*JOBSET, "js", {"spec": {"replicatedJobs": patched}}, _content_type=MERGE)
    more = copy.deepcopy(patched)
    more[0]["replicas"] = 2
    with pytest.raises(ApiException) as refused:
        custom.patch_namespaced_custom_object(*JOBSET, "js", {"spec": {"replicatedJobs": more}}, _content_type=MERGE)
    assert refused.value.status == 422


# ── JobSet failure ─────────────────────────────────────────────────────────────────────────────
def test_a_failed_jobset_deletes_its_active_jobs(cluster: Cluster, kube_client: Any) -> None:
    client.CustomObjectsApi(kube_client).create_namespaced_custom_object(*JOBSET, _jobset("js", replicas=2))
    pods = cluster.pods(NS)
    assert len(pods) == 2
    cluster.exit_pod(NS, pods[0]["metadata"]["name"], 1)
    assert cluster.kube.get("JobSet", NS, "js")["status"]["terminalState"] == "Failed"  # type: ignore[index]
    jobs = cluster.kube.list("Job", NS)
    assert [j["metadata"]["name"] for j in jobs] == [pods[0]["metadata"]["labels"]["batch.kubernetes.io/job-name"]]
    assert [p["status"]["phase"] for p in cluster.pods(NS)] == ["Failed"]


# ── the Job controller's deadline ──────────────────────────────────────────────────────────────
def test_active_deadline_seconds_fails_the_job_with_deadline_exceeded(cluster: Cluster, kube_client: Any) -> None:
    _create_job(kube_client, _job("j", activeDeadlineSeconds=300))
    assert len(cluster.pods(NS)) == 1
    cluster.advance(290)
    assert cluster.kube.get("Job", NS, "j")["status"].get("conditions") in (None, [])  # type: ignore[index]
    cluster.advance(20)
    failed = [
        c
        for c in cluster.kube.get("Job", NS, "j")["status"]["conditions"]  # type: ignore[index]
        if c["type"] == "Failed"
    ]
    assert failed and failed[0]["reason"] == "DeadlineExceeded" and cluster.pods(NS) == []


# ── scheduling ─────────────────────────────────────────────────────────────────────────────────
def test_pods_wait_for_a_node_that_fits_and_a_higher_priority_pod_preempts(cluster: Cluster, kube_client: Any) -> None:
    cluster.add_node("n1", gpu=8)
    big = _job("low")
    big["spec"]["template"]["spec"]["containers"][0]["resources"] = {"limits": {"nvidia.com/gpu": "8"}}
    _create_job(kube_client, big)
    (low,) = cluster.pods(NS)
    assert low["spec"]["nodeName"] == "n1" and low["status"]["phase"] == "Running"
    cluster.priority_classes["high"] = 100
    urgent = copy.deepcopy(big)
    urgent["metadata"]["name"] = "high"
    urgent["spec"]["template"]["spec"]["priorityClassName"] = "high"
    _create_job(kube_client, urgent)
    victim = cluster.kube.get("Pod", NS, low["metadata"]["name"])
    assert victim is not None and victim["status"]["phase"] == "Failed"
    (target,) = [c for c in victim["status"]["conditions"] if c["type"] == "DisruptionTarget"]
    assert target["reason"] == "PreemptionByScheduler"
    (high,) = cluster.pods(NS, {"batch.kubernetes.io/job-name": "high"})
    assert high["spec"].get("nodeName") == "n1"
    replacement = [
        p for p in cluster.pods(NS, {"batch.kubernetes.io/job-name": "low"}) if p["status"]["phase"] == "Pending"
    ]
    assert replacement and replacement[0]["status"]["conditions"][-1]["reason"] == "Unschedulable"
    assert "Insufficient nvidia.com/gpu" in replacement[0]["status"]["conditions"][-1]["message"]


# ── Kueue ──────────────────────────────────────────────────────────────────────────────────────
def test_kueue_preempts_a_lower_priority_workload_and_readmits_it_later(cluster: Cluster, kube_client: Any) -> None:
    cluster.add_queue(NS, "lq", "cq", cpu="4")
    cluster.cq_preemption.add("cq")
    cluster.priority_classes["urgent"] = 1000
    for name, labels in (("low", {}), ("high", {"kueue.x-k8s.io/priority-class": "urgent"})):
        body = _job(name)
        body["metadata"]["labels"] = {"kueue.x-k8s.io/queue-name": "lq", **labels}
        body["spec"]["template"]["spec"]["containers"][0]["resources"] = {"requests": {"cpu": "3"}}
        _create_job(kube_client, body)
    low = cluster.kube.get("Job", NS, "low")
    assert low["spec"]["suspend"] is True  # type: ignore[index]
    workload = next(
        w for w in cluster.kube.list("Workload", NS) if w["metadata"]["ownerReferences"][0]["name"] == "low"
    )
    conds = {c["type"]: c for c in workload["status"]["conditions"]}
    assert conds["Evicted"]["status"] == "True" and conds["Evicted"]["reason"] == "Preempted"
    assert workload["status"]["schedulingStats"]["evictions"] == [
        {"reason": "Preempted", "underlyingCause": "InClusterQueue", "count": 1}
    ]
    cluster.finish(NS, {"batch.kubernetes.io/job-name": "high"})
    workload = cluster.kube.get("Workload", NS, workload["metadata"]["name"])
    conds = {c["type"]: c for c in workload["status"]["conditions"]}  # type: ignore[index]
    assert conds["Evicted"]["status"] == "False" and conds["Evicted"]["message"].startswith("Previously: ")
    assert cluster.kube.get("Job", NS, "low")["spec"]["suspend"] is False  # type: ignore[index]


def test_workloads_are_served_at_v1beta2_and_v1beta1_with_the_crds_deprecation(
    cluster: Cluster, kube_client: Any
) -> None:
    custom = client.CustomObjectsApi(kube_client)
    cluster.add_queue(NS, "lq", "cq", cpu="4")
    body = _job("j")
    body["metadata"]["labels"] = {"kueue.x-k8s.io/queue-name": "lq"}
    _create_job(kube_client, body)
    new = custom.list_namespaced_custom_object("kueue.x-k8s.io", "v1beta2", NS, "workloads", _preload_content=False)
    assert new.headers.get("Warning") is None
    assert json.loads(new.data)["items"][0]["apiVersion"] == "kueue.x-k8s.io/v1beta2"
    old = custom.list_namespaced_custom_object("kueue.x-k8s.io", "v1beta1", NS, "workloads", _preload_content=False)
    assert "deprecated" in old.headers.get("Warning", "")
    cluster.kube.unserved.add("kueue.x-k8s.io/v1beta1")  # a Kueue that dropped v1beta1
    with pytest.raises(ApiException) as gone:
        custom.list_namespaced_custom_object("kueue.x-k8s.io", "v1beta1", NS, "workloads")
    assert gone.value.status == 404


# ── KubeRay ────────────────────────────────────────────────────────────────────────────────────
def _rayjob(name: str, backoff: int | None = None) -> dict[str, Any]:
    pod = {"spec": {"containers": [{"name": "ray", "image": "rayproject/ray:2.40.0"}]}}
    spec: dict[str, Any] = {
        "entrypoint": "python main.py",
        "shutdownAfterJobFinishes": True,
        "ttlSecondsAfterFinished": 60,
        "rayClusterSpec": {
            "headGroupSpec": {"rayStartParams": {}, "template": pod},
            "workerGroupSpecs": [
                {
                    "groupName": "w",
                    "replicas": 1,
                    "minReplicas": 1,
                    "maxReplicas": 1,
                    "rayStartParams": {},
                    "template": pod,
                }
            ],
        },
    }
    if backoff is not None:
        spec["submitterConfig"] = {"backoffLimit": backoff}
    return {"apiVersion": "ray.io/v1", "kind": "RayJob", "metadata": {"name": name}, "spec": spec}


def _submitters(cluster: Cluster, name: str) -> list[dict[str, Any]]:
    return cluster.pods(NS, {"batch.kubernetes.io/job-name": name})


def test_kuberay_takes_the_drivers_end_from_ray_not_from_the_submitter(cluster: Cluster, kube_client: Any) -> None:
    client.CustomObjectsApi(kube_client).create_namespaced_custom_object("ray.io", "v1", NS, "rayjobs", _rayjob("rj"))
    (submitter,) = _submitters(cluster, "rj")
    cluster.driver_exit(NS, "rj", 3, "Traceback: CUDA error\n")
    assert cluster.kube.get("Pod", NS, submitter["metadata"]["name"])["status"]["phase"] == "Succeeded"  # type: ignore[index]
    status = cluster.kube.get("RayJob", NS, "rj")["status"]  # type: ignore[index]
    assert (status["jobStatus"], status["jobDeploymentStatus"]) == ("FAILED", "Failed")
    assert "failed with exit code 3" in status["message"]


def test_kuberay_retries_the_submitter_and_fails_only_past_its_backoff_limit(
    cluster: Cluster, kube_client: Any
) -> None:
    client.CustomObjectsApi(kube_client).create_namespaced_custom_object(
        "ray.io", "v1", NS, "rayjobs", _rayjob("rj", backoff=1)
    )
    for _ in range(2):
        (live,) = [p for p in _submitters(cluster, "rj") if p["status"]["phase"] == "Running"]
        assert cluster.kube.get("RayJob", NS, "rj")["status"]["jobDeploymentStatus"] == "Running"  # type: ignore[index]
        cluster.exit_pod(NS, live["metadata"]["name"], 1, "connection reset\n")
    status = cluster.kube.get("RayJob", NS, "rj")["status"]  # type: ignore[index]
    assert (status["jobDeploymentStatus"], status["reason"]) == ("Failed", "SubmissionFailed")


def test_a_finished_rayjob_s_ray_cluster_is_deleted_at_its_ttl_and_its_submitter_kept(
    cluster: Cluster, kube_client: Any
) -> None:
    """KubeRay deletes only the Ray cluster at the TTL: the submitter Job and its completed pod stay (for
    the driver's log), and so does the RayJob (its deletion is an operator setting, off by default)."""
    client.CustomObjectsApi(kube_client).create_namespaced_custom_object("ray.io", "v1", NS, "rayjobs", _rayjob("rj"))
    cluster.driver_exit(NS, "rj", 0)
    cluster.advance(59)
    assert cluster.kube.list("RayCluster", NS)
    cluster.advance(2)
    assert cluster.kube.list("RayCluster", NS) == []
    assert [p["status"]["phase"] for p in _submitters(cluster, "rj")] == ["Succeeded"]
    assert cluster.kube.get("Job", NS, "rj") is not None and cluster.kube.get("RayJob", NS, "rj") is not None


# ── the Eviction API ───────────────────────────────────────────────────────────────────────────
def test_the_eviction_api_disrupts_the_pod_and_its_job_replaces_it(cluster: Cluster, kube_client: Any) -> None:
    rules = {"rules": [{"action": "Count", "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}]}]}
    _create_job(kube_client, _job("j", backoffLimit=1, podFailurePolicy=rules))
    (pod,) = cluster.pods(NS)
    name = pod["metadata"]["name"]
    eviction = {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": name, "namespace": NS}}
    client.CoreV1Api(kube_client).create_namespaced_pod_eviction(name, NS, eviction, _preload_content=False)
    evicted = cluster.kube.get("Pod", NS, name)
    assert evicted is not None and evicted["metadata"].get("deletionTimestamp")
    (target,) = [c for c in evicted["status"]["conditions"] if c["type"] == "DisruptionTarget"]
    assert target["reason"] == "EvictionByEvictionAPI"
    assert [p["status"]["phase"] for p in cluster.pods(NS)].count("Running") == 1  # the replacement
    assert cluster.kube.get("Job", NS, "j")["status"]["failed"] == 1  # type: ignore[index]
    with pytest.raises(ApiException) as missing:
        client.CoreV1Api(kube_client).create_namespaced_pod_eviction("nope", NS, eviction)
    assert missing.value.status == 404


# ── core validation: client writes, and the pods and Jobs the controllers create ─────────────
AT = "spec.template.spec"
BAD_POD_VALUES = [
    (
        {"tolerations": [{"key": "", "operator": "Equal"}]},
        f'{AT}.tolerations[0].operator: Invalid value: "Equal": operator must be Exists when `key` is empty',
    ),
    (
        {"tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "value": "x"}]},
        f"{AT}.tolerations[0].operator: Invalid value: \"x\": value must be empty when `operator` is 'Exists'",
    ),
    (
        {"nodeSelector": {"nvidia.com/gpu.product": "NVIDIA H200"}},
        'spec.template.spec.nodeSelector: Invalid value: "NVIDIA H200": a valid label must be',
    ),
    (
        {
            "containers": [
                {
                    "name": "trainer",
                    "image": "busybox:1.36",
                    "resources": {"requests": {"nvidia.com/gpu": "4"}, "limits": {"nvidia.com/gpu": "8"}},
                }
            ]
        },
        f'{AT}.containers[0].resources.requests[nvidia.com/gpu]: Invalid value: "4": must be equal to '
        "nvidia.com/gpu limit of 8",
    ),
    (
        {
            "containers": [
                {
                    "name": "trainer",
                    "image": "busybox:1.36",
                    "volumeMounts": [{"name": "dshm", "mountPath": "/dev/shm"}],
                }
            ]
        },
        'spec.template.spec.containers[0].volumeMounts[0].name: Not found: "dshm"',
    ),
]


def _with_pod_values(body: dict[str, Any], values: dict[str, Any]) -> dict[str, Any]:
    body = copy.deepcopy(body)
    spec = (
        body["spec"]["template"]["spec"]
        if body["kind"] == "Job"
        else body["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]
    )
    spec.update(copy.deepcopy(values))
    return body


@pytest.mark.parametrize(("values", "message"), BAD_POD_VALUES)
def test_a_job_core_validation_refuses_is_422_in_the_api_servers_words(
    fake_kube: FakeKube, values: dict[str, Any], message: str
) -> None:
    from twin_rbac import bot_client

    with pytest.raises(ApiException) as refused:
        _create_job(bot_client(fake_kube, NS), _with_pod_values(_job("j"), values))
    body = json.loads(refused.value.body)
    assert refused.value.status == 422 and body["reason"] == "Invalid"
    assert message in body["message"], body["message"]
    assert fake_kube.get("Job", NS, "j") is None


def test_an_indexed_job_whose_last_pod_host_name_is_too_long_is_refused(fake_kube: FakeKube) -> None:
    from twin_rbac import bot_client

    name = "j" * 61
    with pytest.raises(ApiException) as refused:
        _create_job(bot_client(fake_kube, NS), _job(name, completionMode="Indexed", completions=11, parallelism=11))
    message = json.loads(refused.value.body)["message"]
    assert refused.value.status == 422 and f"will not able to create pod with invalid DNS label: {name}-10" in message
    _create_job(bot_client(fake_kube, NS), _job(name, completionMode="Indexed", completions=10, parallelism=10))


def test_a_quantity_that_does_not_decode_is_a_bad_request(fake_kube: FakeKube) -> None:
    from twin_rbac import bot_client

    volumes = {"volumes": [{"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": "64GB"}}]}
    with pytest.raises(ApiException) as refused:
        _create_job(bot_client(fake_kube, NS), _with_pod_values(_job("j"), volumes))
    body = json.loads(refused.value.body)
    assert refused.value.status == 400 and body["reason"] == "BadRequest"
    assert 'Job in version "v1" cannot be handled as a Job: quantities must match' in body["message"]


def _events(kube_client: Any, reason: str) -> list[Any]:
    return [e for e in client.CoreV1Api(kube_client).list_namespaced_event(NS).items if e.reason == reason]


@pytest.mark.parametrize(("values", "message"), BAD_POD_VALUES[:3])
def test_a_jobset_whose_jobs_core_validation_refuses_is_accepted_and_never_gets_a_pod(
    cluster: Cluster, kube_client: Any, values: dict[str, Any], message: str
) -> None:
    from twin_rbac import bot_client

    custom = client.CustomObjectsApi(bot_client(cluster.kube, NS))
    custom.create_namespaced_custom_object(*JOBSET, _with_pod_values(_jobset("js"), values))
    cluster.advance(3 * 86400)
    assert cluster.kube.list("Job", NS) == [] and cluster.pods(NS) == []
    (event,) = _events(kube_client, "JobCreationFailed")
    assert (event.type, event.involved_object.kind, event.involved_object.name) == ("Warning", "JobSet", "js")
    assert 'Job.batch "js-workers-0" is invalid' in event.message and message in event.message
    assert "terminalState" not in cluster.kube.get("JobSet", NS, "js")["status"]  # type: ignore[index]


def test_a_rayjob_whose_pods_core_validation_refuses_waits_with_kuberays_event(
    cluster: Cluster, kube_client: Any
) -> None:
    from twin_rbac import bot_client

    body = _rayjob("rj")
    body["spec"]["rayClusterSpec"]["headGroupSpec"]["template"]["spec"]["tolerations"] = [
        {"key": "", "operator": "Equal"}
    ]
    client.CustomObjectsApi(bot_client(cluster.kube, NS)).create_namespaced_custom_object(
        "ray.io", "v1", NS, "rayjobs", body
    )
    assert cluster.kube.list("RayCluster", NS) and cluster.pods(NS, {"ray.io/node-type": "head"}) == []
    (event,) = _events(kube_client, "FailedToCreateHeadPod")
    assert event.involved_object.kind == "RayCluster"
    assert "spec.tolerations[0].operator: Invalid value" in event.message


def test_kueue_counts_the_rayjob_submitter_in_its_workload(cluster: Cluster, kube_client: Any) -> None:
    from twin_rbac import bot_client

    cluster.add_queue(NS, "lq", "cq", cpu="2")  # the head's and the worker's CPU, nothing for the submitter
    body = _rayjob("rj")
    body["metadata"]["labels"] = {"kueue.x-k8s.io/queue-name": "lq"}
    ray = body["spec"]["rayClusterSpec"]
    for template in (ray["headGroupSpec"]["template"], ray["workerGroupSpecs"][0]["template"]):
        template["spec"]["containers"][0]["resources"] = {"requests": {"cpu": "1"}, "limits": {"cpu": "1"}}
    client.CustomObjectsApi(bot_client(cluster.kube, NS)).create_namespaced_custom_object(
        "ray.io", "v1", NS, "rayjobs", body
    )
    (workload,) = cluster.kube.list("Workload", NS)
    sets = {s["name"]: s for s in workload["spec"]["podSets"]}
    assert sorted(sets) == ["head", "submitter", "w"] and sets["submitter"]["count"] == 1
    waiting = {c["type"]: c for c in workload["status"]["conditions"]}["QuotaReserved"]
    assert waiting["status"] == "False" and "insufficient unused quota for cpu" in waiting["message"]
    assert cluster.kube.get("RayJob", NS, "rj")["spec"]["suspend"] is True  # type: ignore[index]


def _pod(**spec: Any) -> dict[str, Any]:
    container = {"name": "c", "image": "busybox:1.36", **spec.pop("container", {})}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p"},
        "spec": {"restartPolicy": "Never", "containers": [container], **spec},
    }


@pytest.mark.parametrize(
    ("pod", "message"),
    [
        (
            _pod(container={"resources": {"requests": {"cpu": "2"}, "limits": {"cpu": "1"}}}),
            'spec.containers[0].resources.requests[cpu]: Invalid value: "2": must be less than or equal to cpu limit',
        ),
        (
            _pod(container={"resources": {"requests": {"memory": "-1Gi"}}}),
            "must be greater than or equal to 0",
        ),
        (
            _pod(container={"resources": {"limits": {"nvidia.com/gpu": "0.5"}}}),
            'spec.containers[0].resources.limits[nvidia.com/gpu]: Invalid value: "0.5": must be an integer',
        ),
        (
            _pod(container={"env": [{"name": "1ST", "value": "x"}]}),
            'spec.containers[0].env[0].name: Invalid value: "1ST": a valid environment variable name',
        ),
        (
            _pod(initContainers=[{"name": "c", "image": "busybox:1.36"}]),
            'spec.containers[0].name: Duplicate value: "c"',
        ),
        (
            _pod(tolerations=[{"key": "k", "operator": "Exists", "effect": "NoSchedule", "tolerationSeconds": 30}]),
            "spec.tolerations[0].effect: Invalid value: \"NoSchedule\": effect must be 'NoExecute'",
        ),
        (
            _pod(hostname="h" * 64),
            "spec.hostname: Invalid value: ",
        ),
        (
            {**_pod(), "metadata": {"name": "p", "annotations": {"bad key": "v"}}},
            'metadata.annotations: Invalid value: "bad key": name part must consist of',
        ),
    ],
)
def test_a_pod_core_validation_refuses_is_422(kube_client: Any, pod: dict[str, Any], message: str) -> None:
    with pytest.raises(ApiException) as refused:
        client.CoreV1Api(kube_client).create_namespaced_pod(NS, pod, _preload_content=False)
    body = json.loads(refused.value.body)
    assert refused.value.status == 422 and body["message"].startswith('Pod "p" is invalid: '), body["message"]
    assert message in body["message"], body["message"]


def test_a_policy_webhook_that_denies_pods_holds_the_jobs_pods_back_with_the_controllers_event(
    cluster: Cluster, kube_client: Any
) -> None:
    from twin_rbac import bot_client

    def policy(kind: str, obj: dict[str, Any]) -> str | None:
        labels = obj["metadata"].get("labels") or {}
        return "policy.example.com: pods need a team label" if kind == "Pod" and "team" not in labels else None

    cluster.kube.webhooks.append(policy)
    _create_job(bot_client(cluster.kube, NS), _job("j"))  # the Job itself is not a Pod: admitted
    assert cluster.pods(NS) == []
    (event,) = _events(kube_client, "FailedCreate")
    assert (event.involved_object.kind, event.involved_object.name) == ("Job", "j")
    assert 'Error creating: admission webhook "policy.example.com" denied the request: pods need a team label' in (
        event.message
    )


def test_events_are_listed_by_the_field_selectors_the_api_server_supports(cluster: Cluster, kube_client: Any) -> None:
    cluster.kube.webhooks.append(lambda kind, obj: "policy.example.com: no" if kind == "Pod" else None)
    _create_job(kube_client, _job("j"))
    core = client.CoreV1Api(kube_client)
    assert [e.reason for e in core.list_namespaced_event(NS, field_selector="type=Warning").items] == ["FailedCreate"]
    assert core.list_namespaced_event(NS, field_selector="type=Normal").items == []
    assert len(core.list_namespaced_event(NS, field_selector="involvedObject.name=j,reason=FailedCreate").items) == 1
    with pytest.raises(ApiException) as refused:
        core.list_namespaced_event(NS, field_selector="message=no")
    assert refused.value.status == 400 and "field label not supported: message" in refused.value.body
