"""A run whose pods the API server refuses to create: the job object was accepted, but its controller's
creates are not (a cluster's policy webhook, a validation the object's own check did not reach). On a
cluster such a run waits with no pod and no word of why, holding its Kueue quota; the controller's
Warning Event is the only trace. The backend says it, and ends the attempt after the grace period.
Driven through the real `kubernetes` client against the twin, as the bot's ServiceAccount."""

from __future__ import annotations

import random
from typing import TYPE_CHECKING, Any

import pytest
from support.render import CLUSTER_SETTINGS, build, make_lab, request
from twin_rbac import bot_client

from tuneplane.backends.base import BackendRef, SubmitRequest
from tuneplane.backends.kubernetes import ApiRetry, KubernetesBackend
from tuneplane.backends.kubernetes.payload import KubernetesObjects

if TYPE_CHECKING:
    from fakekube import FakeKube
    from twin_controllers import Cluster

pytest_plugins = ("fakekube",)

NS = "ml-team"
FAST = ApiRetry(attempts=2, backoff_base=0.001, backoff_cap=0.005, timeout=5.0)
POLICY = "policy.example.com: pods must carry the label cost-center"
GPU_TAINT = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Any:
    return make_lab(
        tmp_path_factory.mktemp("refused") / "lab",
        {"trl-sft-exp": "trl/sft", "verl-grpo-exp": "verl/grpo"},
        settings=CLUSTER_SETTINGS,
    )


