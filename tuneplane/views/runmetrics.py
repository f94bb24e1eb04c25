"""A run's metrics as people read them: canonical names, primary first, raw keys still answerable.

`RunMetrics` wraps what the ingest read API returns (a summary by raw key and a series reader) with
the recipe's vocabulary, for `tp job metrics` and `tp job compare`; the status writer
(`observe.with_metrics`) and the bot's charts use the same vocabulary, so every view names a key the
same way. A query may name a key canonically (`train/loss`) or as the job logged it (`loss`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from tuneplane.errors import UsageError
from tuneplane.lab.runs import RunKey
from tuneplane.metrics.vocab import Vocabulary, counts, is_hardware
from tuneplane.problems import did_you_mean_each
from tuneplane.runtime.records import Record

Series = Sequence[tuple[int, float]]
TimedSeries = Sequence[tuple[int, float, float | None]]  # step, value, epoch seconds
Timed = dict[str, list[tuple[int, float, float | None]]]  # by raw key: step, value, epoch seconds


class RunMetrics(Record):
    summary: Mapping[str, Mapping[str, Any]]  # by raw key, as stored
    read_series: Callable[[str], Series]
    vocab: Vocabulary
    read_timed: Callable[[str], TimedSeries] | None = None  # hardware keys on a wall-time axis

    def names(self) -> dict[str, str]:
        """Canonical name → the stored key that answers for it, in reading order."""
        return self.vocab.pick(self.summary, counts(self.summary))

    def select(self, wanted: Sequence[str] = ()) -> dict[str, str]:
        """Shown name → stored key: every metric (canonical names), or the keys asked for."""
        names = self.names()
        if not wanted:
            return names
        out: dict[str, str] = {}
        missing = []
        for item in wanted:
            stored = self.lookup(item, names)
            if stored is None:
                missing.append(item)
            else:
                out[item] = stored
        if missing:
            raise UsageError(
                f"no metric named {', '.join(map(repr, missing))} in this run",
                did_you_mean_each(missing, [*names, *self.summary], then=f"keys: {', '.join(names)}"),
            )
        return out

    def lookup(self, item: str, names: Mapping[str, str] | None = None) -> str | None:
        """The stored key that answers a query for `item`: a canonical name, a key as stored, or the
        key as the trainer logged it before a callback renamed it (TRL's `rewards/margins`, stored
        as `train/rewards/margins`: both are `train/reward_margin`). A canonical name answers first,
        so `--key`, the table, `tp job compare` and the charts agree on what a name shows: with
        `test_loss` (canonically `eval/loss`) and a logged `eval/loss` (canonically
        `validation/loss`), `eval/loss` is the `predict()` series everywhere."""
        names = self.names() if names is None else names
        if item in names:
            return names[item]
        if item in self.summary:
            return item  # a raw key stays queryable under its own name
        # transformers' rewrite_logs (which the callback follows) puts `train/` before every key
        # that is not an evaluation's
        for guess in (self.vocab.canonical(item), self.vocab.canonical("train/" + item)):
            if guess in names:
                return names[guess]
        return None

    def table(self, keys: Mapping[str, str], width: int = 24) -> str:
        from tuneplane.views.charts import render_table  # lazy: the chart code, a large import, loads only to draw

        series = {shown: self.read_series(raw) for shown, raw in keys.items()}
        return render_table({shown: self.summary[raw] for shown, raw in keys.items()}, series, width=width)

    def rows(self, keys: Mapping[str, str]) -> list[dict[str, Any]]:
        """`tp job metrics --json`: per shown name, in reading order, the stored key and its summary."""
        fields = ("last", "min", "max", "count", "last_step")
        return [
            {"key": shown, "raw": raw, **{f: self.summary[raw].get(f) for f in fields}} for shown, raw in keys.items()
        ]

    def series(self, keys: Mapping[str, str]) -> dict[str, Series]:
        return {shown: self.read_series(raw) for shown, raw in keys.items()}

    def times(self, keys: Mapping[str, str]) -> dict[str, list[tuple[float, float]]]:
        """Hardware keys as (seconds since the first hardware sample, value); {} without times."""
        from tuneplane.views.charts import wall_times  # lazy: as above

        if self.read_timed is None:
            return {}
        return wall_times({shown: self.read_timed(raw) for shown, raw in keys.items() if is_hardware(shown)})


def compare_svg(
    runs: Mapping[str, RunMetrics], params: Mapping[str, Mapping[str, Any]], wanted: Sequence[str] = (), title: str = ""
) -> str:
    """One chart per metric with every run overlaid; the legend names each run's changed parameters."""
    from tuneplane.views.charts import render_compare_svg  # lazy: as above
    from tuneplane.views.charts_legend import changed_parameters

    vocab = next((m.vocab for m in runs.values() if m.summary), Vocabulary())
    lines: dict[str, dict[str, Series]] = {}
    times: dict[str, dict[str, list[tuple[float, float]]]] = {}
    for label, metrics in runs.items():
        keys = metrics.names()
        if wanted:
            found = [w for w in wanted if metrics.lookup(w, keys) is not None]
            keys = metrics.select(found) if found else {}  # a run with none of them draws nothing
        lines[label] = dict(metrics.series(keys))
        times[label] = metrics.times(keys)  # each run's hardware from its own first sample
    legend = changed_parameters(params)
    for label, metrics in runs.items():
        if not metrics.summary:  # said in the legend, not left out unexplained
            legend[label] = "no metrics stored"
    return render_compare_svg(
        lines, legend=legend, title=title, vocab=vocab, times=times if any(times.values()) else None
    )


def chart_svg(key: RunKey, timed: Timed, vocab: Vocabulary) -> str:
    """The chart committed beside a finished run's status: canonical names, primary first,
    hardware against wall time."""
    from tuneplane.views.charts import render_svg, wall_times  # lazy: charts only when a run ends

    weight = {k: float(len(v)) for k, v in timed.items()}
    picked = vocab.pick(timed, weight).items()
    named = {name: [(s, v) for s, v, _ in timed[raw]] for name, raw in picked}
    times = wall_times({name: timed[raw] for name, raw in picked})
    return render_svg(named, title=f"{key.experiment} / {key.run_id}", vocab=vocab, compact=True, times=times)


def vocabulary_of(method: str) -> Vocabulary:
    """The recipe's metric vocabulary (aliases and primary); the default one for custom or unknown."""
    from tuneplane.lab.catalog import load_catalog  # lazy: the catalog is read only when metrics are

    try:
        catalog = load_catalog()
        if method and catalog.has(method):
            m = catalog.recipe(method).metrics
            return Vocabulary.of(m.aliases, m.primary)
    except (UsageError, OSError, ValueError):
        pass
    return Vocabulary()
