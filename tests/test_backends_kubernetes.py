"""The Kubernetes backend, through the real `kubernetes` client, against the stateful fake API server."""

from __future__ import annotations

import base64
import hashlib
import logging
import random
import subprocess
import sys
import textwrap
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from twin_rbac import bot_client, bot_session

from tuneplane.backends.base import Backend, BackendError, BackendRef, SubmitRequest
from tuneplane.backends.kubernetes.backend import ApiRetry, KubernetesBackend
from tuneplane.backends.kubernetes.payload import KubernetesObjects

if TYPE_CHECKING:
    from fakekube import FakeKube

pytest_plugins = ("fakekube",)

NS = "team-a"
TOKEN = "tp-secret-token-5f1c"
# Quick retries; a request's own timeout is generous: on a loaded machine a twin's answer once took over
# a second, and the timeout's retry counted as one more than the faults injected. The timeout tests set theirs.
FAST = ApiRetry(attempts=4, backoff_base=0.001, backoff_cap=0.005, timeout=10.0)
KIND_PATHS = {
    "Job": "/apis/batch/v1/namespaces/team-a/jobs",
    "JobSet": "/apis/jobset.x-k8s.io/v1alpha2/namespaces/team-a/jobsets",
    "RayJob": "/apis/ray.io/v1/namespaces/team-a/rayjobs",
}


# ---------------------------------------------------------------- minimal manifests
def _labels(run: str) -> dict[str, str]:
    return {"tuneplane.dev/run": run, "tuneplane.dev/experiment": "sft-demo"}


def _pod_template(run: str) -> dict[str, Any]:
    return {
        "metadata": {"labels": _labels(run)},
        "spec": {
            "restartPolicy": "Never",
            "containers": [{"name": "trainer", "image": "ghcr.io/acme/train:1"}],
        },
    }


def job_manifest(name: str, run: str) -> dict[str, Any]:
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "labels": _labels(run)},
        "spec": {"backoffLimit": 0, "template": _pod_template(run)},
    }


def jobset_manifest(name: str, run: str) -> dict[str, Any]:
    job = {"spec": {"parallelism": 2, "completions": 2, "template": _pod_template(run)}}
    return {
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": {"name": name, "labels": _labels(run)},
        "spec": {"replicatedJobs": [{"name": "workers", "replicas": 1, "template": job}]},
    }


def rayjob_manifest(name: str, run: str) -> dict[str, Any]:
    head = {"rayStartParams": {}, "template": _pod_template(run)}
    return {
        "apiVersion": "ray.io/v1",
        "kind": "RayJob",
        "metadata": {"name": name, "labels": _labels(run)},
        "spec": {"entrypoint": "python -m verl.trainer.main_ppo", "rayClusterSpec": {"headGroupSpec": head}},
    }


MANIFESTS = {"Job": job_manifest, "JobSet": jobset_manifest, "RayJob": rayjob_manifest}


def request_for(kind: str, name: str = "sft-demo-r1", run: str = "r1") -> SubmitRequest:
    return SubmitRequest(
        run_id=run,
        experiment="sft-demo",
        namespace=NS,
        object_name=name,
        payload=KubernetesObjects([MANIFESTS[kind](name, run)]),
        secret_data={"TUNEPLANE_JOB_TOKEN": TOKEN},
    )


def documents(request: SubmitRequest) -> list[dict[str, Any]]:
    """The rendered objects a Kubernetes request carries."""
    assert isinstance(request.payload, KubernetesObjects)
    return request.payload.documents


# ---------------------------------------------------------------- fixtures and helpers
class Sleeps(list[float]):
    """Records backoff sleeps instead of sleeping, so tests can check Retry-After was honoured."""

    def __call__(self, seconds: float) -> None:
        self.append(seconds)


@pytest.fixture
def kube_client(fake_kube: FakeKube) -> Iterator[Any]:
    """The bot's client: every request is held to the Role tuneplane declares (twin_rbac)."""
    with bot_session(fake_kube, NS) as api_client:
        yield api_client


@pytest.fixture
def backend(kube_client: Any) -> KubernetesBackend:
    return KubernetesBackend(NS, api_client=kube_client, retry=FAST, rng=random.Random(7))


def terminated(code: int, reason: str = "Error", at: str = "2025-01-01T00:10:00Z") -> dict[str, Any]:
    return {"terminated": {"exitCode": code, "reason": reason, "finishedAt": at}}


def set_failed(fake: FakeKube, kind: str, name: str = "sft-demo-r1") -> None:
    if kind == "RayJob":
        status = {
            "jobStatus": "FAILED",
            "jobDeploymentStatus": "Complete",
            "message": "Job entrypoint failed",
        }
    else:
        cond = {
            "type": "Failed",
            "status": "True",
            "reason": "BackoffLimitExceeded",
            "message": "limit reached",
        }
        status = {"conditions": [cond]}
    fake.set_status(kind, NS, name, status)


# ---------------------------------------------------------------- submit
def test_backend_satisfies_the_protocol(backend: KubernetesBackend) -> None:
    assert isinstance(backend, KubernetesBackend)
    protocol_user: Backend = backend
    assert protocol_user.name == "kubernetes"


