"""A chart's axes: round tick values for steps and values, labels with just enough digits, and
wall-time ticks on round durations in one unit per axis. Pure and standard library only."""

from __future__ import annotations

import math
from collections.abc import Sequence


def nice_ticks(low: float, high: float, count: int = 5, whole: bool = False) -> list[float]:
    """Round tick values covering [low, high]; `whole`: integer steps only (training steps).

    Ticks are whole multiples of the tick step, computed in integers for steps (exact at any size,
    2**62 included) and rounded to the step's own digits for values (distinct at 1e-30 as at 1e6)."""
    if not (math.isfinite(low) and math.isfinite(high)) or high <= low:
        return [round(low) if whole else low]
    if whole:
        return list(_whole_ticks(low, high, count))
    step = _value_step(low, high, count)
    if step is None:
        return [low, high]
    first, last = math.ceil(low / step - 1e-9), math.floor(high / step + 1e-9)
    ticks = [_at(k, step) for k in range(first, min(last, first + 49) + 1)]
    return ticks or [low]


def value_axis(low: float, high: float, count: int = 4) -> tuple[float, float, list[float]]:
    """A value axis from the round tick at or below `low` to the one at or above `high`, and its
    ticks: both ends are named, so every panel shows at least two labels."""
    step = _value_step(low, high, count) if math.isfinite(low) and math.isfinite(high) and high > low else None
    if step is None:
        return low, high, [t for t in nice_ticks(low, high, count) if low <= t <= high]
    first, last = math.floor(low / step + 1e-9), math.ceil(high / step - 1e-9)
    ticks = [_at(k, step) for k in range(first, min(last, first + 49) + 1)]
    if not all(math.isfinite(t) for t in ticks) or len(ticks) < 2:
        return low, high, [t for t in nice_ticks(low, high, count) if low <= t <= high]
    return min(low, ticks[0]), max(high, ticks[-1]), ticks


def _value_step(low: float, high: float, count: int) -> float | None:
    raw = high / max(1, count - 1) - low / max(1, count - 1)  # finite even for a span past the float range
    if not math.isfinite(raw) or raw <= 0:
        return None
    magnitude = 10.0 ** math.floor(math.log10(raw))
    step = next((m * magnitude for m in (1, 2, 2.5, 5, 10) if m * magnitude >= raw), math.inf)
    return step if math.isfinite(step) and step > 0 else None


def _at(k: int, step: float) -> float:
    """The k-th multiple of `step`, rounded to the step's own digits (1e-7 steps stay 1e-7 apart)."""
    return round(k * step, 3 - math.floor(math.log10(step)))


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


def time_labels(ticks: Sequence[float]) -> list[str]:
    """Labels of one wall-time axis in one unit: the largest (day, hour, minute, second) that its
    tick step is a whole multiple of, so 3 days read `0h 12h … 72h` and not `36h 2d 2d12h`."""
    step = min((b - a for a, b in zip(ticks, ticks[1:], strict=False) if b > a), default=1.0)
    if step < 0.095:  # steps under a tenth of a second (0.1 less float error): milliseconds
        digits = max(0, -math.floor(math.log10(step * 1000)))
        return [f"{round(t * 1000, digits):g}ms" for t in ticks]
    unit, suffix = next(
        (
            (u, x)
            for u, x in ((86400, "d"), (3600, "h"), (60, "m"))
            if step >= u and abs(step / u - round(step / u)) < 1e-9
        ),
        (1, "s"),
    )
    return [f"{round(t / unit, 1):g}{suffix}" for t in ticks]


def time_ticks(low: float, high: float, count: int = 6) -> list[float]:
    """Ticks on round durations (1 s, 5 s, 1 min, 5 min, 1 h, …); under 0.1 s, 1, 2 or 5 times a
    power of ten (milliseconds and less)."""
    span = max(high - low, 1e-9)
    if span < 0.1:
        magnitude = 10.0 ** math.floor(math.log10(span / count))
        step = next(m * magnitude for m in (1, 2, 5, 10) if span / (m * magnitude) <= count)
        digits = 1 - math.floor(math.log10(step))
        first = math.ceil(low / step - 1e-9) * step
        return [round(first + i * step, digits) for i in range(int((high - first) / step + 1e-9) + 1)][:50] or [low]
    for step in (
        0.1,
        0.2,
        0.5,
        1,
        2,
        5,
        10,
        15,
        30,
        60,
        120,
        300,
        600,
        900,
        1800,
        3600,
        7200,
        21600,
        43200,
        86400,
        172800,
        604800,
    ):
        if span / step <= count:
            break
    else:  # longer still: whole weeks
        step = 604800 * math.ceil(span / (count * 604800))
    first = math.ceil(low / step - 1e-9) * step
    count_of = int((high - first) / step + 1e-9) + 1
    return [round(first + i * step, 1) for i in range(max(0, count_of))][:50] or [low]
