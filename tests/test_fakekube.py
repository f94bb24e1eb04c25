"""The fake API server behaves like the real one where our backend depends on it.

Each test drives it through the real `kubernetes` client, so a fake that drifts from the client's
paths, verbs or content types fails here first.
"""

from __future__ import annotations

import base64
import json
import threading
from typing import TYPE_CHECKING, Any

import pytest
import urllib3
from kubernetes import client
from kubernetes.client.exceptions import ApiException
from kubernetes.dynamic import DynamicClient

if TYPE_CHECKING:
    from fakekube import FakeKube

pytest_plugins = ("fakekube",)

NS = "team-a"
APPLY = "application/apply-patch+yaml"
MERGE = "application/merge-patch+json"
JOBSET = ("jobset.x-k8s.io", "v1alpha2", NS, "jobsets")


def _jobset(name: str, **labels: str) -> dict[str, Any]:
    return {
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": {"name": name, "labels": labels},
        # the smallest JobSet the CRD's schema admits: a replicated job needs its Job template
        "spec": {
            "replicatedJobs": [
                {
                    "name": "workers",
                    "replicas": 1,
                    "template": {
                        "spec": {
                            "template": {
                                "spec": {
                                    "restartPolicy": "Never",
                                    "containers": [{"name": "w", "image": "busybox:1.36"}],
                                }
                            }
                        }
                    },
                }
            ]
        },
        "status": {"restarts": 99},
    }


def _apply_jobset(kube_client: Any, body: dict[str, Any], **opts: Any) -> dict[str, Any]:
    custom = client.CustomObjectsApi(kube_client)
    opts.setdefault("field_manager", "tests")
    name = body["metadata"]["name"]
    # Raw JSON: the client's CustomObjectsApi drops the 201 an apply-create answers with.
    response = custom.patch_namespaced_custom_object(
        *JOBSET, name, body, _content_type=APPLY, _preload_content=False, **opts
    )
    return dict(json.loads(response.data))


def test_create_conflict_and_read_back_through_typed_client(fake_kube: FakeKube, kube_client: Any) -> None:
    core = client.CoreV1Api(kube_client)
    body = {"metadata": {"name": "tokens"}, "type": "Opaque", "stringData": {"TOKEN": "abc"}}
    created = core.create_namespaced_secret(NS, body)
    assert created.metadata.uid and created.metadata.resource_version and created.metadata.creation_timestamp
    assert base64.b64decode(created.data["TOKEN"]) == b"abc"
    assert created.string_data is None  # the server folds stringData into data

    with pytest.raises(ApiException) as err:
        core.create_namespaced_secret(NS, body)
    assert err.value.status == 409
    assert json.loads(err.value.body)["reason"] == "AlreadyExists"
    assert fake_kube.creations[("Secret", NS, "tokens")] == 1

    with pytest.raises(ApiException) as missing:
        core.read_namespaced_secret("nope", NS)
    assert missing.value.status == 404
    assert json.loads(missing.value.body) == {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": 'secrets "nope" not found',
        "reason": "NotFound",
        "details": {"name": "nope", "group": "", "kind": "secrets"},
        "code": 404,
    }


def test_server_side_apply_creates_then_merges_and_ignores_status(fake_kube: FakeKube, kube_client: Any) -> None:
    first = _apply_jobset(kube_client, _jobset("js", a="1"), force=True)
    assert first["status"] == {}  # status is a subresource: apply cannot set it
    assert first["metadata"]["managedFields"][0]["manager"] == "tests"
    # A manager's re-apply is its whole intent: the label it no longer sends is removed, as on a real
    # server; a label another manager owns survives.
    other = _apply_jobset(kube_client, _jobset("js", a="1", c="3"), field_manager="someone-else")
    assert other["metadata"]["labels"] == {"a": "1", "c": "3"}
    second = _apply_jobset(kube_client, _jobset("js", b="2"))
    assert second["metadata"]["uid"] == first["metadata"]["uid"]
    assert int(second["metadata"]["resourceVersion"]) > int(first["metadata"]["resourceVersion"])
    assert second["metadata"]["labels"] == {"a": "1", "b": "2", "c": "3"}  # `a` is someone-else's too
    third = _apply_jobset(kube_client, _jobset("js", a="1", c="3"), field_manager="someone-else")
    fourth = _apply_jobset(kube_client, _jobset("js"), field_manager="someone-else")
    assert third["metadata"]["labels"] == {"a": "1", "b": "2", "c": "3"}
    assert fourth["metadata"]["labels"] == {"b": "2"}
    managers = {m["manager"]: m["operation"] for m in fourth["metadata"]["managedFields"]}
    assert managers["tests"] == "Apply"
    assert fake_kube.creations[("JobSet", NS, "js")] == 1
    request = fake_kube.requests_for("PATCH", r"/jobsets/js$")[0]
    assert (request.content_type, request.query["fieldManager"], request.query["force"]) == (
        APPLY,
        "tests",
        "true",
    )


