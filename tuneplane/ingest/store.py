"""The ingest store: SQLite in WAL mode, one row per (run, key, step), batch ids remembered.

A point costs about 25 bytes on disk: each (run, key) is a row of `series` with an integer id and a
base time, and `samples` is a WITHOUT ROWID table keyed by (series id, step) holding the value and
the milliseconds since the series' base time. Closing checkpoints the WAL and removes it.

Writers go through one `MetricStore` (the receiver), whose one writer thread commits the writes
that arrived meanwhile as one transaction (group commit: one WAL append for many requests, and no
handler thread ever holds the database's write lock); readers
(`tuneplane.ingest.reads`) open their own read-only connection, so the bot or `tp job metrics` can read
while a job is writing. Upstream clients send no batch id and retry, so
points are upserted on (run_id, key, step); our client's batch ids make a retried batch a no-op.
"""

from __future__ import annotations

import json
import math
import queue
import sqlite3
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar

from tuneplane.ingest.layout import foreign_objects
from tuneplane.ingest.reads import StoreUnreadable, unreadable

Point = tuple[str, int, float, str | float]  # key, step, value, ts (ISO-8601 text or unix seconds)

SCHEMA = """
CREATE TABLE IF NOT EXISTS series (
    id INTEGER PRIMARY KEY, run_id TEXT NOT NULL, key TEXT NOT NULL, t0_ms INTEGER NOT NULL,
    UNIQUE (run_id, key)
);
CREATE TABLE IF NOT EXISTS samples (
    series INTEGER NOT NULL, step INTEGER NOT NULL, value REAL NOT NULL, dt_ms INTEGER,
    PRIMARY KEY (series, step)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS batches (
    run_id TEXT NOT NULL, batch_id TEXT NOT NULL, kind TEXT NOT NULL, received_at REAL NOT NULL,
    PRIMARY KEY (run_id, batch_id)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS hparams (
    run_id TEXT NOT NULL, name TEXT NOT NULL, value TEXT NOT NULL,
    PRIMARY KEY (run_id, name)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS lifecycle (
    run_id TEXT NOT NULL, event TEXT NOT NULL, ts TEXT, received_at REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS events (
    run_id TEXT NOT NULL, kind TEXT NOT NULL, received_at REAL NOT NULL, body TEXT NOT NULL
);
"""

UPSERT = (
    "INSERT INTO samples (series, step, value, dt_ms) VALUES (?, ?, ?, ?) "
    "ON CONFLICT (series, step) DO UPDATE SET value = excluded.value, dt_ms = excluded.dt_ms"
)
MAX_SERIES_CACHE = 100_000
MAX_SERIES_PER_RUN = 50_000  # metric names one run may have (the receiver's Limits.max_series)
MAX_GROUP = 64  # writes committed in one transaction
MAX_GROUP_POINTS = 200_000  # and rows: a group's transaction stays short
QUEUE_DEPTH = 1024  # writes waiting for the writer; a full queue answers "busy, retry"
WRITE_WAIT = 60.0  # seconds a request waits for its commit before it is answered "busy, retry"
T = TypeVar("T")
_FULL_CODES = (sqlite3.SQLITE_FULL, sqlite3.SQLITE_IOERR_WRITE)


def ts_ms(ts: str | float) -> int | None:
    """Milliseconds since the epoch of an ISO-8601 time (or unix seconds), or None when it is not one."""
    if type(ts) is float:
        return int(ts * 1000) if math.isfinite(ts) else None
    if not ts or not isinstance(ts, str):
        return None
    try:
        stamp = datetime.fromisoformat(ts)
    except ValueError:
        return None
    if stamp.tzinfo is None:
        stamp = stamp.replace(tzinfo=UTC)
    try:
        return int(stamp.timestamp() * 1000)
    except (OverflowError, OSError, ValueError):
        return None


