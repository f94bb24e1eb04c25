"""`tp ingest serve`: run the metrics receiver that `tuneplane.report` in jobs sends to."""

from __future__ import annotations

import os
import signal
from pathlib import Path
from typing import Annotated

import typer

from tuneplane.cli.say import say
from tuneplane.errors import UsageError

ingest_app = typer.Typer(name="ingest", help="The metrics ingest receiver.", no_args_is_help=True, add_completion=False)


@ingest_app.command("serve")
def serve(
    host: Annotated[str, typer.Option(help="Address to bind; 0.0.0.0 inside a cluster.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="Port to listen on (0 picks a free one).")] = 8765,
    db: Annotated[Path | None, typer.Option(help="SQLite database (default .tuneplane/ingest.sqlite).")] = None,
    secret_file: Annotated[
        Path | None,
        typer.Option(
            help="File holding the token secret, a regular file of at most 4 KiB; created with a random secret "
            "when missing (default: ingest.secret next to the database, or $TUNEPLANE_INGEST_SECRET_FILE)."
        ),
    ] = None,
    verbose: Annotated[bool, typer.Option("--verbose", "-v", help="Log every request.")] = False,
) -> None:
    """Accept metrics over HTTP (upstream wire protocol plus gzip and batch ids) into SQLite."""
    # lazy: tp builds only the invoked command, so only it pays for these
    from tuneplane.ingest import DEFAULT_DB, ensure_secret
    from tuneplane.ingest.server import IngestServer
    from tuneplane.ingest.store import MetricStore

    db_path = db or DEFAULT_DB
    if not 0 <= port <= 65535:
        raise UsageError(f"--port {port} is not a TCP port", "use 1-65535, or 0 for any free port")
    env_secret = os.environ.get("TUNEPLANE_INGEST_SECRET_FILE")
    secret_path = secret_file or (Path(env_secret) if env_secret else db_path.parent / "ingest.secret")
    # The store first: a --db it refuses (not an ingest store, a folder it cannot make) is named as
    # such, with no secret made beside it and no folder made for one.
    MetricStore(db_path).close()
    try:
        secret, created = ensure_secret(secret_path)
    except OSError as exc:
        raise UsageError(
            f"cannot make the token secret {secret_path}: {exc.strerror or exc}",
            "pass --secret-file a path in a folder you may write",
        ) from None
    try:
        server = IngestServer(db_path, secret, host, port, verbose=verbose)
    except OSError as exc:
        raise UsageError(
            f"cannot listen on {host}:{port}: {exc.strerror or exc}", "pick another --port or stop what is using it"
        ) from None
    if created:
        say.note(f"created a new token secret in {secret_path} (keep it private)")
    say.note(f"ingest receiver listening on {server.url} (database {db_path})")

    def stop(_signum: int, _frame: object) -> None:
        raise KeyboardInterrupt  # unwinds serve_forever, whose cleanup checkpoints and closes the store

    signal.signal(signal.SIGTERM, stop)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        say.note("stopped")


def register(app: typer.Typer) -> None:
    app.add_typer(ingest_app, name="ingest")
