"""Showing metrics: a text table with sparklines, and self-contained SVG charts people can read.

Pure functions over the ingest read API's shapes (`summary` dicts and `(step, value)` series), so the
CLI, the bot and tests share them without any I/O. Charts follow one metric vocabulary
(`tuneplane.metrics.vocab`): primary metrics first, hardware last. Training panels share one x axis
by step with ticks on whole steps; hardware panels (`hw/*`) are drawn against wall time when the
sample times are known; a series that never changes is one line of text ("train/epoch = 1"), not a
panel. `render_compare_svg` overlays several runs on one chart per metric, with a legend naming what
differs between them (and draws some thicker: a sweep's best trial).
"""

from __future__ import annotations

import math
import re
from collections.abc import Collection, Mapping, Sequence
from typing import Any
from xml.sax.saxutils import escape

from tuneplane.metrics.vocab import Vocabulary, is_hardware
from tuneplane.runtime.records import FrozenRecord
from tuneplane.views.charts_axes import nice_ticks, tick_labels, time_labels, time_ticks, value_axis
from tuneplane.views.charts_legend import cut, fmt
from tuneplane.views.textcols import columns, cut_middle, ljust, printable, rjust

BARS = "▁▂▃▄▅▆▇█"
# What XML 1.0 cannot hold (control characters, lone surrogates, U+FFFE/U+FFFF): a metric name or a
# legend may carry them, and one would make the whole SVG unreadable.
_NOT_XML = re.compile("[^\t\n\r\x20-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")
Series = Sequence[tuple[float, float]]
COLUMNS = ("key", "last", "min", "max", "count", "last_step", "trend")
KEY_COLUMNS = 48  # a metrics table's key column at most, ellipsis included
PALETTE = ("#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf")
# Past the palette, runs repeat its colours with another dash pattern: every run stays its own line.
DASHES = ("", "6 3", "2 2", "8 3 2 3", "1 3")
COMPACT_POINTS = 32  # per series in a chart the bot commits (the lab's history stays small)
COMPACT_PANELS = 3
CHAR_PX = 6.2  # the mean width of a character of the 11 px sans-serif text (legends, words)
DIGIT_PX = 7.0  # a digit's width in that font (0.64 em): what a value label is made of


def _header(width: str, height: str) -> list[str]:
    """The first two lines of every chart: what `is_chart` knows a chart tp wrote by."""
    return [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" font-family="sans-serif" font-size="11">',
        f'<rect width="{width}" height="{height}" fill="#ffffff"/>',
    ]


# the header, its width and height numbers that are the same wherever each appears
_CHART_START = re.compile(
    re.escape("\n".join(_header("W", "H")) + "\n")
    .replace("W", r"(?P<w>\d+)", 1)
    .replace("H", r"(?P<h>\d+)", 1)
    .replace("W", "(?P=w)")
    .replace("H", "(?P=h)")
    .encode()
)


def is_chart(first_bytes: bytes) -> bool:
    """Whether a file that begins with `first_bytes` (its first 512 bytes will do) is a chart tp
    wrote: another tool's SVG, even one that begins alike, is not."""
    return _CHART_START.match(first_bytes) is not None


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


def render_table(
    summary: Mapping[str, Mapping[str, Any]],
    series: Mapping[str, Series] | None = None,
    width: int = 24,
    vocab: Vocabulary | None = None,
) -> str:
    """One row per key: last, min, max, count, last step, trend. With `vocab`, in its reading order
    (primary first, hardware last); without, in the order given."""
    series = series or {}
    rows = [list(COLUMNS)]
    cut_keys = 0
    for key in vocab.order(summary) if vocab is not None else summary:
        stats = summary[key]
        trend = sparkline([v for _, v in series.get(key, ())], width)
        shown = cut_middle(printable(key), KEY_COLUMNS)  # one long key must not widen every row
        cut_keys += shown != printable(key)
        rows.append(
            [
                shown,
                fmt(stats.get("last")),
                fmt(stats.get("min")),
                fmt(stats.get("max")),
                fmt(stats.get("count")),
                fmt(stats.get("last_step")),
                trend,
            ]
        )
    widths = [max(columns(row[i]) for row in rows) for i in range(len(COLUMNS))]
    lines = []
    for row in rows:  # padded by display width: a CJK key takes two columns a character
        cells = [ljust(row[0], widths[0])] + [rjust(row[i], widths[i]) for i in range(1, 6)] + [row[6]]
        lines.append("  ".join(cells).rstrip())
    if cut_keys:
        lines.append(f"({cut_keys} key(s) cut to {KEY_COLUMNS} columns; --json prints them whole)")
    return "\n".join(lines) + "\n"


