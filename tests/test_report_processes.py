"""tuneplane.report as training processes end: SIGTERM mid-run, a SIGKILL that leaves the overflow file
behind, pool workers terminated, and a job with no out dir. Every point logged is delivered once or
left in the out dir for the collector, which a second pass uploads with no point stored twice."""

from __future__ import annotations

import os
import signal
import socket
import sqlite3
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from support.installed import needs
from support.wait import wait_until

from tuneplane.collector import sources
from tuneplane.ingest import mint_token
from tuneplane.ingest.server import IngestServer

SECRET = b"p" * 32
RUN = "run-proc"
TIMEOUT = 120


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def job_env(port: int, out: Path | None, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TUNEPLANE_") and k not in ("RANK", "LOCAL_RANK")}
    env.update(
        {
            "TUNEPLANE_JOB_ENABLED": "1",
            "TUNEPLANE_JOB_ENDPOINT": f"http://127.0.0.1:{port}",
            "TUNEPLANE_JOB_RUN_ID": RUN,
            "TUNEPLANE_JOB_TOKEN": mint_token(SECRET, RUN),
            "TUNEPLANE_REPORT_FLUSH_INTERVAL": "0.02",
            "TUNEPLANE_REPORT_RETRY_BASE": "0.02",
            "TUNEPLANE_REPORT_RETRY_CAP": "0.2",
            "TUNEPLANE_REPORT_FINISH_TIMEOUT": "1",
            **extra,
        }
    )
    if out is not None:
        env["TUNEPLANE_OUT_DIR"] = str(out)
    return env


def rows(db: Path) -> dict[str, tuple[int, int]]:
    """key -> (rows stored, distinct steps) for the run."""
    with sqlite3.connect(db) as conn:
        found = conn.execute(
            "SELECT s.key, COUNT(*), COUNT(DISTINCT x.step) FROM samples x JOIN series s "
            "ON s.id = x.series WHERE s.run_id = ? GROUP BY s.key",
            (RUN,),
        ).fetchall()
    return {key: (count, steps) for key, count, steps in found}


def trainer(code: str, env: dict[str, str]) -> subprocess.Popen[str]:
    """A training script that prints `ready` once it has logged what the test checks."""
    return subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(code)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def wait_ready(proc: subprocess.Popen[str]) -> None:
    assert proc.stdout is not None
    line = proc.stdout.readline()
    assert line.strip() == "ready", proc.communicate(timeout=TIMEOUT)


def collect(env: dict[str, str], out: Path) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        [sys.executable, "-m", "tuneplane.collector", "--once", "--final", "--out-dir", str(out)],
        env=env,
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
    )
    assert done.returncode == 0, done.stderr
    return done


LOG_THEN_WAIT = """
import time, tuneplane.report as r
r.init(monitor_hardware=False{options})
for s in range({steps}):
    r.log({{"loss": 1.0 / (s + 1), "acc": 0.5}}, step=s)
print("ready", flush=True)
time.sleep(100)
"""


def test_sigterm_mid_run_leaves_what_it_could_not_send_for_the_collector(tmp_path: Path) -> None:
    """The receiver is down when the trainer is told to stop: nothing logged is lost (in memory or in
    the overflow file), the process still dies of SIGTERM, and one collector pass delivers it all."""
    port, out = free_port(), tmp_path / "out"
    out.mkdir()
    env = job_env(port, out)
    proc = trainer(LOG_THEN_WAIT.format(options=", buffer_bytes=64 * 1024", steps=3000), env)
    wait_ready(proc)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=TIMEOUT)
    assert proc.returncode == -signal.SIGTERM, err  # the signal's meaning is kept for the launcher
    assert list((out / ".tuneplane").glob("report-unsent-*.jsonl")), err
    server = IngestServer(tmp_path / "ingest.sqlite", SECRET, port=port).start()
    try:
        collect(env, out)
        collect(env, out)  # a second pass (a restarted job's) sends nothing again
    finally:
        server.stop()
    assert rows(tmp_path / "ingest.sqlite") == {"loss": (3000, 3000), "acc": (3000, 3000)}
    assert not list((out / ".tuneplane").glob("report-*"))


