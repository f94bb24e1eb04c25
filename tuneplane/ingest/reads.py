"""Reading the ingest store: per-run summaries (whole, or a page of metric names), series, times,
hyperparameters and lifecycle events, each over its own read-only connection, so the bot or
`tp job metrics` reads while the receiver writes. A run of a scoped token is kept under its
experiment's tag (`tuneplane.ingest.tokens.run_key`): pass `experiment=` to read it.
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

from tuneplane.errors import UsageError
from tuneplane.ingest.tokens import run_key
from tuneplane.runtime.jsonvalue import JSONObject


class StoreUnreadable(UsageError):
    """The store's file is not an ingest store (not SQLite, damaged) or cannot be opened."""


def unreadable(path: Path, exc: sqlite3.Error) -> StoreUnreadable:
    code = getattr(exc, "sqlite_errorcode", None)
    if code in (sqlite3.SQLITE_NOTADB, sqlite3.SQLITE_CORRUPT):
        return StoreUnreadable(
            f"{path} is not an ingest store ({exc})",
            "move the file aside (a new, empty store is then made in its place) or "
            "pass --db with the store's real path",
        )
    return StoreUnreadable(
        f"cannot open the ingest store {path}: {exc}",
        "check that the path is a store file you may read and write, in a folder that exists",
    )


# ── read API ──────────────────────────────────────────────────────────────────────────────────
def _reader(db_path: Path | str) -> sqlite3.Connection | None:
    path = Path(db_path)
    if not path.exists():
        return None
    try:
        db = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True)
        db.execute("PRAGMA busy_timeout=5000")
    except sqlite3.Error as exc:  # a folder, a file we may not read
        raise unreadable(path, exc) from None
    return db


def _query(db_path: Path | str, sql: str, args: tuple[object, ...]) -> list[tuple[Any, ...]]:
    db = _reader(db_path)
    if db is None:
        return []
    try:
        return db.execute(sql, args).fetchall()
    except sqlite3.OperationalError as exc:
        if "no such table" in str(exc):  # sqlite3 has no error type for a missing table: its message says it
            return []
        raise unreadable(Path(db_path), exc) from None  # a folder, unreadable, locked past the wait
    except sqlite3.DatabaseError as exc:  # not SQLite, or damaged: say which file, not a traceback
        raise unreadable(Path(db_path), exc) from None
    finally:
        db.close()


SUMMARY_SQL = """
SELECT s.key, p.value, a.min_value, a.max_value, a.n, a.last_step
FROM series AS s
JOIN (SELECT series, MIN(value) AS min_value, MAX(value) AS max_value, COUNT(*) AS n, MAX(step) AS last_step
      FROM samples WHERE series IN (SELECT id FROM series WHERE run_id = ?) GROUP BY series) AS a
  ON a.series = s.id
JOIN samples AS p ON p.series = s.id AND p.step = a.last_step
ORDER BY s.key
"""


def summary(db_path: Path | str, run_id: str, experiment: str | None = None) -> dict[str, dict[str, Any]]:
    """Per key: last (value at the highest step), min, max, count, last_step. Empty when unknown."""
    run_id = run_key(run_id, experiment)  # see tuneplane.ingest.tokens
    rows = _query(db_path, SUMMARY_SQL, (run_id,))
    return {
        key: {"last": last, "min": low, "max": high, "count": count, "last_step": step}
        for key, last, low, high, count, step in rows
    }


SUMMARY_PAGE_SQL = """
SELECT s.key, p.value, a.min_value, a.max_value, a.n, a.last_step
FROM (SELECT id, key FROM series WHERE run_id = ? AND key > ? ORDER BY key LIMIT ?) AS s
JOIN (SELECT series, MIN(value) AS min_value, MAX(value) AS max_value, COUNT(*) AS n, MAX(step) AS last_step
      FROM samples WHERE series IN (SELECT id FROM series WHERE run_id = ? AND key > ? ORDER BY key LIMIT ?)
      GROUP BY series) AS a
  ON a.series = s.id
JOIN samples AS p ON p.series = s.id AND p.step = a.last_step
ORDER BY s.key
"""


def summary_page(db_path: Path | str, run_id: str, after: str = "", limit: int = 1000) -> dict[str, dict[str, Any]]:
    """As `summary`, for at most `limit` metric names, in name order, those after `after`."""
    rows = _query(db_path, SUMMARY_PAGE_SQL, (run_id, after, limit, run_id, after, limit))
    return {
        key: {"last": last, "min": low, "max": high, "count": count, "last_step": step}
        for key, last, low, high, count, step in rows
    }


def series(db_path: Path | str, run_id: str, key: str, experiment: str | None = None) -> list[tuple[int, float]]:
    """All (step, value) points of one key, by step."""
    run_id = run_key(run_id, experiment)  # see tuneplane.ingest.tokens
    rows = _query(
        db_path,
        "SELECT p.step, p.value FROM samples AS p JOIN series AS s ON s.id = p.series "
        "WHERE s.run_id = ? AND s.key = ? ORDER BY p.step",
        (run_id, key),
    )
    return [(int(step), float(value)) for step, value in rows]


TimedPoint = tuple[int, float, float | None]  # step, value, seconds since the epoch (None: not known)


def timed_series(db_path: Path | str, run_id: str, key: str, experiment: str | None = None) -> list[TimedPoint]:
    """All (step, value, time) points of one key, by step: the time a point was logged (the SDK's
    `ts`, else when the receiver got it), in seconds since the epoch; None for rows migrated from a
    store that kept no times."""
    run_id = run_key(run_id, experiment)  # see tuneplane.ingest.tokens
    rows = _query(
        db_path,
        "SELECT p.step, p.value, s.t0_ms + p.dt_ms FROM samples AS p "
        "JOIN series AS s ON s.id = p.series WHERE s.run_id = ? AND s.key = ? ORDER BY p.step",
        (run_id, key),
    )
    return [(int(step), float(value), None if ms is None else ms / 1000.0) for step, value, ms in rows]


def hparams(db_path: Path | str, run_id: str, experiment: str | None = None) -> JSONObject:
    run_id = run_key(run_id, experiment)  # see tuneplane.ingest.tokens
    rows = _query(db_path, "SELECT name, value FROM hparams WHERE run_id = ? ORDER BY name", (run_id,))
    return {name: json.loads(value) for name, value in rows}


def lifecycle(db_path: Path | str, run_id: str, experiment: str | None = None) -> list[JSONObject]:
    run_id = run_key(run_id, experiment)  # see tuneplane.ingest.tokens
    rows = _query(
        db_path, "SELECT event, ts, received_at FROM lifecycle WHERE run_id = ? ORDER BY received_at", (run_id,)
    )
    return [{"event": event, "ts": ts, "received_at": received} for event, ts, received in rows]
