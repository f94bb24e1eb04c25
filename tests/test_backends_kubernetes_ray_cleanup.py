"""A finished Ray run leaves nothing in the namespace once the bot recorded its end.

KubeRay, at `ttlSecondsAfterFinished`, deletes only the Ray cluster: the RayJob, its submitter Job with the
completed pod, and the run's tokens Secret (owned by the RayJob) stay for ever. So the bot deletes the
RayJob itself once the run's end, its log tail and its metrics are recorded, and garbage collection takes
what the RayJob owns. Rendered runs of a real lab, submitted by the backend to the cluster twin; each
sync is the bot's own `_sync_one` over a fresh backend (a restarted bot).
"""

from __future__ import annotations

import json
import socket
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
import test_backends_kubernetes_ray_retry as ray_retry
from support.labs import new_lab
from support.render import CLUSTER_SETTINGS, make_lab, request, resolve_run
from test_backends_kubernetes_ray_retry import EXP, NS, bot, submit

from tuneplane.backends.base import Backend, BackendRef, SubmitRequest
from tuneplane.backends.kubernetes.apply import SECRET_SUFFIX
from tuneplane.backends.kubernetes.payload import KubernetesObjects
from tuneplane.bot.report import BotReport
from tuneplane.bot.sync import IngestReader, _sync_one
from tuneplane.lab.gitrepo import GitRepo
from tuneplane.lab.runs import RunKey
from tuneplane.models.run import RunStatus
from tuneplane.plan.adapters import compile_plan
from tuneplane.record.batch import Batch
from tuneplane.record.ledger import AWAITING, Ledger
from tuneplane.render.manifests import render_manifests

if TYPE_CHECKING:
    from fakekube import FakeKube
    from twin_controllers import Cluster

pytest_plugins = ("fakekube",)

twin = ray_retry.twin  # the same cluster twin as the Ray retry tests
SFT = "trl-sft-exp"  # a one-node run: a batch/v1 Job


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Any:
    root = tmp_path_factory.mktemp("raycleanup") / "lab"
    return make_lab(root, {EXP: "verl/grpo", SFT: "trl/sft"}, settings=CLUSTER_SETTINGS)


FIXTURE_SECRETS = {"registry-creds", "lab-git"}  # the namespace's own, not the run's


class Pool:
    """The bot's backends: a new Kubernetes backend per sync (a restarted bot remembers nothing)."""

    def __init__(self, fake_kube: FakeKube) -> None:
        self.fake_kube = fake_kube

    def get(self, name: str) -> Backend:
        assert name == "kubernetes"
        return bot(self.fake_kube)


@pytest.fixture
def batch(tmp_path: Path) -> Batch:
    return Batch(GitRepo(new_lab(tmp_path / "lab")), ledger=Ledger())


def sync_once(
    fake_kube: FakeKube, batch: Batch, status: RunStatus, metrics: IngestReader | None = None
) -> tuple[RunStatus, BotReport]:
    """One sync of the run as the bot does it: observe, fold, record; the status as it would be committed."""
    key = RunKey(status.experiment, status.run_id)
    batch.ledger.active.setdefault(str(key), status.phase)
    report = BotReport()
    raw = json.loads(status.model_dump_json())
    reader = metrics or IngestReader("", b"")  # no receiver: nothing to wait for
    _sync_one(Pool(fake_kube), reader, batch, key, raw, report, lambda _line: None)  # type: ignore[arg-type]
    written = batch.pending.get(key.status_rel)
    return (RunStatus.model_validate_json(written) if written else status), report


def left_of_run(twin: Cluster, ref: BackendRef) -> list[str]:
    """Every object of the namespace the run made (or its controllers made for it)."""
    kinds = ("RayJob", "RayCluster", "Job", "Pod", "Secret", "Service", "Workload")
    return sorted(
        f"{kind}/{obj['metadata']['name']}"
        for kind in kinds
        for obj in twin.kube.list(kind, NS)
        if not (kind == "Secret" and obj["metadata"]["name"] in FIXTURE_SECRETS)
    )


def ended(twin: Cluster, fake_kube: FakeKube, lab: Any) -> tuple[BackendRef, RunStatus]:
    """A Ray run submitted, running, and its driver just ended well; nothing synced since it started."""
    ref, status = submit(fake_kube, lab)
    twin.driver_exit(NS, ref.name, 0)
    assert twin.kube.get("RayJob", NS, ref.name)["status"]["jobDeploymentStatus"] == "Complete"  # type: ignore[index]
    return ref, status