@pytest.mark.parametrize("kind", ["Job", "JobSet", "RayJob"])
def test_submit_creates_the_job_then_applies_a_secret_it_owns(
    fake_kube: FakeKube, backend: KubernetesBackend, kind: str
) -> None:
    ref = backend.submit(request_for(kind))
    stored = fake_kube.get(kind, NS, "sft-demo-r1")
    assert stored is not None
    assert ref == BackendRef("kubernetes", kind, "sft-demo-r1", NS, stored["metadata"]["uid"])

    # Created with a POST (a forced apply would answer 200 over an object that exists, never 409),
    # refusing fields the server's schema does not know rather than dropping them.
    (create,) = fake_kube.requests_for("POST", KIND_PATHS[kind] + "$")
    assert create.content_type == "application/json"
    assert (create.query["fieldManager"], create.query["fieldValidation"]) == ("tuneplane", "Strict")
    assert fake_kube.requests_for("PATCH", KIND_PATHS[kind]) == []
    (apply,) = fake_kube.requests_for("PATCH", "/secrets/sft-demo-r1-tokens$")
    assert apply.content_type == "application/apply-patch+yaml"
    assert (apply.query["fieldManager"], apply.query["force"], apply.query["fieldValidation"]) == (
        "tuneplane",
        "true",
        "Strict",
    )

    secret = fake_kube.get("Secret", NS, "sft-demo-r1-tokens")
    assert secret is not None and secret["type"] == "Opaque"
    assert base64.b64decode(secret["data"]["TUNEPLANE_JOB_TOKEN"]).decode() == TOKEN
    (owner,) = secret["metadata"]["ownerReferences"]
    assert (owner["kind"], owner["name"], owner["uid"]) == (kind, "sft-demo-r1", ref.uid)
    assert secret["metadata"]["labels"]["tuneplane.dev/run"] == "r1"


@pytest.mark.parametrize("kind", ["Job", "JobSet", "RayJob"])
def test_submitting_twice_creates_once_and_adopts(fake_kube: FakeKube, backend: KubernetesBackend, kind: str) -> None:
    first = backend.submit(request_for(kind))
    second = KubernetesBackend(NS, api_client=bot_client(fake_kube, NS), retry=FAST).submit(request_for(kind))
    assert second == first
    assert fake_kube.creations[(kind, NS, "sft-demo-r1")] == 1
    assert len(fake_kube.requests_for("POST", KIND_PATHS[kind] + "$")) == 2  # the second got 409 and adopted
    assert fake_kube.requests_for("PATCH", KIND_PATHS[kind]) == []  # never overwritten


def test_an_object_of_another_run_is_never_adopted(fake_kube: FakeKube, backend: KubernetesBackend) -> None:
    fake_kube.put(job_manifest("sft-demo-r1", "someone-else") | {"metadata": {"name": "sft-demo-r1", "namespace": NS}})
    with pytest.raises(BackendError, match=r"Job team-a/sft-demo-r1 already exists .* not run r1"):
        backend.submit(request_for("Job"))
    assert fake_kube.get("Secret", NS, "sft-demo-r1-tokens") is None


def test_a_409_on_create_adopts_the_object_a_racing_bot_created(
    fake_kube: FakeKube, backend: KubernetesBackend
) -> None:
    racer: dict[str, Any] = {}

    def racing_bot_creates_it() -> None:
        manifest = jobset_manifest("sft-demo-r1", "r1")
        manifest["metadata"]["namespace"] = NS
        racer.update(fake_kube.put(manifest))

    # The racer's POST lands between ours reaching the server and being answered: the server says
    # AlreadyExists, as it would.
    fault = fake_kube.inject(409, KIND_PATHS["JobSet"] + "$", method="POST", action=racing_bot_creates_it)
    ref = backend.submit(request_for("JobSet"))
    assert fault.hits == 1
    assert ref.uid == racer["metadata"]["uid"]
    assert fake_kube.creations[("JobSet", NS, "sft-demo-r1")] == 1
    secret = fake_kube.get("Secret", NS, "sft-demo-r1-tokens")
    assert secret is not None and secret["metadata"]["ownerReferences"][0]["uid"] == ref.uid


def test_a_409_with_nothing_there_creates_again(fake_kube: FakeKube, backend: KubernetesBackend) -> None:
    fake_kube.inject(409, KIND_PATHS["Job"] + "$", method="POST")
    ref = backend.submit(request_for("Job"))
    assert fake_kube.creations[("Job", NS, "sft-demo-r1")] == 1
    assert ref.uid == fake_kube.get("Job", NS, "sft-demo-r1")["metadata"]["uid"]  # type: ignore[index]


