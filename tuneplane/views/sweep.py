"""A sweep's page: its trials sorted by the recipe's primary metric, with the parameters that differ.

`sweep_page` renders `status/_sweeps/<name>.md` for the bot (Markdown a git host shows), `sweep_table`
the same rows for a terminal (`tp sweep show`). Both read only files: the sweep, its status files,
and the experiment's recipe for which metric comes first. The pages' folder starts with `_`, which
no experiment name does, so it never shares a folder with an experiment's statuses and pages.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from tuneplane.errors import UsageError
from tuneplane.lab.runs import STATUS_DIR, RunKey, read_status
from tuneplane.lab.sweeps import read_sweep
from tuneplane.lab.yamlio import LoadFailed
from tuneplane.models.run import RunStatus
from tuneplane.models.sweep import Sweep, Trial, expand
from tuneplane.views.dashboard import NOTE

SWEEP_FOLDER = "_sweeps"  # under status/: no experiment is named so (names start with a letter or digit)
SWEEP_PAGES = f"{STATUS_DIR}/{SWEEP_FOLDER}"
_LOWER_IS_BETTER = ("loss", "error", "perplexity", "ppl", "wer", "cer")


@dataclass(frozen=True)
class Row:
    trial: Trial
    status: RunStatus | None

    @property
    def phase(self) -> str:
        return self.status.phase if self.status is not None else "not submitted"

    def metric(self, name: str) -> float | None:
        return None if self.status is None else self.status.metrics.get(name)


def sweep_page_rel(name: str) -> str:
    return f"{SWEEP_PAGES}/{name}.md"


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
    return page_of(root, read_sweep(root, name), declared)


def page_of(root: Path, sweep: Sweep, declared: list[str] | None = None) -> str:
    """The Markdown page of a sweep already read (the bot reads each sweep file once a pass)."""
    rows = sweep_rows(root, sweep)
    metric = primary_metric(rows, declared if declared is not None else _declared(root, sweep.experiment))
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
    return "\n".join(lines) + "\n"


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
