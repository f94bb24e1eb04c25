"""`BackendRef` and a status's `backend`: a run directory is `run_dir`, a namespace only a Kubernetes one.

A status written before `run_dir` existed kept a local or Slurm run's directory in `namespace`; it still
loads, and every command still finds the run's directory from it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from support.repos import git

from tuneplane.backends.base import BackendRef
from tuneplane.backends.slurm.batch import SlurmBatch
from tuneplane.backends.slurm.logs import log_path
from tuneplane.backends.slurm.submit import ref_for
from tuneplane.lab.runs import RunKey, read_status, status_from
from tuneplane.models.run import BackendObject, RunStatus, recorded_run_dir
from tuneplane.runs.observe import backend_object, backend_ref

FLAGS = ("--profile", "local", "--image", "python:3.12", "--observability-url", "https://track.example.org/p")
RUN_DIR = "/shared/runs/alice/demo/20250102-100000-0123456789"


def _old_backend(run_dir: str, **more: str) -> dict[str, str]:
    """A status's `backend` as written before `run_dir`: the run directory in `namespace`."""
    return {"backend": "local", "kind": "Process", "name": "demo-0123456789", "namespace": run_dir, **more}


def _status(backend: dict[str, Any], **more: Any) -> RunStatus:
    data = {
        "experiment": "demo",
        "run_id": "20250102-100000-0123456789",
        "phase": "Running",
        "backend": backend,
        **more,
    }
    return status_from(data, "status/demo/20250102-100000-0123456789.json")


# ── the model ──────────────────────────────────────────────────────────────────────────────────────


def test_an_old_backend_object_reads_its_absolute_namespace_as_the_run_dir() -> None:
    obj = BackendObject.model_validate(_old_backend(RUN_DIR, uid="u1"))
    assert (obj.run_dir, obj.namespace, obj.uid) == (RUN_DIR, "", "u1")
    assert BackendObject.model_validate(obj.model_dump()) == obj  # written back, it reads the same


def test_a_kubernetes_namespace_stays_a_namespace() -> None:
    obj = BackendObject(backend="kubernetes", kind="JobSet", name="sft-demo-1a2b3c4d", namespace="ml", uid="u")
    assert (obj.namespace, obj.run_dir) == ("ml", "")
    ref = backend_ref(_status(obj.model_dump()))
    assert ref == BackendRef("kubernetes", "JobSet", "sft-demo-1a2b3c4d", "ml", "u")
    assert backend_object(ref) == obj


def test_a_status_with_a_run_dir_is_read_as_written() -> None:
    written = {**_old_backend("ns-kept-as-is"), "run_dir": RUN_DIR}
    obj = BackendObject.model_validate(written)
    assert (obj.namespace, obj.run_dir) == ("ns-kept-as-is", RUN_DIR)


@pytest.mark.parametrize(
    ("backend", "expected"),
    [
        (_old_backend(RUN_DIR), RUN_DIR),
        ({**_old_backend(""), "run_dir": RUN_DIR}, RUN_DIR),
        ({"backend": "kubernetes", "kind": "Job", "name": "j", "namespace": "ml"}, ""),
        ({"backend": "local", "namespace": 7}, ""),  # a hand-edited file is no path
        ({}, ""),
    ],
)
def test_the_run_dir_of_a_raw_status_backend(backend: dict[str, Any], expected: str) -> None:
    assert recorded_run_dir(backend) == expected


def test_a_ref_and_the_object_a_status_records_convert_both_ways() -> None:
    ref = BackendRef("local", "Process", "demo-0123456789", uid="u1", run_dir=RUN_DIR)
    obj = backend_object(ref)
    assert (obj.run_dir, obj.namespace) == (RUN_DIR, "")
    assert backend_ref(_status(obj.model_dump())) == ref


# ── Slurm ──────────────────────────────────────────────────────────────────────────────────────────


