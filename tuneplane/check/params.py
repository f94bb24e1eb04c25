"""Hyperparameters: parse `--set` values, check values against a recipe's params, read/write dotted paths.

Pure functions; the rules of CONTRACT §2: an int is accepted for a float, a bool never for a number,
bounds inclusive unless `exclusive_min`, unknown names refused with the list of known ones.

A `--set` value is read by the type of the parameter its key declares: a str or enum parameter keeps the
text as typed (`eval_strategy=no` is "no", `run_name=007` is "007"), a bool one takes the words, a number
one parses. A key no parameter declares is read by CONTRACT §2 (booleans, then numbers, then text).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from enum import StrEnum

from tuneplane.constants import Scalar
from tuneplane.errors import UsageError
from tuneplane.models.recipe import Param, Recipe
from tuneplane.problems import did_you_mean
from tuneplane.runtime.patterns import lazy_pattern

_MISSING = object()
_FLOATISH = lazy_pattern(r"[-+]?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?\Z")
_INTEGER = lazy_pattern(r"[-+]?\d+\Z")
_TRUE = ("true", "yes", "on")
_FALSE = ("false", "no", "off")


def parse_sets(items: list[str], params: Mapping[str, Param] | None = None) -> dict[str, Scalar]:
    """`--set KEY=VALUE` items, parsed the same way by `tp render` and `tp submit` (a rerun keeps the
    values its request recorded). `params` maps each key a parameter declares (its name and its config
    path, see `set_keys`) to that parameter: such a value is read by the parameter's type."""
    out: dict[str, Scalar] = {}
    for item in items:
        key, sep, text = item.partition("=")
        key = key.strip()
        if not sep or not key:
            raise UsageError(f"--set {item!r} is not KEY=VALUE", hint="for example --set learning_rate=2e-5")
        param = (params or {}).get(key)
        out[key] = parse_set_value(key, text) if param is None else parse_typed_value(key, text, param)
    return out


def set_keys(recipe: Recipe | None, plugin_params: Mapping[str, Param] | None = None) -> dict[str, Param]:
    """Every `--set` key a parameter declares, to that parameter: a recipe parameter by its name and by
    its config path, a locked plugin's by its full dotted name (the recipe's win a clash, as in
    admission)."""
    out: dict[str, Param] = dict(plugin_params or {})
    for name, param in (recipe.params if recipe else {}).items():
        out[param.path or name] = param
    for name, param in (recipe.params if recipe else {}).items():
        out[name] = param
    return out


def parse_typed_value(key: str, text: str, param: Param) -> Scalar:
    """`text` read as `param` declares: str keeps it as typed, enum takes the choice written so, bool the
    words of CONTRACT §2, int and float a number. What does not read so stays text, and the check of the
    value (`check_value`) then says what was expected. Quoting keeps a value text, as for any key."""
    text = text.strip()
    if len(text) >= 2 and text[0] == text[-1] and text[0] in "'\"":
        return text[1:-1]
    kind = param.type
    if kind == "str":
        return text
    if kind == "enum":
        chosen: Scalar = next((c for c in param.choices or [] if str(c) == text), text)
        return chosen
    if text.startswith(("[", "{")):
        raise UsageError(
            f"--set {key}: {text!r} is not a single value",
            hint=f"{key} is {'a number' if kind != 'bool' else 'true or false'}",
        )
    if kind == "bool":
        low = text.lower()
        return True if low in _TRUE else False if low in _FALSE else text
    if _INTEGER().match(text):
        _bounded(key, text)
        return float(int(text)) if kind == "float" else int(text)
    if _FLOATISH().match(text):
        return float(text)
    return text


def parse_set_value(key: str, text: str) -> Scalar:
    """`true/yes/on` and `false/no/off` (any case) are booleans, then an integer, then a decimal number,
    else the text (CONTRACT §2). Quote a value (`--set name="'3'"`) to keep it text; `nan` and `inf` stay
    text, so a numeric parameter refuses them.
    """
    text = text.strip()
    if len(text) >= 2 and text[0] == text[-1] and text[0] in "'\"":
        return text[1:-1]
    low = text.lower()
    if low in _TRUE:
        return True
    if low in _FALSE:
        return False
    if text.startswith(("[", "{")):
        raise UsageError(f"--set {key}: {text!r} is not a single value", hint="pass numbers, true/false or text")
    if _INTEGER().match(text):
        _bounded(key, text)
        return int(text)
    if _FLOATISH().match(text):
        return float(text)
    return text


MAX_DIGITS = 4000  # below Python's 4,300-digit limit of int(text)


def _bounded(key: str, text: str) -> None:
    if len(text) > MAX_DIGITS:
        raise UsageError(
            f"--set {key}: a number of {len(text):,} digits: no parameter takes one",
            hint="pass the value you mean, or quote it to keep it text",
        )


