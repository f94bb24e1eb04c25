"""`tp job metrics|compare`: what `tuneplane.report` delivered for a run, and runs side by side."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from tuneplane.cli.completion import run_ids
from tuneplane.cli.options import Run
from tuneplane.cli.say import say
from tuneplane.constants import JOB_TOKEN
from tuneplane.errors import RunNotFound, UsageError
from tuneplane.runtime.records import FrozenRecord

if TYPE_CHECKING:  # the views load only when the command runs
    from tuneplane.views.runmetrics import RunMetrics, Series, TimedSeries


def metrics(
    run: Run,
    key: Annotated[list[str] | None, typer.Option("--key", "-k", help="Only this key (repeatable).")] = None,
    plot: Annotated[
        Path | None,
        typer.Option(help="Also write an SVG line chart to this file (never over a file tp did not write)."),
    ] = None,
    endpoint: Annotated[
        str | None, typer.Option(help="Read from a receiver at this URL instead of a database.")
    ] = None,
    db: Annotated[
        Path | None, typer.Option(help="SQLite database of the receiver (default: the lab's .tuneplane/ingest.sqlite).")
    ] = None,
    token: Annotated[str | None, typer.Option(envvar=JOB_TOKEN, help="Run token for --endpoint.")] = None,
    secret_file: Annotated[
        Path | None, typer.Option(help="Mint the run token for --endpoint from this secret.")
    ] = None,
    width: Annotated[int, typer.Option(help="Sparkline width in characters.")] = 24,
    as_json: Annotated[bool, typer.Option("--json", help="Print the metrics as JSON (in reading order).")] = False,
) -> None:
    """Print a run's metrics (last, min, max, count, last step, trend); --plot writes an SVG.

    Keys are shown under the recipe's canonical names (`train/loss`), primary metrics first and
    hardware last; `--key` takes a canonical name or the key as the job logged it (`loss`).
    """
    if endpoint and db:
        raise UsageError("--endpoint and --db are alternatives", "pass one of them")
    checked = _destination(plot) if plot is not None else None
    target = _Target(run)
    read = (
        _remote_reader(target.run_id, endpoint, token, secret_file, target.experiment)
        if endpoint
        else _local_reader(target, db)
    )
    found = _run_metrics(run, target, read)
    keys = found.select(key or [])
    if as_json:
        import json  # lazy: only --json prints JSON

        say.line(json.dumps({"run": target.run_id, "metrics": found.rows(keys)}, indent=2, ensure_ascii=False))
    else:
        say.text(found.table(keys, width=max(1, width)))
    if checked is not None:
        from tuneplane.views.charts import render_svg  # lazy: the chart code loads only with --plot

        _write(
            checked,
            render_svg(found.series(keys), title=f"run {target.run_id}", vocab=found.vocab, times=found.times(keys)),
        )


def compare(
    runs: Annotated[
        list[str] | None,
        typer.Argument(help="Two or more runs (id, unique prefix or suffix, or EXP/RUN).", autocompletion=run_ids),
    ] = None,
    key: Annotated[list[str] | None, typer.Option("--key", "-k", help="Only this key (repeatable).")] = None,
    plot: Annotated[
        Path | None,
        typer.Option(help="Write an SVG: one chart per metric, runs overlaid (never over a file tp did not write)."),
    ] = None,
    db: Annotated[
        Path | None, typer.Option(help="SQLite database of the receiver (default: each local run's own store).")
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON (see the JSON outputs reference).")] = False,
    sweep: Annotated[str, typer.Option("--sweep", help="Compare the newest run of each trial of this sweep.")] = "",
) -> None:
    """Compare runs: each metric's last value per run, and which hyperparameters differ."""
    runs = list(runs or [])
    if sweep:
        from tuneplane.views.sweep import sweep_run_ids  # lazy: only --sweep reads a sweep

        runs += sweep_run_ids(sweep)
    # lazy: tp builds only the invoked command, so only it pays for the charts and the metrics readers
    from tuneplane.views.charts_legend import changed_parameters
    from tuneplane.views.runmetrics import compare_svg

    if len(runs) < 2:
        raise UsageError("compare needs two or more runs", "tp job compare RUN RUN [RUN…]")
    checked = _destination(plot) if plot is not None else None
    targets = [_Target(run) for run in runs]
    runs = [target.run_id for target in targets]
    twice = sorted({r for r in runs if runs.count(r) > 1})
    if twice:
        raise UsageError(f"run {', '.join(twice)} is named twice", "name each run once: tp job compare RUN RUN…")
    found = {t.run_id: _run_metrics(t.run_id, t, _local_reader(t, db), missing_ok=True) for t in targets}
    if all(not m.summary for m in found.values()):
        raise UsageError(
            "none of these runs has metrics stored",
            "a job reports only with tuneplane.report and TUNEPLANE_JOB_TOKEN set",
        )
    params = {t.run_id: t.params for t in targets}
    legend = changed_parameters(params)
    names = _compared_names(found, key or [])
    if as_json:
        say.json(_comparison(runs, found, legend, names))
    else:
        _show_comparison(runs, found, legend, names)
    if checked is not None:
        _write(checked, compare_svg(found, params, key or [], title="compare " + " · ".join(runs)))