# ── points ──────────────────────────────────────────────────────────────────────────────────────


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
    hardware = {
        k: sorted((t, v) for _, v, t in points if t is not None and math.isfinite(t))
        for k, points in timed.items()
        if is_hardware(k)
    }
    starts = [points[0][0] for points in hardware.values() if points]
    if not starts:
        return {}
    origin = min(starts)
    return {k: [(t - origin, v) for t, v in points] for k, points in hardware.items() if points}


def render_svg(
    series: Mapping[str, Series],
    title: str = "",
    width: int = 760,
    panel_height: int = 150,
    vocab: Vocabulary | None = None,
    times: Mapping[str, Series] | None = None,
    compact: bool = False,
) -> str:
    """A run's metrics: one panel per changing key (primary first, hardware last), stacked.

    `times` gives hardware keys as (seconds since the first sample, value) for a wall-time axis
    (`wall_times` makes it from the ingest's timed series).
    `compact` bounds the file (a chart the bot commits for every run): fewer points and panels.
    """
    return render_compare_svg(
        {"": series},
        title=title,
        width=width,
        panel_height=panel_height,
        vocab=vocab,
        times=({"": times} if times else None),
        compact=compact,
    )


class _Panel(FrozenRecord):
    key: str
    use_time: bool
    lines: dict[str, list[tuple[float, float]]]
    note: str  # what the panel leaves out, in words ("" when nothing)
    y_axis: tuple[float, float, list[float], list[str]]  # low, high, ticks, their labels


def render_compare_svg(
    runs: Mapping[str, Mapping[str, Series]],
    legend: Mapping[str, str] | None = None,
    title: str = "",
    width: int = 760,
    panel_height: int = 150,
    vocab: Vocabulary | None = None,
    times: Mapping[str, Mapping[str, Series]] | None = None,
    compact: bool = False,
    bold: Collection[str] = (),
    x_caption: str = "",
) -> str:
    """One panel per metric with every run drawn on it (one colour per run, named in the legend).

    What is not drawn is said in words under the panels: a series that never changes as its value,
    values that are not finite (NaN, infinity) by their count, and in a `compact` chart the metrics
    past its panel limit by name. The runs in `bold` are drawn thicker and on top of the others (a
    sweep's best trial); `x_caption` names the x axis of training panels when it is not the step."""
    vocab = vocab or Vocabulary()
    legend = dict(legend or {})
    labels = list(runs)
    keys = vocab.order({k for data in runs.values() for k in data})
    words: list[str] = []  # lines under the panels
    panels: list[_Panel] = []
    for key in keys:
        use_time = is_hardware(key) and times is not None and any(key in (times.get(r) or {}) for r in labels)
        sources = {run: ((times or {}).get(run) or {}) if use_time else runs[run] for run in labels}
        lines, note = _lines(key, sources, compact)
        untimed = [r for r in labels if use_time and key in runs[r] and key not in ((times or {}).get(r) or {})]
        if untimed:  # their samples have no times: they cannot share the wall-time axis, and are named
            note = "; ".join(filter(None, (note, f"{cut(', '.join(untimed), 48)}: no sample times, not drawn")))
        same = {constant_value(p) for p in lines.values()}
        if not lines:
            if note:
                words.append(f"{key}: no finite value ({note})")
        elif len(same) == 1 and None not in same:
            words.append(f"{key} = {fmt(next(iter(same)))}" + (f" ({note})" if note else ""))
        else:
            panels.append(_Panel(key, use_time, lines, note, _y_axis(lines)))
    if compact and len(panels) > COMPACT_PANELS:
        left_out = [p.key for p in panels[COMPACT_PANELS:]]
        panels = panels[:COMPACT_PANELS]
        words.insert(
            0,
            f"{len(left_out)} more metric{'' if len(left_out) == 1 else 's'} "
            f"(`tp job metrics RUN --plot` draws them): {', '.join(left_out)}",
        )
    # training panels share one step axis; hardware with no times known is numbered by sample: its own
    step_ranges = [
        s for p in panels if not (p.use_time or is_hardware(p.key)) for line in p.lines.values() for s, _ in line
    ]
    shared = (min(step_ranges), max(step_ranges)) if step_ranges else (0.0, 1.0)
    # hardware panels share one wall-time axis from the first sample (0 s), so their times line up
    time_ranges = [s for p in panels if p.use_time for line in p.lines.values() for s, _ in line]
    wall = (min(0.0, *time_ranges), max(time_ranges)) if time_ranges else (0.0, 1.0)
    # the widest value label sets the left margin, so none runs off the chart's edge
    left = max(64, 10 + math.ceil(DIGIT_PX * max((len(t) for p in panels for t in p.y_axis[3]), default=0)))
    chars = max(8, int((width - 84 - 8) / CHAR_PX))  # what fits on one line of the legend or the words
    legend_rows = len(labels) if len(labels) > 1 or any(legend.values()) else 0
    top = (30 if title else 10) + legend_rows * 16
    band = panel_height + 34
    rows = len(panels) if panels or words else 1  # a chart of words only has no empty panel above them
    height = top + rows * band + len(words) * 16 + 12 + (14 if not panels and words else 0)
    parts = _header(str(width), str(height))
    if title:
        parts.append(
            f'<text x="{width // 2}" y="20" text-anchor="middle" font-size="14">'
            f"{_xml(cut(title, int(width / 9)))}</text>"
        )
    for index, run in enumerate(labels[:legend_rows]):
        y = (30 if title else 10) + index * 16 + 8
        text = cut(run + (f" — {legend[run]}" if legend.get(run) else ""), chars)
        parts.append(
            f'<line x1="64" y1="{y - 6}" x2="80" y2="{y - 6}" stroke-width="3"{_stroke(index)}/>'
            f'<text x="84" y="{y - 4}">{_xml(text)}</text>'
        )
    if not panels and not words:
        parts.append(f'<text x="{width // 2}" y="{top + 20}" text-anchor="middle">no metrics</text>')
    for index, panel in enumerate(panels):
        y0 = top + index * band
        parts.extend(
            _panel(
                panel,
                labels,
                y0,
                (left, width - 16),
                panel_height,
                wall if panel.use_time else _own(panel) if is_hardware(panel.key) else shared,
                single=len(labels) == 1,
                index=index,
                bold=bold,
                caption=x_caption,
            )
        )
    y = top + rows * band + (14 if not panels else 0)
    for text in words:
        parts.append(f'<text x="64" y="{y}">{_xml(cut(text, chars + 3))}</text>')
        y += 16
    parts.append("</svg>")
    return "\n".join(parts) + "\n"