def test_apply_without_field_manager_is_refused(kube_client: Any) -> None:
    with pytest.raises(ApiException) as err:
        _apply_jobset(kube_client, _jobset("js"), field_manager=None)
    assert err.value.status == 400
    assert "fieldManager" in json.loads(err.value.body)["message"]


def test_merge_patch_sets_and_deletes_fields(fake_kube: FakeKube, kube_client: Any) -> None:
    _apply_jobset(kube_client, _jobset("js", keep="x", drop="y"))
    custom = client.CustomObjectsApi(kube_client)
    patch = {"metadata": {"labels": {"drop": None}, "annotations": {"note": "hi"}}}
    custom.patch_namespaced_custom_object(*JOBSET, "js", patch, _content_type=MERGE)
    stored = fake_kube.get("JobSet", NS, "js")
    assert stored is not None
    assert stored["metadata"]["labels"] == {"keep": "x"}
    assert stored["metadata"]["annotations"] == {"note": "hi"}
    with pytest.raises(ApiException) as err:
        custom.patch_namespaced_custom_object(*JOBSET, "absent", patch, _content_type="application/merge-patch+json")
    assert err.value.status == 404


def test_list_filters_by_label_selector(fake_kube: FakeKube, kube_client: Any) -> None:
    fake_kube.add_pod(NS, "p1", {"run": "r1", "role": "leader"})
    fake_kube.add_pod(NS, "p2", {"run": "r1"})
    fake_kube.add_pod(NS, "p3", {"run": "r2"})
    fake_kube.add_pod("other", "p4", {"run": "r1"})
    core = client.CoreV1Api(kube_client)

    def names(selector: str) -> list[str]:
        return [p.metadata.name for p in core.list_namespaced_pod(NS, label_selector=selector).items]

    assert names("run=r1") == ["p1", "p2"]
    assert names("run==r2") == ["p3"]
    assert names("run=r1,role") == ["p1"]
    assert names("run=r1,!role") == ["p2"]
    assert names("run!=r1") == ["p3"]
    assert names("") == ["p1", "p2", "p3"]


def test_delete_records_policy_and_collects_owned_objects(fake_kube: FakeKube, kube_client: Any) -> None:
    owner = _apply_jobset(kube_client, _jobset("js"))
    ref = {"apiVersion": owner["apiVersion"], "kind": "JobSet", "name": "js", "uid": owner["metadata"]["uid"]}
    core = client.CoreV1Api(kube_client)
    core.create_namespaced_secret(NS, {"metadata": {"name": "owned", "ownerReferences": [ref]}})
    core.create_namespaced_secret(NS, {"metadata": {"name": "free"}})
    custom = client.CustomObjectsApi(kube_client)
    custom.delete_namespaced_custom_object(*JOBSET, "js", propagation_policy="Foreground")
    assert fake_kube.deletions == [{"kind": "JobSet", "namespace": NS, "name": "js", "propagationPolicy": "Foreground"}]
    assert fake_kube.get("Secret", NS, "owned") is None
    assert fake_kube.get("Secret", NS, "free") is not None
    with pytest.raises(ApiException) as err:
        custom.delete_namespaced_custom_object(*JOBSET, "js")
    assert err.value.status == 404


def test_lingering_foreground_delete_keeps_object_until_finished(fake_kube: FakeKube, kube_client: Any) -> None:
    fake_kube.linger_deletes = True
    _apply_jobset(kube_client, _jobset("js"))
    client.CustomObjectsApi(kube_client).delete_namespaced_custom_object(*JOBSET, "js", propagation_policy="Foreground")
    lingering = fake_kube.get("JobSet", NS, "js")
    assert lingering is not None and lingering["metadata"]["deletionTimestamp"]
    fake_kube.finish_deletion("JobSet", NS, "js")
    assert fake_kube.get("JobSet", NS, "js") is None


