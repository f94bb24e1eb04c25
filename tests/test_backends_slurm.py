"""The Slurm backend against a real two-node Slurm cluster (`slurm_cluster.py`), through the bot.

Each test builds a lab whose runs go to the cluster, lets `tp bot reconcile` submit them and
`tp bot sync` follow them, and checks the status files: phases, reasons, exit codes, artifacts and
metrics (from a real ingest receiver the jobs report to).
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from support.slurm import (
    ALLREDUCE_PY,
    ALLREDUCE_TRAIN,
    EXIT7_TRAIN,
    SLEEP_TRAIN,
    make_slurm_lab,
    quiet,
    request_run,
    run_dir_of,
    status_of,
    sync_until,
    terminal,
)
from support.wait import until

if TYPE_CHECKING:
    from slurm_cluster import SlurmCluster

pytest_plugins = ("slurm_cluster",)

INGEST_SECRET_ENV = "TUNEPLANE_INGEST_SECRET"


@pytest.fixture()
def ingest(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """A real ingest receiver on 127.0.0.1; the bot mints per-run tokens from its secret."""
    from tuneplane.ingest import start_server

    secret = secrets.token_hex(16)
    url, stop = start_server(tmp_path / "ingest.db", secret.encode())
    monkeypatch.setenv(INGEST_SECRET_ENV, secret)
    try:
        yield url
    finally:
        stop()


def _reconcile(root: Path) -> Any:
    from tuneplane.bot.entry import reconcile

    return reconcile(root, echo=quiet)


def _squeue_names(cluster: SlurmCluster, name: str) -> list[str]:
    out = cluster.command("squeue", "--noheader", "--states=all", f"--name={name}", "--format=%i")
    return [line.strip() for line in out.splitlines() if line.strip()]


# ── runs that succeed, on one node and across both ─────────────────────────────────────────────────


def test_custom_allreduce_on_one_node_and_across_two(
    slurm_cluster: SlurmCluster, tmp_path: Path, ingest: str, tp: Any
) -> None:
    shared = tmp_path / "shared"
    root = make_slurm_lab(
        tmp_path / "lab",
        slurm_cluster,
        shared,
        {"ddp": {"train.sh": ALLREDUCE_TRAIN, "allreduce.py": ALLREDUCE_PY}},
        ingest=ingest,
    )
    one, two = "20250102-100000-000001", "20250102-100001-000002"
    request_run(root, "ddp", one, "gpu:1")
    request_run(root, "ddp", two, "gpu:2")
    report = _reconcile(root)
    assert sorted(report.submitted) == [f"ddp/{one}", f"ddp/{two}"], report
    submitted = status_of(root, "ddp", two)
    assert submitted["phase"] == "Submitted" and submitted["backend"]["backend"] == "slurm"
    followed = tp("job", "logs", "--follow", two, cwd=root)  # returns when the job ends
    assert followed.code == 0, followed.output
    assert "tuneplane: job" in followed.out and "2 node(s)" in followed.out

    statuses = sync_until(root, lambda s: all(terminal(v) for v in s.values()), [("ddp", one), ("ddp", two)])
    for run_id, nodes in ((one, 1), (two, 2)):
        status = statuses[run_id]
        assert status["phase"] == "Succeeded", status
        assert status["exit_code"] == 0
        out = Path(status["out_dir"])
        assert status["backend"]["run_dir"] == str(run_dir_of(status)) and status["backend"]["namespace"] == ""
        ranks = [json.loads((out / f"rank-{r}.json").read_text()) for r in range(nodes)]
        assert all(r["world"] == nodes and r["sum"] == nodes * (nodes + 1) / 2 for r in ranks)
        assert sorted(r["node"] for r in ranks) == ["n1", "n2"][:nodes]  # one task on each node
        assert all(r["nodes"] == str(nodes) and r["gpus"] == "1" for r in ranks)  # what Slurm granted
        assert {a["path"] for a in status["artifacts"]} >= {"checkpoints/step-1.txt"}
        assert status["metrics"]["train/loss"] == 0.25
        assert status["metrics"]["allreduce/sum"] == nodes * (nodes + 1) / 2
        last = tp("job", "logs", "--tail", "1", run_id, cwd=root)
        assert last.code == 0 and len(last.out.splitlines()) == 1, last.output
        token = run_dir_of(status) / ".tuneplane" / "secrets" / "job-token"
        assert token.stat().st_mode & 0o777 == 0o600  # the job's user only
        script = (run_dir_of(status) / ".tuneplane" / "slurm" / "batch.sh").read_text()
        assert token.read_text() not in script and str(token) in script
        launches = (run_dir_of(status) / "launches.txt").read_text().splitlines()
        assert len(launches) == nodes  # the job ran once: one launcher per node


def test_image_classification_on_one_node_and_across_two(
    slurm_cluster: SlurmCluster, tmp_path: Path, ingest: str
) -> None:
    shared = tmp_path / "shared"
    root = make_slurm_lab(
        tmp_path / "lab", slurm_cluster, shared, {"cls": {}}, method="pytorch/image-classification", ingest=ingest
    )
    small = {
        "epochs": 1,
        "synthetic_train_samples": 64,
        "synthetic_val_samples": 32,
        "batch_size": 16,
        "log_interval": 1,
    }
    one, two = "20250102-110000-000001", "20250102-110001-000002"
    request_run(root, "cls", one, "gpu:1", set=small, observability_url="")
    request_run(root, "cls", two, "gpu:2", set=small, observability_url="")
    report = _reconcile(root)
    assert len(report.submitted) == 2, report
    statuses = sync_until(
        root, lambda s: all(terminal(v) for v in s.values()), [("cls", one), ("cls", two)], timeout=240
    )
    for run_id in (one, two):
        status = statuses[run_id]
        why = f"{run_id}: {status.get('reason')}: {status.get('message')}\n{_log(status)[-4000:]}"
        assert status["phase"] == "Succeeded", why  # reason and message first: the dict repr is cut
        kinds = {a["kind"] for a in status["artifacts"]}
        assert "checkpoint" in kinds, status["artifacts"]
        assert "validation/loss" in status["metrics"] or "train/loss" in status["metrics"], status["metrics"]
    # torchrun's c10d rendezvous at the first node's address joined one rank from each node
    assert '"world_size": 1' in _log(statuses[one])
    assert '"world_size": 2' in _log(statuses[two]) and "rendezvous 127.0.0.1:" in _log(statuses[two])


def _log(status: dict[str, Any]) -> str:
    logs = sorted((run_dir_of(status) / "logs").glob("slurm-*.out"))
    return "\n".join(p.read_text(errors="replace") for p in logs)


# ── failures, limits and cancellation ──────────────────────────────────────────────────────────────


def test_exit_code_timeout_pending_and_cancel(slurm_cluster: SlurmCluster, tmp_path: Path, tp: Any) -> None:
    root = make_slurm_lab(
        tmp_path / "lab",
        slurm_cluster,
        tmp_path / "shared",
        {"fails": {"train.sh": EXIT7_TRAIN}, "sleeps": {"train.sh": SLEEP_TRAIN}},
    )
    failing, slow, limited, by_request, by_cli = (f"20250102-12000{i}-00000{i}" for i in range(5))
    request_run(root, "fails", failing, "cpu")
    request_run(root, "sleeps", slow, "cpu", timeout=60)
    request_run(root, "sleeps", limited, "wide:2")  # partition `small` allows one node: pending
    request_run(root, "sleeps", by_request, "cpu")
    request_run(root, "sleeps", by_cli, "cpu")
    assert len(_reconcile(root).submitted) == 5
    keys = [("fails", failing), ("sleeps", slow), ("sleeps", limited), ("sleeps", by_request), ("sleeps", by_cli)]

    statuses = sync_until(
        root,
        lambda s: (
            s[by_request].get("phase") == "Running"
            and s[by_cli].get("phase") == "Running"
            and s[limited].get("reason") != ""
        ),
        keys,
    )
    pending = statuses[limited]
    # Slurm names the partition's limit either way, depending on which of its passes looked at the job last
    assert pending["phase"] == "Pending" and pending["reason"] in {"PartitionNodeLimit", "PartitionConfig"}, pending
    assert pending["reason"] in pending["message"]

    # cancel: one through the request (`cancel: true` merged), one with `tp job cancel`
    from tuneplane.lab.runs import mark_cancel

    mark_cancel(root, _key("sleeps", by_request))
    from support.repos import git

    git(root, "commit", "-qam", "cancel by request")
    result = tp("job", "cancel", by_cli, cwd=root)
    assert result.code == 0, result.output
    report = _reconcile(root)
    assert sorted(report.cancelled) == sorted([f"sleeps/{by_request}", f"sleeps/{by_cli}"]), report
    for run_id in (by_request, by_cli):
        job_id = status_of(root, "sleeps", run_id)["backend"]["uid"]
        state = until(  # COMPLETING is Slurm's passage from RUNNING to CANCELLED while the step is reaped
            lambda job_id=job_id: slurm_cluster.command("scontrol", "show", "job", "--oneliner", job_id),
            lambda shown: "JobState=COMPLETING" not in shown,
            30,
            f"Slurm never finished reaping the cancelled job {job_id}",
            every=0.5,
        )
        assert "JobState=CANCELLED" in state, state

    statuses = sync_until(root, lambda s: terminal(s[failing]) and terminal(s[slow]), keys, timeout=200)
    assert statuses[failing]["phase"] == "Failed" and statuses[failing]["exit_code"] == 7, statuses[failing]
    assert statuses[slow]["phase"] == "Failed" and statuses[slow]["reason"] == "Timeout", statuses[slow]
    assert statuses[by_request]["phase"] == statuses[by_cli]["phase"] == "Cancelled"
    assert statuses[limited]["phase"] == "Pending"
    slurm_cluster.command("scancel", statuses[limited]["backend"]["uid"])


def _key(experiment: str, run_id: str) -> Any:
    from tuneplane.lab.runs import RunKey

    return RunKey(experiment, run_id)


def test_node_set_down_mid_run_is_a_node_failure_the_bot_retries(slurm_cluster: SlurmCluster, tmp_path: Path) -> None:
    """Without `requeue: true` Slurm ends the job NODE_FAIL: attempt 1 ends `NodeFailure`, naming the node,
    and the bot's default retry policy (3 attempts, on NodeFailure) leaves the run Pending for attempt 2."""
    root = make_slurm_lab(tmp_path / "lab", slurm_cluster, tmp_path / "shared", {"sleeps": {"train.sh": SLEEP_TRAIN}})
    run_id = "20250102-130000-000001"
    request_run(root, "sleeps", run_id, "gpu:2")
    assert _reconcile(root).submitted
    keys = [("sleeps", run_id)]
    statuses = sync_until(root, lambda s: s[run_id].get("phase") == "Running", keys)
    assert statuses[run_id]["phase"] == "Running", statuses
    try:
        slurm_cluster.command("scontrol", "update", "nodename=n2", "state=down", "reason=test-node-down")
        statuses = sync_until(root, lambda s: terminal(s[run_id]) or s[run_id].get("reason") == "RetryBackoff", keys)
    finally:
        slurm_cluster.resume("n2")
    status = statuses[run_id]
    assert status["phase"] == "Pending" and status["reason"] == "RetryBackoff", status
    assert [(a["number"], a["reason"]) for a in status["attempts"]] == [(1, "NodeFailure")], status["attempts"]
    # the failed node is named once srun has written `Node failure on n2`; the bot may see NODE_FAIL first
    # (Slurm's job record does not name the node, and with ReturnToService=2 n2 is soon IDLE again)
    failed_node = status["attempts"][0]["failed_node"]
    assert failed_node in ("n2", ""), status["attempts"]
    named = ": node n2" if failed_node else ""
    assert f"a node of the job failed or was set DOWN while it ran{named}\n" in status["message"], status["message"]
    assert "attempt 1 ended NodeFailure; attempt 2 of 3 is submitted 60 s after it ended" in status["message"]
    assert [t["phase"] for t in status["history"]][-2:] == ["Running", "Pending"], status["history"]