def test_sigterm_with_a_healthy_receiver_delivers_what_is_queued(tmp_path: Path) -> None:
    """Points still in memory (the sender waits a long interval) reach the receiver before the
    process ends, not the bin."""
    server = IngestServer(tmp_path / "ingest.sqlite", SECRET).start()
    out = tmp_path / "out"
    out.mkdir()
    try:
        port = int(server.url.rsplit(":", 1)[1])
        proc = trainer(
            LOG_THEN_WAIT.format(options="", steps=500), job_env(port, out, TUNEPLANE_REPORT_FLUSH_INTERVAL="60")
        )
        wait_ready(proc)
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=TIMEOUT)
        assert proc.returncode == -signal.SIGTERM, err
    finally:
        server.stop()
    assert rows(tmp_path / "ingest.sqlite") == {"loss": (500, 500), "acc": (500, 500)}


def test_a_trainers_own_sigterm_handler_is_left_alone(tmp_path: Path) -> None:
    server = IngestServer(tmp_path / "ingest.sqlite", SECRET).start()
    try:
        port = int(server.url.rsplit(":", 1)[1])
        code = """
        import signal, sys, time, tuneplane.report as r
        signal.signal(signal.SIGTERM, lambda *a: (print("mine", flush=True), sys.exit(7)))
        r.init(monitor_hardware=False)
        r.log({"loss": 1.0}, step=1)
        print("ready", flush=True)
        time.sleep(100)
        """
        proc = trainer(code, job_env(port, None))
        wait_ready(proc)
        proc.send_signal(signal.SIGTERM)
        stdout, err = proc.communicate(timeout=TIMEOUT)
    finally:
        server.stop()
    assert proc.returncode == 7 and "mine" in stdout, err
    assert rows(tmp_path / "ingest.sqlite") == {"loss": (1, 1)}  # its sys.exit runs the exit-time finish


def test_pool_workers_closed_and_joined_deliver(tmp_path: Path) -> None:
    """Pool workers that leave as `close()` + `join()` end them finish on their way out. (A `with`
    block's terminate() kills them with the default action, as without tuneplane: see
    tests/test_report_processes_sigterm.py for why a worker catches no SIGTERM.)"""
    server = IngestServer(tmp_path / "ingest.sqlite", SECRET).start()
    script = tmp_path / "pool.py"
    script.write_text(
        textwrap.dedent("""
    import multiprocessing as mp, tuneplane.report as r
    def work(i):
        r.log({f"worker{i}": float(i)}, step=i)
        return i
    if __name__ == "__main__":
        pool = mp.get_context("spawn").Pool(2)
        assert pool.map(work, range(2), chunksize=1) == [0, 1]
        pool.close()
        pool.join()
    """)
    )
    try:
        port = int(server.url.rsplit(":", 1)[1])
        done = subprocess.run(
            [sys.executable, str(script)],
            env=job_env(port, tmp_path, TUNEPLANE_REPORT_FLUSH_INTERVAL="60"),
            capture_output=True,
            text=True,
            timeout=TIMEOUT,
        )
        assert done.returncode == 0, done.stderr
    finally:
        server.stop()
    assert rows(tmp_path / "ingest.sqlite") == {"worker0": (1, 1), "worker1": (1, 1)}


def _spilled(folder: Path) -> set[tuple[str, int]]:
    found: set[tuple[str, int]] = set()
    for path in folder.glob("report-*.jsonl"):
        for line in path.read_bytes().splitlines():
            for step, _, values in sources.unsent_points(line, {}):
                found |= {(key, step) for key in values}
    return found


def test_the_overflow_file_of_a_killed_trainer_is_uploaded_and_a_live_ones_left_alone(tmp_path: Path) -> None:
    """SIGKILL leaves `report-spill-*` (what did not fit in memory) behind: the next collector pass
    uploads it once the process is gone, and never touches the file of a process still writing it."""
    port, out = free_port(), tmp_path / "out"
    out.mkdir()
    proc = trainer(LOG_THEN_WAIT.format(options=", buffer_bytes=16 * 1024", steps=3000), job_env(port, out))
    collector_port = free_port()  # the trainer's receiver stays down: only the collector can deliver
    env = job_env(collector_port, out)
    server = IngestServer(tmp_path / "ingest.sqlite", SECRET, port=collector_port).start()
    try:
        wait_ready(proc)
        wait_until(
            lambda: list((out / ".tuneplane").glob("report-spill-*.jsonl")), 30, message="the trainer spilled nothing"
        )
        spilled = _spilled(out / ".tuneplane")
        assert len(spilled) > 1000
        collect(env, out)  # the trainer is alive: its file is its own
        assert rows(tmp_path / "ingest.sqlite") == {} and list((out / ".tuneplane").glob("report-spill-*"))
        proc.kill()
        proc.communicate(timeout=TIMEOUT)
        assert _spilled(out / ".tuneplane") >= spilled
        collect(env, out)
        collect(env, out)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate(timeout=TIMEOUT)
        server.stop()
    got = rows(tmp_path / "ingest.sqlite")
    with sqlite3.connect(tmp_path / "ingest.sqlite") as conn:
        stored = {
            (key, step)
            for key, step in conn.execute(
                "SELECT s.key, x.step FROM samples x JOIN series s ON s.id = x.series WHERE s.run_id = ?", (RUN,)
            )
        }
    assert spilled <= stored
    assert all(count == steps for count, steps in got.values())
    assert not list((out / ".tuneplane").glob("report-*"))