def test_companion_manifests_are_applied_and_owned(fake_kube: FakeKube, backend: KubernetesBackend) -> None:
    config_map = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "sft-demo-r1-cfg"},
        "data": {"a": "1"},
    }
    request = request_for("Job")
    ref = backend.submit(request.replace(payload=KubernetesObjects([config_map, *documents(request)])))
    stored = fake_kube.get("ConfigMap", NS, "sft-demo-r1-cfg")
    assert stored is not None and stored["metadata"]["ownerReferences"][0]["uid"] == ref.uid


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (
            {"kind": "Deployment", "apiVersion": "apps/v1"},
            r"cannot submit apps/v1 Deployment .* submits batch/v1 Job",
        ),
        ({"metadata": {"name": "other-name"}}, r"none of the 1 manifests .* named 'sft-demo-r1'"),
        (
            {"metadata": {"name": "sft-demo-r1", "namespace": "prod"}},
            r"rendered for namespace 'prod'.*'team-a'",
        ),
    ],
)
def test_submit_refuses_manifests_it_cannot_place(
    fake_kube: FakeKube, backend: KubernetesBackend, change: dict[str, Any], message: str
) -> None:
    request = request_for("Job")
    manifest = documents(request)[0] | change
    with pytest.raises(BackendError, match=message):
        backend.submit(request.replace(payload=KubernetesObjects([manifest])))
    assert fake_kube.requests_for("PATCH", ".") == []


# ---------------------------------------------------------------- observe: job object states
def test_job_lifecycle_pending_running_succeeded(fake_kube: FakeKube, backend: KubernetesBackend) -> None:
    ref = backend.submit(request_for("Job"))
    assert backend.observe(ref).phase == "Pending"
    fake_kube.add_pod(NS, "sft-demo-r1-abc", {"tuneplane.dev/run": "r1"}, start_time="2025-01-01T00:01:00Z")
    fake_kube.set_status("Job", NS, "sft-demo-r1", {"startTime": "2025-01-01T00:00:30Z", "active": 1})
    running = backend.observe(ref)
    assert (running.phase, running.started_at) == ("Running", "2025-01-01T00:00:30Z")
    complete = {"type": "Complete", "status": "True", "lastTransitionTime": "2025-01-01T01:00:00Z"}
    fake_kube.set_status(
        "Job",
        NS,
        "sft-demo-r1",
        {
            "startTime": "2025-01-01T00:00:30Z",
            "completionTime": "2025-01-01T01:00:00Z",
            "conditions": [complete],
        },
    )
    done = backend.observe(ref)
    assert (done.phase, done.started_at, done.finished_at, done.exit_code) == (
        "Succeeded",
        "2025-01-01T00:00:30Z",
        "2025-01-01T01:00:00Z",
        0,
    )


def test_jobset_states_map_from_conditions_and_replicated_jobs(fake_kube: FakeKube, backend: KubernetesBackend) -> None:
    ref = backend.submit(request_for("JobSet"))
    assert backend.observe(ref).phase == "Pending"
    fake_kube.set_status("JobSet", NS, "sft-demo-r1", {"replicatedJobsStatus": [{"name": "workers", "ready": 1}]})
    assert backend.observe(ref).phase == "Running"
    fake_kube.set_status("JobSet", NS, "sft-demo-r1", {"restarts": 2, "replicatedJobsStatus": []})
    fake_kube.add_pod(NS, "w-0", {"jobset.sigs.k8s.io/jobset-name": "sft-demo-r1"}, start_time="2025-01-01T00:02:00Z")
    restarted = backend.observe(ref)  # pods without our run label are found by the controller's label
    assert (restarted.phase, restarted.started_at) == ("Running", "2025-01-01T00:02:00Z")
    assert "restarted 2 times" in restarted.message
    done = {"type": "Completed", "status": "True", "lastTransitionTime": "2025-01-01T02:00:00Z"}
    fake_kube.set_status("JobSet", NS, "sft-demo-r1", {"conditions": [done]})
    child = job_manifest("sft-demo-r1-workers-0", "r1")
    child["metadata"] |= {"namespace": NS, "labels": {"jobset.sigs.k8s.io/jobset-name": "sft-demo-r1"}}
    fake_kube.put(child | {"status": {"startTime": "2025-01-01T00:01:30Z"}})
    finished = backend.observe(ref)
    assert (finished.phase, finished.started_at, finished.finished_at, finished.exit_code) == (
        "Succeeded",
        "2025-01-01T00:01:30Z",
        "2025-01-01T02:00:00Z",
        0,
    )


@pytest.mark.parametrize(
    ("status", "phase", "reason"),
    [
        ({"jobDeploymentStatus": "Initializing"}, "Pending", "Initializing"),
        ({"jobDeploymentStatus": "Running", "jobStatus": "PENDING"}, "Pending", "Running"),
        ({"jobDeploymentStatus": "Running", "jobStatus": "RUNNING"}, "Running", ""),
        ({"jobDeploymentStatus": "Complete", "jobStatus": "SUCCEEDED"}, "Succeeded", ""),
        ({"jobDeploymentStatus": "Complete", "jobStatus": "STOPPED"}, "Cancelled", "Stopped"),
        (
            {"jobDeploymentStatus": "Failed", "reason": "DeadlineExceeded", "message": "too slow"},
            "Failed",
            "DeadlineExceeded",
        ),
        ({"jobDeploymentStatus": "ValidationFailed", "message": "bad spec"}, "Failed", "ValidationFailed"),
    ],
)
def test_rayjob_status_maps_to_phases(
    fake_kube: FakeKube, backend: KubernetesBackend, status: dict[str, Any], phase: str, reason: str
) -> None:
    ref = backend.submit(request_for("RayJob"))
    times = {"startTime": "2025-01-01T00:00:00Z", "endTime": "2025-01-01T03:00:00Z"}
    fake_kube.set_status("RayJob", NS, "sft-demo-r1", status | times)
    observed = backend.observe(ref)
    assert (observed.phase, observed.reason) == (phase, reason)
    assert observed.started_at == "2025-01-01T00:00:00Z"
    if phase == "Failed":
        assert status["message"] in observed.message


