"""Attempts on Kubernetes, told truthfully: a drain, a scheduler's or Kueue's preemption, a deadline, an
error, each ends an attempt with its reason, and the engine's own restarts stay within the run's retry
policy. Rendered runs of a real lab, submitted by the backend to the cluster twin with nodes and queues.
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import pytest
from support.render import CLUSTER_SETTINGS, build, make_lab, pod_templates, request
from twin_rbac import bot_client

from tuneplane.backends.base import BackendRef, Observation, SubmitRequest
from tuneplane.backends.kubernetes import ApiRetry, KubernetesBackend
from tuneplane.backends.kubernetes.backoff import decided_failure
from tuneplane.backends.kubernetes.payload import KubernetesObjects
from tuneplane.backends.kubernetes.types import JobObject, Pod
from tuneplane.runtime.attempts import TERMINATION_LIMIT, encode

if TYPE_CHECKING:
    from fakekube import FakeKube
    from twin_controllers import Cluster

pytest_plugins = ("fakekube",)

NS = "ml-team"
FAST = ApiRetry(attempts=2, backoff_base=0.001, backoff_cap=0.005, timeout=5.0)
H200 = {"nvidia.com/gpu.product": "NVIDIA-H200"}
GPU_TAINT = [{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}]


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Any:
    return make_lab(tmp_path_factory.mktemp("attempts") / "lab", {"trl-sft-exp": "trl/sft"}, settings=CLUSTER_SETTINGS)


@pytest.fixture
def twin(cluster: Cluster) -> Cluster:
    cluster.add_queue(NS, "team-a", "h200-pool", gpu=64, cpu="1000", memory="16Ti")
    for name, data in (("registry-creds", {".dockerconfigjson": "e30="}), ("lab-git", {"password": "cGFzcw=="})):
        cluster.kube.put(
            {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": name, "namespace": NS}, "data": data}
        )
    return cluster


@pytest.fixture
def backend(fake_kube: FakeKube) -> KubernetesBackend:
    return KubernetesBackend(NS, api_client=bot_client(fake_kube, NS), retry=FAST, rng=random.Random(5))


def add_gpu_nodes(twin: Cluster, *names: str) -> None:
    for name in names:
        twin.add_node(name, labels=H200, taints=list(GPU_TAINT), gpu=8, cpu="96", memory="1Ti")


def submit(backend: KubernetesBackend, lab: Any, profile: str = "h200", **fields: Any) -> BackendRef:
    spec, _, docs = build(lab, request("trl-sft-exp", profile=profile, **fields))
    return backend.submit(
        SubmitRequest(
            run_id=spec.metadata.run_id,
            experiment="trl-sft-exp",
            namespace=NS,
            object_name=spec.metadata.name,
            payload=KubernetesObjects(docs),
            secret_data={"job-token": "tp-token-1234"},
        )
    )


def running(twin: Cluster) -> list[dict[str, Any]]:
    return [
        p for p in twin.pods(NS) if p["status"].get("phase") == "Running" and not p["metadata"].get("deletionTimestamp")
    ]


def record(
    node: str, code: int, signal: int | None = None, error: str = "", tail: tuple[str, ...] = (), **more: str
) -> str:
    """The launcher's end record, as it writes it to the trainer's termination message."""
    fields: dict[str, Any] = {
        "attempt": 1,
        "node_rank": 0,
        "node": node,
        "exit_code": code,
        "error": error,
        "log_tail": list(tail),
        "started_at": "2026-01-01T00:00:00Z",
        "finished_at": "2026-01-01T01:00:00Z",
    }
    if signal is not None:
        fields["signal"] = signal
    return encode({**fields, **more}, limit=TERMINATION_LIMIT)


def reasons(seen: Observation) -> list[str | None]:
    return [a.reason for a in seen.attempts]


# ── a drain: Evicted, and the replacement runs ─────────────────────────────────────────────────
def test_a_drained_pod_is_an_attempt_that_ended_evicted_while_its_replacement_runs(
    twin: Cluster, backend: KubernetesBackend, lab: Any
) -> None:
    add_gpu_nodes(twin, "gpu-1", "gpu-2")
    ref = submit(backend, lab)
    (first,) = running(twin)
    node = first["spec"]["nodeName"]
    twin.drain(node, record=record(node, 143, 15, tail=("step 40 loss 1.25",)))
    seen = backend.observe(ref)
    assert seen.phase == "Running", seen
    ended, current = seen.attempts
    assert (ended.number, ended.reason, ended.exit_code, ended.signal) == (1, "Evicted", 143, 15)
    assert ended.failed_node == node and node in ended.where
    assert ended.log_tail == ("step 40 loss 1.25",) and ended.finished_at
    (replacement,) = running(twin)
    assert (current.number, current.reason) == (2, None)
    assert current.where == (replacement["spec"]["nodeName"],) and replacement["spec"]["nodeName"] != node


def test_the_evicted_attempt_stays_after_its_pod_is_gone(twin: Cluster, backend: KubernetesBackend, lab: Any) -> None:
    add_gpu_nodes(twin, "gpu-1", "gpu-2")
    ref = submit(backend, lab)
    (first,) = running(twin)
    twin.drain(first["spec"]["nodeName"])
    assert reasons(backend.observe(ref)) == ["Evicted", None]
    twin.advance(120)  # the Job controller accounted for the pod and its object is gone
    assert first["metadata"]["name"] not in {p["metadata"]["name"] for p in twin.pods(NS)}
    seen = backend.observe(ref)
    assert reasons(seen) == ["Evicted", None] and seen.phase == "Running"


def test_a_disruption_nobody_saw_is_still_an_attempt(twin: Cluster, backend: KubernetesBackend, lab: Any) -> None:
    add_gpu_nodes(twin, "gpu-1", "gpu-2")
    ref = submit(backend, lab)
    (first,) = running(twin)
    twin.drain(first["spec"]["nodeName"])
    twin.advance(120)  # gone before any observation: the Job's failed count still holds it
    seen = backend.observe(ref)
    assert reasons(seen) == ["Lost", None]
    assert "deleted" in seen.attempts[0].message


# ── the scheduler preempts for a higher-priority pod ───────────────────────────────────────────
def test_preemption_by_the_scheduler_ends_an_attempt_preempted(
    twin: Cluster, backend: KubernetesBackend, lab: Any
) -> None:
    add_gpu_nodes(twin, "gpu-1")
    ref = submit(backend, lab)
    (ours,) = running(twin)
    twin.kube.put(
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "urgent", "namespace": NS},
            "spec": {
                "priority": 1000,
                "nodeSelector": H200,
                "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists"}],
                "containers": [{"name": "c", "image": "x", "resources": {"limits": {"nvidia.com/gpu": "8"}}}],
            },
            "status": {"phase": "Pending"},
        }
    )
    twin.kube.settle()
    gone = twin.kube.get("Pod", NS, ours["metadata"]["name"])
    assert gone is not None and any(
        c["type"] == "DisruptionTarget" and c["reason"] == "PreemptionByScheduler" for c in gone["status"]["conditions"]
    )
    seen = backend.observe(ref)
    assert seen.phase == "Pending" and seen.reason == "Unschedulable", seen
    assert reasons(seen) == ["Preempted", None]


# ── Kueue preempts for a higher-priority workload ──────────────────────────────────────────────
def test_kueue_preemption_ends_an_attempt_preempted_and_the_run_waits_then_runs_again(
    twin: Cluster, backend: KubernetesBackend, lab: Any
) -> None:
    twin.add_queue(NS, "team-a", "h200-pool", gpu=8, cpu="96", memory="1Ti")
    twin.cq_preemption.add("h200-pool")
    twin.priority_classes["urgent"] = 1000
    ref = submit(backend, lab)
    assert running(twin) and backend.observe(ref).attempts[0].reason is None
    urgent = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": "urgent",
            "namespace": NS,
            "labels": {"kueue.x-k8s.io/queue-name": "team-a", "kueue.x-k8s.io/priority-class": "urgent"},
        },
        "spec": {
            "template": {
                "spec": {
                    "restartPolicy": "Never",
                    "containers": [{"name": "c", "image": "x", "resources": {"limits": {"nvidia.com/gpu": "8"}}}],
                }
            }
        },
    }
    twin.kube.put(urgent)
    twin.kube.settle()
    seen = backend.observe(ref)
    assert seen.phase == "Pending" and seen.reason.startswith("Queued: evicted (Preempted)"), seen
    assert reasons(seen) == ["Preempted"]
    assert "Preempted to accommodate" in seen.attempts[0].message
    twin.finish(NS, {"batch.kubernetes.io/job-name": "urgent"})
    seen = backend.observe(ref)
    assert seen.phase == "Running", seen
    assert reasons(seen) == ["Preempted", None] and [a.number for a in seen.attempts] == [1, 2]


def test_any_kueue_eviction_is_an_attempt(twin: Cluster, backend: KubernetesBackend, lab: Any) -> None:
    ref = submit(backend, lab)
    twin.kueue_evict(NS, "Job", ref.name, "PodsReadyTimeout", "Exceeded the PodsReady timeout")
    seen = backend.observe(ref)
    assert reasons(seen)[0] == "Evicted" and "PodsReady" in seen.attempts[0].message


# ── the run's retry policy bounds the engine's restarts ────────────────────────────────────────
def test_disruptions_count_against_the_retry_policy(twin: Cluster, backend: KubernetesBackend, lab: Any) -> None:
    add_gpu_nodes(twin, "gpu-1", "gpu-2", "gpu-3")
    ref = submit(backend, lab, retry={"attempts": 2})
    for _ in range(2):
        (pod,) = running(twin)
        twin.drain(pod["spec"]["nodeName"])
    assert running(twin) == []
    seen = backend.observe(ref)
    assert seen.phase == "Failed", seen
    assert reasons(seen) == ["Evicted", "Evicted"]


def test_no_rendered_rule_ignores_a_disruption(lab: Any) -> None:
    for profile in ("h200", "h200:16"):
        _, _, docs = build(lab, request("trl-sft-exp", profile=profile, retry={"attempts": 4}))
        jobs = [d["spec"] for d in docs if d["kind"] == "Job"] or [
            r["template"]["spec"] for r in docs[0]["spec"]["replicatedJobs"]
        ]
        for job in jobs:
            assert job["backoffLimit"] == 3
            actions = [r["action"] for r in job["podFailurePolicy"]["rules"]]
            assert "Ignore" not in actions and "Count" in actions


def test_an_error_fails_at_once_with_the_trainers_own_words(
    twin: Cluster, backend: KubernetesBackend, lab: Any
) -> None:
    add_gpu_nodes(twin, "gpu-1")
    ref = submit(backend, lab)
    (pod,) = running(twin)
    twin.exit_pod(
        NS,
        pod["metadata"]["name"],
        1,
        "Traceback …\n",
        message=record("gpu-1", 1, error="FileNotFoundError: data/train.jsonl", tail=("loading data", "Traceback …")),
    )
    seen = backend.observe(ref)
    assert seen.phase == "Failed" and len(twin.pods(NS)) == 1  # the default policy does not retry Error
    (only,) = seen.attempts
    assert (only.reason, only.exit_code, only.message) == ("Error", 1, "FileNotFoundError: data/train.jsonl")
    assert only.failed_node == "gpu-1" and only.log_tail[-1] == "Traceback …"


def test_the_gpu_watchdogs_stop_and_warning_reach_the_attempt(
    twin: Cluster, backend: KubernetesBackend, lab: Any
) -> None:
    # The launcher's record says its GPU watchdog stopped the trainer (TERM: 143), or only warned.
    overuse = (
        "the run's processes occupy 8 GPUs on this node (0, 1, 2, 3, 4, 5, 6, 7; 8 processes) but it was granted 4"
    )
    add_gpu_nodes(twin, "gpu-1")
    stopped = submit(backend, lab)
    (pod,) = running(twin)
    message = record(
        "gpu-1", 143, 15, f"GPU watchdog: {overuse}; stopped", warning=f"{overuse}; stopped", reason="GpuOveruse"
    )
    twin.exit_pod(NS, pod["metadata"]["name"], 143, message=message)
    seen = backend.observe(stopped)
    assert seen.phase == "Failed" and reasons(seen) == ["GpuOveruse"]  # not retried by the default policy
    assert seen.attempts[0].message == f"GPU watchdog: {overuse}; stopped"
    warned = submit(backend, lab, run_id="20260101-000000-00000b")
    (pod,) = running(twin)
    twin.exit_pod(NS, pod["metadata"]["name"], 0, message=record("gpu-1", 0, warning=overuse))
    seen = backend.observe(warned)
    assert seen.phase == "Succeeded" and reasons(seen) == ["Completed"]
    assert seen.attempts[0].message == f"GPU watchdog: {overuse}"


def test_an_error_is_retried_when_the_policy_says_so_but_a_config_error_never(
    twin: Cluster, backend: KubernetesBackend, lab: Any
) -> None:
    ref = submit(backend, lab, retry={"attempts": 3, "on": ["Error", "Evicted"]})
    (pod,) = running(twin)
    twin.exit_pod(NS, pod["metadata"]["name"], 1)
    seen = backend.observe(ref)
    assert seen.phase == "Running" and reasons(seen) == ["Error", None]
    (pod,) = running(twin)
    twin.exit_pod(NS, pod["metadata"]["name"], 78, message=record("n", 78, error="secret HF_TOKEN is empty"))
    seen = backend.observe(ref)
    assert seen.phase == "Failed" and reasons(seen) == ["Error", "ConfigError"]
    assert running(twin) == []


def test_the_time_limit_ends_the_attempt_with_timeout(twin: Cluster, backend: KubernetesBackend, lab: Any) -> None:
    ref = submit(backend, lab, timeout=600)
    assert running(twin)
    twin.advance(601)
    seen = backend.observe(ref)
    assert seen.phase == "Failed" and seen.reason == "DeadlineExceeded", seen
    assert reasons(seen) == ["Timeout"]


def test_a_profile_time_limit_becomes_the_deadline(tmp_path: Path) -> None:
    settings = CLUSTER_SETTINGS.replace("    shm_size: 64Gi\n", "    shm_size: 64Gi\n    time_limit: 7200\n")
    limited = make_lab(tmp_path / "lab", {"trl-sft-exp": "trl/sft"}, settings=settings)
    _, _, docs = build(limited, request("trl-sft-exp"))
    assert docs[0]["spec"]["activeDeadlineSeconds"] == 7200
    assert next(iter(pod_templates(docs[0])))["spec"]["restartPolicy"] == "Never"


# ── Kueue's API versions ───────────────────────────────────────────────────────────────────────
@pytest.mark.parametrize("unserved, read", [((), "v1beta2"), (("kueue.x-k8s.io/v1beta2",), "v1beta1")])
def test_workloads_are_read_at_the_newest_version_kueue_serves(
    twin: Cluster, backend: KubernetesBackend, lab: Any, unserved: tuple[str, ...], read: str
) -> None:
    twin.kube.unserved.update(unserved)  # a Kueue before 0.15 serves v1beta1 only
    twin.add_queue(NS, "team-a", "h200-pool", gpu=0, cpu="1", memory="1Gi")
    ref = submit(backend, lab)
    seen = backend.observe(ref)
    assert seen.phase == "Pending" and seen.reason == "Queued: waiting for quota in ClusterQueue h200-pool", seen
    asked = {  # the version of every Kueue read, its API schema's (the submit-time check) included
        r.path.split("/apis/kueue.x-k8s.io/")[1].split("/")[0]
        for r in twin.kube.requests
        if "/apis/kueue.x-k8s.io/" in r.path
    }
    assert read in asked
    if read == "v1beta2":
        assert asked == {"v1beta2"}, "a served v1beta2 is read without touching the deprecated v1beta1"


# ── several nodes: a JobSet replaces one rank ──────────────────────────────────────────────────
@pytest.mark.parametrize("rank", [0, 1])
def test_a_drained_rank_of_a_jobset_ends_the_attempt_and_the_replacement_joins(
    twin: Cluster, backend: KubernetesBackend, lab: Any, rank: int
) -> None:
    add_gpu_nodes(twin, "gpu-1", "gpu-2", "gpu-3")
    ref = submit(backend, lab, profile="h200:16")
    assert ref.kind == "JobSet" and len(running(twin)) == 2
    drained = next(
        p for p in running(twin) if p["metadata"]["labels"]["batch.kubernetes.io/job-completion-index"] == str(rank)
    )
    node = drained["spec"]["nodeName"]
    twin.drain(node, record=record(node, 143, 15))
    seen = backend.observe(ref)
    assert seen.phase == "Running", seen
    assert reasons(seen) == ["Evicted", None]
    assert seen.attempts[0].failed_rank == rank and seen.attempts[0].failed_node == node
    twin.advance(120)
    seen = backend.observe(ref)
    assert reasons(seen) == ["Evicted", None]  # the JobSet's ledger keeps it, rank 0 as any other
    assert (seen.attempts[0].failed_rank, seen.attempts[0].exit_code, seen.attempts[0].failed_node) == (rank, 143, node)


def _held(twin: Cluster, backend: KubernetesBackend, lab: Any, profile: str, kind: str) -> BackendRef:
    """A run of `profile` submitted as a `kind`, its Job controller held: the test steps it write by write."""
    ref = submit(backend, lab, profile=profile)
    assert ref.kind == kind
    twin.hold_jobs()
    return ref


# ── pods that succeeded under a Job or JobSet its controller has not yet marked done ─────────────
@pytest.mark.parametrize("profile, kind", [("h200", "Job"), ("h200:16", "JobSet")])
def test_pods_that_succeeded_before_their_job_is_complete_are_a_run_still_running(
    twin: Cluster, backend: KubernetesBackend, lab: Any, profile: str, kind: str
) -> None:
    ref = _held(twin, backend, lab, profile, kind)
    for pod in running(twin):
        twin.exit_pod(NS, pod["metadata"]["name"], 0)
    twin.step_jobs()  # SuccessCriteriaMet, nothing active or ready: the pods are not yet counted
    job = next(j for j in twin.kube.list("Job", NS) if j["metadata"]["name"].startswith(ref.name))
    assert [c["type"] for c in job["status"]["conditions"]] == ["SuccessCriteriaMet"]
    seen = backend.observe(ref)
    assert seen.phase == "Running", seen
    assert reasons(seen) == ["Completed"] and seen.finished_at is None
    twin.release_jobs()
    seen = backend.observe(ref)
    assert seen.phase == "Succeeded", seen
    assert [(a.reason, a.exit_code) for a in seen.attempts] == [("Completed", 0)]


# ── a Job whose controller decided it fails, its pods still stopping ──────────────────────────────
@pytest.mark.parametrize("profile, kind", [("h200", "Job"), ("h200:16", "JobSet")])
def test_a_job_whose_failure_is_decided_runs_until_its_pods_stopped_and_says_so(
    twin: Cluster, backend: KubernetesBackend, lab: Any, profile: str, kind: str
) -> None:
    ref = _held(twin, backend, lab, profile, kind)
    twin.slow_stops = True  # the other ranks save on SIGTERM
    first, *others = running(twin)
    twin.exit_pod(NS, first["metadata"]["name"], 1)
    twin.step_jobs()  # FailureTarget (a podFailurePolicy FailJob rule): the other pods are deleted
    seen = backend.observe(ref)
    assert (seen.phase, seen.reason, seen.ending) == ("Running", "PodFailurePolicy", True), seen
    assert "its pods are stopping" in seen.message and reasons(seen) == ["Error"] and seen.finished_at is None
    for pod in others:
        twin.exit_pod(NS, pod["metadata"]["name"], 143)
    twin.release_jobs()
    seen = backend.observe(ref)
    assert (seen.phase, seen.ending) == ("Failed", False), seen
    assert reasons(seen) == ["Error"]


def test_a_job_past_its_deadline_ends_its_attempt_timeout_while_its_pod_stops(
    twin: Cluster, backend: KubernetesBackend, lab: Any
) -> None:
    ref = submit(backend, lab, timeout=600)
    (pod,) = running(twin)
    twin.hold_jobs()
    twin.slow_stops = True
    twin.advance(601)
    twin.step_jobs()  # FailureTarget DeadlineExceeded; the trainer got SIGTERM and saves
    assert running(twin) == [] and [p["status"]["phase"] for p in twin.pods(NS)] == ["Running"]
    seen = backend.observe(ref)
    assert (seen.phase, seen.reason, seen.ending) == ("Running", "DeadlineExceeded", True), seen
    assert reasons(seen) == ["Timeout"]
    twin.exit_pod(NS, pod["metadata"]["name"], 143)
    twin.release_jobs()
    seen = backend.observe(ref)
    assert (seen.phase, seen.reason) == ("Failed", "DeadlineExceeded") and reasons(seen) == ["Timeout"], seen


# ── a pod stuck on a missing Secret or an image it cannot pull ends its attempt ─────────────────
def live_pods(twin: Cluster) -> list[dict[str, Any]]:
    return [p for p in twin.pods(NS) if not p["metadata"].get("deletionTimestamp")]


def test_a_pod_that_loses_its_secret_ends_the_attempt_config_error_and_gives_its_gpus_back(
    twin: Cluster, backend: KubernetesBackend, lab: Any
) -> None:
    add_gpu_nodes(twin, "gpu-1", "gpu-2")
    ref = submit(backend, lab)
    (first,) = running(twin)
    twin.kube.remove("Secret", NS, "lab-git")  # the git credentials are deleted while the run goes on
    twin.drain(first["spec"]["nodeName"])  # its replacement cannot clone: no GIT_PASSWORD
    seen = backend.observe(ref)
    assert (seen.phase, seen.reason) == ("Pending", "CreateContainerConfigError"), seen
    assert reasons(seen) == ["Evicted", None]
    twin.advance(9 * 60)  # within the grace period (10 minutes by default) the pod may still start
    assert reasons(backend.observe(ref)) == ["Evicted", None]
    twin.advance(2 * 60)
    seen = backend.observe(ref)
    assert (seen.phase, seen.reason) == ("Failed", "ConfigError"), seen
    assert reasons(seen) == ["Evicted", "ConfigError"]
    assert 'secret "lab-git" not found' in seen.attempts[-1].message and seen.attempts[-1].finished_at
    assert live_pods(twin) == [], "the stuck pod still holds its GPUs"
    assert twin.kube.list("Workload", NS) == [], "the run still holds its Kueue quota"


def test_an_image_that_cannot_be_pulled_ends_the_attempt_image_pull_after_the_grace_period(
    twin: Cluster, fake_kube: FakeKube, lab: Any
) -> None:
    twin.private_registries = ("docker.io",)  # the lab's trl image, without its pull secret
    twin.kube.remove("Secret", NS, "registry-creds")
    backend = KubernetesBackend(NS, api_client=bot_client(fake_kube, NS), retry=FAST, stuck_after=300)
    ref = submit(backend, lab)
    seen = backend.observe(ref)
    assert (seen.phase, seen.reason) == ("Pending", "ErrImagePull"), seen
    twin.advance(301)
    seen = backend.observe(ref)
    assert (seen.phase, seen.reason) == ("Failed", "ImagePull"), seen
    assert reasons(seen) == ["ImagePull"] and "pull access denied" in seen.attempts[-1].message
    assert live_pods(twin) == []
    assert backend.observe(ref).phase == "Failed"  # while its deletion goes on, or after


def test_the_grace_period_is_a_lab_setting(tmp_path: Path) -> None:
    from tuneplane.backends.factory import ClusterAccess, make_backend
    from tuneplane.lab.load import load_lab

    settings = CLUSTER_SETTINGS.replace("  ttl_seconds_after_finished: 86400\n", "  stuck_after: 1200\n")
    root = tmp_path / "lab"
    root.mkdir()
    (root / "tuneplane.yaml").write_text(settings, encoding="utf-8")
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: c\n"
        "clusters: [{name: c, cluster: {server: 'https://127.0.0.1:1'}}]\n"
        "users: [{name: u, user: {token: t}}]\ncontexts: [{name: c, context: {cluster: c, user: u}}]\n",
        encoding="utf-8",
    )
    backend = make_backend("kubernetes", load_lab(root), ClusterAccess(kubeconfig=str(kubeconfig)))
    assert getattr(backend, "stuck_after", None) == 1200


def failed_pod(name: str, code: int = 1, *, tracked: bool = False, deleted: bool = False) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": "ns", "uid": f"uid-{name}"}
    if tracked:
        meta["finalizers"] = ["batch.kubernetes.io/job-tracking"]
    if deleted:
        meta["deletionTimestamp"] = "2025-01-02T10:00:00Z"
    terminated = {"state": {"terminated": {"exitCode": code}}, "name": "trainer"}
    return {"metadata": meta, "status": {"phase": "Failed", "containerStatuses": [terminated]}}


RULES = {
    "rules": [
        {"action": "FailJob", "onExitCodes": {"containerName": "trainer", "operator": "In", "values": [78]}},
        {"action": "Ignore", "onExitCodes": {"containerName": "trainer", "operator": "In", "values": [42]}},
    ]
}


@pytest.mark.parametrize(
    "status, pods, per_index, reason",
    [
        ({}, [failed_pod("a")], False, None),  # one failure, backoffLimit 1: replaced
        ({"failed": 1}, [failed_pod("a"), failed_pod("b", tracked=True)], False, "BackoffLimitExceeded"),
        ({"failed": 1}, [failed_pod("b", tracked=True)], False, "BackoffLimitExceeded"),  # the counted one gone
        (
            {"failed": 1, "uncountedTerminatedPods": {"failed": ["uid-b"]}},
            [failed_pod("b", tracked=True)],
            False,
            "BackoffLimitExceeded",
        ),
        ({"failed": 1}, [failed_pod("a")], False, None),  # counted already, nothing new
        ({}, [failed_pod("a"), failed_pod("b")], False, "BackoffLimitExceeded"),  # no finalizers: the pods count
        ({}, [failed_pod("a"), failed_pod("b", 42)], False, None),  # an Ignore rule's pod is not counted
        ({}, [failed_pod("a"), failed_pod("b", deleted=True)], False, None),  # deleted: the controller decides
        ({}, [failed_pod("a", 78)], False, "PodFailurePolicy"),
        ({}, [failed_pod("a"), failed_pod("b")], True, None),  # per index: not this count
    ],
)
def test_whether_a_job_can_replace_its_failed_pods_is_read_before_its_controller_synced(
    status: dict[str, Any], pods: list[dict[str, Any]], per_index: bool, reason: str | None
) -> None:
    spec: dict[str, Any] = {"backoffLimit": 1, "podFailurePolicy": RULES}
    if per_index:
        spec["backoffLimitPerIndex"] = 1
    target = decided_failure(cast(JobObject, {"spec": spec, "status": status}), cast(list[Pod], pods))
    assert (target or {}).get("reason") == reason
    if reason == "PodFailurePolicy":
        assert "Container trainer for pod ns/a failed with exit code 78 matching FailJob rule at index 0" == (
            (target or {}).get("message")
        )
