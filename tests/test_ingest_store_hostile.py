"""A store the receiver cannot use: a file that is not SQLite (named, left untouched, never "a bug in
tp"), and a disk that fills up (a clear 507 the client retries, the other writes stored, the store
whole). SQLite's own page limit (`max_page_count`) raises the very error a full disk raises
(SQLITE_FULL), so the test fills the store without filling the machine's disk; a failure at COMMIT
(where a real full disk in WAL mode mostly fails) is injected with SQLite's own error, and a
file-size limit (RLIMIT_FSIZE, what a quota looks like to SQLite) is set on a real receiver process."""

from __future__ import annotations

import http.client
import json
import signal
import sqlite3
import subprocess
import sys
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
def test_a_store_file_that_is_not_sqlite_is_named_and_left_alone(
    tmp_path: Path, kind: str, capsys: pytest.CaptureFixture[str]
) -> None:
    db = tmp_path / "ingest.sqlite"
    db.write_bytes(NOT_SQLITE[kind])
    (tmp_path / "secret").write_bytes(SECRET)
    with pytest.raises(StoreUnreadable, match="is not an ingest store"):
        MetricStore(db)
    for argv in (
        ["ingest", "serve", "--port", "0", "--db", str(db), "--secret-file", str(tmp_path / "secret")],
        ["job", "metrics", "some-run", "--db", str(db)],
    ):
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
    host, port = url[len("http://") :].rsplit(":", 1)
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


def test_a_full_disk_is_a_clear_507_and_the_store_stays_whole(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
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


def _a_group_of_three(store: MetricStore) -> dict[str, Any]:
    """Three writes (small, huge, small) waiting together, so the writer commits them as one group;
    what each write returned or raised."""
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

    writers = [
        threading.Thread(target=write, args=(name, steps))
        for name, steps in (("small-1", 5), ("huge", 40_000), ("small-2", 5))
    ]
    for thread in writers:
        thread.start()
    for _ in range(1000):
        if store._jobs.qsize() >= 3:
            break
        threading.Event().wait(0.01)
    release.set()
    for thread in [holder, *writers]:
        thread.join(30)
    store.close()
    return results


def test_a_write_that_does_not_fit_fails_alone_in_its_group(tmp_path: Path) -> None:
    """Writes that waited together commit together; when SQLite gives the whole transaction up (a
    full disk does), each is tried alone: the ones that fit are stored, the one that does not gets
    StoreFull, and none gets another write's error."""
    store = MetricStore(tmp_path / "ingest.sqlite")
    store.add_points("r", [("warm", 0, 1.0, 0.0)])
    _fill_up(store, 4)
    results = _a_group_of_three(store)
    assert results["small-1"] == (5, False) and results["small-2"] == (5, False)
    assert isinstance(results["huge"], StoreFull)
    assert sorted(summary(store.path, "r")) == ["small-1", "small-2", "warm"]


def _real_full_error() -> sqlite3.OperationalError:
    """The very error SQLite raises when its file cannot grow (SQLITE_FULL), from SQLite itself."""
    db = sqlite3.connect(":memory:")
    db.execute("CREATE TABLE t (x)")
    db.execute("PRAGMA max_page_count = 3")
    try:
        db.executemany("INSERT INTO t VALUES (?)", [("x" * 2000,)] * 100)
    except sqlite3.OperationalError as exc:
        assert exc.sqlite_errorcode == sqlite3.SQLITE_FULL
        return exc
    finally:
        db.close()
    raise AssertionError("SQLite did not fill up")


class FullAtCommit:
    """The store's connection on a disk with `room` rows to spare, where (as on a real full disk in
    WAL mode, whose pages go to the log only at COMMIT) every statement succeeds and COMMIT fails
    with SQLite's own SQLITE_FULL; the transaction stays open, or SQLite has rolled it back."""

    def __init__(self, db: sqlite3.Connection, room: int, rolled_back: bool) -> None:
        self._db, self.room, self.rolled_back = db, room, rolled_back
        self.error, self.begun, self.failed = _real_full_error(), 0, 0

    def execute(self, sql: str, *args: Any) -> Any:
        if sql.startswith("BEGIN"):
            self.begun = self._db.total_changes
        elif sql == "COMMIT" and self._db.total_changes - self.begun > self.room:
            self.failed += 1
            if self.rolled_back:
                self._db.execute("ROLLBACK")
            raise self.error.with_traceback(None)
        return self._db.execute(sql, *args)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._db, name)


