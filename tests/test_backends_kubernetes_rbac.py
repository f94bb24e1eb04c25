"""The bot's Role (tuneplane.backends.kubernetes.rbac) against the cluster twin with RBAC enforced.

Every backend test runs as the bot's ServiceAccount bound to that Role, so a request the Role lacks
fails there. Here: the Role is *exactly* what the backend asks for across the life of Job, JobSet and
RayJob runs (nothing missing, nothing spare), a cluster's `edit` role is refused with a message that
says what to do, and `tp init` / `tp cluster rbac` write that Role for a lab.
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
import twin_rbac
import yaml
from support.render import CLUSTER_SETTINGS, build, make_lab, request
from support.repos import clone, kubeconfig, make_remote, run_ids, seed_lab, tp_run
from twin_rbac import bot_client

from tuneplane.backends.base import BackendRef, SubmitRequest
from tuneplane.backends.kubernetes import ApiRetry, KubernetesBackend, rbac
from tuneplane.backends.kubernetes.payload import KubernetesObjects

if TYPE_CHECKING:
    from fakekube import FakeKube
    from twin_controllers import Cluster

pytest_plugins = ("fakekube",)

NS = "ml-team"
RUNS = run_ids(3)
FAST = ApiRetry(attempts=2, backoff_base=0.001, backoff_cap=0.005, timeout=5.0)


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Any:
    return make_lab(
        tmp_path_factory.mktemp("rbac") / "lab",
        {"trl-sft-exp": "trl/sft", "verl-grpo-exp": "verl/grpo"},
        settings=CLUSTER_SETTINGS,
    )


@pytest.fixture
def twin(cluster: Cluster) -> Cluster:
    """Room for one 8-GPU run at a time: a 16-GPU JobSet waits in the queue while a Job runs."""
    cluster.add_queue(NS, "team-a", "h200-pool", gpu=16, cpu="1000", memory="16Ti")
    for name, data in (("registry-creds", {".dockerconfigjson": "e30="}), ("lab-git", {"password": "cGFzcw=="})):
        cluster.kube.put(
            {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": name, "namespace": NS}, "data": data}
        )
    return cluster


def submit(
    backend: KubernetesBackend,
    lab: Any,
    experiment: str,
    profile: str,
    run_id: str,
    extra: tuple[dict[str, Any], ...] = (),
) -> BackendRef:
    spec, _, docs = build(lab, request(experiment, profile=profile, run_id=run_id))
    return backend.submit(
        SubmitRequest(
            run_id=spec.metadata.run_id,
            experiment=experiment,
            namespace=NS,
            object_name=spec.metadata.name,
            payload=KubernetesObjects([*docs, *extra]),
            secret_data={"job-token": "tp-job-token-93ab1"},
        )
    )


def granted() -> set[tuple[str, str, str]]:
    return {(v, r.group, res) for r in rbac.RULES for res in r.resources for v in r.verbs}


def asked(kube: FakeKube) -> set[tuple[str, str, str]]:
    user = rbac.user(NS)
    return {(a.verb, a.group, a.combined) for who, a in kube.audit if who == user}


def companion(name: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": f"{name}-extra"}, "data": {"k": "v"}}


# ── the Role is exactly what the backend asks for ────────────────────────────────────────────────
def test_the_role_is_exactly_the_requests_of_job_jobset_and_rayjob_runs(twin: Cluster, lab: Any) -> None:
    backend = KubernetesBackend(NS, api_client=bot_client(twin.kube, NS), retry=FAST, rng=random.Random(3))
    job = submit(backend, lab, "trl-sft-exp", "h200", RUNS[0], (companion("job"),))
    assert backend.observe(job).phase == "Running"
    # a two-node JobSet waits for quota while the Job holds it: the queue's reason is read
    jobset = submit(backend, lab, "trl-sft-exp", "h200:16", RUNS[1])
    waiting = backend.observe(jobset)
    assert waiting.phase == "Pending" and "h200-pool" in (waiting.reason + waiting.message), waiting
    # the one-node Job fails: its logs and tokens are read for the message
    twin.finish(NS, {"batch.kubernetes.io/job-name": job.name}, 3, "boom\n")
    twin.advance(60)
    failed = backend.observe(job)
    assert failed.phase == "Failed" and "boom" in failed.message, failed
    list(backend.logs(job, tail=5))  # tp job logs: the leader pod's log
    backend.cancel(job)
    assert twin.kube.get("Secret", NS, f"{job.name}-tokens") is None  # collected with its owner, never deleted by us
    assert twin.kube.get("ConfigMap", NS, "job-extra") is None
    # then runs and succeeds: its start time comes from its child Jobs
    twin.finish(NS, {"jobset.sigs.k8s.io/jobset-name": jobset.name}, 0)
    assert backend.observe(jobset).phase == "Succeeded"
    # a RayJob's driver succeeds, then the run is cancelled (deleted) all the same
    # a policy webhook refuses the Ray pods for a while: the run waits, and the controllers' Events say why
    twin.kube.webhooks.append(lambda kind, obj: "policy.example.com: not yet" if kind == "Pod" else None)
    rayjob = submit(backend, lab, "verl-grpo-exp", "h200", RUNS[2])
    assert backend.observe(rayjob).reason == "FailedToCreateHeadPod"
    twin.kube.webhooks.clear()
    twin.kube.settle()
    twin.driver_exit(NS, rayjob.name, 0, "done\n")
    assert backend.observe(rayjob).phase == "Succeeded"
    for ref in (jobset, rayjob):
        backend.cancel(ref)
        assert backend.observe(ref).phase == "Cancelled"
    assert not [s for s in twin.kube.list("Secret", NS) if s["metadata"]["name"].endswith("-tokens")]

    missing, spare = asked(twin.kube) - granted(), granted() - asked(twin.kube)
    assert not missing, f"the backend asks for what the Role lacks: {sorted(missing)}"
    assert not spare, f"the Role grants what the backend never asks for: {sorted(spare)}"


def test_the_objects_tp_writes_pass_the_api_servers_schemas(fake_kube: FakeKube, kube_client: Any) -> None:
    from kubernetes import client

    account, role, binding = rbac.manifests(NS)
    client.CoreV1Api(kube_client).create_namespaced_service_account(NS, account, field_validation="Strict")
    custom = client.CustomObjectsApi(kube_client)
    for plural, body in (("roles", role), ("rolebindings", binding)):
        custom.create_namespaced_custom_object(
            "rbac.authorization.k8s.io", "v1", NS, plural, body, field_validation="Strict"
        )
    assert fake_kube.get("Role", NS, rbac.BOT_NAME)["rules"] == role["rules"]


# ── a cluster's `edit` role is not enough ────────────────────────────────────────────────────────
def multi_node_lab(tmp_path: Path) -> tuple[Path, str]:
    """A Kubernetes lab whose one run request asks for two nodes (a JobSet), and the bot's clone."""
    remote = make_remote(tmp_path)
    (run_id,) = run_ids(1)
    seed_lab(
        remote,
        tmp_path / "seed",
        {"demo": "echo hi\n"},
        backend="kubernetes",
        runs=[("demo", run_id)],
        profile="h200:16",
    )
    return clone(remote, tmp_path / "bot"), run_id


