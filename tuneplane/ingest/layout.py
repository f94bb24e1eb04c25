"""Whether a SQLite database is an ingest store: read before the store writes anything, so another
program's database given as `--db` is named and left byte for byte as it was."""

from __future__ import annotations

import sqlite3

OLD_POINTS = ["run_id", "key", "step", "value", "ts"]  # the `points` table of the first layout
_SHAPES: dict[str, dict[str, list[str]]] = {}  # schema -> its tables' columns


def foreign_objects(db: sqlite3.Connection, schema: str) -> str:
    """What of `db` is not an ingest store's (tables by `schema`'s names and columns, the old
    layout's `points`, indexes on them), named for a message; empty when it is a store, an old one,
    or empty."""
    kept = dict(_tables(schema)) | {"points": OLD_POINTS}
    odd = []
    rows = db.execute(
        "SELECT type, name, tbl_name FROM sqlite_master WHERE name NOT LIKE 'sqlite!_%' ESCAPE '!' ORDER BY name"
    ).fetchall()
    for kind, name, table in rows:
        if kind not in ("table", "index") or kept.get(table) != _columns(db, table):
            odd.append(f"{kind} {name!r}")
    return ", ".join(odd[:5]) + (f" and {len(odd) - 5} more" if len(odd) > 5 else "")


def _columns(db: sqlite3.Connection, table: str) -> list[str]:
    return [str(row[0]) for row in db.execute("SELECT name FROM pragma_table_info(?)", (table,))]


def _tables(schema: str) -> dict[str, list[str]]:
    """Each table `schema` makes, with its columns in order (read from SQLite itself, once)."""
    if schema not in _SHAPES:
        db = sqlite3.connect(":memory:")
        try:
            db.executescript(schema)
            names = [str(row[0]) for row in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
            _SHAPES[schema] = {name: _columns(db, name) for name in names}
        finally:
            db.close()
    return _SHAPES[schema]
