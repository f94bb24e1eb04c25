"""`tp job ...`: inspect a run's job. `metrics` shows what `tuneplane.report` delivered."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated, Any

import typer

from tuneplane.cli.options import Run

job_app = typer.Typer(name="job", help="Inspect and control runs: ls, status, logs, cancel, metrics.",
                      no_args_is_help=True, add_completion=False)


@job_app.command("metrics")
def metrics(
    run: Run,
    key: Annotated[list[str] | None, typer.Option("--key", "-k", help="Only this key (repeatable).")] = None,
    plot: Annotated[Path | None, typer.Option(help="Also write an SVG line chart to this file.")] = None,
    endpoint: Annotated[str | None, typer.Option(
        help="Read from a receiver at this URL instead of a database.")] = None,
    db: Annotated[Path | None, typer.Option(
        help="SQLite database of the receiver (default .tuneplane/ingest.sqlite).")] = None,
    token: Annotated[str | None, typer.Option(envvar="TUNEPLANE_JOB_TOKEN",
                                              help="Run token for --endpoint.")] = None,
    secret_file: Annotated[Path | None, typer.Option(
        help="Mint the run token for --endpoint from this secret.")] = None,
    width: Annotated[int, typer.Option(help="Sparkline width in characters.")] = 24,
) -> None:
    """Print a run's metrics (last, min, max, count, last step, trend); --plot writes an SVG."""
    # lazy: tp builds only the invoked command, so only it pays for these
    from tuneplane.errors import UsageError
    from tuneplane.gitops.charts import render_svg, render_table

    if endpoint and db:
        raise UsageError("--endpoint and --db are alternatives", "pass one of them")
    read = _remote_reader(_resolve_run(run)[0], endpoint, token, secret_file) if endpoint else _local_reader(run, db)
    summary = read.summary()
    if not summary:
        raise UsageError(f"no metrics stored for run {run!r}",
                         "check the run id; a job reports only with tuneplane.report "
                         "and TUNEPLANE_JOB_TOKEN set")
    keys = _select(summary, key or [])
    series = {k: read.series(k) for k in keys}
    typer.echo(render_table({k: summary[k] for k in keys}, series, width=max(1, width)), nl=False)
    if plot is not None:
        try:
            plot.write_text(render_svg(series, title=f"run {run}"), encoding="utf-8")
        except OSError as exc:
            raise UsageError(f"cannot write {plot}: {exc.strerror or exc}") from None
        typer.echo(f"wrote {plot}", err=True)


def _select(summary: dict[str, Any], wanted: list[str]) -> list[str]:
    # lazy: tp builds only the invoked command, so only it pays for these
    from tuneplane.errors import UsageError

    missing = [k for k in wanted if k not in summary]
    if missing:
        raise UsageError(f"no metric named {', '.join(map(repr, missing))} in this run",
                         f"keys: {', '.join(sorted(summary))}")
    return wanted or sorted(summary)


class _Reader:
    def __init__(self, summary: Any, series: Any) -> None:
        self.summary, self.series = summary, series


def _local_reader(run: str, db: Path | None) -> _Reader:
    # lazy: tp builds only the invoked command, so only it pays for these
    from tuneplane import ingest
    from tuneplane.errors import UsageError

    run_id, own = _resolve_run(run)
    path = db or own or Path(os.environ.get("TUNEPLANE_INGEST_DB") or ingest.DEFAULT_DB)
    if not path.exists():
        raise UsageError(f"no ingest database at {path}", "pass --db PATH or --endpoint URL")
    return _Reader(lambda: ingest.summary(path, run_id), lambda k: ingest.series(path, run_id, k))


def _resolve_run(run: str) -> tuple[str, Path | None]:
    """The run id a reference names (id, unique prefix, EXP/RUN, a path), and a local run's own store.

    Outside a lab, or for a run the lab does not know (one a receiver holds), the text is the run id.
    """
    # lazy: tp builds only the invoked command, so only it pays for these
    from tuneplane.backends.local import DB
    from tuneplane.errors import UsageError
    from tuneplane.lab.load import find_lab_root
    from tuneplane.lab.runs import find_run, read_status

    try:
        root = find_lab_root()
    except UsageError:
        return run, None
    try:
        key = find_run(root, run)
    except UsageError as exc:
        if "matches" in str(exc):  # ambiguous: say so rather than guess
            raise
        return run, None
    current = read_status(root, key)
    if current is None or current.backend is None or current.backend.backend != "local":
        return key.run_id, None
    path = Path(current.backend.namespace) / DB
    return key.run_id, path if path.exists() else None


def _remote_reader(run: str, endpoint: str, token: str | None, secret_file: Path | None) -> _Reader:
    # lazy: tp builds only the invoked command, so only it pays for these
    from tuneplane.errors import UsageError
    from tuneplane.ingest import client, load_secret, mint_token

    if secret_file is not None:
        token = mint_token(load_secret(secret_file), run)
    if not token:
        raise UsageError("reading from --endpoint needs the run's token",
                         "pass --token (or set TUNEPLANE_JOB_TOKEN), or --secret-file to mint it")
    return _Reader(lambda: client.fetch_summary(endpoint, run, token),
                   lambda k: client.fetch_series(endpoint, run, k, token))


def register(app: typer.Typer) -> None:
    # lazy: tp builds only the invoked command, so only it pays for these
    from tuneplane.cli.job_commands import register_job_commands

    register_job_commands(job_app)
    app.add_typer(job_app, name="job")