def test_with_requeue_a_node_failure_requeues_the_job(slurm_cluster: SlurmCluster, tmp_path: Path) -> None:
    root = make_slurm_lab(tmp_path / "lab", slurm_cluster, tmp_path / "shared", {"sleeps": {"train.sh": SLEEP_TRAIN}})
    path = root / "tuneplane.yaml"
    path.write_text(path.read_text().replace("    partition: debug\n", "    partition: debug\n    requeue: true\n"))
    from support.repos import git

    git(root, "commit", "-qam", "let Slurm requeue")
    run_id = "20250102-131000-000001"
    request_run(root, "sleeps", run_id, "gpu:2")
    assert _reconcile(root).submitted
    keys = [("sleeps", run_id)]
    assert sync_until(root, lambda s: s[run_id].get("phase") == "Running", keys)[run_id]["phase"] == "Running"
    try:
        slurm_cluster.command("scontrol", "update", "nodename=n2", "state=down", "reason=test-requeue")
        status = sync_until(root, lambda s: s[run_id].get("reason") == "REQUEUED", keys)[run_id]
    finally:
        slurm_cluster.resume("n2")
    # the run's phase is its newest attempt's: attempt 1 ended, attempt 2 waits in Slurm's queue
    assert status["phase"] == "Pending" and status["reason"] == "REQUEUED", status
    assert [t["phase"] for t in status["history"]][-2:] == ["Running", "Pending"], status["history"]
    assert [a["number"] for a in status["attempts"]] == [1], status["attempts"]
    # Preempted unless attempt 1's own evidence (its marker, slurmstepd's line) already names the node failure
    assert status["attempts"][0]["reason"] in ("Preempted", "NodeFailure"), status["attempts"]
    assert status["message"].startswith(f"attempt 1 ended {status['attempts'][0]['reason']}"), status["message"]
    assert "Slurm requeued the job (restart 1); attempt 2 waits to start" in status["message"], status["message"]
    assert ": None" not in status["message"], status["message"]
    job = slurm_cluster.command("scontrol", "show", "job", "--oneliner", status["backend"]["uid"])
    assert "Restarts=1" in job
    slurm_cluster.command("scancel", status["backend"]["uid"])