def _lines(
    key: str, sources: Mapping[str, Mapping[str, Series]], compact: bool
) -> tuple[dict[str, list[tuple[float, float]]], str]:
    """Each run's points of `key` to draw, and how many were not finite (said, never drawn)."""
    lines, dropped = {}, 0
    for run, source in sources.items():
        given = source.get(key, ())
        dropped += sum(1 for s, v in given if not (math.isfinite(v) and math.isfinite(s)))
        points = smooth(given, COMPACT_POINTS) if compact else thin(given, 1500)
        if points:
            lines[run] = points
    return lines, f"{dropped} value{'' if dropped == 1 else 's'} not finite (NaN/inf) not drawn" if dropped else ""


def _own(panel: _Panel) -> tuple[float, float]:
    xs = [s for line in panel.lines.values() for s, _ in line]
    return min(xs), max(xs)


def _y_axis(lines: Mapping[str, list[tuple[float, float]]]) -> tuple[float, float, list[float], list[str]]:
    """A panel's value axis: from a round tick below its data to one above, and the tick labels."""
    ys = [v for p in lines.values() for _, v in p]
    y_lo, y_hi = min(ys), max(ys)
    if y_hi == y_lo:
        pad = abs(y_lo) * 0.05 or 1.0
        y_lo, y_hi = y_lo - pad, y_hi + pad
    y_lo, y_hi, ticks = value_axis(y_lo, y_hi, 4)
    return y_lo, y_hi, ticks, tick_labels(ticks)