# ---------------------------------------------------------------- observe: queues and pod problems
@pytest.mark.parametrize("kind", ["Job", "JobSet", "RayJob"])
def test_a_kueue_queued_job_is_pending_with_the_queue_reason(
    fake_kube: FakeKube, backend: KubernetesBackend, kind: str
) -> None:
    ref = backend.submit(request_for(kind))
    fake_kube.set_spec(kind, NS, "sft-demo-r1", suspend=True)
    fake_kube.add_local_queue(NS, "team-a-gpus", "h200-pool")
    quota = "couldn't assign flavors to pod set main: insufficient unused quota for nvidia.com/gpu in flavor h200"
    conditions = [{"type": "QuotaReserved", "status": "False", "reason": "Pending", "message": quota}]
    fake_kube.add_workload(NS, "job-sft-demo-r1-1a2b", kind, "sft-demo-r1", conditions, queue_name="team-a-gpus")
    fake_kube.put({"apiVersion": "kueue.x-k8s.io/v1beta1", "kind": "Workload", "metadata": {"name": "unrelated"}})
    observed = backend.observe(ref)
    assert observed.phase == "Pending"
    assert observed.reason == "Queued: waiting for quota in ClusterQueue h200-pool"
    assert observed.message == quota


def test_queue_reasons_for_reserved_admitted_and_missing_queues(
    fake_kube: FakeKube, backend: KubernetesBackend
) -> None:
    ref = backend.submit(request_for("Job"))
    fake_kube.set_spec("Job", NS, "sft-demo-r1", suspend=True)
    assert backend.observe(ref).reason == "Suspended"  # no Workload yet

    fake_kube.add_workload(NS, "wl", "Job", "sft-demo-r1", [], queue_name="nope")
    missing = backend.observe(ref)
    assert missing.reason == "Queued: LocalQueue nope does not exist"
    assert "kueue.x-k8s.io/queue-name" in missing.message

    fake_kube.remove("Workload", NS, "wl")
    reserved = [
        {"type": "QuotaReserved", "status": "True"},
        {"type": "Admitted", "status": "False", "message": "The workload has not all checks ready"},
    ]
    fake_kube.add_workload(NS, "wl", "Job", "sft-demo-r1", reserved, admission={"clusterQueue": "cq"})
    observed = backend.observe(ref)
    assert observed.reason == "Queued: quota reserved in ClusterQueue cq, waiting for admission checks"
    assert observed.message == "The workload has not all checks ready"


def test_image_pull_backoff_names_the_image(fake_kube: FakeKube, backend: KubernetesBackend) -> None:
    ref = backend.submit(request_for("Job"))
    waiting = {"waiting": {"reason": "ImagePullBackOff", "message": 'Back-off pulling image "ghcr.io/acme/trian:1"'}}
    status = {"name": "trainer", "image": "ghcr.io/acme/trian:1", "state": waiting}
    fake_kube.add_pod(NS, "sft-demo-r1-x", {"tuneplane.dev/run": "r1"}, "Pending", [status])
    observed = backend.observe(ref)
    assert (observed.phase, observed.reason) == ("Pending", "ImagePullBackOff")
    assert "cannot pull image 'ghcr.io/acme/trian:1'" in observed.message
    assert "name and tag exist" in observed.message


def test_crash_loop_unschedulable_and_config_errors_are_explained(
    fake_kube: FakeKube, backend: KubernetesBackend
) -> None:
    ref = backend.submit(request_for("Job"))
    unschedulable = {
        "type": "PodScheduled",
        "status": "False",
        "reason": "Unschedulable",
        "message": "0/4 nodes",
    }
    pending = [{"name": "trainer", "state": {"waiting": {"reason": "ContainerCreating"}}}]
    fake_kube.add_pod(NS, "p", {"tuneplane.dev/run": "r1"}, "Pending", pending, conditions=[unschedulable])
    assert backend.observe(ref).message == "pod team-a/p cannot be scheduled: 0/4 nodes"

    fake_kube.remove("Pod", NS, "p")
    crash = {
        "name": "trainer",
        "restartCount": 4,
        "state": {"waiting": {"reason": "CrashLoopBackOff"}},
        "lastState": terminated(2),
    }
    fake_kube.add_pod(NS, "p", {"tuneplane.dev/run": "r1"}, "Running", [crash])
    observed = backend.observe(ref)
    assert (observed.phase, observed.reason) == ("Running", "CrashLoopBackOff")
    assert "keeps crashing (restarted 4 times; last exit code 2 (Error))" in observed.message

    fake_kube.remove("Pod", NS, "p")
    config = {
        "name": "trainer",
        "state": {"waiting": {"reason": "CreateContainerConfigError", "message": "secret x"}},
    }
    fake_kube.add_pod(NS, "p", {"tuneplane.dev/run": "r1"}, "Pending", [config])
    assert "Secret or ConfigMap it references may be missing" in backend.observe(ref).message


