"""What a comparison's legend says about each run: the hyperparameters that differ, and no more.

Nested settings are named by their dotted path (`optim.betas=[0.9,0.99]`), so a change deep in a
mapping names only the leaf that changed; list values are written compactly; a value longer than
`VALUE_CHARS` is cut with an ellipsis; a key one run does not set reads `(unset)`. Values equal as
numbers (`1` and `1.0`) are no change; `True` and `1` are. Pure and standard library only.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from tuneplane.views.textcols import ELLIPSIS

VALUE_CHARS = 24  # at most, ellipsis included: a legend line names several parameters
UNSET = "(unset)"


def cut(text: str, limit: int) -> str:
    """`text` in at most `limit` characters, the end replaced by an ellipsis when cut."""
    if len(text) <= limit:
        return text
    return text[: max(0, limit - 1)] + ELLIPSIS


def flatten(params: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """Nested mappings as dotted keys: {"optim": {"lr": 1}} is {"optim.lr": 1}."""
    out: dict[str, Any] = {}
    for key, value in params.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping) and value:
            out.update(flatten(value, name + "."))
        else:
            out[name] = value
    return out


def _same_as(value: Any) -> tuple[str, Any]:
    """What two values must share to be the same setting."""
    if isinstance(value, bool):
        return ("bool", value)
    if isinstance(value, int | float):
        return ("number", float(value))
    return ("text", json.dumps(value, sort_keys=True, default=str, ensure_ascii=False))


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


def value_text(value: Any) -> str:
    if isinstance(value, list | tuple | Mapping):
        text = json.dumps(value, separators=(",", ":"), default=str, ensure_ascii=False)
    else:
        text = fmt(value)
    return cut(" ".join(text.split()), VALUE_CHARS)  # one line: a newline in a value would break the legend


def changed_parameters(params: Mapping[str, Mapping[str, Any]]) -> dict[str, str]:
    """Per run, the hyperparameters whose value differs between the runs (`lr=0.001 batch=8`)."""
    flat = {run: flatten(p) for run, p in params.items()}
    keys = sorted({k for p in flat.values() for k in p})
    varying = [k for k in keys if len({_same_as(p[k]) if k in p else ("unset", None) for p in flat.values()}) > 1]
    return {run: " ".join(f"{k}={value_text(p[k]) if k in p else UNSET}" for k in varying) for run, p in flat.items()}
