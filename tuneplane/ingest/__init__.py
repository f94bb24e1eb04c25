"""The ingest receiver for `tuneplane.report`: tokens, SQLite store, HTTP server, read API.

Lifecycle code reads results with `summary(db_path, run_id)` and `series(db_path, run_id, key)`
(`timed_series` adds each point's time, for wall-time charts);
the local backend starts a receiver per run with `start_server(db_path, secret)`.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from tuneplane.ingest.reads import hparams, lifecycle, series, summary, timed_series
from tuneplane.ingest.tokens import ensure_secret, load_secret, mint_token, verify_token

DEFAULT_DB = Path(".tuneplane") / "ingest.sqlite"
DEFAULT_SECRET = Path(".tuneplane") / "ingest.secret"

__all__ = [
    "DEFAULT_DB",
    "DEFAULT_SECRET",
    "ensure_secret",
    "hparams",
    "lifecycle",
    "load_secret",
    "mint_token",
    "series",
    "start_server",
    "summary",
    "timed_series",
    "verify_token",
]


def start_server(
    db_path: Path | str, secret: bytes, host: str = "127.0.0.1", port: int = 0
) -> tuple[str, Callable[[], None]]:
    """Start a receiver in a background thread; returns (base URL, stop). See `server.start_server`."""
    # lazy: the HTTP server loads only where a receiver is started
    from tuneplane.ingest.server import start_server as _start

    return _start(db_path, secret, host, port)
