"""How a Slurm attempt ended, told truthfully on a real two-node cluster (`slurm_cluster.py`), while
Slurm knows the job and again once it has forgotten it (the cluster's MinJobAge is short).

The bot submits each run (`tp bot reconcile`); the tests then observe through the backend, as the
bot's sync does, and check the phase, the reason, the exit code or signal, the failing node and rank,
the trainer's error line and the log tail of every attempt, and the GPUs each attempt held (what Slurm
granted, from the fake GRES gpus of the nodes) with its GPU-seconds.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from support.repos import git
from support.slurm import SLEEP_TRAIN, make_slurm_lab, quiet, request_run, status_of
from support.wait import until

if TYPE_CHECKING:
    from slurm_cluster import SlurmCluster

    from tuneplane.backends.base import BackendRef, Observation

pytest_plugins = ("slurm_cluster",)

TERMINAL = ("Succeeded", "Failed", "Cancelled")
# Rank 1 (the second node) dies on a missing data file with exit code 3; rank 0 would wait forever.
RANK_FAILS = """#!/usr/bin/env bash
set -euo pipefail
if [ "$TUNEPLANE_NODE_RANK" = 1 ]; then
  echo "rank 1 loading data"
  exec python3 -c '
import sys, traceback
try:
    open("/nonexistent-dir/data.jsonl")
except FileNotFoundError:
    traceback.print_exc()
    sys.exit(3)
'
fi
echo "rank 0 waiting"
sleep 600
"""
# Grows past the job's --mem (900M) within seconds.
MEMORY_HOG = """#!/usr/bin/env bash
echo "allocating"
exec python3 -c '
import time
held = []
for _ in range(200):
    held.append(bytearray(20 * 1024 * 1024))
    time.sleep(0.05)
'
"""
# Asks for the warning before the time limit (a SIGUSR1 handler), and notes when it comes.
WARNED = """#!/usr/bin/env bash
exec python3 -c '
import os, signal, time
signal.signal(signal.SIGUSR1, lambda *_: open(os.environ["TUNEPLANE_OUT_DIR"] + "/warned", "w").write(
    os.environ["TUNEPLANE_LIMIT_WARNING_SECONDS"]))