class MetricStore:
    """The receiver's write handle. Thread-safe: every write is queued to one writer thread, which
    commits the writes waiting at that moment in one transaction (a savepoint each, so one bad write
    fails alone). A caller returns once its write is committed, or raises what it raised."""

    def __init__(self, path: Path | str) -> None:
        self.path = Path(path)
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:  # not a listening problem: say which folder
            raise StoreUnreadable(
                f"cannot make the folder of the ingest store {self.path}: {exc.strerror or exc}",
                "pass --db a path in a folder you may write",
            ) from None
        try:
            self._db = sqlite3.connect(str(self.path), check_same_thread=False, isolation_level=None)
        except sqlite3.DatabaseError as exc:  # a folder, or a file we may not open
            raise unreadable(self.path, exc) from None
        try:
            foreign = foreign_objects(self._db, SCHEMA)  # before any write: leave a foreign file as it is
            if foreign:
                raise StoreUnreadable(
                    f"{self.path} is not an ingest store: it holds {foreign}",
                    "pass --db the ingest store's path, or one that does not exist yet "
                    "(a new store is made there); this file was left untouched",
                )
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA synchronous=NORMAL")  # WAL: no fsync per commit, only at checkpoints
            self._db.execute("PRAGMA busy_timeout=5000")
            _migrate(self._db)
            self._db.executescript(SCHEMA)
        except (sqlite3.DatabaseError, StoreUnreadable) as exc:  # not SQLite, damaged, a folder, another's
            self._db.close()
            raise (exc if isinstance(exc, StoreUnreadable) else unreadable(self.path, exc)) from None
        self._closed = False
        self._series: dict[tuple[str, str], tuple[int, int]] = {}  # (run, key) -> (id, t0_ms)
        self._names: dict[str, int] = {}  # run -> its number of series (metric names), once counted
        self.max_series = MAX_SERIES_PER_RUN
        self._jobs: queue.Queue[_Job | None] = queue.Queue(QUEUE_DEPTH)
        self._gate = threading.Lock()  # orders close() after every write already queued
        self.commits = 0  # transactions committed, each holding one or more writes
        self.writes = 0
        self._writer = threading.Thread(target=self._run, name="tuneplane-ingest-writer", daemon=True)
        self._writer.start()

    def _claim_batch(self, run_id: str, batch_id: str | None, kind: str) -> bool:
        """Record the batch id inside the current transaction; False when it was seen before."""
        if not batch_id:
            return True
        cursor = self._db.execute(
            "INSERT OR IGNORE INTO batches (run_id, batch_id, kind, received_at) VALUES (?, ?, ?, ?)",
            (run_id, batch_id, kind, time.time()),
        )
        return cursor.rowcount == 1

    def add_points(self, run_id: str, points: Iterable[Point], batch_id: str | None = None) -> Written:
        """Upsert points; a point of a metric name past the run's `max_series` is left out and named."""
        stamped = _stamped(points, int(time.time() * 1000))  # on the caller's thread, not the writer's

        def write() -> Written:
            if not self._claim_batch(run_id, batch_id, "metrics"):
                return Written(0, True)
            rows = []
            known = self._series
            over: dict[str, int] = {}
            for key, step, value, stamp in stamped:
                found = known.get((run_id, key)) or self._series_of(run_id, key, stamp)
                if found is None:
                    over[key] = over.get(key, 0) + 1
                    continue
                rows.append((found[0], step, value, stamp - found[1]))
            self._db.executemany(UPSERT, rows)
            return Written(len(rows), False, list(over), sum(over.values()))

        return self._submit(write, len(stamped))

    def _series_of(self, run_id: str, key: str, t0: int) -> tuple[int, int] | None:
        """The series row of (run, key), created with base time `t0` on first use, or None when the
        run already has `max_series` names. Inside a write."""
        cached = self._series.get((run_id, key))
        if cached is not None:
            return cached
        row = self._db.execute("SELECT id, t0_ms FROM series WHERE run_id = ? AND key = ?", (run_id, key)).fetchone()
        if row is None:
            names = self._names.get(run_id)
            if names is None:
                if len(self._names) >= MAX_SERIES_CACHE:
                    self._names.clear()
                names = self._db.execute("SELECT COUNT(*) FROM series WHERE run_id = ?", (run_id,)).fetchone()[0]
            if names >= self.max_series:
                self._names[run_id] = names
                return None
            cursor = self._db.execute("INSERT INTO series (run_id, key, t0_ms) VALUES (?, ?, ?)", (run_id, key, t0))
            self._names[run_id] = names + 1
            row = (int(cursor.lastrowid or 0), t0)
        if len(self._series) >= MAX_SERIES_CACHE:
            self._series.clear()
        self._series[(run_id, key)] = (int(row[0]), int(row[1]))
        return self._series[(run_id, key)]

    def set_hparams(self, run_id: str, params: Mapping[str, object], batch_id: str | None = None) -> tuple[int, bool]:
        rows = [(run_id, name, json.dumps(value, ensure_ascii=False)) for name, value in params.items()]

        def write() -> tuple[int, bool]:
            if not self._claim_batch(run_id, batch_id, "hparams"):
                return 0, True
            self._db.executemany(
                "INSERT INTO hparams (run_id, name, value) VALUES (?, ?, ?) "
                "ON CONFLICT (run_id, name) DO UPDATE SET value = excluded.value",
                rows,
            )
            return len(rows), False

        return self._submit(write, len(rows))

    def add_lifecycle(self, run_id: str, event: str, ts: str | None) -> None:
        self._insert(
            "INSERT INTO lifecycle (run_id, event, ts, received_at) VALUES (?, ?, ?, ?)",
            (run_id, event, ts, time.time()),
        )

    def add_event(self, run_id: str, kind: str, body: object) -> None:
        """Upstream side channels (hardware samples, observations) kept verbatim for inspection."""
        self._insert(
            "INSERT INTO events (run_id, kind, received_at, body) VALUES (?, ?, ?, ?)",
            (run_id, kind, time.time(), json.dumps(body, ensure_ascii=False)),
        )

    def _insert(self, sql: str, row: tuple[object, ...]) -> None:
        def write() -> None:
            self._db.execute(sql, row)

        self._submit(write)

    # ── the writer ──────────────────────────────────────────────────────────────────────────────
    def _submit(self, fn: Callable[[], T], size: int = 1) -> T:
        job = _Job(fn, size)
        with self._gate:
            if self._closed:
                raise StoreClosed("the ingest store is closed")
            try:
                self._jobs.put_nowait(job)  # never blocks under the gate: close() must not wait on it
            except queue.Full:
                raise StoreBusy(f"{QUEUE_DEPTH} writes are waiting for the store") from None
        if not job.done.wait(WRITE_WAIT):
            raise StoreBusy(f"the write was not committed within {WRITE_WAIT:g} s")
        if job.error is not None:
            raise job.error
        return job.result  # type: ignore[no-any-return]

    def _run(self) -> None:
        """Take what is queued (up to MAX_GROUP writes, MAX_GROUP_POINTS rows), commit it as one."""
        while True:
            job = self._jobs.get()
            if job is None:
                return
            group, size, last = [job], job.size, False
            while len(group) < MAX_GROUP and size < MAX_GROUP_POINTS:
                try:
                    more = self._jobs.get_nowait()
                except queue.Empty:
                    break
                if more is None:
                    last = True
                    break
                group.append(more)
                size += more.size
            self._commit(group)
            if last:
                return

    def _commit(self, group: list[_Job]) -> None:
        try:
            self._transaction(group)
        except Exception as exc:  # a write ended the transaction, or it failed itself (locked, full at COMMIT)
            self._rollback()
            failure = self._failure(exc.cause if isinstance(exc, _Ended) else exc)
            # A full disk (mid-write, or at COMMIT as it mostly is in WAL mode): each write alone, so
            # the one that does not fit fails alone. A locked store fails the group once.
            if len(group) > 1 and (isinstance(exc, _Ended) or isinstance(failure, StoreFull)):
                for job in group:
                    job.error = job.result = None
                    self._commit([job])
                return
            for job in group:
                job.error, job.result = failure, None
        finally:
            for job in group:
                job.done.set()

    def _rollback(self) -> None:
        try:
            self._db.execute("ROLLBACK")
        except sqlite3.Error:
            pass  # SQLite already rolled it back
        self._series.clear()  # ids created in the rolled-back transaction are gone
        self._names.clear()

    def _transaction(self, group: list[_Job]) -> None:
        self._db.execute("BEGIN IMMEDIATE")
        for job in group:
            self._db.execute("SAVEPOINT one_write")
            try:
                job.result = job.fn()
            except Exception as exc:  # this write fails alone; the others still commit
                if not self._db.in_transaction:
                    raise _Ended(exc) from exc  # SQLite ended the whole transaction: the group is retried
                self._db.execute("ROLLBACK TO one_write")
                self._series.clear()  # ids created in the rolled-back write are gone
                self._names.clear()
                job.error = self._failure(exc)
            self._db.execute("RELEASE one_write")
        self._db.execute("COMMIT")
        self.commits += 1
        self.writes += len(group)

    def _failure(self, exc: Exception) -> Exception:
        """What a failed write raises: a full disk as StoreFull, anything else as it came. SQLite says
        SQLITE_FULL only for ENOSPC; a quota (EDQUOT), a file-size limit (EFBIG) or a failing device
        come back as SQLITE_IOERR_WRITE, which is the same to the client: nothing stored, retry later."""
        if isinstance(exc, sqlite3.Error) and getattr(exc, "sqlite_errorcode", None) in _FULL_CODES:
            return StoreFull("the receiver's disk is full (or a quota, file-size limit or write error stops it)")
        return exc

    def close(self) -> None:
        """Commit what is queued, then checkpoint the WAL into the database and leave no -wal/-shm
        file behind. Idempotent; a write after it raises StoreClosed."""
        with self._gate:
            if self._closed:
                return
            self._closed = True
            self._jobs.put(None)  # after every queued write: the writer commits them, then stops
        self._writer.join(WRITE_WAIT)
        try:
            self._db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            self._db.execute("PRAGMA journal_mode=DELETE")
        except sqlite3.Error:
            pass  # a reader holds the WAL: SQLite cleans it up when the last one closes
        self._db.close()

    def wal_left(self) -> bool:
        """Whether the write-ahead log outlived close(): its disk was full (the database could not
        grow to take the log's pages), or a reader held it. The points in it are safe: SQLite applies
        the log when the store is next opened, so it must stay beside the database."""
        return self._closed and Path(f"{self.path}-wal").exists()