def _comparison(
    runs: list[str], found: dict[str, RunMetrics], legend: dict[str, str], names: list[str]
) -> dict[str, object]:
    """`tp job compare --json`: each run with what sets it apart, each metric's last value per run."""

    def last(metrics: RunMetrics, name: str) -> float | None:
        raw = metrics.lookup(name)
        return float(metrics.summary[raw]["last"]) if raw else None

    return {
        "runs": [
            {"run_id": run, "has_metrics": bool(found[run].summary), "differs": legend.get(run, "")} for run in runs
        ],
        "metrics": [{"key": name, "last": {run: last(found[run], name) for run in runs}} for name in names],
    }


def _show_comparison(runs: list[str], found: dict[str, RunMetrics], legend: dict[str, str], names: list[str]) -> None:
    for run in runs:
        said = "no metrics stored" if not found[run].summary else legend.get(run) or "(same parameters)"
        say.line(f"{run}: {said}")
    # lazy: as above
    from tuneplane.views.charts import KEY_COLUMNS
    from tuneplane.views.textcols import columns, cut_middle, ljust, printable

    shown = {n: cut_middle(printable(n), KEY_COLUMNS) for n in names}  # as `tp job metrics` shows them
    width = max((columns(s) for s in shown.values()), default=3)
    # each column headed by the shortest end of its run id (10 characters at least) that tells it apart
    longest = max(map(len, runs))
    cut = next((n for n in range(10, longest + 1) if len({r[-n:] for r in runs}) == len(runs)), longest)
    column = max(10, cut)
    say.line("  " + "key".ljust(width) + "  " + "  ".join(r[-cut:].rjust(column) for r in runs))
    for name in names:
        cells = []
        for metrics in found.values():
            raw = metrics.lookup(name)
            cells.append(f"{metrics.summary[raw]['last']:.4g}" if raw else "-")
        say.line(f"  {ljust(shown[name], width)}  " + "  ".join(c.rjust(column) for c in cells))


def _compared_names(found: dict[str, RunMetrics], wanted: list[str]) -> list[str]:
    """The rows of a comparison: every run's metrics, or the keys asked for. A key needs to be in
    one run only (runs of different recipes log different metrics); one in none is an error."""
    if not wanted:  # the union in one reading order (the first run with metrics decides the primary)
        vocab = next(m.vocab for m in found.values() if m.summary)
        return list(vocab.order(n for m in found.values() for n in m.names()))
    missing = [w for w in wanted if all(m.lookup(w) is None for m in found.values())]
    if missing:
        from tuneplane.problems import did_you_mean_each  # lazy: only a metric not found needs it

        known = list(dict.fromkeys(n for m in found.values() for n in m.names()))
        raise UsageError(
            f"no metric named {', '.join(map(repr, missing))} in any of these runs",
            did_you_mean_each(missing, known, then=f"keys: {', '.join(known)}"),
        )
    return list(dict.fromkeys(wanted))