@pytest.mark.parametrize("kind", ["Job", "JobSet", "RayJob"])
def test_a_failed_pod_gives_exit_code_and_last_log_lines(
    fake_kube: FakeKube, backend: KubernetesBackend, kind: str
) -> None:
    ref = backend.submit(request_for(kind))
    lines = "".join(f"step {i}\n" for i in range(40)) + f"token={TOKEN}\nRuntimeError: CUDA out of memory\n"
    status = {"name": "trainer", "state": terminated(1)}
    fake_kube.add_pod(NS, "sft-demo-r1-0", {"tuneplane.dev/run": "r1"}, "Failed", [status], lines)
    set_failed(fake_kube, kind)
    observed = backend.observe(ref)
    assert (observed.phase, observed.exit_code) == ("Failed", 1)
    assert "container 'trainer' in pod team-a/sft-demo-r1-0 exited with code 1 (Error)" in observed.message
    assert "RuntimeError: CUDA out of memory" in observed.message
    assert "step 22" in observed.message and "step 21\n" not in observed.message  # the last 20 lines only
    assert TOKEN not in observed.message and "token=[redacted]" in observed.message


def test_the_first_failure_wins_and_oom_is_named(fake_kube: FakeKube, backend: KubernetesBackend) -> None:
    ref = backend.submit(request_for("JobSet"))
    labels = {"tuneplane.dev/run": "r1"}
    later = {"name": "trainer", "state": terminated(1, at="2025-01-01T00:20:00Z")}
    fake_kube.add_pod(NS, "w-1", labels, "Failed", [later], "peer gone\n")
    first = {"name": "trainer", "state": terminated(137, "OOMKilled", at="2025-01-01T00:10:00Z")}
    fake_kube.add_pod(NS, "w-0", labels, "Failed", [first], "allocating\n")
    set_failed(fake_kube, "JobSet")
    observed = backend.observe(ref)
    assert (observed.exit_code, observed.reason) == (137, "OOMKilled")
    assert "pod team-a/w-0 exited with code 137 (OOMKilled); it ran out of memory" in observed.message
    assert "allocating" in observed.message


def test_a_failed_init_container_is_the_culprit(fake_kube: FakeKube, backend: KubernetesBackend) -> None:
    ref = backend.submit(request_for("Job"))
    clone = {"name": "clone", "state": terminated(128)}
    main = {"name": "trainer", "state": {"waiting": {"reason": "PodInitializing"}}}
    logs = {"clone": "fatal: could not read Username for 'https://github.com'\n"}
    fake_kube.add_pod(NS, "p", {"tuneplane.dev/run": "r1"}, "Failed", [main], logs, init_container_statuses=[clone])
    set_failed(fake_kube, "Job")
    observed = backend.observe(ref)
    assert observed.exit_code == 128
    assert "container 'clone' in pod team-a/p exited with code 128" in observed.message
    assert "could not read Username" in observed.message


# ---------------------------------------------------------------- observe: deletion
def test_a_deleted_object_is_failed_unless_we_cancelled_it(fake_kube: FakeKube, backend: KubernetesBackend) -> None:
    ref = backend.submit(request_for("Job"))
    fake_kube.remove("Job", NS, "sft-demo-r1")
    gone = backend.observe(ref)
    assert (gone.phase, gone.reason) == ("Failed", "Disappeared")
    assert gone.message.startswith("job object disappeared: Job team-a/sft-demo-r1")

    ours = backend.submit(request_for("Job", name="sft-demo-r2", run="r2"))
    backend.cancel(ours)
    assert backend.observe(ours).phase == "Cancelled"


def test_a_lingering_cancel_is_recognised_by_a_fresh_backend(fake_kube: FakeKube, backend: KubernetesBackend) -> None:
    fake_kube.linger_deletes = True
    ref = backend.submit(request_for("RayJob"))
    backend.cancel(ref)
    other_process = KubernetesBackend(NS, api_client=bot_client(fake_kube, NS), retry=FAST)
    assert other_process.observe(ref).phase == "Cancelled"
    fake_kube.finish_deletion("RayJob", NS, "sft-demo-r1")
    assert other_process.observe(ref).phase == "Failed"  # it cannot know any more; the bot's run request can


def test_a_recreated_object_with_another_uid_is_not_ours(fake_kube: FakeKube, backend: KubernetesBackend) -> None:
    ref = backend.submit(request_for("Job"))
    fake_kube.remove("Job", NS, "sft-demo-r1")
    fake_kube.put(job_manifest("sft-demo-r1", "r1") | {"metadata": {"name": "sft-demo-r1", "namespace": NS}})
    observed = backend.observe(ref)
    assert observed.phase == "Failed" and "replaced by another object" in observed.message