def test_a_slurm_ref_keeps_its_run_dir_and_no_namespace() -> None:
    batch = SlurmBatch(job_name="demo-0123456789", comment="run", script="#!/bin/bash\n", run_dir=RUN_DIR, work_dir="")
    ref = ref_for(batch, "42")
    assert (ref.run_dir, ref.namespace) == (RUN_DIR, "")
    recorded = backend_object(ref)
    assert (recorded.run_dir, recorded.namespace) == (RUN_DIR, "")
    assert log_path(ref) == Path(RUN_DIR) / "logs" / "slurm-42.out"


def test_an_old_slurm_status_still_names_the_jobs_log() -> None:
    old = _old_backend(RUN_DIR, backend="slurm", kind="SlurmJob", uid="42")
    ref = backend_ref(_status(old))
    assert ref is not None and (ref.run_dir, ref.namespace) == (RUN_DIR, "")
    assert log_path(ref) == Path(RUN_DIR) / "logs" / "slurm-42.out"


# ── a local run, through tp ────────────────────────────────────────────────────────────────────────


def _local_run(tp: Any, root: Path) -> tuple[RunKey, Path]:
    """A local run of `demo` to its end: its key and its status file."""
    (root / "experiments" / "demo" / "train.sh").write_text("echo trained\n", encoding="utf-8")
    git(root, "commit", "-qam", "a trainer")
    done = tp("submit", "demo", *FLAGS, "--local")
    assert done.code == 0, done.output
    (status,) = (root / "status" / "demo").glob("*.json")
    return RunKey("demo", status.stem), status


def test_a_local_runs_status_records_its_run_dir_and_no_namespace(demo_lab: Path, tp: Any) -> None:
    key, path = _local_run(tp, demo_lab)
    backend = json.loads(path.read_text(encoding="utf-8"))["backend"]
    assert backend["namespace"] == "" and Path(backend["run_dir"]).is_dir(), backend
    assert Path(backend["run_dir"]).name == key.run_id
    shown = tp("job", "status", key.run_id)
    assert shown.code == 0 and f" in {backend['run_dir']}" in shown.out, shown.output


def test_an_old_local_status_still_finds_the_runs_directory(demo_lab: Path, tp: Any) -> None:
    from tuneplane.runs.lookup import run_rows

    key, path = _local_run(tp, demo_lab)
    data = json.loads(path.read_text(encoding="utf-8"))
    run_dir = data["backend"].pop("run_dir")
    # as a status of an older tp said it: the run directory as namespace, and (as it was while the run
    # went on) Running, so that the listing and `tp job status` ask the run's directory
    data["backend"]["namespace"] = run_dir
    data["phase"] = "Running"
    path.write_text(json.dumps(data), encoding="utf-8")

    status = read_status(demo_lab, key)
    assert status is not None and status.backend is not None
    assert (status.backend.run_dir, status.backend.namespace) == (run_dir, "")
    rows, _ = run_rows(None, None)
    assert rows[0][2] == "Succeeded", rows  # `tp job ls` read the run's directory
    shown = tp("job", "status", key.run_id)
    assert shown.code == 0 and "Succeeded" in shown.out and f" in {run_dir}" in shown.out, shown.output
    logs = tp("job", "logs", key.run_id)
    assert logs.code == 0 and "[tuneplane]" in logs.out, logs.output


@pytest.mark.parametrize("backend", ["local", "slurm"])
def test_an_old_status_with_a_relative_run_dir_in_its_namespace_is_migrated(backend: str) -> None:
    """A relative storage root (a relative XDG_DATA_HOME, a Slurm storage root) put a relative run
    directory in an older status's namespace: every backend whose runs are not pods kept it there."""
    old = {"backend": backend, "kind": "Process", "name": "p", "namespace": "data/runs/p", "uid": "u"}
    obj = BackendObject.model_validate(old)
    assert (obj.namespace, obj.run_dir) == ("", "data/runs/p")
    assert recorded_run_dir(old) == "data/runs/p"
    k8s = {"backend": "kubernetes", "kind": "Job", "name": "j", "namespace": "ml", "uid": "u"}
    assert BackendObject.model_validate(k8s).namespace == "ml" and recorded_run_dir(k8s) == ""