def _panel(
    panel: _Panel,
    labels: list[str],
    y0: float,
    across: tuple[int, int],
    height: int,
    shared: tuple[float, float],
    single: bool,
    index: int,
    bold: Collection[str] = (),
    caption: str = "",
) -> list[str]:
    (left, right), lines = across, panel.lines
    plot_top, plot_bottom = y0 + 18, y0 + height
    unit = " (wall time)" if panel.use_time else ""
    out = [
        f'<text x="{left}" y="{y0 + 12}" font-weight="bold">{_xml(panel.key)}{unit}</text>',
        f'<rect x="{left}" y="{plot_top}" width="{right - left}" height="{plot_bottom - plot_top}" '
        'fill="none" stroke="#cccccc"/>',
    ]
    if panel.note:
        out.append(f'<text x="{right}" y="{y0 + 12}" text-anchor="end" fill="#666666">{_xml(panel.note)}</text>')
    x_lo, x_hi = shared
    y_lo, y_hi, y_ticks, y_labels = panel.y_axis

    def x_of(step: float) -> int:
        return round(left + (step - x_lo) / (x_hi - x_lo) * (right - left)) if x_hi > x_lo else (left + right) // 2

    def y_of(value: float) -> int:
        return round(plot_bottom - _share(value, y_lo, y_hi) * (plot_bottom - plot_top))

    for tick, label in zip(y_ticks, y_labels, strict=True):
        if y_lo <= tick <= y_hi:
            y = y_of(tick)
            out.append(
                f'<line x1="{left}" y1="{y}" x2="{right}" y2="{y}" stroke="#eeeeee"/>'
                f'<text x="{left - 4}" y="{y + 4}" text-anchor="end">{_xml(label)}</text>'
            )
    if panel.use_time:
        caption = "time since the first sample"
    elif is_hardware(panel.key):
        caption = "sample"
    else:
        caption = caption or "step"
    out += _x_axis(x_lo, x_hi, panel.use_time, x_of, plot_bottom, right, caption)
    # the emphasised runs last, so that no other line hides them
    for number, run in sorted(enumerate(labels), key=lambda item: item[1] in bold):
        points = lines.get(run)
        if not points:
            continue
        style = index % len(PALETTE) if single else number  # one run: a colour per panel, solid
        coords = [(x_of(s), y_of(v)) for s, v in points]
        if len(coords) == 1:
            color = PALETTE[style % len(PALETTE)]
            radius = 4 if run in bold else 3
            out.append(f'<circle cx="{coords[0][0]}" cy="{coords[0][1]}" r="{radius}" fill="{color}"/>')
            continue
        width = "3" if run in bold else "1.5"
        out.append(f'<path fill="none"{_stroke(style)} stroke-width="{width}" d="{_path(coords)}"/>')
    return out


def _stroke(number: int) -> str:
    """Run `number`'s line: a palette colour, and past the palette a dash pattern as well."""
    color = PALETTE[number % len(PALETTE)]
    dash = DASHES[(number // len(PALETTE)) % len(DASHES)]
    return f' stroke="{color}"' + (f' stroke-dasharray="{dash}"' if dash else "")


def _x_axis(x_lo: float, x_hi: float, use_time: bool, x_of: Any, bottom: float, right: int, caption: str) -> list[str]:
    """Tick labels under a panel (whole steps, or round durations), each label once."""
    if use_time:
        ticks = [t + x_lo for t in time_ticks(0.0, x_hi - x_lo)]
        labels = time_labels([t - x_lo for t in ticks])
    else:
        ticks = nice_ticks(x_lo, x_hi, 6, whole=True)
        labels = tick_labels(ticks)
    slack = 1e-9 if use_time else 0  # whole steps are compared exactly (a float epsilon is lost at 2**62)
    kept: list[tuple[int, str]] = []
    for tick, label in zip(ticks, labels, strict=True):
        if label not in {k for _, k in kept} and x_lo - slack <= tick <= x_hi + slack:
            kept.append((x_of(tick), label))
    out = [f'<text x="{x}" y="{bottom + 13}" text-anchor="middle">{_xml(label)}</text>' for x, label in _spaced(kept)]
    out.append(f'<text x="{right}" y="{bottom + 26}" text-anchor="end" fill="#666666">{_xml(caption)}</text>')
    return out


def _spaced(labels: list[tuple[int, str]]) -> list[tuple[int, str]]:
    """Every k-th label, the smallest k at which no two neighbours overlap (long step numbers)."""
    for k in range(1, len(labels) + 1):
        picked = labels[::k]
        if all(
            b[0] - a[0] >= (len(a[1]) + len(b[1])) / 2 * DIGIT_PX + 4 for a, b in zip(picked, picked[1:], strict=False)
        ):
            return picked
    return labels[:1]


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