def _run_metrics(run: str, target: _Target, read: _Reader, missing_ok: bool = False) -> RunMetrics:
    """The run's metrics; none stored is an error, or with `missing_ok` (a comparison) an empty set.
    A run the lab does not know and no store holds is named as such."""
    # lazy: as above
    from tuneplane.views.runmetrics import RunMetrics, vocabulary_of

    summary = read.summary()
    if not summary and target.unknown is not None:
        raise UsageError(f"{target.unknown.message}, and no metrics are stored under that id", target.unknown.hint)
    if not summary and not missing_ok:
        raise UsageError(
            f"no metrics stored for run {run!r}",
            "check the run id; a job reports only with tuneplane.report and TUNEPLANE_JOB_TOKEN set",
        )
    return RunMetrics(summary, read.series, vocabulary_of(target.method), read.timed)


class _Plot(FrozenRecord):
    """Where --plot writes, as checked: `path` as given; `target` the file written (a symlink's
    target); `kind` "new", "chart" (a chart tp wrote, replaced whole), "stream" (a character device
    or a FIFO: written straight through) or "stdout"/"stderr" (tp's own stream, as /dev/stdout
    names it). A replaced chart keeps its mode: the writer keeps a file's own."""

    path: Path
    target: Path
    kind: str


def _destination(path: Path) -> _Plot:
    """Check where --plot will write, before any work and again just before the write. A folder, a
    missing folder, a file that is not a chart tp wrote (another tool's SVG included, found by its
    first bytes) and a read-only chart are refused with what to do."""
    import stat  # lazy: only --plot looks at a file

    from tuneplane.views.charts import is_chart  # lazy: the chart code loads only with --plot

    try:
        seen: os.stat_result | None = os.stat(path)  # what the path names, a symlink followed
    except (FileNotFoundError, NotADirectoryError):
        seen = None
    except OSError as exc:
        raise UsageError(
            f"cannot see what --plot {path} is: {exc.strerror or exc}", "give another --plot path"
        ) from None
    if seen is not None and stat.S_ISDIR(seen.st_mode):
        raise UsageError(f"--plot {path} is a folder", f"give a file name, e.g. --plot {path / 'metrics.svg'}")
    own = _own_stream(seen) if seen is not None and path.is_symlink() else ""
    if own:  # /dev/stdout, /dev/fd/1, /dev/stderr: into tp's own stream (after the table), even a file
        return _Plot(path, path, own)
    if seen is not None and (stat.S_ISCHR(seen.st_mode) or stat.S_ISFIFO(seen.st_mode)):
        return _Plot(path, path, "stream")  # never read (a pipe would hang) nor renamed over
    if seen is not None and not stat.S_ISREG(seen.st_mode):
        raise UsageError(
            f"--plot {path} is not a file tp can write a chart into",
            "give a file name, a FIFO or a character device such as /dev/stdout",
        )
    target = Path(os.path.realpath(path)) if path.is_symlink() else path  # a link stays a link
    if not target.parent.is_dir():
        raise UsageError(
            f"cannot write {path}: the folder {target.parent} does not exist",
            "create it first, or give a path in a folder that exists",
        )
    if seen is None:
        return _Plot(path, target, "new")
    try:
        handle = os.open(target, os.O_RDONLY | os.O_NONBLOCK)  # never blocks, whatever it became
        try:
            regular = stat.S_ISREG(os.fstat(handle).st_mode)
            start = os.read(handle, 512) if regular else b""
        finally:
            os.close(handle)
    except OSError as exc:
        raise UsageError(f"cannot read {path} to see what it is: {exc.strerror or exc}") from None
    if not regular or not is_chart(start):
        raise UsageError(
            f"{path} exists and is not a chart tp wrote; it is left as it is",
            "give another --plot path, or move that file away first",
        )
    mode = stat.S_IMODE(seen.st_mode)
    if not mode & 0o200 or not os.access(target, os.W_OK):  # root may write anything: its bits say no
        raise UsageError(
            f"{path} is read-only (mode {mode:04o}); it is left as it is",
            f"make it writable (chmod u+w {path}), or give another --plot path",
        )
    return _Plot(path, target, "chart")


