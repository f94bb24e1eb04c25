"""`tp job ...`: inspect a run's job. `metrics` shows what `tuneplane.report` delivered."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated, Any

import typer

from tuneplane.cli.options import Run

job_app = typer.Typer(name="job", help="Inspect and control runs: ls, status, logs, cancel, metrics, compare.",
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
    """Print a run's metrics (last, min, max, count, last step, trend); --plot writes an SVG.

    Keys are shown under the recipe's canonical names (`train/loss`), primary metrics first and
    hardware last; `--key` takes a canonical name or the key as the job logged it (`loss`).
    """
    from tuneplane.errors import UsageError

    if endpoint and db:
        raise UsageError("--endpoint and --db are alternatives", "pass one of them")
    read = _remote_reader(_resolve_run(run)[0], endpoint, token, secret_file) if endpoint else _local_reader(run, db)
    found = _run_metrics(run, read)
    keys = found.select(key or [])
    typer.echo(found.table(keys, width=max(1, width)), nl=False)
    if plot is not None:
        from tuneplane.gitops.charts import render_svg

        _write(plot, render_svg(found.series(keys), title=f"run {run}", vocab=found.vocab,
                                times=found.times(keys)))


@job_app.command("compare")
def compare(
    runs: Annotated[list[str], typer.Argument(help="Two or more runs (id, unique prefix or EXP/RUN).")],
    key: Annotated[list[str] | None, typer.Option("--key", "-k", help="Only this key (repeatable).")] = None,
    plot: Annotated[Path | None, typer.Option(help="Write an SVG: one chart per metric, runs overlaid.")] = None,
    db: Annotated[Path | None, typer.Option(
        help="SQLite database of the receiver (default: each local run's own store).")] = None,
) -> None:
    """Compare runs: each metric's last value per run, and which hyperparameters differ."""
    from tuneplane.errors import UsageError
    from tuneplane.gitops.charts import changed_parameters
    from tuneplane.gitops.runmetrics import compare_svg

    if len(runs) < 2:
        raise UsageError("compare needs two or more runs", "tp job compare RUN RUN [RUN…]")
    runs = [_resolve_run(run)[0] for run in runs]
    found = {run: _run_metrics(run, _local_reader(run, db)) for run in runs}
    params = {run: _params_of(run) for run in runs}
    legend = changed_parameters(params)
    for run in runs:
        typer.echo(f"{run}: {legend.get(run) or '(same parameters)'}")
    names = list(dict.fromkeys(n for m in found.values() for n in m.select(key or [])))
    width = max((len(n) for n in names), default=3)
    typer.echo("  " + "key".ljust(width) + "  " + "  ".join(r[-10:].rjust(10) for r in runs))
    for name in names:
        cells = []
        for metrics in found.values():
            raw = metrics.names().get(name) or (name if name in metrics.summary else None)
            cells.append(f"{metrics.summary[raw]['last']:.4g}" if raw else "-")
        typer.echo(f"  {name.ljust(width)}  " + "  ".join(c.rjust(10) for c in cells))
    if plot is not None:
        _write(plot, compare_svg(found, params, key or [], title="compare " + " · ".join(runs)))


def _run_metrics(run: str, read: _Reader) -> Any:
    from tuneplane.errors import UsageError
    from tuneplane.gitops.observe import vocabulary_of
    from tuneplane.gitops.runmetrics import RunMetrics

    summary = read.summary()
    if not summary:
        raise UsageError(f"no metrics stored for run {run!r}",
                         "check the run id; a job reports only with tuneplane.report "
                         "and TUNEPLANE_JOB_TOKEN set")
    return RunMetrics(summary, read.series, vocabulary_of(_method_of(run)), read.timed)


def _method_of(run: str) -> str:
    """The run's recipe, from its status (the vocabulary is the recipe's); "" when unknown."""
    from tuneplane.errors import UsageError
    from tuneplane.lab.load import find_lab_root
    from tuneplane.lab.runs import find_run, read_status

    try:
        root = find_lab_root()
        current = read_status(root, find_run(root, run))
    except UsageError:
        return ""
    return current.method if current is not None else ""


def _params_of(run: str) -> dict[str, Any]:
    """What a run's request sets (`--set`) and its profile: what a comparison legend names."""
    from tuneplane.errors import UsageError
    from tuneplane.lab.load import find_lab_root
    from tuneplane.lab.runs import find_run, read_request

    try:
        root = find_lab_root()
        request = read_request(root, find_run(root, run))
    except UsageError:
        return {}
    return {**dict(request.set), "profile": request.profile}


def _write(path: Path, text: str) -> None:
    from tuneplane.errors import UsageError

    try:
        path.write_text(text, encoding="utf-8")
    except OSError as exc:
        raise UsageError(f"cannot write {path}: {exc.strerror or exc}") from None
    typer.echo(f"wrote {path}", err=True)


class _Reader:
    def __init__(self, summary: Any, series: Any, timed: Any = None) -> None:
        self.summary, self.series, self.timed = summary, series, timed


def _local_reader(run: str, db: Path | None) -> _Reader:
    # lazy: tp builds only the invoked command, so only it pays for these
    from tuneplane import ingest
    from tuneplane.errors import UsageError

    run_id, own = _resolve_run(run)
    path = db or own or Path(os.environ.get("TUNEPLANE_INGEST_DB") or ingest.DEFAULT_DB)
    if not path.exists():
        raise UsageError(f"no ingest database at {path}", "pass --db PATH or --endpoint URL")
    return _Reader(lambda: ingest.summary(path, run_id), lambda k: ingest.series(path, run_id, k),
                   lambda k: ingest.timed_series(path, run_id, k))


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
                   lambda k: client.fetch_series(endpoint, run, k, token),
                   lambda k: client.fetch_timed_series(endpoint, run, k, token))


def register(app: typer.Typer) -> None:
    # lazy: tp builds only the invoked command, so only it pays for these
    from tuneplane.cli.job_commands import register_job_commands

    register_job_commands(job_app)
    app.add_typer(job_app, name="job")