# ---------------------------------------------------------------- logs
def test_logs_tail_from_the_leader_pod(fake_kube: FakeKube, backend: KubernetesBackend) -> None:
    ref = backend.submit(request_for("JobSet"))
    labels = {"tuneplane.dev/run": "r1", "jobset.sigs.k8s.io/replicatedjob-name": "workers"}
    fake_kube.add_pod(NS, "w-1", labels | {"batch.kubernetes.io/job-completion-index": "1"}, log_text="worker 1\n")
    fake_kube.add_pod(NS, "w-0", labels | {"batch.kubernetes.io/job-completion-index": "0"}, log_text="a\nb\nc\n")
    assert list(backend.logs(ref)) == ["a", "b", "c"]
    assert list(backend.logs(ref, tail=2)) == ["b", "c"]


def test_rayjob_logs_come_from_the_submitter_pod(fake_kube: FakeKube, backend: KubernetesBackend) -> None:
    ref = backend.submit(request_for("RayJob"))
    fake_kube.add_pod(NS, "head", {"tuneplane.dev/run": "r1", "ray.io/node-type": "head"}, log_text="raylet\n")
    submitter = {"tuneplane.dev/run": "r1", "batch.kubernetes.io/job-name": "sft-demo-r1"}
    fake_kube.add_pod(NS, "sft-demo-r1-submit", submitter, log_text="driver: epoch 1\n")
    assert list(backend.logs(ref)) == ["driver: epoch 1"]


def test_follow_streams_until_the_container_ends(fake_kube: FakeKube, backend: KubernetesBackend) -> None:
    ref = backend.submit(request_for("Job"))
    fake_kube.add_pod(NS, "p", {"tuneplane.dev/run": "r1"}, log_text="one\n")
    stream = backend.logs(ref, follow=True)
    assert next(stream) == "one"
    fake_kube.append_log(NS, "p", "two\nthr")
    assert next(stream) == "two"
    fake_kube.append_log(NS, "p", "ee\n")
    assert next(stream) == "three"
    finisher = threading.Timer(0.05, fake_kube.set_pod_phase, (NS, "p", "Succeeded"))
    finisher.start()
    assert list(stream) == []
    finisher.join()


def test_logs_without_pods_say_so(fake_kube: FakeKube, backend: KubernetesBackend) -> None:
    ref = backend.submit(request_for("Job"))
    with pytest.raises(BackendError, match="Job team-a/sft-demo-r1 has no pods yet"):
        backend.logs(ref)
    fake_kube.remove("Job", NS, "sft-demo-r1")
    with pytest.raises(BackendError, match="does not exist"):
        backend.logs(ref)


# ---------------------------------------------------------------- cancel
@pytest.mark.parametrize("policy", ["Foreground", "Background"])
def test_cancel_deletes_with_propagation_and_is_idempotent(fake_kube: FakeKube, kube_client: Any, policy: str) -> None:
    backend = KubernetesBackend(NS, api_client=kube_client, retry=FAST, propagation_policy=policy)
    ref = backend.submit(request_for("JobSet"))
    backend.cancel(ref)
    backend.cancel(ref)
    assert fake_kube.deletions == [
        {"kind": "JobSet", "namespace": NS, "name": "sft-demo-r1", "propagationPolicy": policy}
    ]
    assert fake_kube.get("JobSet", NS, "sft-demo-r1") is None
    assert fake_kube.get("Secret", NS, "sft-demo-r1-tokens") is None  # garbage-collected with its owner


# ---------------------------------------------------------------- faults and retries
def test_latency_within_the_timeout_succeeds(fake_kube: FakeKube, backend: KubernetesBackend) -> None:
    fault = fake_kube.inject("latency", KIND_PATHS["Job"], times=2, seconds=0.1)
    ref = backend.submit(request_for("Job"))
    backend.observe(ref)
    assert fault.hits == 2  # the create and the read
    assert fake_kube.creations[("Job", NS, "sft-demo-r1")] == 1


def test_latency_past_the_timeout_is_retried(fake_kube: FakeKube, kube_client: Any) -> None:
    backend = KubernetesBackend(NS, api_client=kube_client, retry=ApiRetry(backoff_base=0.001, timeout=1.0))
    # The first POST times out but the server still creates the Job: the retry's 409 adopts it.
    fault = fake_kube.inject("latency", KIND_PATHS["Job"] + "$", method="POST", seconds=2.5)
    ref = backend.submit(request_for("Job"))
    assert fault.hits == 1
    assert fake_kube.creations[("Job", NS, "sft-demo-r1")] == 1  # the late create and the retry are one object
    assert ref.uid == fake_kube.get("Job", NS, "sft-demo-r1")["metadata"]["uid"]  # type: ignore[index]