def _own_stream(seen: os.stat_result) -> str:
    """ "stdout" or "stderr" when `seen` is that stream of tp's, else ""."""
    for fd, name in ((1, "stdout"), (2, "stderr")):
        try:
            if os.path.samestat(seen, os.fstat(fd)):
                return name
        except OSError:  # that stream is closed
            continue
    return ""


def _write(checked: _Plot, text: str) -> None:
    """Write the chart, and say so. A file is written whole: a temporary file beside it, renamed
    over a chart tp wrote (keeping its mode) or linked to a new name (failing if the name is taken by
    then: nothing is overwritten). A stream is written straight through."""
    own = checked.kind in ("stdout", "stderr")
    plot = checked if own else _destination(checked.path)  # checked again now
    path = plot.path
    try:
        if checked.kind == "new" and plot.kind != "new":
            raise FileExistsError
        if own:
            (sys.stderr if plot.kind == "stderr" else sys.stdout).write(text)  # a chart's bytes: never painted
        elif plot.kind == "stream":
            with os.fdopen(os.open(path, os.O_WRONLY), "w", encoding="utf-8") as out:  # no O_CREAT: it is there
                out.write(text)
        else:
            _write_file(plot, text.encode("utf-8"))
    except FileExistsError:
        raise UsageError(
            f"{path} appeared while tp was drawing the chart; it is left as it is",
            "give another --plot path, or move that file away and run again",
        ) from None
    except OSError as exc:
        raise UsageError(
            f"cannot write {path}: {exc.strerror or exc}", "give a --plot path in a folder you can write to"
        ) from None
    say.note(f"{'replaced' if plot.kind == 'chart' else 'wrote'} {path}")


def _write_file(plot: _Plot, data: bytes) -> None:
    """Over a chart tp wrote, keeping its mode; else a new file, never over one that appeared."""
    from tuneplane.lab.fs import atomic_write, write_new  # lazy: only --plot writes a file

    if plot.kind == "chart":
        atomic_write(plot.target, data)  # keeps the chart's own mode
    else:
        write_new(plot.target, data)


class _Reader:
    """Where one run's metrics are read from: a store on this machine, or a receiver over HTTP."""

    def __init__(
        self,
        summary: Callable[[], Mapping[str, Mapping[str, object]]],
        series: Callable[[str], Series],
        timed: Callable[[str], TimedSeries] | None = None,
    ) -> None:
        self.summary, self.series, self.timed = summary, series, timed