class Written(tuple[int, bool]):
    """What `add_points` did: `(stored, duplicate)` as before (points stored, whether the batch was seen
    before), and beside it the metric names (`over`) and their points (`over_points`) left out because
    the run has `max_series` names already."""

    over: list[str]
    over_points: int

    def __new__(cls, stored: int, duplicate: bool, over: list[str] | None = None, over_points: int = 0) -> Written:
        self = super().__new__(cls, (stored, duplicate))
        self.over, self.over_points = over or [], over_points
        return self

    @property
    def stored(self) -> int:
        return self[0]

    @property
    def duplicate(self) -> bool:
        return self[1]


class _Ended(Exception):
    """A write whose failure ended the whole transaction (SQLite rolls back on a full disk)."""

    def __init__(self, cause: Exception) -> None:
        super().__init__(str(cause))
        self.cause = cause


class _Job:
    """One write waiting for the writer thread: its function, then its result or error."""

    __slots__ = ("done", "error", "fn", "result", "size")

    def __init__(self, fn: Callable[[], Any], size: int) -> None:
        self.fn, self.size = fn, size
        self.done = threading.Event()
        self.result: Any = None
        self.error: BaseException | None = None


def _stamped(points: Iterable[Point], now_ms: int) -> list[tuple[str, int, float, int]]:
    """Points with their time in epoch milliseconds (the receipt time when they carry none): unix
    seconds (the rows/1 body) or ISO-8601 text. The points of one record share one `ts`, so
    consecutive equal stamps are converted once."""
    out = []
    last_ts: str | float | None = None
    last_ms = now_ms
    for key, step, value, ts in points:
        if ts != last_ts:
            last_ts = ts
            parsed = ts_ms(ts) if ts else None
            last_ms = now_ms if parsed is None else parsed
        out.append((key, step, value, last_ms))
    return out