def bound_to_edit(kube: FakeKube, ns: str) -> str:
    """The bot's ServiceAccount bound to the cluster's `edit` role, as docs once had it; its token."""
    kube.put(twin_rbac.edit_cluster_role())
    binding = {
        **rbac.role_binding(ns),
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "edit"},
    }
    return twin_rbac.grant(kube, [rbac.service_account(ns), binding])


def test_a_bot_bound_to_edit_cannot_submit_a_jobset_and_is_told_what_to_apply(
    tmp_path: Path, fake_kube: FakeKube
) -> None:
    bot, run_id = multi_node_lab(tmp_path)
    config = kubeconfig(tmp_path / "kubeconfig", fake_kube.url, token=bound_to_edit(fake_kube, "tuneplane"))

    code, out = tp_run(bot, "bot", "reconcile", "--kubeconfig", str(config))

    assert code == 1 and "Traceback" not in out, out
    assert 'cannot create resource "jobsets" in API group "jobset.x-k8s.io" in the namespace "tuneplane"' in out
    assert "kubectl auth can-i create jobsets.jobset.x-k8s.io -n tuneplane" in out
    assert "`tp cluster rbac` prints the Role" in out
    assert fake_kube.list("JobSet", "tuneplane") == []


def test_the_same_bot_with_the_role_tp_prints_submits_it(tmp_path: Path, fake_kube: FakeKube) -> None:
    bot, run_id = multi_node_lab(tmp_path)
    code, printed = tp_run(bot, "cluster", "rbac")
    assert code == 0, printed
    token = twin_rbac.grant(fake_kube, list(yaml.safe_load_all(printed)))
    config = kubeconfig(tmp_path / "kubeconfig", fake_kube.url, token=token)

    code, out = tp_run(bot, "bot", "reconcile", "--kubeconfig", str(config))

    assert code == 0, out
    (jobset,) = fake_kube.list("JobSet", "tuneplane")
    assert jobset["metadata"]["labels"]["tuneplane.dev/run"] == run_id
    (secret,) = fake_kube.list("Secret", "tuneplane")
    assert secret["metadata"]["ownerReferences"][0]["uid"] == jobset["metadata"]["uid"]
