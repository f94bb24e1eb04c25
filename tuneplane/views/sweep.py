"""A sweep's page: its trials sorted by the recipe's primary metric, with the parameters that differ.

`sweep_page` renders `status/_sweeps/<name>.md` for the bot (Markdown a git host shows), `sweep_table`
the same rows for a terminal (`tp sweep show`). Both read only files: the sweep, its status files,
and the experiment's recipe for which metric comes first. The pages' folder starts with `_`, which
no experiment name does, so it never shares a folder with an experiment's statuses and pages.

`sweep_chart` draws `status/_sweeps/<name>.svg`, which the page shows: every trial's primary metric
overlaid, one line a trial named by its differing parameters, the best trial drawn thicker. Its points
are the few each status keeps (`metric_history`, spread over the run first to latest), so the chart,
like the page, is a function of the committed files: it changes only when a trial's points do, and
the bot commits it only then. A trial with no point yet is named in the legend as such.
"""

from __future__ import annotations

from pathlib import Path

from tuneplane.errors import UsageError
from tuneplane.lab.runs import STATUS_DIR, RunKey, read_status
from tuneplane.lab.sweeps import read_sweep
from tuneplane.lab.yamlio import LoadFailed
from tuneplane.models.run import RunStatus
from tuneplane.models.sweep import Sweep, Trial, expand
from tuneplane.runtime.records import FrozenRecord
from tuneplane.views.charts_legend import value_text
from tuneplane.views.dashboard import NOTE

SWEEP_FOLDER = "_sweeps"  # under status/: no experiment is named so (names start with a letter or digit)
SWEEP_PAGES = f"{STATUS_DIR}/{SWEEP_FOLDER}"
_LOWER_IS_BETTER = ("loss", "error", "perplexity", "ppl", "wer", "cer")
# A status keeps no steps with its points: each trial's points are spread over its own run so far.
HISTORY_AXIS = "% of each trial's run so far (the points its status keeps, first to latest)"
BEST = "best"
NO_POINTS = "no points yet"


class Row(FrozenRecord):
    trial: Trial
    status: RunStatus | None

    @property
    def phase(self) -> str:
        return self.status.phase if self.status is not None else "not submitted"

    def metric(self, name: str) -> float | None:
        return None if self.status is None else self.status.metrics.get(name)


def sweep_page_rel(name: str) -> str:
    return f"{SWEEP_PAGES}/{name}.md"


def sweep_chart_rel(name: str) -> str:
    return f"{SWEEP_PAGES}/{name}.svg"


def trial_ids(sweep: Sweep) -> set[str]:
    """The run ids of every trial of the sweep, reruns included: a status of any of them is on its page."""
    return {t.run_id for t in expand(sweep)}


def sweep_rows(root: Path, sweep: Sweep) -> list[Row]:
    """The newest run of each trial with its status (None before the bot has seen it)."""
    newest: dict[int, Trial] = {}
    for trial in expand(sweep):
        newest[trial.index] = trial
    return [Row(t, read_status(root, RunKey(sweep.experiment, t.run_id))) for t in newest.values()]


def primary_metric(rows: list[Row], declared: list[str]) -> str:
    """The recipe's first primary metric some trial reported, else the first metric any reported, else ""."""
    seen = {name for r in rows if r.status is not None for name in r.status.metrics}
    return next((m for m in declared if m in seen), min(seen) if seen else "")


def lower_is_better(metric: str) -> bool:
    return any(word in metric.lower() for word in _LOWER_IS_BETTER)


def ranked(rows: list[Row], metric: str) -> list[Row]:
    """Trials with the metric best first (lower first for a loss), then those without it in trial order."""
    with_value = [r for r in rows if r.metric(metric) is not None]
    sign = 1.0 if lower_is_better(metric) else -1.0
    with_value.sort(key=lambda r: (sign * (r.metric(metric) or 0.0), r.trial.index))
    return with_value + [r for r in rows if r.metric(metric) is None]


def varied(sweep: Sweep) -> list[str]:
    """The swept parameters that take more than one value: the columns that tell trials apart."""
    return sorted(k for k, v in sweep.grid.items() if len(v) > 1)


def sweep_page(root: Path, name: str, declared: list[str] | None = None) -> str:
    """The Markdown page of sweep `name`."""
    return view_of(root, read_sweep(root, name), declared)[0]


def sweep_chart(root: Path, name: str) -> str:
    """The chart of sweep `name` ("" while no trial has a point of its primary metric)."""
    return view_of(root, read_sweep(root, name))[1]


def view_of(root: Path, sweep: Sweep, declared: list[str] | None = None) -> tuple[str, str]:
    """The page of a sweep already read (the bot reads each sweep file once a pass) and its chart ("" when
    there is none to draw: the page then links none), from one reading of its trials' statuses."""
    rows = sweep_rows(root, sweep)
    metric = primary_metric(rows, declared if declared is not None else _declared(root, sweep.experiment))
    chart = chart_of(sweep, rows, metric)
    return _page(sweep, rows, metric, chart_rel=sweep_chart_rel(sweep.name) if chart else ""), chart