def test_latency_that_never_ends_gives_a_clear_error(fake_kube: FakeKube, kube_client: Any) -> None:
    retry = ApiRetry(attempts=2, backoff_base=0.001, timeout=1.0)
    backend = KubernetesBackend(NS, api_client=kube_client, retry=retry)
    fake_kube.inject("latency", KIND_PATHS["JobSet"], times=10, seconds=2.5)
    with pytest.raises(BackendError) as err:
        backend.submit(request_for("JobSet"))
    message = str(err.value)
    assert "could not create JobSet team-a/sft-demo-r1: no answer within the 1 s timeout" in message
    assert f"POST {KIND_PATHS['JobSet']} on {fake_kube.url}, 2 attempts" in message
    assert "Check network access" in message


@pytest.mark.parametrize("code", [500, 502, 503, 504, 429])
def test_transient_server_errors_are_retried(fake_kube: FakeKube, kube_client: Any, code: int) -> None:
    sleeps = Sleeps()
    backend = KubernetesBackend(NS, api_client=kube_client, retry=FAST, sleep=sleeps)
    fault = fake_kube.inject(code, KIND_PATHS["RayJob"], times=3)
    ref = backend.submit(request_for("RayJob"))
    assert fault.hits == 3 and len(sleeps) == 3
    assert fake_kube.creations[("RayJob", NS, "sft-demo-r1")] == 1
    assert ref.uid


def test_429_retry_after_is_honoured(fake_kube: FakeKube, kube_client: Any) -> None:
    sleeps = Sleeps()
    retry = ApiRetry(backoff_base=0.001, max_retry_after=30)
    backend = KubernetesBackend(NS, api_client=kube_client, retry=retry, sleep=sleeps)
    fake_kube.inject(429, KIND_PATHS["Job"], times=2, retry_after=7)
    fake_kube.inject(429, "/secrets/", retry_after=90)
    backend.submit(request_for("Job"))
    assert sleeps == [7.0, 7.0, 30.0]  # as asked, and capped where the server asks too much


def test_persistent_500_names_the_object_and_the_status(fake_kube: FakeKube, backend: KubernetesBackend) -> None:
    fault = fake_kube.inject(500, KIND_PATHS["Job"] + "$", method="POST", times=100)
    with pytest.raises(BackendError) as err:
        backend.submit(request_for("Job"))
    message = str(err.value)
    assert fault.hits == FAST.attempts
    assert message.startswith("could not create Job team-a/sft-demo-r1: the API server answered 500 Internal Server")
    assert "injected fault 500 InternalError" in message  # what the server said
    assert f"POST {KIND_PATHS['Job']} on {fake_kube.url}, 4 attempts" in message
    assert "kubectl get --raw /readyz" in message


def test_a_dropped_connection_is_retried(fake_kube: FakeKube, backend: KubernetesBackend) -> None:
    apply = fake_kube.inject("drop", KIND_PATHS["JobSet"], method="POST")
    secret = fake_kube.inject("drop", "/secrets/", method="PATCH")
    listing = fake_kube.inject("drop", "/pods$", method="GET")
    ref = backend.submit(request_for("JobSet"))
    assert backend.observe(ref).phase == "Pending"
    assert (apply.hits, secret.hits, listing.hits) == (1, 1, 1)
    assert fake_kube.creations[("JobSet", NS, "sft-demo-r1")] == 1


def test_errors_a_retry_cannot_fix_fail_at_once(fake_kube: FakeKube, backend: KubernetesBackend) -> None:
    forbidden = fake_kube.inject(403, KIND_PATHS["JobSet"], method="POST", reason="Forbidden")
    with pytest.raises(
        BackendError, match=r"403 Forbidden.*kubectl auth can-i create jobsets.jobset.x-k8s.io -n team-a"
    ):
        backend.submit(request_for("JobSet"))
    assert forbidden.hits == 1


def test_an_admission_webhook_refusal_is_not_called_an_rbac_problem(
    fake_kube: FakeKube, backend: KubernetesBackend
) -> None:
    fake_kube.webhooks.append(
        lambda kind, obj: "policy.example.com: images must come from the internal registry" if kind == "Job" else None
    )
    with pytest.raises(BackendError) as err:
        backend.submit(request_for("Job"))
    message = str(err.value)
    assert 'admission webhook "policy.example.com" denied the request: images must come from' in message
    assert "kubectl auth can-i" not in message
    assert "admission webhook of the cluster refused the object" in message
    assert fake_kube.get("Job", NS, "sft-demo-r1") is None


def test_a_missing_crd_is_named(fake_kube: FakeKube, backend: KubernetesBackend) -> None:
    fake_kube.inject(404, KIND_PATHS["RayJob"], times=100, reason="NotFound")
    with pytest.raises(BackendError, match=r"Is the RayJob CRD installed\? .*kubectl get crd rayjobs.ray.io"):
        backend.submit(request_for("RayJob"))


