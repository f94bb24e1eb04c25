"""What a status keeps of a run's effective hyperparameters (config.yaml merged with `--set`, as the
job was started with them), so `tp job compare` can say which differ.

A config.yaml can be a framework's whole configuration, and a status file is read in git diffs, so
the status keeps scalars only (numbers, text, booleans) under dotted keys (`optim.lr`), at most
`MAX_KEYS` of them: the validated hyperparameters (the recipe's parameters and the request's `--set`)
first, then config.yaml in its own order. Text longer than `MAX_CHARS` is cut with an ellipsis. What
is left out (a list, a null, a date, a key past the bound) is named, the first `MAX_LEFT_OUT` keys
and then how many more: the run's commit holds the whole file.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator, Mapping
from typing import TypeGuard

from tuneplane.constants import Scalar
from tuneplane.views.charts_legend import cut

MAX_KEYS = 64
MAX_CHARS = 200  # a value's text, and a key
MAX_LEFT_OUT = 16


def kept_hyperparameters(
    effective: Mapping[str, object], first: Iterable[str] = ()
) -> tuple[dict[str, Scalar], list[str]]:
    """The hyperparameters a status keeps, and the keys it names as left out. `first` (dotted keys)
    are kept before the rest, so a bound never drops the parameters a run request sets."""
    flat = dict(_flatten(effective))
    order = dict.fromkeys([k for k in first if k in flat] + list(flat))
    kept: dict[str, Scalar] = {}
    left_out: list[str] = []
    for key in order:
        value = flat[key]
        if len(kept) >= MAX_KEYS or len(key) > MAX_CHARS or not _scalar(value):
            left_out.append(key)
        else:
            kept[key] = cut(value, MAX_CHARS) if isinstance(value, str) else value
    return kept, _named(left_out)


def _flatten(data: Mapping[str, object], prefix: str = "") -> Iterator[tuple[str, object]]:
    """Leaves under dotted keys; an empty mapping is a leaf (and not a scalar)."""
    for key, value in data.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping) and value:
            yield from _flatten(value, name + ".")
        else:
            yield name, value


def _scalar(value: object) -> TypeGuard[Scalar]:
    """A number, text or boolean JSON can carry (not NaN or an infinity)."""
    if isinstance(value, float):
        return math.isfinite(value)
    return isinstance(value, bool | int | str)


def _named(keys: list[str]) -> list[str]:
    """The first `MAX_LEFT_OUT` keys (each cut to a readable length), then how many more."""
    named = [cut(k, 80) for k in keys[:MAX_LEFT_OUT]]
    more = len(keys) - MAX_LEFT_OUT
    return named + ([f"… and {more} more"] if more > 0 else [])