@pytest.fixture
def twin(cluster: Cluster) -> Cluster:
    cluster.add_queue(NS, "team-a", "h200-pool", gpu=64, cpu="1000", memory="16Ti")
    for name, data in (("registry-creds", {".dockerconfigjson": "e30="}), ("lab-git", {"password": "cGFzcw=="})):
        cluster.kube.put(
            {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": name, "namespace": NS}, "data": data}
        )
    cluster.kube.webhooks.append(_policy)
    return cluster


def _policy(kind: str, obj: dict[str, Any]) -> str | None:
    """A cluster's policy engine: every pod needs a label the lab's pods lack."""
    return POLICY if kind == "Pod" and "cost-center" not in (obj["metadata"].get("labels") or {}) else None


@pytest.fixture
def backend(fake_kube: FakeKube) -> KubernetesBackend:
    return KubernetesBackend(NS, api_client=bot_client(fake_kube, NS), retry=FAST, rng=random.Random(5))


def submit(backend: KubernetesBackend, lab: Any, experiment: str, profile: str) -> BackendRef:
    spec, _, docs = build(lab, request(experiment, profile=profile))
    return backend.submit(
        SubmitRequest(
            run_id=spec.metadata.run_id,
            experiment=experiment,
            namespace=NS,
            object_name=spec.metadata.name,
            payload=KubernetesObjects(docs),
            secret_data={"job-token": "tp-token-1234"},
        )
    )


@pytest.mark.parametrize(
    ("experiment", "profile", "event"),
    [
        ("trl-sft-exp", "h200", "FailedCreate"),
        ("trl-sft-exp", "h200:16", "FailedCreate"),
        ("verl-grpo-exp", "h200", "FailedToCreateHeadPod"),
    ],
    ids=["Job", "JobSet", "RayJob"],
)
def test_a_run_whose_pods_are_refused_says_why_then_ends_config_error_and_gives_its_quota_back(
    twin: Cluster, backend: KubernetesBackend, lab: Any, experiment: str, profile: str, event: str
) -> None:
    ref = submit(backend, lab, experiment, profile)
    assert [p for p in twin.pods(NS) if p["metadata"]["labels"].get("ray.io/node-type") != "submitter"] == []
    seen = backend.observe(ref)
    assert (seen.phase, seen.reason) == ("Pending", event), seen
    assert 'admission webhook "policy.example.com" denied the request' in seen.message
    twin.advance(9 * 60)  # within the grace period: a webhook that was briefly down may let the pods through
    assert backend.observe(ref).phase == "Pending"
    twin.advance(2 * 60)
    seen = backend.observe(ref)
    assert (seen.phase, seen.reason) == ("Failed", "ConfigError"), seen
    assert [a.reason for a in seen.attempts] == ["ConfigError"]
    assert "pods must carry the label cost-center" in seen.attempts[-1].message
    assert twin.kube.list("Workload", NS) == [], "the run still holds its Kueue quota"


def test_a_jobset_whose_child_jobs_core_validation_refuses_says_the_api_servers_words(
    cluster: Cluster, backend: KubernetesBackend, lab: Any
) -> None:
    """A value `tp validate` would refuse, had it reached a JobSet's pod template another way: the JobSet
    is accepted (its CRD checks no toleration rule), its child Jobs are not."""
    cluster.add_queue(NS, "team-a", "h200-pool", gpu=64, cpu="1000", memory="16Ti")
    for name, data in (("registry-creds", {".dockerconfigjson": "e30="}), ("lab-git", {"password": "cGFzcw=="})):
        cluster.kube.put(
            {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": name, "namespace": NS}, "data": data}
        )
    spec, _, docs = build(lab, request("trl-sft-exp", profile="h200:16"))
    pod = docs[0]["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]
    pod["tolerations"] = [{"key": "", "operator": "Equal", "effect": "NoSchedule"}]
    ref = backend.submit(
        SubmitRequest(
            run_id=spec.metadata.run_id,
            experiment="trl-sft-exp",
            namespace=NS,
            object_name=spec.metadata.name,
            payload=KubernetesObjects(docs),
            secret_data={"job-token": "tp-token-1234"},
        )
    )
    seen = backend.observe(ref)
    assert (seen.phase, seen.reason) == ("Pending", "JobCreationFailed"), seen
    assert 'tolerations[0].operator: Invalid value: "Equal": operator must be Exists when `key` is empty' in (
        seen.message
    )
    cluster.advance(11 * 60)
    ended = backend.observe(ref)
    assert (ended.phase, ended.reason) == ("Failed", "ConfigError"), ended
    assert "JobCreationFailed" in ended.attempts[-1].message


def test_a_refusal_long_past_never_stops_a_job_whose_pods_ran_and_succeeded(
    twin: Cluster, backend: KubernetesBackend, lab: Any
) -> None:
    """The webhook was down a moment when the Job started: its Event stays (an hour on a cluster), and
    once the pods succeeded nothing runs or waits while the Job controller finishes the Job."""
    ref = submit(backend, lab, "trl-sft-exp", "h200")
    assert backend.observe(ref).reason == "FailedCreate"
    twin.kube.webhooks.remove(_policy)
    twin.advance(60)  # the controller tries again, and its pod runs
    (pod,) = twin.pods(NS)
    twin.advance(15 * 60)
    assert backend.observe(ref).phase == "Running"
    twin.hold_jobs()
    twin.exit_pod(NS, pod["metadata"]["name"], 0)
    twin.step_jobs()  # SuccessCriteriaMet: nothing active or ready, no Complete yet
    seen = backend.observe(ref)
    assert seen.phase == "Running", seen
    assert twin.kube.get("Job", NS, ref.name) is not None, "the Job was deleted as refused"
    twin.release_jobs()
    assert backend.observe(ref).phase == "Succeeded"


def test_a_refusal_long_past_never_stops_a_job_whose_replacement_pod_waits(
    twin: Cluster, backend: KubernetesBackend, lab: Any
) -> None:
    """The same Event, and the run's pod drained later: its replacement waits for a node, which is no
    refused create (the controller's creates went through after the Event)."""
    ref = submit(backend, lab, "trl-sft-exp", "h200")
    assert backend.observe(ref).reason == "FailedCreate"
    twin.kube.webhooks.remove(_policy)
    h200 = {"nvidia.com/gpu.product": "NVIDIA-H200"}
    twin.add_node("gpu-1", labels=h200, taints=[dict(GPU_TAINT)], gpu=8, cpu="96", memory="1Ti")
    twin.advance(15 * 60)
    assert backend.observe(ref).phase == "Running"
    twin.drain("gpu-1")
    seen = backend.observe(ref)
    assert (seen.phase, [a.reason for a in seen.attempts]) == ("Pending", ["Evicted", None]), seen
    assert twin.kube.get("Job", NS, ref.name) is not None, "the Job was deleted as refused"