def test_without_an_out_dir_nothing_is_left_in_the_temp_dir_once_delivered(tmp_path: Path) -> None:
    server = IngestServer(tmp_path / "ingest.sqlite", SECRET).start()
    temp = tmp_path / "tmp"
    temp.mkdir()
    try:
        port = int(server.url.rsplit(":", 1)[1])
        code = """
        import tuneplane.report as r
        r.init(monitor_hardware=False, buffer_bytes=16 * 1024)
        for s in range(2000):
            r.log({"loss": 1.0, "acc": 0.5}, step=s)
        r.finish(30)
        """
        done = subprocess.run(
            [sys.executable, "-c", textwrap.dedent(code)],
            env=job_env(port, None, TMPDIR=str(temp)),
            capture_output=True,
            text=True,
            timeout=TIMEOUT,
        )
        assert done.returncode == 0, done.stderr
    finally:
        server.stop()
    assert rows(tmp_path / "ingest.sqlite") == {"loss": (2000, 2000), "acc": (2000, 2000)}
    assert list(temp.iterdir()) == []  # one private folder per process would pile up on a node


def test_an_out_dirs_state_folder_that_links_elsewhere_gets_no_overflow_file(tmp_path: Path) -> None:
    outside, out, temp = tmp_path / "elsewhere", tmp_path / "out", tmp_path / "tmp"
    for folder in (outside, out, temp):
        folder.mkdir()
    (out / ".tuneplane").symlink_to(outside)
    code = """
    import tuneplane.report as r
    r.init(monitor_hardware=False, buffer_bytes=16 * 1024)
    for s in range(3000):
        r.log({"loss": 1.0, "acc": 0.5}, step=s)
    print(r.stats()["spill_path"])
    r.finish(0.2)
    """
    env = job_env(free_port(), out, TMPDIR=str(temp))
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)], env=env, capture_output=True, text=True, timeout=TIMEOUT
    )
    assert done.returncode == 0, done.stderr
    assert list(outside.iterdir()) == []
    assert done.stdout.strip().startswith(str(temp)) and "out/.tuneplane is a link" in done.stderr


def test_what_each_rank_left_unsent_is_uploaded_under_that_ranks_series(tmp_path: Path) -> None:
    """With every rank reporting, the receiver keeps one series per rank (`loss@rank3`); the collector
    uploads the ranks' unsent files as rank zero, which had merged them into one `loss` (rank 3's
    values overwriting rank 0's step by step)."""
    port, out = free_port(), tmp_path / "out"
    out.mkdir()
    code = """
    import sys, tuneplane.report as r
    r.init(monitor_hardware=False, all_ranks=True)
    for s in range(10):
        r.log({"loss": float(sys.argv[1])}, step=s)
    r.finish(0.2)
    """
    for rank in ("0", "3"):
        done = subprocess.run(
            [sys.executable, "-c", textwrap.dedent(code), rank],
            env=job_env(port, out, RANK=rank),
            capture_output=True,
            text=True,
            timeout=TIMEOUT,
        )
        assert done.returncode == 0 and "not delivered" in done.stderr, done.stderr
    server = IngestServer(tmp_path / "ingest.sqlite", SECRET, port=port).start()
    try:
        collect(job_env(port, out), out)
    finally:
        server.stop()
    assert rows(tmp_path / "ingest.sqlite") == {"loss@rank0": (10, 10), "loss@rank3": (10, 10)}
    with sqlite3.connect(tmp_path / "ingest.sqlite") as conn:
        assert conn.execute(
            "SELECT s.key, MIN(x.value), MAX(x.value) FROM samples x JOIN series s ON s.id = x.series "
            "GROUP BY s.key ORDER BY s.key"
        ).fetchall() == [("loss@rank0", 0.0, 0.0), ("loss@rank3", 3.0, 3.0)]


