"""Each backend's payload is its own record: a backend handed another backend's (a run rendered for
Slurm sent to Kubernetes, a cluster run sent to this machine) refuses it by name before it writes a file
or asks its engine anything."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from tuneplane.backends.base import Backend, BackendError, Payload, SubmitRequest
from tuneplane.backends.kubernetes.backend import KubernetesBackend
from tuneplane.backends.kubernetes.payload import KubernetesObjects
from tuneplane.backends.local import LocalBackend, LocalRun
from tuneplane.backends.slurm import SlurmBackend
from tuneplane.backends.slurm.batch import SlurmBatch

if TYPE_CHECKING:
    from fakekube import FakeKube

pytest_plugins = ("fakekube",)

NS = "team-a"


def _objects(root: Path) -> KubernetesObjects:
    job = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "demo-r1"}, "spec": {}}
    return KubernetesObjects([job])


def _batch(root: Path) -> SlurmBatch:
    run_dir = root / "slurm/demo/r1"
    return SlurmBatch("demo-r1", "tuneplane run r1", "#!/bin/bash\n", str(run_dir), str(run_dir / "work"))


def _local(root: Path) -> LocalRun:
    run_dir = root / "runs/u/demo/r1"
    return LocalRun(
        name="demo-r1",
        experiment="demo",
        run_id="r1",
        repo=str(root / "lab"),
        commit="0" * 40,
        run_dir=str(run_dir),
        gpu_lock_dir=str(root / ".locks/gpus"),
        work_dir=str(run_dir / "work"),
        out_dir=str(run_dir / "out"),
        plugins=[],
        jobspec={},
        argv=["python", "-m", "tuneplane.launcher"],
        plan_argv=["bash", "train.sh"],
        env={},
        timeout=None,
        gpus=0,
        artifacts=[],
    )


PAYLOADS: dict[str, Callable[[Path], Payload]] = {"kubernetes": _objects, "slurm": _batch, "local": _local}
REFUSALS = {
    "kubernetes": "the Kubernetes backend takes the run's rendered manifests",
    "slurm": "the Slurm backend takes one rendered batch script per run",
    "local": "the local backend takes a LocalRun",
}


def _request(payload: Payload) -> SubmitRequest:
    return SubmitRequest(run_id="r1", experiment="demo", namespace=NS, object_name="demo-r1", payload=payload)


@pytest.mark.parametrize(
    ("backend_name", "payload_of"),
    [(b, p) for b in PAYLOADS for p in PAYLOADS if b != p],
)
def test_a_backend_refuses_another_backends_payload(
    backend_name: str, payload_of: str, tmp_path: Path, fake_kube: FakeKube
) -> None:
    backends: dict[str, Callable[[], Backend]] = {
        "kubernetes": lambda: KubernetesBackend(NS, api_client=fake_kube.api_client()),
        "slurm": SlurmBackend,  # no Slurm here: refused before any of its commands would run
        "local": lambda: LocalBackend(tmp_path / "storage"),
    }
    payload = PAYLOADS[payload_of](tmp_path)
    with pytest.raises(BackendError) as refused:
        backends[backend_name]().submit(_request(payload))
    message = str(refused.value)
    assert message.startswith("run r1: " + REFUSALS[backend_name])
    assert f"was handed {type(payload).__name__} (a run packed for another backend)" in message
    assert list(tmp_path.iterdir()) == []  # no run directory, no storage root
    assert fake_kube.requests == []


def test_each_payload_shows_what_tp_render_prints(tmp_path: Path) -> None:
    """`tp render` asks the payload: the manifests' YAML text and its documents; the batch script, and as
    JSON the keys a Slurm batch was always shown with."""
    objects = KubernetesObjects([{"kind": "Job"}], "---\nkind: Job\n")
    assert objects.shown() == ("---\nkind: Job\n", [{"kind": "Job"}])
    batch = _batch(tmp_path)
    text, [doc] = batch.shown()
    assert text == batch.script
    assert list(doc) == ["kind", "job_name", "comment", "script", "launch_document"]
    assert doc["kind"] == "SlurmBatch" and doc["job_name"] == "demo-r1"