def test_pod_log_tail_and_container_rules(fake_kube: FakeKube, kube_client: Any) -> None:
    fake_kube.add_pod(NS, "one", {}, log_text="a\nb\nc\n")
    statuses = [{"name": "main", "state": {"running": {}}}, {"name": "side", "state": {"running": {}}}]
    fake_kube.add_pod(NS, "two", {}, container_statuses=statuses, log_text={"main": "m\n", "side": "s\n"})
    waiting = [{"name": "main", "state": {"waiting": {"reason": "ContainerCreating"}}}]
    fake_kube.add_pod(NS, "three", {}, phase="Pending", container_statuses=waiting)
    core = client.CoreV1Api(kube_client)
    assert core.read_namespaced_pod_log("one", NS, tail_lines=2) == "b\nc\n"
    assert core.read_namespaced_pod_log("one", NS) == "a\nb\nc\n"
    assert core.read_namespaced_pod_log("two", NS, container="side") == "s\n"
    with pytest.raises(ApiException) as ambiguous:
        core.read_namespaced_pod_log("two", NS)
    assert "a container name must be specified" in json.loads(ambiguous.value.body)["message"]
    with pytest.raises(ApiException) as not_started:
        core.read_namespaced_pod_log("three", NS)
    assert "is waiting to start: ContainerCreating" in json.loads(not_started.value.body)["message"]


def test_follow_streams_appended_lines_until_the_pod_ends(fake_kube: FakeKube, kube_client: Any) -> None:
    fake_kube.add_pod(NS, "p", {}, log_text="first\n")
    response = client.CoreV1Api(kube_client).read_namespaced_pod_log("p", NS, follow=True, _preload_content=False)
    chunks = response.stream(1024)
    assert next(chunks) == b"first\n"
    fake_kube.append_log(NS, "p", "second\n")
    assert next(chunks) == b"second\n"
    fake_kube.set_pod_phase(NS, "p", "Succeeded")
    assert list(chunks) == []


def test_faults_fire_the_given_number_of_times_on_matching_paths(fake_kube: FakeKube, kube_client: Any) -> None:
    core = client.CoreV1Api(kube_client)
    server_error = fake_kube.inject(500, r"/secrets$", times=2)
    other_path = fake_kube.inject(503, r"/configmaps")
    for _ in range(2):
        with pytest.raises(ApiException) as err:
            core.list_namespaced_secret(NS)
        assert err.value.status == 500
    assert core.list_namespaced_secret(NS).items == []
    assert (server_error.hits, other_path.hits) == (2, 0)


def test_429_carries_retry_after_and_409_a_status_body(fake_kube: FakeKube, kube_client: Any) -> None:
    fake_kube.inject(429, retry_after=7)
    fake_kube.inject(409, method="PATCH")
    core = client.CoreV1Api(kube_client)
    with pytest.raises(ApiException) as throttled:
        core.list_namespaced_pod(NS)
    assert throttled.value.status == 429 and throttled.value.headers["Retry-After"] == "7"
    with pytest.raises(ApiException) as conflict:
        _apply_jobset(kube_client, _jobset("js"))
    assert conflict.value.status == 409 and json.loads(conflict.value.body)["reason"] == "AlreadyExists"
    assert fake_kube.get("JobSet", NS, "js") is None


def test_latency_past_the_client_timeout_times_out(fake_kube: FakeKube, kube_client: Any) -> None:
    fake_kube.inject("latency", r"/pods$", seconds=2.0)
    core = client.CoreV1Api(kube_client)
    with pytest.raises(urllib3.exceptions.ReadTimeoutError):
        core.list_namespaced_pod(NS, _request_timeout=0.2)
    fake_kube.inject("latency", r"/pods$", seconds=0.05)
    assert core.list_namespaced_pod(NS, _request_timeout=5).items == []


def test_dropped_connection_reaches_the_client_as_a_protocol_error(fake_kube: FakeKube, kube_client: Any) -> None:
    fake_kube.inject("drop", r"/pods$")
    core = client.CoreV1Api(kube_client)
    with pytest.raises(urllib3.exceptions.ProtocolError):
        core.list_namespaced_pod(NS)
    assert core.list_namespaced_pod(NS).items == []