class _Target:
    """What one run reference names, looked up in the lab once: the run id, the recipe (whose metric
    vocabulary applies), what its request sets (a comparison's legend) and a local run's own store.

    Outside a lab, or for a run the lab does not know (one a receiver holds), the text is the run id
    and the rest is empty. The parameters are the effective hyperparameters the run's status keeps,
    or for a status older than those the request's `--set`. An ambiguous prefix or a damaged status
    file is an error; a request that cannot be read only leaves the legend without that run's parameters.
    """

    def __init__(self, run: str) -> None:
        # lazy: tp builds only the invoked command, so only it pays for these
        from tuneplane.backends.factory import run_metrics_store
        from tuneplane.lab.load import find_lab_root
        from tuneplane.lab.runs import find_run, read_request, read_status

        self.run_id, self.method, self.store = run, "", None
        self.experiment: str | None = None  # the run's experiment, when the lab knows the run
        self.params: dict[str, object] = {}
        self.root: Path | None = None
        self.outside = ""  # why no lab is here, when none is
        self.unknown: UsageError | None = None  # the lab does not know this run (a receiver may)
        try:
            self.root = root = find_lab_root()
        except UsageError as exc:
            self.outside = exc.message
            return
        try:
            key = find_run(root, run)
        except RunNotFound as exc:  # an ambiguous reference is raised: said rather than guessed
            self.unknown = exc
            return
        self.run_id, self.experiment = key.run_id, key.experiment
        current = read_status(root, key)
        hyperparameters: dict[str, object] = {}
        if current is not None:
            hyperparameters = dict(current.hyperparameters)
            self.method = current.method
            if current.backend is not None:
                self.store = run_metrics_store(current.backend.backend, current.backend.run_dir)
        try:
            request = read_request(root, key)
        except UsageError:
            return
        # The hyperparameters the job was started with (config.yaml and --set, as its status keeps
        # them), else (a status written before statuses kept them) the request's --set; then what sets
        # a run apart besides its parameters: shown only where the runs compared differ.
        self.params = {
            **(hyperparameters or dict(request.set)),
            "profile": request.profile,
            "experiment": key.experiment,
            **({"method": self.method} if self.method else {}),
        }


def _local_reader(target: _Target, db: Path | None) -> _Reader:
    # lazy: tp builds only the invoked command, so only it pays for these
    from tuneplane import ingest

    given = (
        db
        or target.store
        or (Path(os.environ["TUNEPLANE_INGEST_DB"]) if os.environ.get("TUNEPLANE_INGEST_DB") else None)
    )
    if given is None and target.root is None:
        raise UsageError(
            f"{target.outside}, so there is no lab's ingest database to read",
            "cd into the lab, or pass --db PATH or --endpoint URL",
        )
    path = given or (target.root or Path()) / ingest.DEFAULT_DB  # the lab's receiver keeps it at the lab's root
    if not path.exists():
        if target.unknown is not None and given is None:
            raise target.unknown  # not this lab's run, and no store to look in: say which
        if given is None:  # a run the lab knows with no store (not run yet, or run on a cluster): none stored
            return _Reader(dict, lambda k: [], lambda k: [])
        raise UsageError(f"no ingest database at {path}", "pass --db PATH or --endpoint URL")
    run_id = target.run_id
    # A lab's receiver keeps a run under its experiment (tokens are scoped to both); a run's own store,
    # and a store older than scoped tokens, keep it under its id alone.
    scope = target.experiment if target.experiment and ingest.summary(path, run_id, target.experiment) else None
    return _Reader(
        lambda: ingest.summary(path, run_id, scope),
        lambda k: ingest.series(path, run_id, k, scope),
        lambda k: ingest.timed_series(path, run_id, k, scope),
    )


def _remote_reader(
    run: str, endpoint: str, token: str | None, secret_file: Path | None, experiment: str | None = None
) -> _Reader:
    # lazy: tp builds only the invoked command, so only it pays for these
    from tuneplane.ingest import client, load_secret, mint_token

    if secret_file is not None:
        token = mint_token(load_secret(secret_file), run, experiment)
    if not token:
        raise UsageError(
            "reading from --endpoint needs the run's token",
            "pass --token (or set TUNEPLANE_JOB_TOKEN), or --secret-file to mint it",
        )
    return _Reader(
        lambda: client.fetch_summary(endpoint, run, token),
        lambda k: client.fetch_series(endpoint, run, k, token),
        lambda k: client.fetch_timed_series(endpoint, run, k, token),
    )


def register(job_app: typer.Typer) -> None:
    """Add `metrics` and `compare` to the `tp job` group."""
    job_app.command("metrics")(metrics)
    job_app.command("compare")(compare)
