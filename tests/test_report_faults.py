"""tuneplane.report against receivers that fail: real local HTTP servers injecting each fault.

Every test checks the same promises: log() never raises, memory stays within the budget, and when the
receiver is healthy at the end every point is stored exactly once (counted where the store applies a
batch, so a duplicate would show even though the upsert would hide it in the table).
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
import time
import tracemalloc
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from support.wait import wait_until

import tuneplane.report as report
from tuneplane.ingest import hparams, mint_token, series, summary
from tuneplane.ingest.server import IngestHandler, IngestServer, Limits
from tuneplane.ingest.store import Written

SECRET = b"f" * 32
RUN = "run-faults"


class Plan:
    """Faults to apply to the next POSTs, in order; then behave."""

    def __init__(self) -> None:
        self.faults: list[str] = []
        self.lock = threading.Lock()
        self.applied: Counter[tuple[str, int]] = Counter()  # (key, step) -> times stored
        self.requests = 0
        self.gate = threading.Event()
        self.gate.set()
        self.inside = threading.Event()

    def next(self) -> str:
        with self.lock:
            self.requests += 1
            return self.faults.pop(0) if self.faults else ""


class FaultHandler(IngestHandler):
    def do_POST(self) -> None:
        plan: Plan = self.server.plan  # type: ignore[attr-defined]
        fault = plan.next()
        if fault == "block":
            plan.inside.set()
            plan.gate.wait(30)
        if fault == "slow":
            time.sleep(2)
        if fault in ("500", "429", "422", "close"):
            length = int(self.headers.get("Content-Length") or 0)
            self.rfile.read(length)
        if fault == "close":  # hang up without answering
            self.close_connection = True
            self.connection.shutdown(socket.SHUT_RDWR)
            return
        if fault == "500":
            self._send(500, {"error": "boom"})
        elif fault == "429":
            self.send_response(429)
            self.send_header("Retry-After", "0.05")
            self.send_header("Content-Length", "2")
            self.end_headers()
            self.wfile.write(b"{}")
        elif fault == "422":
            self._send(422, {"error": "this batch is not acceptable"})
        elif fault == "store-then-500":  # the write happened, the answer was lost
            self._post()
            self._send(500, {"error": "lost answer"})
        elif fault == "hangup-after-answer":
            super().do_POST()
            self.close_connection = True
        else:
            super().do_POST()


class Receiver:
    """A fault-injecting receiver that can go away and come back on the same port."""

    def __init__(self, db: Path, port: int = 0, limits: Limits | None = None) -> None:
        self.db, self.port, self.limits = db, port, limits
        self.plan = Plan()
        self.server: IngestServer | None = None

    def start(self) -> Receiver:
        self.server = IngestServer(self.db, SECRET, port=self.port, handler=FaultHandler, limits=self.limits).start()
        self.server.httpd.plan = self.plan  # type: ignore[attr-defined]
        store = self.server.store
        real = store.add_points

        def counting(run_id: str, points: Any, batch_id: str | None = None) -> Written:
            points = list(points)
            written = real(run_id, points, batch_id)
            if not written.duplicate:
                self.plan.applied.update((key, step) for key, step, _, _ in points)
            return written

        store.add_points = counting  # type: ignore[method-assign]
        self.port = int(self.server.httpd.server_address[1])
        return self

    def stop(self) -> None:
        if self.server is not None:
            self.server.stop()
            self.server = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture()
def env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    for name in list(os.environ):
        if name.startswith("TUNEPLANE_") or name in ("RANK", "LOCAL_RANK"):
            monkeypatch.delenv(name, raising=False)
    out = tmp_path / "out"
    out.mkdir()
    for name, value in {
        "TUNEPLANE_JOB_ENABLED": "1",
        "TUNEPLANE_JOB_RUN_ID": RUN,
        "TUNEPLANE_JOB_TOKEN": mint_token(SECRET, RUN),
        "TUNEPLANE_OUT_DIR": str(out),
        "TUNEPLANE_REPORT_FLUSH_INTERVAL": "0.02",
        "TUNEPLANE_REPORT_RETRY_BASE": "0.02",
        "TUNEPLANE_REPORT_RETRY_CAP": "0.1",
        "TUNEPLANE_REPORT_FINISH_TIMEOUT": "20",
        "TUNEPLANE_REPORT_REQUEST_TIMEOUT": "10",
    }.items():
        monkeypatch.setenv(name, value)
    report._reset()
    yield tmp_path
    report._reset()


@pytest.fixture()
def receiver(env: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Receiver]:
    rec = Receiver(env / "ingest.sqlite").start()
    monkeypatch.setenv("TUNEPLANE_JOB_ENDPOINT", rec.url)
    yield rec
    rec.stop()


def log_steps(start: int, stop: int, keys: tuple[str, ...] = ("loss", "acc")) -> None:
    for step in range(start, stop):
        report.log({key: step + index / 10 for index, key in enumerate(keys)}, step=step)


def assert_exactly_once(rec: Receiver, steps: range, keys: tuple[str, ...] = ("loss", "acc")) -> None:
    expected = {(key, step) for key in keys for step in steps}
    assert set(rec.plan.applied) == expected
    assert max(rec.plan.applied.values()) == 1, "a batch was applied twice"
    for index, key in enumerate(keys):
        assert series(rec.db, RUN, key) == [(s, s + index / 10) for s in steps]


# ── outages ───────────────────────────────────────────────────────────────────────────────────
def test_receiver_down_from_the_start_then_up(env: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    port = free_port()
    monkeypatch.setenv("TUNEPLANE_JOB_ENDPOINT", f"http://127.0.0.1:{port}")
    assert report.init(hparams={"lr": 0.1}, monitor_hardware=False)
    log_steps(0, 300)
    wait_until(lambda: report.stats()["retries"] >= 1, 30, 0.01, "the sender never tried the absent receiver")
    rec = Receiver(env / "ingest.sqlite", port=port).start()
    try:
        log_steps(300, 400)
        report.finish()
        assert_exactly_once(rec, range(400))
        assert hparams(rec.db, RUN) == {"lr": 0.1}
    finally:
        rec.stop()


def test_receiver_never_comes_back(
    env: Path, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("TUNEPLANE_JOB_ENDPOINT", f"http://127.0.0.1:{free_port()}")
    report.init(monitor_hardware=False, buffer_bytes=16 * 1024)
    log_steps(0, 200)
    start = time.monotonic()
    report.finish(timeout=0.3)
    assert time.monotonic() - start < 10  # bounded (generous: this only guards against hanging)
    err = capfd.readouterr().err
    assert "400 point(s) not delivered before finish()" in err
    assert "report-unsent" in err and "Connection" in err  # where they are kept, and why
    # Kept under the name the collector (or the backend after the job) uploads.
    spill = next((env / "out" / ".tuneplane").glob("report-unsent-*.jsonl"))
    lines = spill.read_bytes().splitlines()
    from tuneplane.collector.sources import unsent_points  # the reader that uploads it

    problems: dict[str, int] = {}
    assert sum(len(values) for line in lines for _, _, values in unsent_points(line, problems)) == 400
    assert problems == {}
    assert report.stats()["pending_points"] == 400


def test_receiver_down_mid_run_and_back(receiver: Receiver) -> None:
    report.init(monitor_hardware=False, buffer_bytes=32 * 1024)  # small: forces overflow to disk
    log_steps(0, 100)
    assert report.flush(10)
    receiver.stop()
    log_steps(100, 1500)
    time.sleep(0.1)
    stats = report.stats()
    assert stats["spilled_points"] > 0 and stats["retries"] >= 1
    assert stats["buffered_bytes"] <= 32 * 1024
    receiver.start()
    log_steps(1500, 1600)
    report.finish()
    assert_exactly_once(receiver, range(1600))
    assert not list((Path(os.environ["TUNEPLANE_OUT_DIR"]) / ".tuneplane").glob("*.jsonl"))  # cleaned up


def test_without_an_out_dir_overflow_waits_in_a_private_temp_dir(
    receiver: Receiver, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("TUNEPLANE_OUT_DIR")
    report.init(monitor_hardware=False, buffer_bytes=16 * 1024)
    receiver.stop()
    log_steps(0, 500)
    time.sleep(0.2)
    stats = report.stats()
    assert stats["dropped_points"] == 0 and stats["spilled_points"] > 0
    assert "tuneplane-report-" in stats["spill_path"] and "no TUNEPLANE_OUT_DIR" in capfd.readouterr().err
    assert stats["buffered_bytes"] <= 16 * 1024
    receiver.start()
    report.finish()
    assert report.stats()["delivered_points"] == 1000
    assert_exactly_once(receiver, range(500))


# ── misbehaving receivers ─────────────────────────────────────────────────────────────────────
def test_slow_receiver_does_not_block_log(receiver: Receiver) -> None:
    receiver.plan.faults = ["block"]
    receiver.plan.gate.clear()
    report.init(monitor_hardware=False)
    log_steps(0, 10)
    assert receiver.plan.inside.wait(10)  # the sender is stuck inside a request...
    log_steps(10, 2000)  # ...and logging carries on
    assert report.stats()["delivered_points"] == 0
    receiver.plan.gate.set()
    receiver.plan.faults = ["slow"]  # and one genuinely slow (2 s) answer
    report.finish()
    assert_exactly_once(receiver, range(2000))


@pytest.mark.parametrize("fault", ["500", "429", "close", "store-then-500", "hangup-after-answer"])
def test_transient_faults_are_retried_and_stored_once(receiver: Receiver, fault: str) -> None:
    receiver.plan.faults = [fault] * 3
    report.init(monitor_hardware=False, batch_points=50)
    log_steps(0, 200)
    report.finish()
    assert_exactly_once(receiver, range(200))
    assert report.stats()["retries"] >= (0 if fault == "hangup-after-answer" else 3)


def test_a_422_drops_one_batch_and_carries_on(receiver: Receiver, capfd: pytest.CaptureFixture[str]) -> None:
    report.init(monitor_hardware=False)
    log_steps(0, 10)
    assert report.flush(10)
    receiver.plan.faults = ["422"]
    log_steps(10, 20)
    report.flush(10)
    log_steps(20, 30)
    report.finish()
    kept = [*range(10), *range(20, 30)]
    assert set(receiver.plan.applied) == {(k, s) for k in ("loss", "acc") for s in kept}
    err = capfd.readouterr().err
    assert err.count("HTTP 422") == 2  # the diagnostic, and the summary at finish
    assert "this batch is not acceptable" in err
    stats = report.stats()
    assert stats["refused_points"] == 20 and stats["refused_batches"] == {422: 1}


def test_a_413_splits_batches(env: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    rec = Receiver(env / "ingest.sqlite", limits=Limits(max_points=60)).start()
    monkeypatch.setenv("TUNEPLANE_JOB_ENDPOINT", rec.url)
    try:
        report.init(monitor_hardware=False, batch_points=400)
        log_steps(0, 300)
        report.finish()
        assert_exactly_once(rec, range(300))
    finally:
        rec.stop()


def test_a_wrong_token_is_one_diagnostic_not_a_flood(
    receiver: Receiver, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("TUNEPLANE_JOB_TOKEN", "wrong")
    report.init(monitor_hardware=False, batch_points=10)
    log_steps(0, 100)
    report.finish()
    err = capfd.readouterr().err
    assert err.count("refused a batch") == 1
    assert report.stats()["refused_batches"] == {403: 20}
    assert not receiver.plan.applied


# ── processes ─────────────────────────────────────────────────────────────────────────────────
@pytest.mark.filterwarnings("ignore::DeprecationWarning")  # fork() with threads, on purpose
def test_forked_child_reports_its_own_points(receiver: Receiver) -> None:
    report.init(monitor_hardware=False)
    log_steps(0, 50)
    pid = os.fork()
    if pid == 0:  # the child: a fresh session, none of the parent's queue
        code = 1
        try:
            assert report._session is None
            log_steps(0, 40, keys=("child",))
            report.finish()
            code = 0 if report.stats()["delivered_points"] == 40 else 2
        finally:
            os._exit(code)
    log_steps(50, 100)
    _, status = os.waitpid(pid, 0)
    report.finish()
    assert os.waitstatus_to_exitcode(status) == 0
    assert max(receiver.plan.applied.values()) == 1
    assert series(receiver.db, RUN, "child") == [(s, float(s)) for s in range(40)]
    assert summary(receiver.db, RUN)["loss"]["count"] == 100


def test_hparams_that_are_not_json(receiver: Receiver) -> None:
    class Weird:
        def __str__(self) -> str:
            raise ValueError("no")

    report.init(
        hparams={
            "fn": print,
            "set": {1, 2},
            "bytes": b"\x00",
            "weird": Weird(),
            "inf": float("inf"),
            "long": "x" * 5000,
            "ok": 1,
        },
        monitor_hardware=False,
    )
    report.finish()
    got = hparams(receiver.db, RUN)
    assert got["ok"] == 1 and got["inf"] == "inf" and got["weird"] == "<Weird>"
    assert got["fn"] == "<built-in function print>" and got["set"] in ("{1, 2}", "{2, 1}")
    assert len(got["long"]) == 1000


# ── a million points through one MiB ──────────────────────────────────────────────────────────
RECEIVER_SCRIPT = """
import sys, time
from tuneplane.ingest.server import IngestServer
server = IngestServer(sys.argv[1], sys.argv[2].encode()).start()
print(server.url, flush=True)
sys.stdin.read()
server.stop()
"""


@pytest.mark.process
def test_a_million_points_through_a_one_mib_budget(env: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # The receiver runs in another process so tracemalloc sees only the SDK and this loop.
    db = env / "ingest.sqlite"
    proc = subprocess.Popen(
        [sys.executable, "-c", RECEIVER_SCRIPT, str(db), SECRET.decode()],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        monkeypatch.setenv("TUNEPLANE_JOB_ENDPOINT", proc.stdout.readline().strip())
        budget = 1024 * 1024
        keys = tuple(f"m{i}" for i in range(10))
        tracemalloc.start()
        report.init(monitor_hardware=False, buffer_bytes=budget, finish_timeout=120)
        baseline = tracemalloc.get_traced_memory()[0]
        peak_buffered = 0
        for step in range(100_000):
            report.log({key: float(step) for key in keys}, step=step)
            if step % 5000 == 0:
                peak_buffered = max(peak_buffered, report.stats()["buffered_bytes"])
        during = tracemalloc.get_traced_memory()[1] - baseline
        tracemalloc.stop()
        report.finish()
        stats = report.stats()
    finally:
        assert proc.stdin is not None
        proc.stdin.close()
        proc.wait(30)
    assert peak_buffered <= budget
    # Everything Python allocated meanwhile: the queue, a batch read back from disk (a quarter of the
    # budget at most), zlib's state and the overflow writer's chunk. Measured ~1.3x the budget.
    assert during <= budget + budget // 2 + 256 * 1024, f"traced peak {during} bytes"
    assert stats["delivered_points"] == 1_000_000 and stats["pending_points"] == 0
    assert stats["dropped_points"] == 0 and stats["spilled_points"] > 0
    got = summary(db, RUN)
    assert set(got) == set(keys)
    assert all(v["count"] == 100_000 and v["last"] == 99_999.0 for v in got.values())


def test_without_an_out_dir_what_finish_leaves_is_uploaded_by_the_command_it_prints(
    env: Path, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    import re
    import shutil
    import subprocess
    import sys

    monkeypatch.delenv("TUNEPLANE_OUT_DIR")
    port = free_port()
    monkeypatch.setenv("TUNEPLANE_JOB_ENDPOINT", f"http://127.0.0.1:{port}")
    report.init(monitor_hardware=False, buffer_bytes=16 * 1024)
    log_steps(0, 300)
    report.finish(timeout=0.3)
    err = capfd.readouterr().err
    found = re.search(r"python -m tuneplane\.collector --out-dir (\S+) --once", err)
    assert found, err
    rec = Receiver(env / "ingest.sqlite", port=port).start()
    try:
        done = subprocess.run(
            [sys.executable, "-m", "tuneplane.collector", "--out-dir", found.group(1), "--once"],
            env=dict(os.environ),
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode == 0, done.stderr
        assert_exactly_once(rec, range(300))
        assert not list(Path(found.group(1), ".tuneplane").glob("report-unsent-*"))  # delivered, removed
    finally:
        rec.stop()
        shutil.rmtree(found.group(1), ignore_errors=True)
