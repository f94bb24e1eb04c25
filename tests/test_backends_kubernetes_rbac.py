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
import twin_schemas
import yaml
from helpers_git import kubeconfig, run_ids, tp_run
from helpers_render import CLUSTER_SETTINGS, build, make_lab, request
from twin_rbac import bot_client

from tuneplane.backends.base import BackendError, BackendRef, SubmitRequest
from tuneplane.backends.kubernetes import KubernetesBackend, RetryPolicy, rbac

if TYPE_CHECKING:
    from fakekube import FakeKube
    from twin_controllers import Cluster

pytest_plugins = ("fakekube",)

NS = "ml-team"
RUNS = run_ids(3)
FAST = RetryPolicy(attempts=2, backoff_base=0.001, backoff_cap=0.005, timeout=5.0)


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
            manifests=[*docs, *extra],
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
    rayjob = submit(backend, lab, "verl-grpo-exp", "h200", RUNS[2])
    twin.driver_exit(NS, rayjob.name, 0, "done\n")
    assert backend.observe(rayjob).phase == "Succeeded"
    for ref in (jobset, rayjob):
        backend.cancel(ref)
        assert backend.observe(ref).phase == "Cancelled"
    assert not [s for s in twin.kube.list("Secret", NS) if s["metadata"]["name"].endswith("-tokens")]

    missing, spare = asked(twin.kube) - granted(), granted() - asked(twin.kube)
    assert not missing, f"the backend asks for what the Role lacks: {sorted(missing)}"
    assert not spare, f"the Role grants what the backend never asks for: {sorted(spare)}"