def test_a_finished_ray_run_leaves_nothing_once_its_end_is_recorded(
    twin: Cluster, fake_kube: FakeKube, lab: Any, batch: Batch
) -> None:
    ref, status = ended(twin, fake_kube, lab)
    assert f"Secret/{ref.name}{SECRET_SUFFIX}" in left_of_run(twin, ref)
    twin.advance(61)  # past KubeRay's TTL: its Ray cluster is gone, the rest stays
    assert f"RayJob/{ref.name}" in left_of_run(twin, ref) and f"Job/{ref.name}" in left_of_run(twin, ref)

    new, report = sync_once(fake_kube, batch, status)

    assert new.phase == "Succeeded" and not report.errors
    assert left_of_run(twin, ref) == []
    assert str(RunKey(new.experiment, new.run_id)) not in batch.ledger.active  # no sync looks at it again


def test_the_rayjob_is_deleted_at_the_end_even_before_kuberay_s_ttl(
    twin: Cluster, fake_kube: FakeKube, lab: Any, batch: Batch
) -> None:
    ref, status = ended(twin, fake_kube, lab)

    new, _ = sync_once(fake_kube, batch, status)

    assert new.phase == "Succeeded"
    assert left_of_run(twin, ref) == []


def test_a_deletion_that_fails_is_tried_again_on_the_next_sync_and_the_status_stands(
    twin: Cluster, fake_kube: FakeKube, lab: Any, batch: Batch
) -> None:
    ref, status = ended(twin, fake_kube, lab)
    fake_kube.inject(500, f"/rayjobs/{ref.name}$", times=10, method="DELETE")

    new, report = sync_once(fake_kube, batch, status)

    key = str(RunKey(new.experiment, new.run_id))
    assert new.phase == "Succeeded" and new.finished_at
    assert f"RayJob/{ref.name}" in left_of_run(twin, ref)
    assert batch.ledger.active[key] == "Succeeded" + AWAITING  # asked again on the next sync
    assert any(ref.name in e for e in report.errors)
    fake_kube.faults.clear()

    again, report = sync_once(fake_kube, batch, new)

    assert again == new and not report.errors  # the recorded end is not touched by the cleanup
    assert left_of_run(twin, ref) == []
    assert key not in batch.ledger.active


def test_the_rayjob_stays_while_the_run_s_metrics_are_still_to_be_read(
    twin: Cluster, fake_kube: FakeKube, lab: Any, batch: Batch
) -> None:
    ref, status = ended(twin, fake_kube, lab)
    with socket.socket() as probe:  # a port nothing listens on: the receiver is down
        probe.bind(("127.0.0.1", 0))
        down = IngestReader(f"http://127.0.0.1:{probe.getsockname()[1]}", b"secret", timeout=1.0)

    new, _ = sync_once(fake_kube, batch, status, down)

    key = str(RunKey(new.experiment, new.run_id))
    assert new.phase == "Succeeded" and batch.ledger.active[key] == "Succeeded" + AWAITING
    assert f"RayJob/{ref.name}" in left_of_run(twin, ref)

    sync_once(fake_kube, batch, new)  # the receiver answers (it has nothing more)

    assert left_of_run(twin, ref) == [] and key not in batch.ledger.active


def test_a_finished_job_is_left_to_its_own_ttl_which_takes_its_pods_and_secret(
    twin: Cluster, fake_kube: FakeKube, lab: Any
) -> None:
    """A Job (as a JobSet) carries `ttlSecondsAfterFinished`: its logs stay readable until then, and the
    TTL controller's deletion takes its pods and the tokens Secret it owns, so the bot deletes nothing."""
    spec = resolve_run(lab, request(SFT))
    manifests = render_manifests(spec, compile_plan(spec), lab.config)
    name = spec.metadata.name
    ref = bot(fake_kube).submit(
        SubmitRequest(
            run_id=spec.metadata.run_id,
            experiment=SFT,
            namespace=NS,
            object_name=name,
            payload=KubernetesObjects(manifests),
            secret_data={"job-token": "tp-token-1234"},
            attempt=1,
        )
    )
    (pod,) = twin.pods(NS)
    twin.exit_pod(NS, pod["metadata"]["name"], 0)
    assert twin.kube.get("Job", NS, name)["status"]["succeeded"] == 1  # type: ignore[index]

    bot(fake_kube).clean_up(ref)

    kept = {f"Job/{name}", f"Pod/{pod['metadata']['name']}", f"Secret/{name}{SECRET_SUFFIX}"}
    assert kept <= set(left_of_run(twin, ref))
    twin.advance(lab.config.cluster.ttl_seconds_after_finished + 1)
    assert left_of_run(twin, ref) == []