def test_fault_action_runs_before_the_response(fake_kube: FakeKube, kube_client: Any) -> None:
    ran = threading.Event()
    fake_kube.inject(409, r"/jobsets/js$", action=ran.set)
    with pytest.raises(ApiException):
        _apply_jobset(kube_client, _jobset("js"))
    assert ran.is_set()


def test_discovery_serves_the_dynamic_client(fake_kube: FakeKube, kube_client: Any) -> None:
    assert client.VersionApi(kube_client).get_code().git_version.startswith("v1.")
    dynamic = DynamicClient(kube_client)
    rayjobs = dynamic.resources.get(api_version="ray.io/v1", kind="RayJob")
    body = {"apiVersion": "ray.io/v1", "kind": "RayJob", "metadata": {"name": "rj"}, "spec": {}}
    created = rayjobs.create(namespace=NS, body=body)
    assert created.metadata.uid == fake_kube.get("RayJob", NS, "rj")["metadata"]["uid"]  # type: ignore[index]


def test_workload_hook_owns_it_by_the_job_uid(fake_kube: FakeKube, kube_client: Any) -> None:
    owner = _apply_jobset(kube_client, _jobset("js"))
    fake_kube.add_workload(NS, "jobset-js-1", "JobSet", "js", queue_name="lq")
    custom = client.CustomObjectsApi(kube_client)
    listed = custom.list_namespaced_custom_object("kueue.x-k8s.io", "v1beta1", NS, "workloads")
    (workload,) = listed["items"]
    assert workload["metadata"]["ownerReferences"][0]["uid"] == owner["metadata"]["uid"]
    assert workload["spec"]["queueName"] == "lq"


def test_stop_unblocks_an_open_follow_stream(kube_client: Any, fake_kube: FakeKube) -> None:
    fake_kube.add_pod(NS, "p", {}, log_text="x\n")
    response = client.CoreV1Api(kube_client).read_namespaced_pod_log("p", NS, follow=True, _preload_content=False)
    assert _drain_after_stop(fake_kube, response) == b"x\n"


def _drain_after_stop(server: FakeKube, response: Any) -> bytes:
    first = next(response.stream(1024))
    server.stop()
    try:
        rest = b"".join(response.stream(1024))
    except urllib3.exceptions.HTTPError:
        rest = b""
    return bytes(first + rest)


# ---------------------------------------------------------------- API machinery a real server has
def _job(name: str, **spec: Any) -> dict[str, Any]:
    pod = {"spec": {"restartPolicy": "Never", "containers": [{"name": "trainer", "image": "busybox:1.36"}]}}
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name},
        "spec": {"backoffLimit": 0, "template": pod, **spec},
    }


def test_unknown_fields_follow_field_validation(fake_kube: FakeKube, kube_client: Any) -> None:
    # The generic client: the typed one refuses the unknown field itself, before the server sees it.
    jobs = client.CustomObjectsApi(kube_client)
    body = _job("strict") | {"spec": {**_job("strict")["spec"], "bogus": 1}}
    with pytest.raises(ApiException) as err:
        jobs.create_namespaced_custom_object("batch", "v1", NS, "jobs", body, field_validation="Strict")
    assert err.value.status == 400 and 'unknown field \\"spec.bogus\\"' in str(err.value.body)
    warned = jobs.create_namespaced_custom_object(
        "batch",
        "v1",
        NS,
        "jobs",
        body | {"metadata": {"name": "warn"}},
        field_validation="Warn",
        _preload_content=False,
    )
    assert warned.headers["Warning"] == '299 - "unknown field \\"spec.bogus\\""'
    stored = fake_kube.get("Job", NS, "warn")
    assert stored is not None and "bogus" not in stored["spec"]  # pruned, as the server drops it


def test_invalid_objects_are_422_with_causes(kube_client: Any) -> None:
    custom = client.CustomObjectsApi(kube_client)
    body = _jobset("bad") | {"spec": {"replicatedJobs": [{"name": "w", "replicas": "two"}]}}
    with pytest.raises(ApiException) as err:
        custom.create_namespaced_custom_object(*JOBSET, body)
    payload = json.loads(err.value.body)
    assert err.value.status == 422 and payload["reason"] == "Invalid" and payload["details"]["causes"]


