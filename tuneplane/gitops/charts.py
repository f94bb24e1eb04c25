"""Showing a run's metrics: a text table with unicode sparklines, and a self-contained SVG chart.

Pure functions over the ingest read API's shapes (`summary` dicts and `(step, value)` series), so the
CLI, status writers and tests share them without any I/O.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any
from xml.sax.saxutils import escape

BARS = "▁▂▃▄▅▆▇█"
Series = Sequence[tuple[int, float]]
COLUMNS = ("key", "last", "min", "max", "count", "last_step", "trend")
PALETTE = ("#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf")


def bucket_means(values: Sequence[float], width: int) -> list[float]:
    """At most `width` values: the mean of each of `width` consecutive, near-equal slices."""
    if width <= 0 or not values:
        return []
    if len(values) <= width:
        return list(values)
    out = []
    for index in range(width):
        lo, hi = index * len(values) // width, (index + 1) * len(values) // width
        chunk = values[lo:hi] or values[lo:lo + 1]
        out.append(sum(chunk) / len(chunk))
    return out


def sparkline(values: Sequence[float], width: int = 24) -> str:
    """`▁▂▄█`-style trend of `values`, at most `width` characters; flat data sits mid-height."""
    points = [v for v in bucket_means([v for v in values if math.isfinite(v)], width)]
    if not points:
        return ""
    low, high = min(points), max(points)
    if high - low <= 1e-12 * max(1.0, abs(high)):
        return BARS[len(BARS) // 2 - 1] * len(points)
    scale = (len(BARS) - 1) / (high - low)
    return "".join(BARS[min(len(BARS) - 1, int(round((v - low) * scale)))] for v in points)


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
                 width: int = 24) -> str:
    """One row per key: last, min, max, count, last step and a sparkline of the series."""
    series = series or {}
    rows = [list(COLUMNS)]
    for key in sorted(summary):
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


# ── SVG ───────────────────────────────────────────────────────────────────────────────────────
def thin(points: Series, limit: int = 1500) -> list[tuple[int, float]]:
    """Keep each bucket's first, min and max point, so spikes survive on long series."""
    finite = [(s, v) for s, v in points if math.isfinite(v)]
    if len(finite) <= limit:
        return finite
    buckets = max(1, limit // 3)
    out: list[tuple[int, float]] = []
    for index in range(buckets):
        chunk = finite[index * len(finite) // buckets:(index + 1) * len(finite) // buckets]
        if chunk:
            picks = {chunk[0], min(chunk, key=lambda p: p[1]), max(chunk, key=lambda p: p[1])}
            out.extend(sorted(picks))
    return out


def nice_ticks(low: float, high: float, count: int = 5) -> list[float]:
    """Round tick values covering [low, high]."""
    if high <= low:
        return [low]
    raw = (high - low) / max(1, count - 1)
    magnitude = 10 ** math.floor(math.log10(raw))
    step = next(m * magnitude for m in (1, 2, 2.5, 5, 10) if m * magnitude >= raw)
    first = math.ceil(low / step) * step
    ticks = []
    value = first
    while value <= high + step * 1e-9:
        ticks.append(round(value, 12))
        value += step
    return ticks or [low]


def render_svg(series: Mapping[str, Series], title: str = "", width: int = 760,
               panel_height: int = 170) -> str:
    """One panel per key (each with its own y range), stacked; standalone SVG 1.1 with no scripts."""
    keys = sorted(series)
    top = 34 if title else 12
    height = top + max(1, len(keys)) * (panel_height + 26) + 10
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" font-family="sans-serif" font-size="11">',
        f'<rect width="{width}" height="{height}" fill="#ffffff"/>',
    ]
    if title:
        parts.append(f'<text x="{width / 2:.1f}" y="20" text-anchor="middle" font-size="14">'
                     f"{escape(title)}</text>")
    if not keys:
        parts.append(f'<text x="{width / 2:.1f}" y="{top + 20}" text-anchor="middle">no metrics</text>')
    for index, key in enumerate(keys):
        y0 = top + index * (panel_height + 26)
        parts.extend(_panel(key, thin(series[key]), PALETTE[index % len(PALETTE)], y0, width, panel_height))
    parts.append("</svg>")
    return "\n".join(parts) + "\n"


def _panel(key: str, points: list[tuple[int, float]], color: str, y0: float, width: int,
           height: int) -> list[str]:
    left, right = 64, width - 16
    plot_top, plot_bottom = y0 + 18, y0 + height
    out = [f'<text x="{left}" y="{y0 + 12}" font-weight="bold">{escape(key)}</text>',
           f'<rect x="{left}" y="{plot_top}" width="{right - left}" height="{plot_bottom - plot_top}" '
           'fill="none" stroke="#cccccc"/>']
    if not points:
        return out + [f'<text x="{(left + right) / 2}" y="{(plot_top + plot_bottom) / 2}" '
                      'text-anchor="middle" fill="#888888">no points</text>']
    steps = [s for s, _ in points]
    values = [v for _, v in points]
    x_lo, x_hi = min(steps), max(steps)
    y_lo, y_hi = min(values), max(values)
    if y_hi == y_lo:
        pad = abs(y_lo) * 0.05 or 1.0
        y_lo, y_hi = y_lo - pad, y_hi + pad

    def x_of(step: float) -> float:
        return left + (step - x_lo) / (x_hi - x_lo) * (right - left) if x_hi > x_lo else (left + right) / 2

    def y_of(value: float) -> float:
        return plot_bottom - (value - y_lo) / (y_hi - y_lo) * (plot_bottom - plot_top)

    for tick in nice_ticks(y_lo, y_hi, 4):
        y = y_of(tick)
        out.append(f'<line x1="{left}" y1="{y:.1f}" x2="{right}" y2="{y:.1f}" stroke="#eeeeee"/>')
        out.append(f'<text x="{left - 4}" y="{y + 4:.1f}" text-anchor="end">{escape(fmt(tick))}</text>')
    for tick in nice_ticks(x_lo, x_hi, 6):
        x = x_of(tick)
        out.append(f'<text x="{x:.1f}" y="{plot_bottom + 13}" text-anchor="middle">'
                   f"{escape(fmt(tick))}</text>")
    coords = " ".join(f"{x_of(s):.1f},{y_of(v):.1f}" for s, v in points)
    if len(points) == 1:
        cx, cy = coords.split(",")
        out.append(f'<circle cx="{cx}" cy="{cy}" r="3" fill="{color}"/>')
    else:
        out.append(f'<polyline fill="none" stroke="{color}" stroke-width="1.5" points="{coords}"/>')
    return out
