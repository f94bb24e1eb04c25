"""Exactly once on a real Slurm cluster: racing bots, a bot killed after `sbatch`, a controller that does
not answer, and sbatch refusals as errors that name the setting to change.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

from support.repos import BRANCH, clone, git, make_remote, remote_files, remote_show, tp_process
from support.slurm import SLEEP_TRAIN, make_slurm_lab, quiet, request_run, status_of
from support.wait import wait_until

if TYPE_CHECKING:
    from slurm_cluster import SlurmCluster

pytest_plugins = ("slurm_cluster",)

COUNTING_TRAIN = """#!/usr/bin/env bash
set -euo pipefail
echo "$TUNEPLANE_RUN_ID $SLURM_JOB_ID" >> "$TUNEPLANE_STORAGE_ROOT/launches.txt"
echo "ran $TUNEPLANE_RUN_ID"
"""
CRASH_ENV = "TUNEPLANE_BOT_CRASH_AT"
CRASH_EXIT = 197


def _jobs_named(cluster: SlurmCluster, name: str) -> list[str]:
    out = cluster.command("squeue", "--noheader", "--states=all", f"--name={name}", "--format=%i")
    return [line.strip() for line in out.splitlines() if line.strip()]


def _wait_launches(path: Path, count: int, timeout: float = 90) -> list[str]:
    import time

    def launched() -> list[str]:
        return path.read_text().splitlines() if path.exists() else []

    wait_until(lambda: len(launched()) >= count, timeout, interval=0.5, message=lambda: f"launches: {launched()}")
    time.sleep(3)  # a duplicate would show up now
    return launched()


def test_three_bots_racing_submit_each_run_once(slurm_cluster: SlurmCluster, tmp_path: Path) -> None:
    remote = make_remote(tmp_path)
    shared = tmp_path / "shared"
    seed = make_slurm_lab(
        tmp_path / "seed", slurm_cluster, shared, {"count": {"train.sh": COUNTING_TRAIN}}, remote=remote
    )
    run_ids = [f"20250102-14000{i}-00000{i}" for i in range(4)]
    for run_id in run_ids:
        request_run(seed, "count", run_id, "cpu")
    git(seed, "push", "-q", "origin", f"HEAD:{BRANCH}")
    clones = [clone(remote, tmp_path / f"bot{i}") for i in range(3)]
    procs = [tp_process(root, "bot", "reconcile", "--push") for root in clones]
    results = [(proc.wait(timeout=180), proc.communicate()) for proc in procs]
    assert all(code == 0 for code, _ in results), results

    launches = _wait_launches(shared / "launches.txt", len(run_ids))
    assert sorted(line.split()[0] for line in launches) == sorted(run_ids), launches
    launched = dict(line.split()[:2] for line in launches)  # run id → the one Slurm job that ran it
    for run_id in run_ids:
        status = json.loads(remote_show(remote, f"status/count/{run_id}.json"))
        assert status["backend"]["backend"] == "slurm"
        assert launched[run_id] == status["backend"]["uid"], (launches, status["backend"])
        # a second job of that name would still be known (pending or running); an ended one is purged
        # MinJobAge after its end, so the one that ran may already be gone
        assert set(_jobs_named(slurm_cluster, status["backend"]["name"])) <= {status["backend"]["uid"]}
    statuses = [f for f in remote_files(remote, "status/count") if f.endswith(".json")]  # pages beside them
    assert len(statuses) == len(run_ids)


def test_bot_killed_between_sbatch_and_status_commit(slurm_cluster: SlurmCluster, tmp_path: Path) -> None:
    shared = tmp_path / "shared"
    root = make_slurm_lab(tmp_path / "lab", slurm_cluster, shared, {"count": {"train.sh": COUNTING_TRAIN}})
    run_id = "20250102-150000-000001"
    request_run(root, "count", run_id, "cpu")
    crashed = tp_process(root, "bot", "reconcile", env={CRASH_ENV: "submitted"})
    assert crashed.wait(timeout=120) == CRASH_EXIT
    assert status_of(root, "count", run_id) == {}  # sbatch ran, nothing was written

    again = tp_process(root, "bot", "reconcile")
    out, err = again.communicate(timeout=120)
    assert again.returncode == 0, out + err
    status = status_of(root, "count", run_id)
    assert status["phase"] == "Submitted", status
    assert _jobs_named(slurm_cluster, status["backend"]["name"]) == [status["backend"]["uid"]]
    launches = _wait_launches(shared / "launches.txt", 1)
    assert [line.split()[0] for line in launches] == [run_id]


def test_unanswering_controller_is_retried_never_lost(slurm_cluster: SlurmCluster, tmp_path: Path) -> None:
    from tuneplane.bot.entry import reconcile

    root = make_slurm_lab(tmp_path / "lab", slurm_cluster, tmp_path / "shared", {"count": {"train.sh": COUNTING_TRAIN}})
    good = (root / "tuneplane.yaml").read_text()
    dead = tmp_path / "dead.conf"  # the same cluster, but a controller port nobody listens on
    dead.write_text(
        "\n".join(
            "SlurmctldPort=9" if line.startswith("SlurmctldPort=") else line
            for line in slurm_cluster.conf.read_text().splitlines()
        )
        + "\n"
    )
    (root / "tuneplane.yaml").write_text(good.replace(json.dumps(str(slurm_cluster.conf)), json.dumps(str(dead))))
    git(root, "commit", "-qam", "point at a controller that does not answer")
    run_id = "20250102-160000-000001"
    request_run(root, "count", run_id, "cpu")

    report = reconcile(root, echo=quiet)
    assert report.waiting == [f"count/{run_id}"], report
    status = status_of(root, "count", run_id)
    assert status["phase"] == "Pending" and status["reason"] == "SubmitFailed", status
    assert "slurm controller" in status["message"].lower() and "retry" in status["message"]

    (root / "tuneplane.yaml").write_text(good)
    git(root, "commit", "-qam", "the controller is back")
    report = reconcile(root, echo=quiet)
    assert report.submitted == [f"count/{run_id}"], report
    status = status_of(root, "count", run_id)
    assert status["backend"]["uid"] and _jobs_named(slurm_cluster, status["backend"]["name"]) == [
        status["backend"]["uid"]
    ]


def test_a_hung_controller_is_retried_and_its_job_adopted(slurm_cluster: SlurmCluster, tmp_path: Path) -> None:
    """slurmctld stopped (SIGSTOP) while sbatch waits: the bot gives up after command_timeout and says it
    will retry; once the controller runs again, the next bot finds whatever it did and runs it once."""
    import os
    import signal

    from tuneplane.bot.entry import reconcile

    shared = tmp_path / "shared"
    root = make_slurm_lab(tmp_path / "lab", slurm_cluster, shared, {"count": {"train.sh": COUNTING_TRAIN}})
    text = (root / "tuneplane.yaml").read_text()
    (root / "tuneplane.yaml").write_text(
        text.replace("    partition: debug\n", "    partition: debug\n    command_timeout: 3\n")
    )
    git(root, "commit", "-qam", "a short command timeout")
    run_id = "20250102-180000-000001"
    request_run(root, "count", run_id, "cpu")
    controller = slurm_cluster.processes["slurmctld"].pid
    os.kill(controller, signal.SIGSTOP)
    try:
        report = reconcile(root, echo=quiet)
    finally:
        os.kill(controller, signal.SIGCONT)
    assert report.waiting == [f"count/{run_id}"], report
    status = status_of(root, "count", run_id)
    assert status["phase"] == "Pending" and status["reason"] == "SubmitFailed", status
    assert "did not answer" in status["message"]

    slurm_cluster.wait_answering()
    report = reconcile(root, echo=quiet)
    assert report.submitted == [f"count/{run_id}"], report
    status = status_of(root, "count", run_id)
    assert _jobs_named(slurm_cluster, status["backend"]["name"]) == [status["backend"]["uid"]]
    assert [line.split()[0] for line in _wait_launches(shared / "launches.txt", 1)] == [run_id]


def test_sbatch_refusals_name_the_setting(slurm_cluster: SlurmCluster, tmp_path: Path) -> None:
    from tuneplane.bot.entry import reconcile

    root = make_slurm_lab(tmp_path / "lab", slurm_cluster, tmp_path / "shared", {"sleeps": {"train.sh": SLEEP_TRAIN}})
    text = (root / "tuneplane.yaml").read_text()
    text = text.replace("    partition: debug\n", "    partition: nosuchpartition\n")
    text = text.replace("  wide:\n    gpus_per_node: 1\n", "  wide:\n    gpus_per_node: 1\n", 1)
    text = text.replace(
        "  cpu:\n    gpus_per_node: 0\n", "  cpu:\n    gpus_per_node: 0\n  huge:\n    gpus_per_node: 5\n", 1
    )
    text = text.replace(
        "      wide:\n        partition: small\n",
        "      wide:\n        partition: small\n      huge:\n        partition: debug\n",
    )
    (root / "tuneplane.yaml").write_text(text)
    git(root, "commit", "-qam", "a partition that does not exist; nodes with too few GPUs")
    bad_partition, too_many_gpus = "20250102-170000-000001", "20250102-170001-000002"
    request_run(root, "sleeps", bad_partition, "cpu")
    request_run(root, "sleeps", too_many_gpus, "huge:5")
    report = reconcile(root, echo=quiet)
    assert sorted(report.refused) == sorted([f"sleeps/{bad_partition}", f"sleeps/{too_many_gpus}"]), report

    first = status_of(root, "sleeps", bad_partition)
    assert first["phase"] == "Failed" and first["reason"] == "SubmitRefused", first
    assert "tuneplane.yaml" in first["message"] and "cluster.slurm.partition" in first["message"]
    assert "Invalid partition" in first["message"]
    second = status_of(root, "sleeps", too_many_gpus)
    assert second["phase"] == "Failed" and "cluster.slurm.profiles.huge" in second["message"], second
    assert "not available" in second["message"]
    assert _jobs_named(slurm_cluster, _job_name(root, bad_partition)) == []


def _job_name(root: Path, run_id: str) -> str:
    from tuneplane.plan.names import object_name

    return object_name("sleeps", run_id)


def test_a_job_slurm_has_forgotten_is_read_from_its_exit_marker(slurm_cluster: SlurmCluster, tmp_path: Path) -> None:
    """scontrol answers "Invalid job id" for a purged job: the script's markers still tell how it ended."""
    from tuneplane.backends.base import BackendRef
    from tuneplane.backends.slurm import SlurmBackend
    from tuneplane.render.slurm import STATE_DIR

    backend = SlurmBackend(str(slurm_cluster.conf))
    run_dir = tmp_path / "run"
    state = run_dir / STATE_DIR
    state.mkdir(parents=True)
    gone = BackendRef(backend="slurm", kind="SlurmJob", name="gone-0123456789", run_dir=str(run_dir), uid="987654")
    lost = backend.observe(gone)
    assert lost.phase == "Failed" and lost.reason == "Lost", lost

    (state / "987654.1.started").write_text(
        '{"job_id": "987654", "attempt": 1, "started_at": "2025-01-02T10:00:00Z"}\n'
    )
    (state / "987654.1.exit").write_text(
        '{"job_id": "987654", "attempt": 1, "exit_code": 3, "signal": 0, '
        '"slurm_state": "", "finished_at": "2025-01-02T10:05:00Z"}\n'
    )
    ended = backend.observe(gone)
    assert (ended.phase, ended.reason, ended.exit_code, ended.started_at, ended.finished_at) == (
        "Failed",
        "Error",
        3,
        "2025-01-02T10:00:00Z",
        "2025-01-02T10:05:00Z",
    ), ended

    # a requeue: attempt 2 started and left no end marker; attempt 1's end never decides it
    (state / "987654.2.started").write_text(
        '{"job_id": "987654", "attempt": 2, "started_at": "2025-01-02T10:06:00Z"}\n'
    )
    again = backend.observe(gone)
    assert (again.phase, again.reason) == ("Failed", "Lost"), again
    assert [(a.number, a.reason) for a in again.attempts] == [(1, "Preempted"), (2, "Lost")]