@pytest.mark.parametrize("rolled_back", [False, True], ids=["left-open", "rolled-back"])
def test_a_disk_that_fills_at_commit_fails_only_the_write_that_does_not_fit(tmp_path: Path, rolled_back: bool) -> None:
    """On a real full disk in WAL mode the failure mostly comes at COMMIT, not from a statement:
    the writes of the group are still tried alone, so only the one that does not fit gets StoreFull."""
    store = MetricStore(tmp_path / "ingest.sqlite")
    store.add_points("r", [("warm", 0, 1.0, 0.0)])
    disk = FullAtCommit(store._db, room=1000, rolled_back=rolled_back)
    store._db = disk  # type: ignore[assignment]
    results = _a_group_of_three(store)
    assert disk.failed >= 2  # the group's COMMIT, then the huge write's own
    assert results["small-1"] == (5, False) and results["small-2"] == (5, False), results
    assert isinstance(results["huge"], StoreFull)
    assert sorted(summary(store.path, "r")) == ["small-1", "small-2", "warm"]
    assert sqlite3.connect(store.path).execute("PRAGMA integrity_check").fetchone() == ("ok",)


def test_a_log_that_outlives_the_close_is_said_and_applied_on_the_next_start(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
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
    group = [_Job(lambda: store._db.execute("INSERT INTO events VALUES ('r', 'x', 0, '{}')"), 1) for _ in range(3)]
    store._commit(group)
    store._db.set_trace_callback(None)
    other.execute("ROLLBACK")
    other.close()
    store.close()
    assert all(isinstance(job.error, sqlite3.OperationalError) and job.done.is_set() for job in group)
    assert sum(s.startswith("BEGIN") for s in statements) == 1, statements
    assert sorted(summary(store.path, "r")) == ["warm"]


def test_a_store_whose_folder_cannot_be_made_is_not_a_port_problem(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "a-file").write_text("x")
    (tmp_path / "secret").write_bytes(SECRET)
    db = tmp_path / "a-file" / "ingest.sqlite"
    code = tp(["ingest", "serve", "--port", "0", "--db", str(db), "--secret-file", str(tmp_path / "secret")])
    said = capsys.readouterr().err
    assert code == 2 and f"cannot make the folder of the ingest store {db}" in said, said
    assert "--port" not in said and "cannot listen" not in said


# SIGTERM is blocked in every thread (the server's inherit the mask) and taken by `sigwait` in the main
# thread: a Python handler calling Event.set() deadlocks when it runs while the main thread holds that
# Event's lock, which a main thread starved of the GIL on a loaded machine can be doing. A stop that
# hangs dumps every thread's stack, so the test says where.
FILE_SIZE_LIMITED = r"""
import faulthandler, resource, signal, sys
from tuneplane.ingest.server import IngestServer
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails with EFBIG instead
signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})
server = IngestServer(sys.argv[1], b"f" * 32).start()
limit = int(sys.argv[2])
resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))  # no file of this process grows past it
print(server.url, flush=True)
signal.sigwait({signal.SIGTERM})
faulthandler.dump_traceback_later(45, exit=True)
server.stop()
faulthandler.cancel_dump_traceback_later()
"""


def test_a_file_size_limit_or_quota_is_a_507_not_an_internal_error(tmp_path: Path) -> None:
    """SQLite says SQLITE_FULL only for ENOSPC: a quota (EDQUOT) or a file-size limit (EFBIG, made
    here with RLIMIT_FSIZE on a real receiver process) comes back as SQLITE_IOERR_WRITE. It is
    answered as a full disk is: 507 with Retry-After, told once on stderr, the writes that fit stored."""
    db = tmp_path / "ingest.sqlite"
    child = subprocess.Popen(
        [sys.executable, "-c", FILE_SIZE_LIMITED, str(db), str(512 * 1024)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert child.stdout is not None
        url = child.stdout.readline().strip()
        assert url.startswith("http://127.0.0.1:"), child.stderr.read() if child.stderr else ""
        assert _post(url, "run-a", "loss", 100)[0] == 200
        for attempt in range(3):
            status, answer, retry_after = _post(url, "run-a", f"big-{attempt}", 40_000)
            assert status == 507, answer
            assert "full" in answer["error"] and "quota" in answer["error"]
            assert retry_after is not None and int(retry_after) > 0
        assert _post(url, "run-a", "small", 10)[0] == 200  # what still fits is stored
    finally:
        child.send_signal(signal.SIGTERM)
        try:
            _, err = child.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            child.kill()
            _, err = child.communicate()
    assert child.returncode == 0, err
    assert "internal error" not in err and "Traceback" not in err, err
    assert err.count("writes are answered 507") == 1, err  # the operator is told, once
    assert sqlite3.connect(db).execute("PRAGMA integrity_check").fetchone() == ("ok",)
    assert sorted(summary(db, "run-a")) == ["loss", "small"]


FOREIGN = {
    "another program's table": "CREATE TABLE users (x); INSERT INTO users VALUES (1);",
    "a points table of another shape": "CREATE TABLE points (run_id, key, step, value); "
    "INSERT INTO points VALUES ('r', 'loss', 1, 0.5);",
    "the old points table beside another's": "CREATE TABLE points (run_id TEXT NOT NULL, key TEXT NOT NULL, "
    "step INTEGER NOT NULL, value REAL NOT NULL, ts TEXT); "
    "INSERT INTO points VALUES ('r', 'loss', 1, 0.5, ''); "
    "CREATE TABLE users (x);",
    "our names, other columns": "CREATE TABLE events (id INTEGER PRIMARY KEY, what TEXT);",
    "a view": "CREATE TABLE hparams (run_id TEXT NOT NULL, name TEXT NOT NULL, value TEXT NOT NULL, "
    "PRIMARY KEY (run_id, name)) WITHOUT ROWID; CREATE VIEW v AS SELECT 1;",
}


@pytest.mark.parametrize("kind", list(FOREIGN))
def test_another_programs_sqlite_file_is_named_and_left_untouched(
    tmp_path: Path, kind: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("TUNEPLANE_INGEST_SECRET_FILE", raising=False)
    db = tmp_path / "other.db"
    made = sqlite3.connect(db)
    made.executescript(FOREIGN[kind])
    made.commit()
    made.close()
    before = db.read_bytes()
    with pytest.raises(StoreUnreadable, match="is not an ingest store") as caught:
        MetricStore(db)
    assert str(db) in str(caught.value) and "hint:" in str(caught.value)
    code = tp(["ingest", "serve", "--port", "0", "--db", str(db)])  # no --secret-file: none is made
    said = capsys.readouterr().err
    assert code == 2 and f"{db} is not an ingest store" in said and "bug in tp" not in said, said
    assert db.read_bytes() == before  # byte for byte: not switched to WAL, no table added or dropped
    assert sorted(p.name for p in tmp_path.iterdir()) == ["other.db"]  # no -wal, -shm, ingest.secret


def test_a_store_folder_that_is_a_file_without_a_secret_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The secret's default place is beside the store: the store's folder is checked first, so a
    file in its way is named as the store's problem, never "a bug in tp"."""
    monkeypatch.delenv("TUNEPLANE_INGEST_SECRET_FILE", raising=False)
    (tmp_path / "a-file").write_text("x")
    db = tmp_path / "a-file" / "ingest.sqlite"
    code = tp(["ingest", "serve", "--port", "0", "--db", str(db)])
    said = capsys.readouterr().err
    assert code == 2 and f"cannot make the folder of the ingest store {db}" in said, said
    assert "bug in tp" not in said and "Traceback" not in said
    assert (tmp_path / "a-file").read_text() == "x"


def test_a_secret_file_whose_folder_cannot_be_made_is_named(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "a-file").write_text("x")
    secret = tmp_path / "a-file" / "ingest.secret"
    code = tp(["ingest", "serve", "--port", "0", "--db", str(tmp_path / "ingest.sqlite"), "--secret-file", str(secret)])
    said = capsys.readouterr().err
    assert code == 2 and f"cannot make the token secret {secret}" in said, said
    assert "bug in tp" not in said and "Traceback" not in said and "cannot listen" not in said