def _migrate(db: sqlite3.Connection) -> None:
    """A database from before the compact layout: move its `points` rows into series + samples."""
    old = db.execute("SELECT name FROM sqlite_master WHERE type = 'table' AND name = 'points'").fetchone()
    if old is None:
        return
    db.executescript(SCHEMA)
    db.execute("BEGIN IMMEDIATE")
    try:
        db.execute(
            "INSERT OR IGNORE INTO series (run_id, key, t0_ms) SELECT run_id, key, 0 FROM points GROUP BY run_id, key"
        )
        db.execute(
            "INSERT OR REPLACE INTO samples (series, step, value, dt_ms) "
            "SELECT s.id, p.step, p.value, NULL FROM points AS p "
            "JOIN series AS s ON s.run_id = p.run_id AND s.key = p.key"
        )
        db.execute("DROP TABLE points")
        db.execute("COMMIT")
    except sqlite3.Error:
        db.execute("ROLLBACK")
        raise


class StoreClosed(RuntimeError):
    """A write arrived while the receiver was shutting down."""


class StoreBusy(RuntimeError):
    """A write could not be committed in time (the writer is behind); the client retries."""


class StoreFull(RuntimeError):
    """The store's disk (or its quota) is full: nothing of the write was stored; the client retries."""


__all__ = ["MetricStore", "Point", "StoreBusy", "StoreClosed", "StoreFull", "StoreUnreadable", "Written"]
