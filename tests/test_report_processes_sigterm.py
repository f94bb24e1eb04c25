"""tuneplane.report's SIGTERM handler under the review's cases: a fork Pool's terminate() while its
workers finish (it deadlocked), a trainer that chains handlers after init() (it was killed mid
graceful stop) and a trainer that is PID 1 (the kernel ignored the re-raised signal and every later
point was dropped). Every run is bounded: a hang fails the test."""

from __future__ import annotations

import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from test_report_processes import SECRET, job_env, rows

from tuneplane.ingest.server import IngestServer

TIMEOUT = 60


def run_script(
    tmp_path: Path,
    code: str,
    env: dict[str, str],
    prefix: list[str] | None = None,
) -> subprocess.CompletedProcess[str]:
    script = tmp_path / "t.py"
    script.write_text(textwrap.dedent(code))
    return subprocess.run(
        [*(prefix or []), sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=TIMEOUT
    )


def test_fork_pool_blocks_that_terminate_workers_while_they_finish_never_hang(tmp_path: Path) -> None:
    """Pool.__exit__ terminates workers that are in their exit-time finish(): 20 blocks in a row end."""
    server = IngestServer(tmp_path / "ingest.sqlite", SECRET).start()
    code = """
    import multiprocessing as mp, tuneplane.report as r
    def work(i):
        r.log({"w": float(i)}, step=i)
        return i
    if __name__ == "__main__":
        ctx = mp.get_context("fork")
        for block in range(20):
            with ctx.Pool(4) as p:
                assert p.map(work, range(8)) == list(range(8))
        print("done", flush=True)
    """
    try:
        port = int(server.url.rsplit(":", 1)[1])
        done = run_script(tmp_path, code, job_env(port, tmp_path))
    finally:
        server.stop()
    assert done.returncode == 0 and "done" in done.stdout, done.stderr


def test_a_handler_chained_after_init_keeps_its_graceful_stop(tmp_path: Path) -> None:
    """Lightning's signal connector (or SLURM requeue) installs its handler after init() and calls the
    previous one, ours: ours flushes and returns, so the trainer saves and exits 0 as it meant to."""
    server = IngestServer(tmp_path / "ingest.sqlite", SECRET).start()
    code = """
    import os, signal, sys, tuneplane.report as r
    r.init(monitor_hardware=False)
    previous = signal.getsignal(signal.SIGTERM)
    stop = []
    def mine(signum, frame):
        stop.append(1)
        previous(signum, frame)
    signal.signal(signal.SIGTERM, mine)
    step = 0
    while not stop and step < 10000:
        r.log({"loss": 1.0 / (step + 1)}, step=step)
        if step == 5:
            os.kill(os.getpid(), signal.SIGTERM)
        step += 1
    open("ckpt", "w").write(str(step))
    r.log({"saved": 1.0}, step=step)
    sys.exit(0)
    """
    try:
        port = int(server.url.rsplit(":", 1)[1])
        env = job_env(port, tmp_path)
        script_dir = tmp_path
        done = subprocess.run(
            [sys.executable, "-c", textwrap.dedent(code)],
            env=env,
            cwd=script_dir,
            capture_output=True,
            text=True,
            timeout=TIMEOUT,
        )
    finally:
        server.stop()
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "ckpt").read_text() == "6"
    assert rows(tmp_path / "ingest.sqlite") == {"loss": (6, 6), "saved": (1, 1)}


PID1 = """
import os, signal, tuneplane.report as r
r.init(monitor_hardware=False)
for step in range(40):
    r.log({"loss": float(step)}, step=step)
    if step == 5:
        os.kill(os.getpid(), signal.SIGTERM)
print("kept training", flush=True)
"""


def _can_unshare() -> bool:
    if shutil.which("unshare") is None:
        return False
    try:
        return (
            subprocess.run(["unshare", "-pf", "--mount-proc", "true"], capture_output=True, timeout=TIMEOUT).returncode
            == 0
        )
    except (OSError, subprocess.TimeoutExpired):
        return False


@pytest.mark.skipif(not _can_unshare(), reason="needs unshare(1) with PID namespaces (root) to run as PID 1")
def test_as_pid_1_a_sigterm_still_ends_the_process_after_the_drain(tmp_path: Path) -> None:
    """The kernel ignores a default-action signal PID 1 sends itself: the handler makes sure the
    process ends anyway (143), not train on with reporting finished and every later point dropped."""
    server = IngestServer(tmp_path / "ingest.sqlite", SECRET).start()
    try:
        port = int(server.url.rsplit(":", 1)[1])
        done = run_script(tmp_path, PID1, job_env(port, tmp_path), prefix=["unshare", "-pf", "--mount-proc"])
    finally:
        server.stop()
    assert "kept training" not in done.stdout, done.stderr
    assert done.returncode == 128 + 15, done.stderr
    assert rows(tmp_path / "ingest.sqlite") == {"loss": (6, 6)}
