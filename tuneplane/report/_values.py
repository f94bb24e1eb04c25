"""Turning what a training loop hands to `log()` into flat `{key: float}` records.

Everything here is pure and tolerant: a value that cannot become one finite float is dropped and the
reason is counted, so the caller never sees an exception and the user still learns what was lost.
"""

from __future__ import annotations

import dataclasses
import enum
import math
import numbers
from collections.abc import Callable, Mapping
from typing import SupportsFloat, cast

MAX_KEY_LENGTH = 256
MAX_DEPTH = 16  # nested mappings deeper than this (or cycles) are dropped, not recursed into
# Hparams are a config panel, not a data channel: a huge value is cut rather than shipped.
MAX_HPARAM_TEXT = 1000

DropFn = Callable[[str], None]


def flatten(metrics: Mapping[object, object], sep: str = ".", on_drop: DropFn | None = None) -> dict[str, object]:
    """Flatten nested mappings with `sep`, so `{"a": {"b": 1}}` reports as `a.b`.

    Iterative, with a depth limit and cycle detection: a self-referencing or very deep value is
    dropped alone (reported through `on_drop`) and everything beside it is kept."""
    out: dict[str, object] = {}
    stack: list[tuple[Mapping[object, object], str, int, frozenset[int]]] = [(metrics, "", 0, frozenset({id(metrics)}))]
    while stack:
        obj, prefix, depth, seen = stack.pop()
        try:
            items = list(obj.items())
        except Exception:  # a mapping whose items() fails is one bad value
            if on_drop:
                on_drop("mapping that cannot be read")
            continue
        nested = []
        for key, value in items:
            name = _name(key, prefix, sep)
            if name is None:  # its __str__ raised: this key alone is lost, not the call
                if on_drop:
                    on_drop(UNNAMED)
                continue
            if not isinstance(value, Mapping):
                out[name] = value
            elif id(value) in seen:
                if on_drop:
                    on_drop("self-referencing value")
            elif depth + 1 >= MAX_DEPTH:
                if on_drop:
                    on_drop(f"nested deeper than {MAX_DEPTH} levels")
            else:
                nested.append((value, name, depth + 1, seen | {id(value)}))
        stack.extend(reversed(nested))
    return out


UNNAMED = "key that cannot be named"


def _name(key: object, prefix: str, sep: str) -> str | None:
    """The key as text under `prefix`, or None when the key cannot become text."""
    try:
        text = key if type(key) is str else str(key)
        if type(text) is not str:  # a __str__ returning a str subclass with its own failing methods
            text = str.__str__(text)
    except Exception:
        return None
    return f"{prefix}{sep}{text}" if prefix else text


def with_prefix(key: str, prefix: str) -> str:
    """`prefix/key`, unless the key already starts with that namespace."""
    if not prefix:
        return key
    prefix = prefix.rstrip("/")
    if not prefix or key.startswith(prefix + "/"):
        return key
    return f"{prefix}/{key}"


def key_problem(key: str) -> str | None:
    """Why a metric name would be refused, or None when it is acceptable."""
    if not key:
        return "empty key"
    if len(key) > MAX_KEY_LENGTH:
        return f"key longer than {MAX_KEY_LENGTH} characters"
    if any(ord(ch) < 32 or ord(ch) == 127 for ch in key):
        return "key contains control characters"
    if any(0xD800 <= ord(ch) <= 0xDFFF for ch in key):
        return "key contains half a UTF-16 surrogate pair (not text a receiver can store)"
    return None


def to_float(value: object) -> tuple[float | None, str]:
    """Reduce a metric value to one float, or say why it cannot be.

    Order matters: plain numbers first (the common case), then array-likes by duck typing, so neither
    numpy nor torch is ever imported here.
    """
    try:
        return _reduce(value)
    except OverflowError:  # an int (or a sum of them) beyond float range
        return None, "non-finite value"


def _reduce(value: object) -> tuple[float | None, str]:
    if isinstance(value, bool):
        return float(value), ""
    if isinstance(value, (int, float)):
        return _finite(float(value))
    if value is None:
        return None, "None value"
    if isinstance(value, (str, bytes, bytearray)):
        return None, "text value"
    if isinstance(value, (list, tuple)):
        return _mean_of_sequence(value)
    return _reduce_array_like(value)


def _finite(number: float) -> tuple[float | None, str]:
    if math.isfinite(number):
        return number, ""
    return None, "non-finite value"


def _mean_of_sequence(items: list[object] | tuple[object, ...]) -> tuple[float | None, str]:
    if not items:
        return None, "empty list"
    total = 0.0
    for item in items:
        # numbers.Real also admits numpy scalars without importing numpy.
        if isinstance(item, bool) or not isinstance(item, numbers.Real):
            return None, "list with non-numeric items"
        total += float(item)
    return _finite(total / len(items))


