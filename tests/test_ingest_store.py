"""The store's one writer thread: writes that wait together commit together, one bad write fails
alone, a write the writer cannot reach in time is answered "busy, retry", close commits what is queued."""

from __future__ import annotations

import http.client
import json
import os
import sqlite3
import threading
from pathlib import Path

import pytest
from support.wait import wait_until

from tuneplane.ingest import mint_token, series, summary
from tuneplane.ingest import store as store_mod
from tuneplane.ingest.server import IngestServer
from tuneplane.ingest.store import MetricStore, StoreBusy, StoreClosed

SECRET = b"w" * 32


def _hold_writer(store: MetricStore) -> tuple[threading.Event, threading.Thread]:
    """Keep the writer busy until the event is set, so what is submitted meanwhile queues up."""
    release, started = threading.Event(), threading.Event()

    def block() -> None:
        started.set()
        release.wait(10)

    def submit() -> None:
        try:
            store._submit(block)
        except StoreBusy:  # a test that shortened the wait: the holder's own wait ran out
            pass

    thread = threading.Thread(target=submit)
    thread.start()
    assert started.wait(10)
    return release, thread


def _in_threads(count: int, fn) -> tuple[list[threading.Thread], dict[int, object]]:
    results: dict[int, object] = {}

    def run(index: int) -> None:
        try:
            results[index] = fn(index)
        except Exception as exc:  # the outcome under test
            results[index] = exc

    threads = [threading.Thread(target=run, args=(i,)) for i in range(count)]
    for thread in threads:
        thread.start()
    return threads, results


def _wait_queued(store: MetricStore, count: int) -> None:
    wait_until(
        lambda: store._jobs.qsize() >= count, 10, 0.01, lambda: f"{store._jobs.qsize()} of {count} writes queued"
    )


def test_waiting_writes_commit_together_and_a_bad_one_fails_alone(tmp_path: Path) -> None:
    db = tmp_path / "ingest.sqlite"
    store = MetricStore(db)
    release, holder = _hold_writer(store)

    def write(index: int) -> object:
        value = None if index == 7 else float(index)  # NOT NULL: this write's transaction part fails
        return store.add_points(f"run-{index % 4}", [("loss", index, value, "")], f"batch-{index}")  # type: ignore[list-item]

    threads, results = _in_threads(20, write)
    _wait_queued(store, 20)
    commits = store.commits
    release.set()
    for thread in [holder, *threads]:
        thread.join(10)
    assert store.commits == commits + 2  # the holder's transaction, then all 20 in one
    assert isinstance(results[7], sqlite3.IntegrityError)
    assert all(results[i] == (1, False) for i in range(20) if i != 7)
    assert sorted(s for r in range(4) for s, _ in series(db, f"run-{r}", "loss")) == [i for i in range(20) if i != 7]
    assert store.add_points("run-3", [("loss", 99, 1.0, "")], "batch-3") == (0, True)  # the id was kept
    assert store.add_points("run-3", [("loss", 7, 1.0, "")], "batch-7") == (1, False)  # the failed one was not
    store.close()


def test_close_commits_what_is_queued_and_leaves_no_wal(tmp_path: Path) -> None:
    db = tmp_path / "ingest.sqlite"
    store = MetricStore(db)
    release, holder = _hold_writer(store)
    threads, results = _in_threads(10, lambda i: store.add_points("r", [("k", i, 1.0, "")]))
    _wait_queued(store, 10)
    closer = threading.Thread(target=store.close)
    closer.start()
    release.set()
    for thread in [holder, closer, *threads]:
        thread.join(10)
    assert all(results[i] == (1, False) for i in range(10)), results
    assert summary(db, "r")["k"]["count"] == 10
    assert not os.path.exists(f"{db}-wal") and not os.path.exists(f"{db}-shm")
    with pytest.raises(StoreClosed):
        store.add_points("r", [("k", 11, 1.0, "")])
    store.close()  # idempotent


def test_a_write_that_waits_too_long_is_answered_busy_and_its_retry_is_a_no_op(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    server = IngestServer(tmp_path / "ingest.sqlite", SECRET).start()
    try:
        monkeypatch.setattr(store_mod, "WRITE_WAIT", 0.3)
        release, holder = _hold_writer(server.store)
        host, port = server.url[len("http://") :].split(":")
        body = json.dumps({"run_id": "r", "batch_id": "b-1", "points": [{"key": "loss", "step": 1, "value": 0.5}]})
        headers = {"X-TunePlane-Token": mint_token(SECRET, "r")}

        def post() -> tuple[int, dict[str, object]]:
            conn = http.client.HTTPConnection(host, int(port), timeout=10)
            conn.request("POST", "/metrics", body, headers)
            response = conn.getresponse()
            answer = response.status, json.loads(response.read())
            conn.close()
            return answer

        status, answer = post()
        assert status == 503 and "busy" in str(answer["error"]) and "retry" in str(answer["error"])
        release.set()
        holder.join(10)
        monkeypatch.setattr(store_mod, "WRITE_WAIT", 60.0)
        assert post() == (200, {"ok": True, "stored": 0, "duplicate": True})  # the late commit counted once
        assert summary(server.store.path, "r")["loss"]["count"] == 1
    finally:
        server.stop()


def test_a_full_queue_is_busy_not_unbounded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(store_mod, "QUEUE_DEPTH", 2)
    monkeypatch.setattr(store_mod, "WRITE_WAIT", 0.2)
    store = MetricStore(tmp_path / "ingest.sqlite")
    release, holder = _hold_writer(store)
    threads, results = _in_threads(2, lambda i: store.add_points("r", [("k", i, 1.0, "")]))
    _wait_queued(store, 2)
    with pytest.raises(StoreBusy, match="writes are waiting"):
        store.add_points("r", [("k", 9, 1.0, "")])
    release.set()
    for thread in [holder, *threads]:
        thread.join(10)
    store.close()