print("training until the limit", flush=True)
time.sleep(600)
'
"""
# Each attempt says what it was told, and leaves a complete checkpoint for the next one.
RESUMING = """#!/usr/bin/env bash
set -euo pipefail
echo "$TUNEPLANE_ATTEMPT ${TUNEPLANE_RESUME_FROM:-none}" >> "$TUNEPLANE_OUT_DIR/attempts.txt"
mkdir -p "$TUNEPLANE_OUT_DIR/checkpoints/checkpoint-$TUNEPLANE_ATTEMPT"
echo '{}' > "$TUNEPLANE_OUT_DIR/checkpoints/checkpoint-$TUNEPLANE_ATTEMPT/trainer_state.json"
sleep 600
"""


def _backend(cluster: SlurmCluster, timeout: float | None = None) -> Any:
    from tuneplane.backends.slurm import SlurmBackend

    return SlurmBackend(str(cluster.conf), timeout)


def _submit(root: Path, keys: list[tuple[str, str]]) -> dict[str, BackendRef]:
    from tuneplane.backends.base import BackendRef
    from tuneplane.bot.entry import reconcile

    report = reconcile(root, echo=quiet)
    assert len(report.submitted) == len(keys), report
    refs = {}
    for experiment, run_id in keys:
        backend = status_of(root, experiment, run_id)["backend"]
        refs[run_id] = BackendRef(**{k: backend.get(k, "") for k in ("backend", "kind", "name", "run_dir", "uid")})
    return refs


def _until(what: Callable[[], Any], ok: Callable[[Any], bool], timeout: float, why: str) -> Any:
    """`support.wait.until`, asking Slurm once a second."""
    return until(what, ok, timeout, why, every=1)


def _observe_all(backend: Any, refs: dict[str, BackendRef]) -> dict[str, Observation]:
    return {run_id: backend.observe(ref) for run_id, ref in refs.items()}


def _started(ref: BackendRef, attempt: int = 1) -> bool:
    return (Path(ref.run_dir) / ".tuneplane" / "slurm" / f"{ref.uid}.{attempt}.started").exists()


def _forget(cluster: SlurmCluster, refs: dict[str, BackendRef]) -> None:
    _until(lambda: [cluster.forgotten(ref.uid) for ref in refs.values()], all, 150, "Slurm still knows the jobs")


def _ran_a_second(attempts: tuple[Any, ...]) -> bool:
    from tuneplane.constants import epoch_of

    start = epoch_of(attempts[-1].started_at) if attempts else None  # the newest attempt's
    return start is not None and time.time() >= start + 1.5


def _assert_gpu_seconds(status: dict[str, Any], gpus: int, attempts: int) -> None:
    """Every attempt held `gpus` GPUs and spent that many times its own wall time; the run's GPU-seconds
    (its GPU-hours on the pages) are their sum."""
    from tuneplane.constants import epoch_of
    from tuneplane.lab.runs import unchecked_from
    from tuneplane.views.dashboard import gpu_seconds

    spent = status["attempts"]
    assert len(spent) == attempts, spent
    for attempt in spent:
        start, end = epoch_of(attempt["started_at"]), epoch_of(attempt["finished_at"])
        assert start is not None and end is not None and end > start, attempt
        assert attempt["gpus"] == gpus, attempt
        assert attempt["gpu_seconds"] == round(gpus * (end - start), 1) > 0, attempt
    assert gpu_seconds(unchecked_from(status)) == sum(a["gpu_seconds"] for a in spent)


def _verdict(seen: Observation) -> tuple[Any, ...]:
    last = seen.attempts[-1]
    return (
        seen.phase,
        seen.reason,
        seen.exit_code,
        last.reason,
        last.exit_code,
        last.signal,
        last.failed_node,
        last.failed_rank,
        last.message,
        len(seen.attempts),
    )


def test_limit_cancel_memory_and_a_failing_rank_before_and_after_slurm_forgets(
    slurm_cluster: SlurmCluster, tmp_path: Path
) -> None:
    root = make_slurm_lab(
        tmp_path / "lab",
        slurm_cluster,
        tmp_path / "shared",
        {
            "sleeps": {"train.sh": SLEEP_TRAIN},
            "hog": {"train.sh": MEMORY_HOG},
            "ranks": {"train.sh": RANK_FAILS},
            "warned": {"train.sh": WARNED},
        },
    )
    path = root / "tuneplane.yaml"  # warn 30 s before a limit; only a run with a limit gets --signal
    path.write_text(path.read_text().replace("    partition: debug\n", "    partition: debug\n    limit_warning: 30\n"))
    git(root, "commit", "-qam", "warn before the limit")
    limited, by_hand, hog, ranks = (f"20250103-10000{i}-00000{i}" for i in range(4))
    request_run(root, "warned", limited, "cpu", timeout=60)
    request_run(root, "sleeps", by_hand, "cpu")
    request_run(root, "hog", hog, "cpu")
    request_run(root, "ranks", ranks, "gpu:2")
    refs = _submit(root, [("warned", limited), ("sleeps", by_hand), ("hog", hog), ("ranks", ranks)])
    backend = _backend(slurm_cluster)

    # the trainer itself runs (its own marker, not the batch script's): a cancel in the second before
    # srun starts the step ends the job before any process can be signalled (the unit test below)
    trainer = Path(refs[by_hand].run_dir) / "out" / "started"
    _until(trainer.exists, bool, 60, "the job to cancel never started its trainer")
    slurm_cluster.command("scancel", refs[by_hand].uid)  # by hand, not through the bot
    seen = _until(
        lambda: _observe_all(backend, refs),
        lambda s: all(o.phase in TERMINAL for o in s.values()),
        180,
        "not every run ended",
    )

    timed_out = seen[limited]
    assert (timed_out.phase, timed_out.reason, timed_out.exit_code) == ("Failed", "Timeout", 143), timed_out
    assert timed_out.attempts[-1].signal == 15 and "time limit" in timed_out.message
    assert (Path(refs[limited].run_dir) / "out" / "warned").read_text() == "30"  # it asked: it was warned
    for run_id in (by_hand, hog, ranks):  # no limit, no warning
        script = (Path(refs[run_id].run_dir) / ".tuneplane" / "slurm" / "batch.sh").read_text()
        assert "#SBATCH --signal" not in script

    cancelled = seen[by_hand]
    assert (cancelled.phase, cancelled.reason) == ("Cancelled", "Cancelled"), cancelled
    assert cancelled.attempts[-1].signal == 15 and cancelled.exit_code == 143

    memory = seen[hog]
    assert (memory.phase, memory.reason) == ("Failed", "OutOfMemory"), memory
    assert memory.attempts[-1].signal == 9 and memory.exit_code == 137, memory
    assert memory.attempts[-1].failed_node == "n1" and memory.attempts[-1].failed_rank == 0
    assert any("exceeded memory limit" in line for line in memory.attempts[-1].log_tail), memory.attempts[-1]

    failed = seen[ranks]
    last = failed.attempts[-1]
    assert (failed.phase, failed.reason, failed.exit_code) == ("Failed", "Error", 3), failed
    assert (last.failed_node, last.failed_rank, last.exit_code, last.signal) == ("n2", 1, 3, None), last
    assert last.message.startswith("FileNotFoundError: [Errno 2]") and "data.jsonl" in last.message, last
    assert "rank 1 loading data" in last.log_tail, last.log_tail
    assert "n2" in failed.message and "FileNotFoundError" in failed.message, failed.message
    assert last.where == ("n1", "n2") and last.started_at and last.finished_at

    _forget(slurm_cluster, refs)
    again = _observe_all(backend, refs)
    for run_id, before in seen.items():
        assert _verdict(again[run_id]) == _verdict(before), (run_id, again[run_id], before)


def test_a_requeue_is_a_new_attempt_that_resumes_and_a_paused_controller_decides_nothing(
    slurm_cluster: SlurmCluster, tmp_path: Path
) -> None:
    from tuneplane.bot.entry import sync

    root = make_slurm_lab(tmp_path / "lab", slurm_cluster, tmp_path / "shared", {"resumes": {"train.sh": RESUMING}})
    path = root / "tuneplane.yaml"
    path.write_text(
        path.read_text()
        .replace("    partition: debug\n", "    partition: debug\n    requeue: true\n")
        .replace("profiles:\n", "profiles:\n  pair:\n    gpus_per_node: 2\n    max_nodes: 1\n", 1)
    )
    git(root, "commit", "-qam", "let Slurm requeue; a profile of two GPUs on one node")
    run_id = "20250103-110000-000001"
    request_run(root, "resumes", run_id, "pair:2")  # each attempt holds both GPUs of its node
    refs = _submit(root, [("resumes", run_id)])
    ref = refs[run_id]
    out = Path(ref.run_dir) / "out"
    backend, impatient = _backend(slurm_cluster), _backend(slurm_cluster, timeout=3)
    _until(lambda: (out / "attempts.txt").exists(), bool, 60, "attempt 1 never ran")
    assert "--requeue" in (Path(ref.run_dir) / ".tuneplane" / "slurm" / "batch.sh").read_text()
    # times are kept to the second: attempt 1 runs into its next second, so its GPU-seconds are not 0. Slurm's
    # start can come a second before the launcher's own (which the status keeps): wait past both
    _until(lambda: backend.observe(ref), lambda o: _ran_a_second(o.attempts), 30, "attempt 1 never started")
    _until(lambda: time.time() - (out / "attempts.txt").stat().st_mtime, lambda age: age >= 1.5, 30, "no clock")

    slurm_cluster.command("scontrol", "requeue", ref.uid)
    _until(lambda: backend.observe(ref), lambda o: o.reason == "REQUEUED", 30, "never requeued")
    controller = slurm_cluster.processes["slurmctld"].pid
    os.kill(controller, signal.SIGSTOP)
    try:
        paused = impatient.observe(ref)
    finally:
        os.kill(controller, signal.SIGCONT)
    assert paused.phase == "Unknown" and "retry" in paused.message, paused  # never a verdict from old files

    running = _until(
        lambda: backend.observe(ref),
        lambda o: len(o.attempts) == 2 and o.attempts[1].started_at,
        90,
        "attempt 2 never started",
    )
    assert running.phase == "Running", running
    first, second = running.attempts
    assert (first.number, first.reason, first.signal) == (1, "Preempted", 15), first
    assert (second.number, second.reason) == (2, None), second
    lines = _until(lambda: (out / "attempts.txt").read_text().splitlines(), lambda v: len(v) == 2, 30, "no attempt 2")
    assert lines == ["1 none", f"2 {out / 'checkpoints' / 'checkpoint-1'}"]
    sync(root, echo=quiet)  # the bot records attempt 1's end while attempt 2 runs
    assert [a["gpus"] for a in status_of(root, "resumes", run_id)["attempts"]] == [2, 2]
    # attempt 2 too runs into its next second before the cancel, by Slurm's clock and the launcher's
    _until(lambda: backend.observe(ref), lambda o: _ran_a_second(o.attempts), 30, "attempt 2 never ran a second")
    _until(lambda: time.time() - (out / "attempts.txt").stat().st_mtime, lambda age: age >= 1.5, 30, "no clock")

    slurm_cluster.command("scancel", ref.uid)
    ended = _until(lambda: backend.observe(ref), lambda o: o.phase in TERMINAL, 60, "the cancel never ended it")
    assert (ended.phase, ended.reason) == ("Cancelled", "Cancelled"), ended
    assert [a.reason for a in ended.attempts] == ["Preempted", "Cancelled"], ended.attempts
    assert [a.gpus for a in ended.attempts] == [2, 2], ended.attempts
    sync(root, echo=quiet)
    _assert_gpu_seconds(status_of(root, "resumes", run_id), gpus=2, attempts=2)
    _forget(slurm_cluster, refs)
    assert _verdict(backend.observe(ref)) == _verdict(ended)
    assert [a.reason for a in backend.observe(ref).attempts] == ["Preempted", "Cancelled"]
    sync(root, echo=quiet)  # the bot looks again after the end (a requeue may come): nothing changes
    _assert_gpu_seconds(status_of(root, "resumes", run_id), gpus=2, attempts=2)


def test_requeues_past_the_retry_budget_are_stopped_by_the_bot(slurm_cluster: SlurmCluster, tmp_path: Path) -> None:
    """`retry: {attempts: 2}` and Slurm's `--requeue`: the first requeue starts attempt 2 untouched; the
    second (held, so that attempt 3 cannot start before the bot looks) is past the budget: the bot's sync
    cancels the job in Slurm, then records the run ended."""
    from tuneplane.bot.entry import sync

    root = make_slurm_lab(tmp_path / "lab", slurm_cluster, tmp_path / "shared", {"sleeps": {"train.sh": SLEEP_TRAIN}})
    path = root / "tuneplane.yaml"
    path.write_text(path.read_text().replace("    partition: debug\n", "    partition: debug\n    requeue: true\n"))
    git(root, "commit", "-qam", "let Slurm requeue")
    run_id = "20250103-130000-000001"
    request_run(root, "sleeps", run_id, "gpu:1", retry={"attempts": 2})
    ref = _submit(root, [("sleeps", run_id)])[run_id]
    backend = _backend(slurm_cluster)
    queued = ("squeue", "--noheader", "--format=%i %T", f"--jobs={ref.uid}")
    _until(lambda: _started(ref), bool, 60, "attempt 1 never ran")

    slurm_cluster.command("scontrol", "requeue", ref.uid)
    _until(lambda: _started(ref, 2), bool, 90, "attempt 2 never started")
    sync(root, echo=quiet)
    status = status_of(root, "sleeps", run_id)
    assert (status["phase"], [a["reason"] for a in status["attempts"]]) == ("Running", ["Preempted", ""]), status
    assert ref.uid in slurm_cluster.command(*queued, check=False)  # within the budget: left running

    slurm_cluster.command("scontrol", "requeuehold", ref.uid)
    _until(lambda: backend.observe(ref), lambda o: o.reason == "REQUEUED" and len(o.attempts) == 2, 60, "not held")
    sync(root, echo=quiet)

    status = status_of(root, "sleeps", run_id)
    assert (status["phase"], status["reason"]) == ("Failed", "RetriesExhausted"), status
    assert [(a["number"], a["reason"]) for a in status["attempts"]] == [(1, "Preempted"), (2, "Preempted")]
    assert "attempt 2 of 2 ended Preempted; the engine requeued it, but the retry budget is spent" in status["message"]
    assert "the job was stopped" in status["message"]
    _until(lambda: slurm_cluster.command(*queued, check=False).strip(), lambda out: out == "", 60, "still queued")
    ended = backend.observe(ref)
    assert ended.phase == "Cancelled", ended  # stopped by the bot's scancel, as `cancel: true` stops it


def test_a_killed_slurmd_fails_the_run_with_node_failure(slurm_cluster: SlurmCluster, tmp_path: Path) -> None:
    root = make_slurm_lab(tmp_path / "lab", slurm_cluster, tmp_path / "shared", {"sleeps": {"train.sh": SLEEP_TRAIN}})
    run_id = "20250103-120000-000001"
    request_run(root, "sleeps", run_id, "gpu:2")
    refs = _submit(root, [("sleeps", run_id)])
    ref = refs[run_id]
    backend = _backend(slurm_cluster)
    _until(lambda: backend.observe(ref), lambda o: o.phase == "Running" and _started(ref), 60, "never ran")
    time.sleep(2)  # both launchers are up
    slurm_cluster.processes["slurmd-n2"].kill()
    slurm_cluster.processes["slurmd-n2"].wait(timeout=10)
    try:
        ended = _until(lambda: backend.observe(ref), lambda o: o.phase in TERMINAL, 150, "the node never failed")
    finally:
        slurm_cluster.restart_slurmd("n2")
        slurm_cluster.resume("n2")
    assert (ended.phase, ended.reason) == ("Failed", "NodeFailure"), ended
    assert ended.attempts[-1].where == ("n1", "n2") and "node" in ended.message
    assert ended.attempts[-1].failed_node == "n2", ended.attempts[-1]
    _forget(slurm_cluster, refs)
    assert _verdict(backend.observe(ref)) == _verdict(ended)


def test_a_request_larger_than_the_partition_is_refused_at_submit(slurm_cluster: SlurmCluster, tmp_path: Path) -> None:
    from tuneplane.bot.entry import reconcile

    root = make_slurm_lab(tmp_path / "lab", slurm_cluster, tmp_path / "shared", {"sleeps": {"train.sh": SLEEP_TRAIN}})
    path = root / "tuneplane.yaml"
    path.write_text(
        path.read_text().replace(
            "  gpu:\n    gpus_per_node: 1\n    max_nodes: 2\n", "  gpu:\n    gpus_per_node: 1\n    max_nodes: 3\n"
        )
    )
    git(root, "commit", "-qam", "a profile wider than the cluster")
    run_id = "20250103-130000-000001"
    request_run(root, "sleeps", run_id, "gpu:3")
    report = reconcile(root, echo=quiet)
    assert report.refused == [f"sleeps/{run_id}"], report
    status = status_of(root, "sleeps", run_id)
    assert status["phase"] == "Failed" and status["reason"] == "SubmitRefused", status
    assert "profiles.gpu" in status["message"] and "3 nodes" in status["message"] and "has 2" in status["message"]
