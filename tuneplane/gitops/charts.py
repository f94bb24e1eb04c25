"""Showing metrics: a text table with sparklines, and self-contained SVG charts people can read.

Pure functions over the ingest read API's shapes (`summary` dicts and `(step, value)` series), so the
CLI, the bot and tests share them without any I/O. Charts follow one metric vocabulary
(`tuneplane.metrics.vocab`): primary metrics first, hardware last. Training panels share one x axis
by step with ticks on whole steps; hardware panels (`hw/*`) are drawn against wall time when the
sample times are known; a series that never changes is one line of text ("train/epoch = 1"), not a
panel. `render_compare_svg` overlays several runs on one chart per metric, with a legend naming what
differs between them.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from typing import Any
from xml.sax.saxutils import escape

from tuneplane.metrics.vocab import Vocabulary, is_hardware

BARS = "▁▂▃▄▅▆▇█"
# What XML 1.0 cannot hold (control characters, lone surrogates, U+FFFE/U+FFFF): a metric name or a
# legend may carry them, and one would make the whole SVG unreadable.
_NOT_XML = re.compile("[^\t\n\r\x20-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")
Series = Sequence[tuple[float, float]]
COLUMNS = ("key", "last", "min", "max", "count", "last_step", "trend")
PALETTE = ("#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf")
# Past the palette, runs repeat its colours with another dash pattern: every run stays its own line.
DASHES = ("", "6 3", "2 2", "8 3 2 3", "1 3")
COMPACT_POINTS = 32  # per series in a chart the bot commits (the lab's history stays small)
COMPACT_PANELS = 3


def _xml(text: str) -> str:
    """`text` as XML character data: markup escaped, characters XML cannot hold shown as U+FFFD."""
    return escape(_NOT_XML.sub("\ufffd", text))


def bucket_means(values: Sequence[float], width: int) -> list[float]:
    """At most `width` values: the mean of each of `width` consecutive, near-equal slices."""
    if width <= 0 or not values:
        return []
    if len(values) <= width:
        return list(values)
    out = []
    for index in range(width):
        lo, hi = index * len(values) // width, (index + 1) * len(values) // width
        chunk = values[lo:hi] or values[lo : lo + 1]
        out.append(math.fsum(v / len(chunk) for v in chunk))  # each part first: no sum past the float range
    return out


def sparkline(values: Sequence[float], width: int = 24) -> str:
    """`▁▂▄█`-style trend of `values`, at most `width` characters; flat data sits mid-height."""
    points = list(bucket_means([v for v in values if math.isfinite(v)], width))
    if not points:
        return ""
    low, high = min(points), max(points)
    if _flat(low, high):
        return BARS[len(BARS) // 2 - 1] * len(points)
    return "".join(BARS[min(len(BARS) - 1, int(round(_share(v, low, high) * (len(BARS) - 1))))] for v in points)


def fmt(value: Any) -> str:
    """Numbers short and aligned-friendly: 4 significant digits, integers as integers."""
    if isinstance(value, bool) or value is None:
        return str(value)
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if value.is_integer() and abs(value) < 1e15:
            return str(int(value))
        return f"{value:.4g}"
    return str(value)


def render_table(summary: Mapping[str, Mapping[str, Any]], series: Mapping[str, Series] | None = None,
                 width: int = 24, vocab: Vocabulary | None = None) -> str:
    """One row per key: last, min, max, count, last step, trend. With `vocab`, in its reading order
    (primary first, hardware last); without, in the order given."""
    series = series or {}
    rows = [list(COLUMNS)]
    for key in vocab.order(summary) if vocab is not None else summary:
        stats = summary[key]
        trend = sparkline([v for _, v in series.get(key, ())], width)
        rows.append([key, fmt(stats.get("last")), fmt(stats.get("min")), fmt(stats.get("max")),
                     fmt(stats.get("count")), fmt(stats.get("last_step")), trend])
    widths = [max(len(row[i]) for row in rows) for i in range(len(COLUMNS))]
    lines = []
    for row in rows:
        cells = [row[0].ljust(widths[0])] + [row[i].rjust(widths[i]) for i in range(1, 6)] + [row[6]]
        lines.append("  ".join(cells).rstrip())
    return "\n".join(lines) + "\n"


# ── ticks ──────────────────────────────────────────────────────────────────────────────────────


def thin(points: Series, limit: int = 1500) -> list[tuple[float, float]]:
    """Keep each bucket's first, min and max point, so spikes survive on long series."""
    finite = [(s, v) for s, v in points if math.isfinite(v) and math.isfinite(s)]
    if len(finite) <= limit:
        return finite
    buckets = max(1, limit // 3)
    out: list[tuple[float, float]] = []
    for index in range(buckets):
        chunk = finite[index * len(finite) // buckets : (index + 1) * len(finite) // buckets]
        if chunk:
            picks = {chunk[0], min(chunk, key=lambda p: p[1]), max(chunk, key=lambda p: p[1])}
            out.extend(sorted(picks))
    return out


def smooth(points: Series, limit: int = COMPACT_POINTS) -> list[tuple[float, float]]:
    """At most `limit` points: each the mean step and mean value of a run of consecutive points.

    What a committed chart draws: the trend, evenly spaced, so its path is a few bytes per point
    (`tp job metrics --plot` draws every point, spikes included)."""
    finite = [(s, v) for s, v in points if math.isfinite(v) and math.isfinite(s)]
    if len(finite) <= limit:
        return finite
    steps = bucket_means([s for s, _ in finite], limit)
    return list(zip(steps, bucket_means([v for _, v in finite], limit), strict=True))


def _share(value: float, low: float, high: float) -> float:
    """Where `value` lies between `low` and `high` (0 to 1); by halves when the span itself is past the
    float range (-1e308 to 1e308), and mid-way when the span is too small to divide by."""
    span = high - low
    if math.isfinite(span) and span > 0:
        return (value - low) / span
    half = high / 2 - low / 2
    return (value / 2 - low / 2) / half if math.isfinite(half) and half > 0 else 0.5


def nice_ticks(low: float, high: float, count: int = 5, whole: bool = False) -> list[float]:
    """Round tick values covering [low, high]; `whole`: integer steps only (training steps).

    Ticks are whole multiples of the tick step, computed in integers for steps (exact at any size,
    2**62 included) and rounded to the step's own digits for values (distinct at 1e-30 as at 1e6)."""
    if not (math.isfinite(low) and math.isfinite(high)) or high <= low:
        return [round(low) if whole else low]
    if whole:
        return list(_whole_ticks(low, high, count))
    raw = high / max(1, count - 1) - low / max(1, count - 1)  # finite even for a span past the float range
    if not math.isfinite(raw) or raw <= 0:
        return [low, high]
    magnitude = 10.0 ** math.floor(math.log10(raw))
    step = next((m * magnitude for m in (1, 2, 2.5, 5, 10) if m * magnitude >= raw), math.inf)
    if not math.isfinite(step):
        return [low, high]
    digits = 3 - math.floor(math.log10(step))  # enough to keep k * step exact to the step's scale
    first, last = math.ceil(low / step - 1e-9), math.floor(high / step + 1e-9)
    ticks = [round(k * step, digits) for k in range(first, min(last, first + 49) + 1)]
    return ticks or [low]


def _whole_ticks(low: float, high: float, count: int) -> list[int]:
    lo, hi = math.ceil(low), math.floor(high)
    if hi < lo:
        return [round(low)]
    raw = max(1, hi - lo) / max(1, count - 1)
    magnitude = 10 ** max(0, math.floor(math.log10(raw)))
    step = next(m * magnitude for m in (1, 2, 5, 10) if m * magnitude >= raw)
    if magnitude >= 10 and 2.5 * magnitude >= raw and 2 * magnitude < raw:
        step = magnitude * 5 // 2  # 25, 250, ...: still whole
    first = -(-lo // step) * step
    return list(range(first, hi + 1, step))[:50] or [round(low)]


def tick_labels(ticks: Sequence[float]) -> list[str]:
    """Labels with just enough digits that no two are the same."""
    for digits in range(3, 18):
        labels = [_short(t, digits) for t in ticks]
        if len(set(labels)) == len(labels):
            return labels
    return [repr(t) for t in ticks]


def _short(value: float, digits: int) -> str:
    if isinstance(value, int):
        return str(value)
    if float(value).is_integer() and abs(value) < 1e15:
        return str(int(value))
    return f"{value:.{digits}g}"


def time_label(seconds: float) -> str:
    if seconds < 60:
        return f"{seconds:g}s"
    if seconds < 3600:
        minutes, secs = divmod(int(round(seconds)), 60)
        return f"{minutes}m" if not secs else f"{minutes}m{secs:02d}s"
    if seconds >= 172800:  # two days and more: days (and hours)
        days, rest = divmod(int(round(seconds)), 86400)
        return f"{days}d" if rest < 3600 else f"{days}d{rest // 3600}h"
    hours, rest = divmod(int(round(seconds)), 3600)
    return f"{hours}h" if not rest else f"{hours}h{rest // 60:02d}m"


def time_ticks(low: float, high: float, count: int = 6) -> list[float]:
    """Ticks on round durations (1 s, 5 s, 1 min, 5 min, 1 h, …)."""
    span = max(high - low, 1e-9)
    for step in (1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 21600, 43200, 86400, 172800,
                 604800):
        if span / step <= count:
            break
    else:  # longer still: whole weeks
        step = 604800 * math.ceil(span / (count * 604800))
    first = float(math.ceil(low / step) * step)
    return [first + i * step for i in range(int((high - first) // step) + 1)][:50] or [low]


# ── one run ────────────────────────────────────────────────────────────────────────────────────


def constant_value(points: Series) -> float | None:
    values = [v for _, v in points if math.isfinite(v)]
    if values and _flat(min(values), max(values)):
        return values[0]
    return None


def _flat(low: float, high: float) -> bool:
    """Equal but for float rounding, relative to the values' own size (a 1e-14 range is not flat)."""
    return high - low <= 1e-12 * max(abs(low), abs(high))


def wall_times(timed: Mapping[str, Sequence[tuple[int, float, float | None]]]) -> dict[str, list[tuple[float, float]]]:
    """Hardware keys of `timed` (step, value, epoch seconds) as (seconds since the run's first
    hardware sample, value), by time: what `render_svg(times=...)` draws against. Points without a
    time are left out; a key with none keeps its step axis."""
    hardware = {k: sorted((t, v) for _, v, t in points if t is not None and math.isfinite(t))
                for k, points in timed.items() if is_hardware(k)}
    starts = [points[0][0] for points in hardware.values() if points]
    if not starts:
        return {}
    origin = min(starts)
    return {k: [(t - origin, v) for t, v in points] for k, points in hardware.items() if points}


def render_svg(series: Mapping[str, Series], title: str = "", width: int = 760, panel_height: int = 150,
               vocab: Vocabulary | None = None, times: Mapping[str, Series] | None = None,
               compact: bool = False) -> str:
    """A run's metrics: one panel per changing key (primary first, hardware last), stacked.

    `times` gives hardware keys as (seconds since the first sample, value) for a wall-time axis
    (`wall_times` makes it from the ingest's timed series).
    `compact` bounds the file (a chart the bot commits for every run): fewer points and panels.
    """
    return render_compare_svg({"": series}, title=title, width=width, panel_height=panel_height,
                              vocab=vocab, times=({"": times} if times else None), compact=compact)


def render_compare_svg(
    runs: Mapping[str, Mapping[str, Series]],
    legend: Mapping[str, str] | None = None,
    title: str = "",
    width: int = 760,
    panel_height: int = 150,
    vocab: Vocabulary | None = None,
    times: Mapping[str, Mapping[str, Series]] | None = None,
    compact: bool = False,
) -> str:
    """One panel per metric with every run drawn on it (one colour per run, named in the legend)."""
    vocab = vocab or Vocabulary()
    legend = dict(legend or {})
    labels = list(runs)
    limit = COMPACT_POINTS if compact else 1500
    keys = vocab.order({k for data in runs.values() for k in data})
    constants: list[str] = []
    panels: list[tuple[str, bool, dict[str, list[tuple[float, float]]]]] = []
    for key in keys:
        use_time = is_hardware(key) and times is not None and any(key in (times.get(r) or {}) for r in labels)
        lines = {}
        for run in labels:
            source = (times.get(run) or {}) if use_time and times is not None else runs[run]
            points = (smooth if compact else thin)(source.get(key, ()), limit)
            if points:
                lines[run] = points
        if not lines:
            continue
        same = {constant_value(p) for p in lines.values()}
        if len(same) == 1 and None not in same:
            value = next(iter(same))
            constants.append(f"{key} = {fmt(value)}")
            continue
        panels.append((key, use_time, lines))
    if compact:
        panels = panels[:COMPACT_PANELS]
    step_ranges = [s for _, t, lines in panels if not t for p in lines.values() for s, _ in p]
    shared = (min(step_ranges), max(step_ranges)) if step_ranges else (0.0, 1.0)
    # hardware panels share one wall-time axis from the first sample (0 s), so their times line up
    time_ranges = [s for _, t, lines in panels if t for p in lines.values() for s, _ in p]
    wall = (min(0.0, *time_ranges), max(time_ranges)) if time_ranges else (0.0, 1.0)
    legend_rows = len(labels) if len(labels) > 1 or any(legend.values()) else 0
    top = (30 if title else 10) + legend_rows * 16
    const_rows = len(constants)
    height = top + max(1, len(panels)) * (panel_height + 34) + const_rows * 16 + 12
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" font-family="sans-serif" font-size="11">',
        f'<rect width="{width}" height="{height}" fill="#ffffff"/>',
    ]
    if title:
        parts.append(f'<text x="{width // 2}" y="20" text-anchor="middle" font-size="14">{_xml(title)}</text>')
    for index, run in enumerate(labels[:legend_rows]):
        y = (30 if title else 10) + index * 16 + 8
        text = run + (f" — {legend[run]}" if legend.get(run) else "")
        parts.append(f'<line x1="64" y1="{y - 6}" x2="80" y2="{y - 6}" stroke-width="3"{_stroke(index)}/>'
                     f'<text x="84" y="{y - 4}">{_xml(text)}</text>')
    if not panels and not constants:
        parts.append(f'<text x="{width // 2}" y="{top + 20}" text-anchor="middle">no metrics</text>')
    for index, (key, use_time, lines) in enumerate(panels):
        y0 = top + index * (panel_height + 34)
        parts.extend(_panel(key, lines, labels, y0, width, panel_height, use_time, wall if use_time else shared,
                            single=len(labels) == 1, index=index))
    y = top + max(1, len(panels)) * (panel_height + 34)
    for text in constants:
        parts.append(f'<text x="64" y="{y}">{_xml(text)}</text>')
        y += 16
    parts.append("</svg>")
    return "\n".join(parts) + "\n"


def _panel(key: str, lines: Mapping[str, list[tuple[float, float]]], labels: list[str], y0: float, width: int,
           height: int, use_time: bool, shared: tuple[float, float] | None, single: bool,
           index: int) -> list[str]:
    left, right = 64, width - 16
    plot_top, plot_bottom = y0 + 18, y0 + height
    unit = " (wall time)" if use_time else ""
    out = [f'<text x="{left}" y="{y0 + 12}" font-weight="bold">{_xml(key)}{unit}</text>',
           f'<rect x="{left}" y="{plot_top}" width="{right - left}" height="{plot_bottom - plot_top}" '
           'fill="none" stroke="#cccccc"/>']
    xs = [s for p in lines.values() for s, _ in p]
    ys = [v for p in lines.values() for _, v in p]
    x_lo, x_hi = shared if shared is not None else (min(xs), max(xs))
    y_lo, y_hi = min(ys), max(ys)
    if y_hi == y_lo:
        pad = abs(y_lo) * 0.05 or 1.0
        y_lo, y_hi = y_lo - pad, y_hi + pad

    def x_of(step: float) -> int:
        return round(left + (step - x_lo) / (x_hi - x_lo) * (right - left)) if x_hi > x_lo else (left + right) // 2

    def y_of(value: float) -> int:
        return round(plot_bottom - _share(value, y_lo, y_hi) * (plot_bottom - plot_top))

    y_ticks = nice_ticks(y_lo, y_hi, 4)
    for tick, label in zip(y_ticks, tick_labels(y_ticks), strict=True):
        if y_lo <= tick <= y_hi:
            y = y_of(tick)
            out.append(f'<line x1="{left}" y1="{y}" x2="{right}" y2="{y}" stroke="#eeeeee"/>'
                       f'<text x="{left - 4}" y="{y + 4}" text-anchor="end">{_xml(label)}</text>')
    out += _x_axis(x_lo, x_hi, use_time, x_of, plot_bottom, right)
    for number, run in enumerate(labels):
        points = lines.get(run)
        if not points:
            continue
        style = index % len(PALETTE) if single else number  # one run: a colour per panel, solid
        coords = [(x_of(s), y_of(v)) for s, v in points]
        if len(coords) == 1:
            color = PALETTE[style % len(PALETTE)]
            out.append(f'<circle cx="{coords[0][0]}" cy="{coords[0][1]}" r="3" fill="{color}"/>')
            continue
        out.append(f'<path fill="none"{_stroke(style)} stroke-width="1.5" d="{_path(coords)}"/>')
    return out


def _stroke(number: int) -> str:
    """Run `number`'s line: a palette colour, and past the palette a dash pattern as well."""
    color = PALETTE[number % len(PALETTE)]
    dash = DASHES[(number // len(PALETTE)) % len(DASHES)]
    return f' stroke="{color}"' + (f' stroke-dasharray="{dash}"' if dash else "")


def _x_axis(x_lo: float, x_hi: float, use_time: bool, x_of: Any, bottom: float, right: int) -> list[str]:
    """Tick labels under a panel (whole steps, or round durations), each label once."""
    if use_time:
        ticks = [t + x_lo for t in time_ticks(0.0, x_hi - x_lo)]
        labels = [time_label(t - x_lo) for t in ticks]
    else:
        ticks = nice_ticks(x_lo, x_hi, 6, whole=True)
        labels = tick_labels(ticks)
    slack = 1e-9 if use_time else 0  # whole steps are compared exactly (a float epsilon is lost at 2**62)
    out, seen = [], set()
    for tick, label in zip(ticks, labels, strict=True):
        if label in seen or not (x_lo - slack <= tick <= x_hi + slack):
            continue
        seen.add(label)
        out.append(f'<text x="{x_of(tick)}" y="{bottom + 13}" text-anchor="middle">{_xml(label)}</text>')
    out.append(f'<text x="{right}" y="{bottom + 26}" text-anchor="end" fill="#666666">'
               f'{"time since the first sample" if use_time else "step"}</text>')
    return out


def _path(coords: list[tuple[int, int]]) -> str:
    """A compact SVG path: absolute start, then relative moves, repeated points dropped."""
    (x0, y0), rest = coords[0], coords[1:]
    out = [f"M{x0} {y0}"]
    px, py = x0, y0
    for x, y in rest:
        if (x, y) == (px, py):
            continue
        dx, dy = x - px, y - py
        out.append(f"l{dx}{'' if dy < 0 else ' '}{dy}")
        px, py = x, y
    return "".join(out)


def changed_parameters(params: Mapping[str, Mapping[str, Any]]) -> dict[str, str]:
    """Per run, the hyperparameters whose value differs between the runs (`lr=0.001 batch=8`)."""
    keys = sorted({k for p in params.values() for k in p})
    varying = [k for k in keys if len({repr(p.get(k)) for p in params.values()}) > 1]
    return {run: " ".join(f"{k}={fmt(p.get(k))}" for k in varying if k in p) for run, p in params.items()}