def test_a_jobs_pod_template_is_immutable_and_stale_updates_conflict(fake_kube: FakeKube, kube_client: Any) -> None:
    batch = client.BatchV1Api(kube_client)
    created = json.loads(batch.create_namespaced_job(NS, _job("j"), _preload_content=False).data)
    changed = _job("j")
    changed["spec"]["template"]["spec"]["containers"][0]["image"] = "busybox:1.37"
    with pytest.raises(ApiException) as err:
        client.CustomObjectsApi(kube_client).patch_namespaced_custom_object(
            "batch", "v1", NS, "jobs", "j", changed, _content_type=APPLY, field_manager="tests", force=True
        )
    assert err.value.status == 422 and "field is immutable" in json.loads(err.value.body)["message"]
    batch.patch_namespaced_job("j", NS, {"metadata": {"labels": {"seen": "yes"}}}, _preload_content=False)
    with pytest.raises(ApiException) as conflict:  # `created` carries the resourceVersion before the patch
        batch.replace_namespaced_job("j", NS, created, _preload_content=False)
    assert conflict.value.status == 409 and "the object has been modified" in str(conflict.value.body)


def test_strategic_merge_patch_is_refused_on_custom_resources(kube_client: Any) -> None:
    custom = client.CustomObjectsApi(kube_client)
    _apply_jobset(kube_client, _jobset("js"))
    with pytest.raises(ApiException) as err:
        custom.patch_namespaced_custom_object(
            *JOBSET, "js", {"metadata": {"labels": {"a": "b"}}}, _content_type="application/strategic-merge-patch+json"
        )
    assert err.value.status == 415


def test_generate_name_and_pagination(fake_kube: FakeKube, kube_client: Any) -> None:
    core = client.CoreV1Api(kube_client)
    for _ in range(3):
        core.create_namespaced_config_map(NS, {"metadata": {"generateName": "cm-"}, "data": {"k": "v"}})
    names = [o["metadata"]["name"] for o in fake_kube.list("ConfigMap", NS)]
    assert len(set(names)) == 3 and all(n.startswith("cm-") and len(n) == 8 for n in names)
    page = core.list_namespaced_config_map(NS, limit=2)
    assert len(page.items) == 2 and page.metadata._continue
    rest = core.list_namespaced_config_map(NS, limit=2, _continue=page.metadata._continue)
    assert len(rest.items) == 1