def _page(sweep: Sweep, rows: list[Row], metric: str, chart_rel: str) -> str:
    params = varied(sweep)
    order = "lower is better" if lower_is_better(metric) else "higher is better"
    lines = [
        f"# Sweep {sweep.name}",
        "",
        NOTE,
        "",
        f"Experiment `{sweep.experiment}`, profile `{sweep.profile}`, {len(rows)} trials"
        + (f"; sorted by `{metric}` ({order})." if metric else "; no metrics reported yet."),
        "",
    ]
    if sweep.set:
        lines += ["Every trial sets " + ", ".join(f"`{k}={v}`" for k, v in sorted(sweep.set.items())) + ".", ""]
    head = ["#", "run", "phase", *params, *([metric] if metric else [])]
    lines += ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for rank, row in enumerate(ranked(rows, metric) if metric else rows, start=1):
        value = row.metric(metric) if metric else None
        cells = [
            str(rank),
            f"[`{row.trial.run_id}`](../{sweep.experiment}/{row.trial.run_id}.json)",
            row.phase,
            *(f"`{row.trial.params.get(p)}`" for p in params),
            *([f"{value:.4g}" if value is not None else "-"] if metric else []),
        ]
        lines.append("| " + " | ".join(cells) + " |")
    if chart_rel:  # beside the page: linked by its name, as an experiment page links its runs' charts
        lines += ["", f"![{metric} of every trial]({chart_rel.rsplit('/', 1)[1]})"]
    return "\n".join(lines) + "\n"


def chart_of(sweep: Sweep, rows: list[Row], metric: str) -> str:
    """Every trial's `metric` overlaid on one chart, in trial order (a trial keeps its colour however
    the ranking changes), the best trial emphasised; "" when no trial has a point of it yet."""
    points = {r.trial.run_id: history_points(r, metric) for r in rows} if metric else {}
    if not any(points.values()):
        return ""
    # lazy: the chart code loads only when a sweep has points to draw
    from tuneplane.views.charts import render_compare_svg

    labels = trial_labels(sweep, rows)
    ordered = ranked(rows, metric)
    best = ordered[0].trial.run_id if ordered[0].metric(metric) is not None else ""
    legend = {
        labels[run]: ", ".join(([BEST] if run == best else []) + ([] if found else [NO_POINTS]))
        for run, found in points.items()
    }
    return render_compare_svg(
        {labels[run]: {metric: found} for run, found in points.items()},
        legend=legend,
        title=f"Sweep {sweep.name}: {metric}",
        compact=True,
        bold=[labels[best]] if best and points[best] else [],
        x_caption=HISTORY_AXIS,
    )


def history_points(row: Row, metric: str) -> list[tuple[float, float]]:
    """The points the trial's status keeps of `metric`, each at its share (in %) of the run so far."""
    values = [] if row.status is None else row.status.metric_history.get(metric, [])
    last = len(values) - 1
    return [(100.0 * index / last if last else 0.0, value) for index, value in enumerate(values)]


def trial_labels(sweep: Sweep, rows: list[Row]) -> dict[str, str]:
    """Run id → what tells the trial apart: its differing parameters (`lr=1e-05 seed=0`), else its run
    id (a sweep of one trial; two trials whose values read alike once cut also name their run id)."""
    params = varied(sweep)
    said = {
        r.trial.run_id: " ".join(f"{p}={value_text(r.trial.params.get(p))}" for p in params) or r.trial.run_id
        for r in rows
    }
    twice = {text for text in said.values() if list(said.values()).count(text) > 1}
    return {run: f"{text} ({run})" if text in twice else text for run, text in said.items()}


def sweep_table(root: Path, name: str) -> str:
    """The same rows for a terminal: run id, phase, the differing parameters, the primary metric."""
    sweep = read_sweep(root, name)
    rows = sweep_rows(root, sweep)
    metric = primary_metric(rows, _declared(root, sweep.experiment))
    params = varied(sweep)
    head = ["run", "phase", *params, *([metric] if metric else [])]
    body = [
        [
            r.trial.run_id,
            r.phase,
            *(str(r.trial.params.get(p)) for p in params),
            *([f"{r.metric(metric):.4g}" if r.metric(metric) is not None else "-"] if metric else []),
        ]
        for r in (ranked(rows, metric) if metric else rows)
    ]
    widths = [max(len(line[i]) for line in [head, *body]) for i in range(len(head))]
    return "".join(
        "  ".join(c.ljust(w) for c, w in zip(line, widths, strict=True)).rstrip() + "\n" for line in [head, *body]
    )


def sweep_run_ids(name: str, root: Path | None = None) -> list[str]:
    """`EXP/RUN` of the newest run of each trial of sweep `name` that the bot has a status of."""
    # lazy: the lab is found only when a sweep is named
    from tuneplane.lab.fs import find_lab_root

    base = root or find_lab_root()
    sweep = read_sweep(base, name)
    return [str(RunKey(sweep.experiment, r.trial.run_id)) for r in sweep_rows(base, sweep) if r.status is not None]


def _declared(root: Path, experiment: str) -> list[str]:
    """The recipe's primary metrics; none when the experiment does not load (its own check says why)."""
    # lazy: the checker loads the catalog; a page of a sweep without metrics never needs it
    from tuneplane.check.validate import load_experiment
    from tuneplane.lab.catalog import load_catalog
    from tuneplane.lab.load import load_lab

    try:
        recipe = load_experiment(load_lab(root), load_catalog(), experiment).recipe
    except (UsageError, LoadFailed, OSError):  # a page never fails for a broken experiment; validate says why
        return []
    return list(recipe.metrics.primary) if recipe is not None else []