def test_threads_logging_at_once_through_a_small_budget_lose_nothing(tmp_path: Path) -> None:
    """Several threads filling the memory budget together (a data thread, an evaluation thread…):
    each waited only until the sender had spilled once, which the others refilled, so each dropped
    its newest record although the disk and the receiver were fine."""
    server = IngestServer(tmp_path / "ingest.sqlite", SECRET).start()
    out = tmp_path / "out"
    out.mkdir()
    code = """
    import threading, tuneplane.report as r
    r.init(monitor_hardware=False, buffer_bytes=32 * 1024, batch_points=500)
    def work(i):
        for s in range(8000):
            r.log({f"t{i}/a": float(s), f"t{i}/b": 2.0} if s % 3 else {f"t{i}/c": 1.0}, step=s)
    threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    r.finish(60)
    print(r.stats()["dropped"])
    """
    try:
        port = int(server.url.rsplit(":", 1)[1])
        done = subprocess.run(
            [sys.executable, "-c", textwrap.dedent(code)],
            env=job_env(port, out),
            capture_output=True,
            text=True,
            timeout=TIMEOUT,
        )
    finally:
        server.stop()
    assert done.returncode == 0 and done.stdout.strip() == "{}", done.stdout + done.stderr
    want = {f"t{i}/{k}": (n, n) for i in range(4) for k, n in (("a", 5333), ("b", 5333), ("c", 2667))}
    assert rows(tmp_path / "ingest.sqlite") == want


POOL = """
import multiprocessing as mp, sys, tuneplane.report as r
def work(i):
    r.log({f"w{i}": float(i)}, step=i)
    return i
if __name__ == "__main__":
    ctx = mp.get_context(sys.argv[1])
    pool = ctx.Pool(2)
    assert pool.map(work, range(4), chunksize=1) == [0, 1, 2, 3]
    pool.close()
    pool.join()
    child = ctx.Process(target=work, args=(9,))
    child.start()
    child.join()
"""


@pytest.mark.parametrize("method", ["fork", "forkserver", "spawn"])
def test_multiprocessing_children_that_exit_normally_deliver(tmp_path: Path, method: str) -> None:
    """A fork or forkserver child leaves through os._exit, which skips the exit-time finish()."""
    server = IngestServer(tmp_path / "ingest.sqlite", SECRET).start()
    script = tmp_path / "pool.py"
    script.write_text(POOL)
    try:
        port = int(server.url.rsplit(":", 1)[1])
        done = subprocess.run(
            [sys.executable, str(script), method],
            env=job_env(port, tmp_path, TUNEPLANE_REPORT_FLUSH_INTERVAL="60"),
            capture_output=True,
            text=True,
            timeout=TIMEOUT,
        )
        assert done.returncode == 0, done.stderr
    finally:
        server.stop()
    assert rows(tmp_path / "ingest.sqlite") == {f"w{i}": (1, 1) for i in (0, 1, 2, 3, 9)}


def test_dataloader_workers_forked_after_init_keep_the_parents_points_its_own(tmp_path: Path) -> None:
    """num_workers=2 with fork: the workers inherit the parent's session and queue but never send them
    (no point twice, none lost, no hang); what a worker logs itself is its own and delivered."""
    needs("torch")
    server = IngestServer(tmp_path / "ingest.sqlite", SECRET).start()
    code = """
    import multiprocessing as mp, torch, tuneplane.report as r
    from torch.utils.data import DataLoader, Dataset
    class Data(Dataset):
        def __len__(self):
            return 16
        def __getitem__(self, i):
            r.log({"data/item": float(i)}, step=i)
            return torch.tensor([float(i)])
    r.init(monitor_hardware=False)
    step = 0
    for epoch in range(2):
        loader = DataLoader(Data(), batch_size=4, num_workers=2, multiprocessing_context=mp.get_context("fork"))
        for batch in loader:
            r.log({"loss": float(batch.mean()), "epoch": float(epoch)}, step=step)
            step += 1
    r.finish(10)
    print(r.stats()["ledger"])
    """
    try:
        port = int(server.url.rsplit(":", 1)[1])
        done = subprocess.run(
            [sys.executable, "-c", textwrap.dedent(code)],
            env=job_env(port, tmp_path, TUNEPLANE_REPORT_FLUSH_INTERVAL="60"),
            capture_output=True,
            text=True,
            timeout=TIMEOUT,
        )
        assert done.returncode == 0, done.stderr
    finally:
        server.stop()
    assert "'logged': 16" in done.stdout and "'delivered': 16" in done.stdout, done.stdout
    assert rows(tmp_path / "ingest.sqlite") == {"loss": (8, 8), "epoch": (8, 8), "data/item": (16, 16)}