def test_secret_values_never_reach_messages_or_logs(
    fake_kube: FakeKube, backend: KubernetesBackend, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    fake_kube.inject(500, "/secrets/", times=100)
    with pytest.raises(BackendError) as err:
        backend.submit(request_for("Job"))
    assert "could not apply Secret team-a/sft-demo-r1-tokens" in str(err.value)
    assert TOKEN not in str(err.value)
    assert caplog.records and all(TOKEN not in r.getMessage() for r in caplog.records)


def test_a_secret_cut_short_by_a_length_limit_is_redacted_too() -> None:
    from tuneplane.backends.kubernetes.client import MESSAGE_LIMIT, clip, redact_text

    secret = hashlib.sha256(b"job token").hexdigest()
    clipped = clip("x" * (MESSAGE_LIMIT - 50) + f"token={secret} and more")  # the limit falls inside the value
    assert secret[:20] in clipped and secret not in clipped
    tail = f"{secret[40:]}\nstep 2 failed"  # a log tail that keeps the end begins inside the value
    line = f"token={secret}"[:30]  # a line cut to its first characters
    for text in (clipped, tail, line):
        redacted = redact_text(text, [secret])
        assert "[redacted]" in redacted and secret[:8] not in redacted and secret[-8:] not in redacted
    inside = f"step {secret[:8]} done"
    assert redact_text(inside, [secret]) == inside  # a piece within a line is no cut value


def test_retry_delays_are_capped_jittered_and_growing() -> None:
    policy = ApiRetry(backoff_base=1.0, backoff_cap=8.0, max_retry_after=20)
    rng = random.Random(1)
    for attempt, step in enumerate([1, 2, 4, 8, 8, 8]):
        delays = {policy.delay(attempt, None, rng) for _ in range(50)}
        assert all(step / 2 <= d <= step for d in delays)
        assert len(delays) > 1  # jittered, so bots that failed together do not retry together
    assert policy.delay(0, 5.0, rng) == 5.0
    assert policy.delay(0, 500.0, rng) == 20.0


# ---------------------------------------------------------------- configuration
def test_a_kubeconfig_file_reaches_the_cluster_with_its_credentials(fake_kube: FakeKube, tmp_path: Path) -> None:
    kubeconfig = tmp_path / "config"
    kubeconfig.write_text(
        textwrap.dedent(
            f"""\
            apiVersion: v1
            kind: Config
            clusters: [{{name: fake, cluster: {{server: "{fake_kube.url}"}}}}]
            users: [{{name: bot, user: {{token: kubeconfig-token}}}}]
            contexts: [{{name: ci, context: {{cluster: fake, user: bot, namespace: {NS}}}}}]
            current-context: elsewhere
            """
        )
    )
    backend = KubernetesBackend(NS, kubeconfig=str(kubeconfig), context="ci", retry=FAST)
    try:
        ref = backend.submit(request_for("Job"))
    finally:
        backend.close()
    assert ref.uid
    assert all(r.headers.get("authorization") == "Bearer kubeconfig-token" for r in fake_kube.requests)


def test_bad_configuration_is_explained(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    missing = tmp_path / "nope"
    with pytest.raises(BackendError, match=rf"could not load {missing}: .*names the context you want"):
        KubernetesBackend(NS, kubeconfig=str(missing))
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    with pytest.raises(BackendError, match="in-cluster .* only works inside a pod"):
        KubernetesBackend(NS, in_cluster=True)


def test_importing_the_module_does_not_load_the_client() -> None:
    code = "import sys, tuneplane.backends.kubernetes.backend; sys.exit('kubernetes' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], check=False).returncode == 0


# ── raw objects are typed where the backend reads them ──────────────────────────────────────────────


def test_every_raw_object_the_backend_reads_has_a_typeddict() -> None:
    """What the API server sends is read through `types.py`'s TypedDicts, which mypy --strict checks:
    every `rest.get`/`rest.list` outside the client is cast to one at once, and the types hold no `Any`."""
    import ast

    import tuneplane.backends.kubernetes.types as types_module

    package = Path(types_module.__file__).parent
    types_tree = ast.parse(Path(types_module.__file__).read_text(encoding="utf-8"))
    declared = {node.name for node in types_tree.body if isinstance(node, ast.ClassDef)}
    assert not [n for n in ast.walk(types_tree) if isinstance(n, ast.Name) and n.id == "Any"]
    untyped = []
    for path in sorted(package.glob("*.py")):
        if path.name in ("client.py", "types.py"):
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        parents = {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}
        for node in ast.walk(tree):
            if not (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr in ("get", "list")
                and isinstance(node.func.value, (ast.Name, ast.Attribute))
                and ast.unparse(node.func.value) in ("rest", "self._rest")
            ):
                continue
            holder = parents.get(node)
            if isinstance(holder, ast.BoolOp):
                holder = parents.get(holder)
            typed = (
                isinstance(holder, ast.Call)
                and ast.unparse(holder.func) == "cast"
                and {n.id for n in ast.walk(holder.args[0]) if isinstance(n, ast.Name)} & declared
            )
            if isinstance(holder, ast.comprehension):  # `[cast(T, w) for w in rest.list(...)]`
                comp = parents[holder]
                elt = getattr(comp, "elt", None)
                typed = (
                    isinstance(elt, ast.Call)
                    and ast.unparse(elt.func) == "cast"
                    and {n.id for n in ast.walk(elt.args[0]) if isinstance(n, ast.Name)} & declared
                )
            if not typed:
                untyped.append(f"{path.name}:{node.lineno}: {ast.unparse(node)}")
    assert not untyped, untyped
