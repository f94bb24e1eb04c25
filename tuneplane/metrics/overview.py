"""A whole series in a few points: what a run's sparkline shows, from its first value to its last."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TypeVar

T = TypeVar("T")


def overview(values: Sequence[T], points: int) -> list[T]:
    """`points` values spread evenly over `values`, the first and the last among them (all of them when
    there are no more). An 800-step run that converged reads as a fall, not as its last 20 wiggles."""
    count = len(values)
    if count <= points:
        return list(values)
    if points <= 1:
        return list(values[-1:]) if points == 1 else []
    return [values[round(i * (count - 1) / (points - 1))] for i in range(points)]
