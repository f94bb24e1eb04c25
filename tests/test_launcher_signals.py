"""Each stop reaches the trainer once, however the engine stops the job.

A trainer's wrapper (accelerate, torchrun) treats a second SIGTERM while it stops its ranks as "stop
now" and kills them before they flush what they hold (metric points, a checkpoint). So the trainer under
the launcher must get one SIGTERM per stop, whether the engine signals the launcher alone (a pod's PID 1),
the launcher's process group (the local backend), or every process of a Slurm step (scancel, the time
limit, a requeue). The trainer here counts the SIGTERMs it gets, and keeps running a little after the
first one to catch any that follow.
"""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from support.repos import git
from support.slurm import make_slurm_lab, request_run
from test_backends_local_attempts import exp, job, storage, wait  # noqa: F401  (fixtures)
from test_backends_slurm_attempts import _backend, _submit, _until
from test_launcher import write_jobspec
from test_launcher_attempts import _env, _wait_for

from tuneplane.backends.local import LocalBackend

if TYPE_CHECKING:
    from slurm_cluster import SlurmCluster

pytest_plugins = ("slurm_cluster",)

# Notes each SIGTERM in $TUNEPLANE_OUT_DIR/sigterms-<attempt>-<node rank>, then ends 3 s after the first.
COUNTER = """import os, signal, sys, time
out = os.environ["TUNEPLANE_OUT_DIR"]
os.makedirs(out, exist_ok=True)
path = os.path.join(out, "sigterms-%s-%s" % (os.environ.get("TUNEPLANE_ATTEMPT", "1"),
                                            os.environ.get("TUNEPLANE_NODE_RANK", "0")))
first = []
def note(signum, frame):
    first.append(time.monotonic())
    with open(path, "a") as handle:
        handle.write("%f\\n" % time.time())
signal.signal(signal.SIGTERM, note)
open(path + ".ready", "w").close()
print("counting", flush=True)
while not first or time.monotonic() - first[0] < 3:
    time.sleep(0.05)
sys.exit(143)
"""
COUNTER_TRAIN = f"#!/usr/bin/env bash\nexec python3 -c '{COUNTER}'\n"


def _count(out: Path, attempt: int = 1, rank: int = 0) -> int:
    path = out / f"sigterms-{attempt}-{rank}"
    return len(path.read_text().splitlines()) if path.exists() else 0


def _launch(tmp_path: Path) -> tuple[subprocess.Popen[str], Path]:
    """The launcher over the counter, in a session of its own as a container's PID 1 or a local run is."""
    work, run_dir = tmp_path / "work", tmp_path / "run"
    work.mkdir()
    (work / "counter.py").write_text(COUNTER)
    write_jobspec(work, [], [sys.executable, "counter.py"])
    proc = subprocess.Popen(
        [sys.executable, "-m", "tuneplane.launcher"],
        cwd=work,
        env=_env(work, run_dir, TUNEPLANE_NODE_RANK="0"),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        text=True,
        start_new_session=True,
    )
    _wait_for(run_dir / "out" / "sigterms-1-0.ready")
    return proc, run_dir / "out"


def test_a_term_to_the_launcher_alone_is_passed_on_once(tmp_path: Path) -> None:
    """A pod's eviction signals the container's PID 1 only: the launcher passes it on."""
    proc, out = _launch(tmp_path)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=60) == 143
    assert _count(out) == 1


def test_a_repeated_term_to_the_launcher_is_passed_on_once(tmp_path: Path) -> None:
    """An engine that says stop again (a second eviction, a retried kill) still means the one stop."""
    proc, out = _launch(tmp_path)
    proc.send_signal(signal.SIGTERM)
    _until(lambda: _count(out), bool, 30, "the first SIGTERM never reached the trainer")
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=60) == 143
    assert _count(out) == 1


def test_a_local_cancel_reaches_the_trainer_once(exp: Path, storage: Path) -> None:  # noqa: F811
    backend = LocalBackend(storage)
    ref = backend.submit(job(exp, f"exec python3 -c '{COUNTER}'\n"))
    out = backend.run_dir(ref) / "out"
    _wait_for(out / "sigterms-1-0.ready")
    backend.cancel(ref)
    obs = wait(backend, ref)
    assert obs.phase == "Cancelled"
    assert _count(out) == 1


@pytest.fixture(scope="module")
def slurm_counts(slurm_cluster: SlurmCluster, tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[int]]:
    """Two jobs of the counter on the real cluster, at once: one cancelled (scancel), one requeued
    (scontrol requeue) and then cancelled; each one's SIGTERM counts per attempt. A job at its time limit
    is left out: there Slurm itself signals each task twice (slurmstepd, and srun terminating the step
    on the limit's SIGTERM), which no launcher can undo, and waiting for the shortest limit costs a
    minute (docs/slurm.md says to checkpoint on the warning signal instead)."""
    tmp = tmp_path_factory.mktemp("signals")
    root = make_slurm_lab(tmp / "lab", slurm_cluster, tmp / "shared", {"counts": {"train.sh": COUNTER_TRAIN}})
    path = root / "tuneplane.yaml"
    path.write_text(path.read_text().replace("    partition: debug\n", "    partition: debug\n    requeue: true\n"))
    git(root, "commit", "-qam", "let Slurm requeue")
    runs = {"scancel": "20250104-100000-000000", "requeue": "20250104-100002-000002"}
    request_run(root, "counts", runs["scancel"], "cpu")
    request_run(root, "counts", runs["requeue"], "cpu")
    refs = _submit(root, [("counts", run_id) for run_id in runs.values()])
    outs = {case: Path(refs[run_id].run_dir) / "out" for case, run_id in runs.items()}
    for out in outs.values():
        _until(lambda out=out: (out / "sigterms-1-0.ready").exists(), bool, 90, f"{out} never started")
    slurm_cluster.command("scancel", refs[runs["scancel"]].uid)
    slurm_cluster.command("scontrol", "requeue", refs[runs["requeue"]].uid)
    _until(lambda: (outs["requeue"] / "sigterms-2-0.ready").exists(), bool, 120, "attempt 2 never started")
    slurm_cluster.command("scancel", refs[runs["requeue"]].uid)
    backend = _backend(slurm_cluster)
    _until(
        lambda: [backend.observe(ref).phase for ref in refs.values()],
        lambda phases: all(p in ("Failed", "Cancelled") for p in phases),
        180,
        "not every job ended",
    )
    return {case: [_count(out, attempt) for attempt in (1, 2)] for case, out in outs.items()}


def test_scancel_reaches_the_trainer_once(slurm_counts: dict[str, list[int]]) -> None:
    assert slurm_counts["scancel"] == [1, 0], slurm_counts


def test_a_requeue_and_the_cancel_after_it_reach_each_attempts_trainer_once(slurm_counts: dict[str, list[int]]) -> None:
    assert slurm_counts["requeue"] == [1, 1], slurm_counts