# ---------------------------------------------------------------- controllers
def test_the_job_controller_runs_pods_and_applies_the_pod_failure_policy(cluster: Any, kube_client: Any) -> None:
    rules = {
        "rules": [
            {"action": "FailJob", "onExitCodes": {"containerName": "trainer", "operator": "In", "values": [78]}},
            {"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}]},
        ]
    }
    batch = client.BatchV1Api(kube_client)
    batch.create_namespaced_job(
        NS,
        _job("j", completionMode="Indexed", completions=2, parallelism=2, podFailurePolicy=rules, backoffLimit=3),
        _preload_content=False,
    )
    pods = cluster.pods(NS)
    labels = pods[0]["metadata"]["labels"]
    assert len(pods) == 2 and labels["batch.kubernetes.io/job-name"] == "j" and "controller-uid" in labels
    assert sorted(p["metadata"]["annotations"]["batch.kubernetes.io/job-completion-index"] for p in pods) == ["0", "1"]
    disrupted = [{"type": "DisruptionTarget", "status": "True"}]
    cluster.exit_pod(NS, pods[0]["metadata"]["name"], 137, conditions=disrupted)
    assert len([p for p in cluster.pods(NS) if p["status"]["phase"] == "Running"]) == 2  # ignored, replaced
    running = [p for p in cluster.pods(NS) if p["status"]["phase"] == "Running"]
    cluster.exit_pod(NS, running[0]["metadata"]["name"], 78, "bad config\n")
    job = cluster.kube.get("Job", NS, "j")
    failed = [c for c in job["status"]["conditions"] if c["type"] == "Failed"]
    assert failed and failed[0]["reason"] == "PodFailurePolicy"
    assert not [p for p in cluster.pods(NS) if p["status"]["phase"] == "Running"]  # active pods stopped


def test_the_jobset_controller_restarts_then_fails(cluster: Any, kube_client: Any) -> None:
    body = _jobset("js") | {"spec": {**_jobset("js")["spec"], "failurePolicy": {"maxRestarts": 1}}}
    body["spec"]["replicatedJobs"][0]["template"]["spec"]["backoffLimit"] = 0
    client.CustomObjectsApi(kube_client).create_namespaced_custom_object(*JOBSET, body)
    (job,) = cluster.kube.list("Job", NS)
    assert job["metadata"]["name"] == "js-workers-0"
    assert job["metadata"]["labels"]["jobset.sigs.k8s.io/restart-attempt"] == "0"
    assert cluster.kube.get("Service", NS, "js")["spec"]["clusterIP"] == "None"
    (pod,) = cluster.pods(NS)
    assert pod["spec"]["subdomain"] == "js" and pod["metadata"]["labels"]["jobset.sigs.k8s.io/jobset-name"] == "js"
    cluster.exit_pod(NS, pod["metadata"]["name"], 1)
    (again,) = cluster.kube.list("Job", NS)
    assert again["metadata"]["labels"]["jobset.sigs.k8s.io/restart-attempt"] == "1"
    assert cluster.kube.get("JobSet", NS, "js")["status"]["restarts"] == 1
    (pod,) = [p for p in cluster.pods(NS) if p["status"]["phase"] == "Running"]
    cluster.exit_pod(NS, pod["metadata"]["name"], 1)
    status = cluster.kube.get("JobSet", NS, "js")["status"]
    assert status["terminalState"] == "Failed"


def _job_status(kube_client: Any, name: str) -> tuple[list[str], dict[str, Any]]:
    """A Job's true condition types and its status, as a client reads them."""
    response = client.BatchV1Api(kube_client).read_namespaced_job_status(name, NS, _preload_content=False)
    status = json.loads(response.data)["status"]
    return [c["type"] for c in status.get("conditions") or [] if c["status"] == "True"], status


def test_a_succeeded_pod_is_counted_before_its_job_is_complete(cluster: Any, kube_client: Any) -> None:
    client.BatchV1Api(kube_client).create_namespaced_job(NS, _job("j"), _preload_content=False)
    (pod,) = cluster.pods(NS)
    cluster.hold_jobs()
    cluster.exit_pod(NS, pod["metadata"]["name"], 0)
    conditions, status = _job_status(kube_client, "j")  # the controller has not synced since
    assert conditions == [] and (status["active"], status["ready"]) == (1, 1)

    cluster.step_jobs()
    conditions, status = _job_status(kube_client, "j")
    assert conditions == ["SuccessCriteriaMet"] and (status["active"], status["ready"]) == (0, 0)
    assert status["uncountedTerminatedPods"] == {"succeeded": [pod["metadata"]["uid"]]}
    assert "completionTime" not in status and not status.get("succeeded")

    cluster.step_jobs()
    conditions, status = _job_status(kube_client, "j")
    assert conditions == ["SuccessCriteriaMet", "Complete"] and status["succeeded"] == 1
    assert status["completionTime"] and not status["uncountedTerminatedPods"]


def test_a_failing_job_stops_its_pods_before_it_is_failed(cluster: Any, kube_client: Any) -> None:
    spec = {"parallelism": 2, "completions": 2, "completionMode": "Indexed"}
    client.BatchV1Api(kube_client).create_namespaced_job(NS, _job("j", **spec), _preload_content=False)
    first, second = cluster.pods(NS)
    cluster.hold_jobs()
    cluster.slow_stops = True  # the other rank saves on SIGTERM
    cluster.exit_pod(NS, first["metadata"]["name"], 1)
    cluster.step_jobs()
    conditions, status = _job_status(kube_client, "j")
    assert conditions == ["FailureTarget"] and status["conditions"][0]["reason"] == "BackoffLimitExceeded"
    assert (status["active"], status["ready"], status["terminating"]) == (0, 0, 1)
    saving = next(p for p in cluster.pods(NS) if p["metadata"]["name"] == second["metadata"]["name"])
    assert saving["metadata"]["deletionTimestamp"] and saving["status"]["phase"] == "Running"

    cluster.step_jobs()  # the rank still runs: no Failed yet
    assert _job_status(kube_client, "j")[0] == ["FailureTarget"]
    cluster.exit_pod(NS, second["metadata"]["name"], 143)
    cluster.step_jobs()
    conditions, status = _job_status(kube_client, "j")
    assert conditions == ["FailureTarget", "Failed"] and status["terminating"] == 0
    assert status["conditions"][1]["reason"] == "BackoffLimitExceeded"
    assert [p["metadata"]["name"] for p in cluster.pods(NS)] == [first["metadata"]["name"]]  # the deleted one is gone


def test_a_pod_that_outlives_its_grace_period_is_killed_and_the_job_fails(cluster: Any, kube_client: Any) -> None:
    spec = {"parallelism": 2, "completions": 2, "completionMode": "Indexed"}
    client.BatchV1Api(kube_client).create_namespaced_job(NS, _job("j", **spec), _preload_content=False)
    first, _ = cluster.pods(NS)
    cluster.slow_stops = True
    cluster.exit_pod(NS, first["metadata"]["name"], 1)
    assert _job_status(kube_client, "j")[0] == ["FailureTarget"]
    cluster.advance(30)
    conditions, _ = _job_status(kube_client, "j")
    assert conditions == ["FailureTarget", "Failed"]


def test_a_jobset_completes_only_once_its_child_job_is_complete(cluster: Any, kube_client: Any) -> None:
    client.CustomObjectsApi(kube_client).create_namespaced_custom_object(*JOBSET, _jobset("js"))
    (pod,) = cluster.pods(NS)
    cluster.hold_jobs()
    cluster.exit_pod(NS, pod["metadata"]["name"], 0)
    cluster.step_jobs()
    assert _job_status(kube_client, "js-workers-0")[0] == ["SuccessCriteriaMet"]
    status = cluster.kube.get("JobSet", NS, "js")["status"]
    assert "terminalState" not in status
    assert [(r["ready"], r["active"], r["succeeded"]) for r in status["replicatedJobsStatus"]] == [(0, 0, 0)]

    cluster.release_jobs()
    assert cluster.kube.get("JobSet", NS, "js")["status"]["terminalState"] == "Completed"


def test_kueue_admits_by_quota_and_says_why_the_second_waits(cluster: Any, kube_client: Any) -> None:
    cluster.add_queue(NS, "lq", "cq", cpu="4")
    batch = client.BatchV1Api(kube_client)
    for name in ("first", "second"):
        body = _job(name)
        body["metadata"]["labels"] = {"kueue.x-k8s.io/queue-name": "lq"}
        body["spec"]["template"]["spec"]["containers"][0]["resources"] = {"requests": {"cpu": "3"}}
        batch.create_namespaced_job(NS, body, _preload_content=False)
    first, second = (cluster.kube.get("Job", NS, n) for n in ("first", "second"))
    assert first["spec"]["suspend"] is False and second["spec"]["suspend"] is True
    workloads = {w["metadata"]["ownerReferences"][0]["name"]: w for w in cluster.kube.list("Workload", NS)}
    assert workloads["first"]["metadata"]["labels"]["kueue.x-k8s.io/job-uid"] == first["metadata"]["uid"]
    waiting = {c["type"]: c for c in workloads["second"]["status"]["conditions"]}["QuotaReserved"]
    assert waiting["status"] == "False" and "insufficient unused quota for cpu" in waiting["message"]
    (pod,) = cluster.pods(NS, {"batch.kubernetes.io/job-name": "first"})
    cluster.exit_pod(NS, pod["metadata"]["name"], 0)
    assert cluster.kube.get("Job", NS, "second")["spec"]["suspend"] is False  # the quota came back


def test_finished_jobs_are_deleted_after_their_ttl(cluster: Any, kube_client: Any) -> None:
    client.BatchV1Api(kube_client).create_namespaced_job(
        NS, _job("j", ttlSecondsAfterFinished=300), _preload_content=False
    )
    (pod,) = cluster.pods(NS)
    cluster.exit_pod(NS, pod["metadata"]["name"], 0)
    cluster.advance(280)  # the twin's clock: no sleeping (timestamps have whole seconds)
    assert cluster.kube.get("Job", NS, "j") is not None
    cluster.advance(30)
    assert cluster.kube.get("Job", NS, "j") is None and cluster.pods(NS) == []