def _reduce_array_like(value: object) -> tuple[float | None, str]:
    """Tensors and arrays: detach, take the element if there is one, the mean if there are many."""
    try:
        if hasattr(value, "detach"):
            value = value.detach()
        size = _size(value)
        if size == 0:
            return None, "empty array"
        if size == 1 and hasattr(value, "item"):
            return _finite(float(value.item()))
        if size is not None and hasattr(value, "mean"):
            return _finite(float(cast(SupportsFloat, _item(_mean(value)))))  # else TypeError, caught
        if hasattr(value, "item"):
            return _finite(float(value.item()))
        if hasattr(value, "__float__"):
            return _finite(float(cast(SupportsFloat, value)))
    except (TypeError, ValueError, RuntimeError, AttributeError, OverflowError):
        return None, f"cannot reduce {type(value).__name__}"
    return None, f"unsupported type {type(value).__name__}"


def _size(value: object) -> int | None:
    numel = getattr(value, "numel", None)
    if callable(numel):
        return int(numel())
    size = getattr(value, "size", None)
    if isinstance(size, int):
        return size
    return None


def _mean(value: object) -> object:
    # Integer tensors refuse mean(); widen them first, as numpy does on its own.
    try:
        if not hasattr(value, "mean"):  # the caller saw one; this narrows it (an array of any library)
            raise AttributeError("mean")
        return value.mean()
    except (TypeError, RuntimeError):
        if hasattr(value, "double"):
            return value.double().mean()
        raise


def _item(value: object) -> object:
    return value.item() if hasattr(value, "item") else value


def to_record(metrics: object, prefix: str, on_drop: DropFn) -> dict[str, float]:
    """The slow path of `log()`: flatten, prefix, validate keys, reduce values."""
    if not isinstance(metrics, Mapping):
        on_drop("metrics is not a mapping")
        return {}
    record: dict[str, float] = {}
    for raw_key, raw_value in flatten(metrics, on_drop=on_drop).items():
        key = with_prefix(raw_key, prefix)
        problem = key_problem(key)
        if problem:
            on_drop(problem)
            continue
        number, reason = to_float(raw_value)
        if number is None:
            on_drop(reason)
            continue
        record[key] = number
    return record


def plain(value: object, seen: frozenset[int] = frozenset()) -> object:
    """Configuration objects as the mappings they stand for, so their fields are hyperparameters of
    their own (`optim.lr`) rather than one `repr` cut at 1000 characters: dataclass instances (a
    structured config), `argparse` and `types` namespaces (`init(hparams=args)`), also nested in
    mappings. Anything else, a broken object or a cycle included, is left to `flatten` as it is."""
    if id(value) in seen:
        return _SELF
    if len(seen) >= MAX_DEPTH:
        return value
    inner = seen | {id(value)}
    try:
        if isinstance(value, Mapping):
            return {k: plain(v, inner) for k, v in value.items()}
        if dataclasses.is_dataclass(value) and not isinstance(value, type):
            return {f.name: plain(getattr(value, f.name, None), inner) for f in dataclasses.fields(value)}
        if type(value).__name__ in _NAMESPACES and isinstance(getattr(value, "__dict__", None), dict):
            return {k: plain(v, inner) for k, v in vars(value).items()}
    except Exception:  # a mapping or object whose reading fails: `flatten` drops it alone
        return value
    return value


_NAMESPACES = frozenset({"Namespace", "SimpleNamespace"})
_SELF: object = object()  # where `plain` met a value inside itself


def hparams_payload(params: object, on_drop: DropFn | None = None) -> dict[str, object]:
    """Flatten hyperparameters and make every value JSON-safe, so one odd object never blocks the rest:
    a cycle, a too-deep value or one that cannot even become text is dropped alone and counted."""
    out: dict[str, object] = {}
    # `plain` keeps a mapping one; anything else fails flatten's guarded items() and is dropped there
    for key, value in flatten(cast(Mapping[object, object], plain(params)), on_drop=on_drop).items():
        problem = "self-referencing value" if value is _SELF else key_problem(key)
        if problem:
            if on_drop:
                on_drop(problem)
            continue
        safe = _json_safe(value)
        if safe is _UNSERIALISABLE:
            if on_drop:
                on_drop("not serialisable")
            continue
        out[key] = safe
    return out


_UNSERIALISABLE: object = object()


def _json_safe(value: object) -> object:
    if isinstance(value, enum.Enum) and not isinstance(value, (int, str)):
        return _json_safe(value.value)  # `Color.RED` is "red", as a config file spells it
    if value is None or isinstance(value, (bool, int, str)):
        return value if not isinstance(value, str) else value[:MAX_HPARAM_TEXT]
    if isinstance(value, float):
        return value if math.isfinite(value) else repr(value)
    if (
        isinstance(value, (list, tuple))
        and all(
            v is None or isinstance(v, (bool, int, str)) or (isinstance(v, float) and math.isfinite(v)) for v in value
        )
        and len(value) <= 64
    ):
        return list(value)
    if hasattr(value, "item") and getattr(value, "ndim", None) == 0:
        try:
            return _json_safe(value.item())
        except (TypeError, ValueError, RuntimeError):
            pass
    text = _as_text(value)
    return text if text is _UNSERIALISABLE else str(text)[:MAX_HPARAM_TEXT]


def _as_text(value: object) -> object:
    try:
        return str(value)
    except Exception:  # a broken __str__ must not stop the report
        try:
            return f"<{type(value).__name__}>"
        except Exception:  # nothing at all can be said about it: drop it alone
            return _UNSERIALISABLE