def config_value(param: Param, value: object, written: str | None) -> object:
    """A config.yaml value as `param` reads it. YAML 1.1 (what tp and the job read config.yaml with)
    takes an unquoted `no` for false and `007` for 7; `written`, the scalar as written (`Doc.plain`),
    gives a str parameter its text and an enum the choice written so (`eval_strategy: no`). Other types
    keep YAML's reading, and the check of the value says what is wrong with it."""
    if written is None or isinstance(value, str):
        return value
    if param.type == "str":
        return written
    if param.type == "enum":
        choices = param.choices or []
        if not any(type(c) is type(value) and c == value for c in choices):
            return next((c for c in choices if str(c) == written), value)
    return value


def config_pointer(path: str) -> str:
    """The JSON pointer of a dotted config path (`optim.lr` is `/optim/lr`)."""
    return "/" + "/".join(part.replace("~", "~0").replace("/", "~1") for part in path.split("."))


class Misfit(StrEnum):
    """Why a value does not fit its parameter: what a rule decides on (its id), never the message."""

    TYPE = "type"  # not of the parameter's type, or a number that is not finite
    RANGE = "range"  # a number outside the parameter's bounds
    CHOICE = "choice"  # not one of an enum parameter's choices


def check_value(param: Param, value: object) -> str | None:
    """None when `value` fits `param`, else the message saying why not."""
    misfit = value_misfit(param, value)
    return None if misfit is None else misfit[1]


def value_misfit(param: Param, value: object) -> tuple[Misfit, str] | None:
    """None when `value` fits `param`, else why not: the kind of misfit and the message saying it."""
    kind = param.type
    if kind == "bool":
        return None if isinstance(value, bool) else (Misfit.TYPE, f"expected true or false, got {_show(value)}")
    if kind in ("int", "float"):
        return _check_number(param, value)
    if kind == "str":
        return None if isinstance(value, str) else (Misfit.TYPE, f"expected text, got {_show(value)}")
    if value not in (param.choices or []):
        return Misfit.CHOICE, f"{_show(value)} is not one of: {', '.join(map(str, param.choices or []))}"
    return None


def _check_number(param: Param, value: object) -> tuple[Misfit, str] | None:
    if _non_finite(value):
        return Misfit.TYPE, (
            f"{value!r} is not a finite number: NaN and infinities pass no bound and break the JSON handed to the job"
        )
    ok = isinstance(value, int) if param.type == "int" else isinstance(value, (int, float))
    if isinstance(value, bool) or not ok or not isinstance(value, (int, float)):  # the last narrows for mypy
        if isinstance(value, str) and param.type == "float" and _FLOATISH().match(value):
            return Misfit.TYPE, (
                f"expected a number, got the text {value!r}: YAML reads an exponent without a dot as text; "
                f"write it as {_with_dot(value)}"
            )
        return Misfit.TYPE, f"expected {'an integer' if param.type == 'int' else 'a number'}, got {_show(value)}"
    if param.min is not None and (value <= param.min if param.exclusive_min else value < param.min):
        bound = f"{'(exclusive) ' if param.exclusive_min else ''}{_num(param.min)}"
        return Misfit.RANGE, f"{value} is below the minimum {bound}"
    if param.max is not None and value > param.max:
        return Misfit.RANGE, f"{value} is above the maximum {_num(param.max)}"
    return None


def _non_finite(value: object) -> bool:
    """NaN or an infinity, as a float or as the text `--set` leaves unconverted ("nan", "1e999")."""
    if isinstance(value, float):
        return not math.isfinite(value)
    if isinstance(value, str):
        try:
            return not math.isfinite(float(value))
        except ValueError:
            return False
    return False


def _with_dot(text: str) -> str:
    mantissa, _, exp = text.lower().partition("e")
    return f"{mantissa if '.' in mantissa else mantissa + '.0'}e{exp}"


def _num(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else str(x)


def _show(value: object) -> str:
    kind = {
        bool: "a boolean",
        int: "an integer",
        float: "a number",
        str: "text",
        list: "a list",
        dict: "a mapping",
        type(None): "null",
    }.get(type(value), type(value).__name__)
    return f"{kind} ({value!r})" if not isinstance(value, (list, dict)) else kind


def unknown_name_message(name: str, recipe: Recipe) -> tuple[str, str]:
    known = sorted(recipe.params)
    return (
        f"unknown hyperparameter {name!r} for {recipe.name}",
        did_you_mean(
            name, known, then="known: " + ", ".join(known) if known else f"{recipe.name} declares no hyperparameters"
        ),
    )


def resolve_name(name: str, recipe: Recipe) -> str | None:
    """A `--set` key may be a param name or its config path."""
    if name in recipe.params:
        return name
    for pname, p in recipe.params.items():
        if p.path == name:
            return pname
    return None


def get_path(data: object, dotted: str) -> object:
    """Value at a dotted path, or `MISSING`."""
    node = data
    for part in dotted.split("."):
        if not isinstance(node, dict) or part not in node:
            return _MISSING
        node = node[part]
    return node


def is_missing(value: object) -> bool:
    return value is _MISSING


def leaf_paths(data: object, prefix: str = "") -> list[str]:
    if not isinstance(data, dict):
        return [prefix] if prefix else []
    out: list[str] = []
    for key, value in data.items():
        path = f"{prefix}.{key}" if prefix else str(key)
        out += leaf_paths(value, path) if isinstance(value, dict) and value else [path]
    return out
