"""A store the receiver cannot use: a file that is not SQLite (named, left untouched, never "a bug in
tp"), and a disk that fills up (a clear 507 the client retries, the other writes stored, the store
whole). SQLite's own page limit (`max_page_count`) raises the very error a full disk raises
(SQLITE_FULL), so the test fills the store without filling the machine's disk."""

from __future__ import annotations

import http.client
import json
import sqlite3
import threading
from pathlib import Path
from typing import Any

import pytest

from tuneplane.cli.main import run as tp
from tuneplane.ingest import mint_token, series, summary
from tuneplane.ingest.server import IngestServer
from tuneplane.ingest.store import MetricStore, StoreFull, StoreUnreadable, _Job

SECRET = b"f" * 32
NOT_SQLITE = {
    "text": b"run,key,step,value\nr,loss,1,0.5\n" * 300,
    "random": bytes((i * 7919 + 13) % 251 for i in range(6000)),
    "a sqlite header on garbage": b"SQLite format 3\x00" + b"\xff" * 5000,
}


@pytest.mark.parametrize("kind", list(NOT_SQLITE))
def test_a_store_file_that_is_not_sqlite_is_named_and_left_alone(tmp_path: Path, kind: str,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    db = tmp_path / "ingest.sqlite"
    db.write_bytes(NOT_SQLITE[kind])
    (tmp_path / "secret").write_bytes(SECRET)
    with pytest.raises(StoreUnreadable, match="is not an ingest store"):
        MetricStore(db)
    for argv in (["ingest", "serve", "--port", "0", "--db", str(db), "--secret-file", str(tmp_path / "secret")],
                 ["job", "metrics", "some-run", "--db", str(db)]):
        code = tp(argv)
        out = capsys.readouterr()
        said = out.out + out.err
        assert code == 2, said
        assert str(db) in said and "not an ingest store" in said and "hint: move the file aside" in said
        assert "bug in tp" not in said and "Traceback" not in said
    assert db.read_bytes() == NOT_SQLITE[kind]  # nothing written into it
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ingest.sqlite", "secret"]  # no -wal, -shm


def test_a_folder_as_the_store_says_it_cannot_be_opened(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(StoreUnreadable, match="cannot open the ingest store") as caught:
        MetricStore(tmp_path)
    assert str(tmp_path) in str(caught.value) and "hint:" in str(caught.value)
    assert tp(["job", "metrics", "some-run", "--db", str(tmp_path)]) == 2  # the read path too
    said = capsys.readouterr().err
    assert f"cannot open the ingest store {tmp_path}" in said and "bug in tp" not in said


def _post(url: str, run: str, key: str, steps: int) -> tuple[int, dict[str, Any], str | None]:
    host, port = url[len("http://"):].rsplit(":", 1)
    conn = http.client.HTTPConnection(host, int(port), timeout=30)
    body = json.dumps({"run_id": run, "points": [{"key": key, "step": s, "value": s / 7} for s in range(steps)]})
    conn.request("POST", "/metrics", body, {"X-TunePlane-Token": mint_token(SECRET, run)})
    response = conn.getresponse()
    answer = json.loads(response.read())
    conn.close()
    return response.status, answer, response.getheader("Retry-After")


def _fill_up(store: MetricStore, spare_pages: int) -> None:
    pages = store._db.execute("PRAGMA page_count").fetchone()[0]
    store._db.execute(f"PRAGMA max_page_count = {pages + spare_pages}")


def test_a_full_disk_is_a_clear_507_and_the_store_stays_whole(tmp_path: Path,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    db = tmp_path / "ingest.sqlite"
    server = IngestServer(db, SECRET).start()
    try:
        assert _post(server.url, "run-a", "loss", 100)[0] == 200
        _fill_up(server.store, 4)
        status, answer, retry_after = _post(server.url, "run-a", "big", 30_000)
        assert status == 507, answer
        assert "full" in answer["error"] and "nothing of this request was stored" in answer["error"]
        assert retry_after is not None and int(retry_after) > 0  # the SDK keeps the points and retries
        assert _post(server.url, "run-a", "small", 10)[0] == 200  # what still fits is stored
        status, _, _ = _post(server.url, "run-a", "big-again", 30_000)
        assert status == 507
        assert server.httpd.internal_errors == 0
    finally:
        server.stop()
    err = capsys.readouterr().err
    assert err.count("is full") == 1 and str(db) in err  # the operator is told, once
    assert sqlite3.connect(db).execute("PRAGMA integrity_check").fetchone() == ("ok",)
    assert sorted(summary(db, "run-a")) == ["loss", "small"]
    assert series(db, "run-a", "loss")[:2] == [(0, 0.0), (1, 1 / 7)]


def test_a_write_that_does_not_fit_fails_alone_in_its_group(tmp_path: Path) -> None:
    """Writes that waited together commit together; when SQLite gives the whole transaction up (a
    full disk does), each is tried alone: the ones that fit are stored, the one that does not gets
    StoreFull, and none gets another write's error."""
    store = MetricStore(tmp_path / "ingest.sqlite")
    store.add_points("r", [("warm", 0, 1.0, 0.0)])
    _fill_up(store, 4)
    release, started = threading.Event(), threading.Event()

    def hold() -> None:
        started.set()
        release.wait(10)

    holder = threading.Thread(target=store._submit, args=(hold,))
    holder.start()
    assert started.wait(10)
    results: dict[str, Any] = {}

    def write(name: str, steps: int) -> None:
        try:
            results[name] = store.add_points("r", [(name, s, float(s), 0.0) for s in range(steps)])
        except Exception as exc:  # what the receiver would answer from
            results[name] = exc

    writers = [threading.Thread(target=write, args=(name, steps))
               for name, steps in (("small-1", 5), ("huge", 40_000), ("small-2", 5))]
    for thread in writers:
        thread.start()
    while store._jobs.qsize() < 3:
        threading.Event().wait(0.01)
    release.set()
    for thread in [holder, *writers]:
        thread.join(30)
    store.close()
    assert results["small-1"] == (5, False) and results["small-2"] == (5, False)
    assert isinstance(results["huge"], StoreFull)
    assert sorted(summary(store.path, "r")) == ["small-1", "small-2", "warm"]


def test_a_log_that_outlives_the_close_is_said_and_applied_on_the_next_start(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The WAL cannot be merged at close when the disk is full (or a reader holds it, as here): the
    receiver says so, and the points in it are all there on the next start, which leaves no log."""
    db = tmp_path / "ingest.sqlite"
    server = IngestServer(db, SECRET).start()
    assert _post(server.url, "run-a", "loss", 500)[0] == 200
    reader = sqlite3.connect(db)
    reader.execute("BEGIN")
    reader.execute("SELECT COUNT(*) FROM samples").fetchone()  # a read transaction holds the log
    server.store._db.execute("PRAGMA busy_timeout = 0")  # give up at once rather than after 5 s
    server.stop()
    assert server.store.wal_left()
    err = capsys.readouterr().err
    assert f"{db}-wal could not be merged" in err and "the next start applies it" in err
    reader.rollback()
    reader.close()
    MetricStore(db).close()
    assert not (tmp_path / "ingest.sqlite-wal").exists()
    assert summary(db, "run-a")["loss"]["count"] == 500


def test_a_locked_store_fails_the_group_once_not_each_write_again(tmp_path: Path) -> None:
    """Another process holding the write lock fails the whole group with one wait: only a write
    that ended the transaction itself (a full disk) makes the writes of its group retry alone."""
    store = MetricStore(tmp_path / "ingest.sqlite")
    store.add_points("r", [("warm", 0, 1.0, 0.0)])
    store._db.execute("PRAGMA busy_timeout = 100")
    other = sqlite3.connect(tmp_path / "ingest.sqlite", isolation_level=None)
    other.execute("BEGIN IMMEDIATE")  # a second writer holds the lock
    statements: list[str] = []
    store._db.set_trace_callback(statements.append)
    # a group as the writer thread takes it from its queue (which is empty meanwhile)
    group = [_Job(lambda: store._db.execute("INSERT INTO events VALUES ('r', 'x', 0, '{}')"), 1)
             for _ in range(3)]
    store._commit(group)
    store._db.set_trace_callback(None)
    other.execute("ROLLBACK")
    other.close()
    store.close()
    assert all(isinstance(job.error, sqlite3.OperationalError) and job.done.is_set() for job in group)
    assert sum(s.startswith("BEGIN") for s in statements) == 1, statements
    assert sorted(summary(store.path, "r")) == ["warm"]


def test_a_store_whose_folder_cannot_be_made_is_not_a_port_problem(tmp_path: Path,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "a-file").write_text("x")
    (tmp_path / "secret").write_bytes(SECRET)
    db = tmp_path / "a-file" / "ingest.sqlite"
    code = tp(["ingest", "serve", "--port", "0", "--db", str(db), "--secret-file", str(tmp_path / "secret")])
    said = capsys.readouterr().err
    assert code == 2 and f"cannot make the folder of the ingest store {db}" in said, said
    assert "--port" not in said and "cannot listen" not in said
