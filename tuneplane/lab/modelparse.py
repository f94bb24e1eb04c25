"""The one converter from a pydantic `ValidationError` to our messages.

`parse_model` validates a positioned file and returns every error as a Problem at its line; files
that have no positions (flags on the command line, a status file the bot reads) go through
`validate_or_raise`, which turns the first problem into a UsageError. Both name an unknown key's
closest known key ("did you mean `learning_rate`?"), found from the model's own fields.
"""

from __future__ import annotations

import re
import types
import typing
from typing import Any, TypeVar, Union

from pydantic import BaseModel, ValidationError

from tuneplane.errors import UsageError
from tuneplane.lab.yamlio import Doc, escape
from tuneplane.problems import Problem, close_matches

M = TypeVar("M", bound=BaseModel)


def parse_model(model: type[M], doc: Doc, rule: str, pointer: str = "") -> tuple[M | None, list[Problem]]:
    """Validate `doc.data` as `model`; every error becomes a positioned Problem (`pointer` prefixes them)."""
    try:
        return model.model_validate(doc.data), []
    except ValidationError as exc:
        return None, problems_from(exc, model, doc, rule, pointer)


def problems_from(exc: ValidationError, model: type[BaseModel], doc: Doc, rule: str,
                  base: str = "") -> list[Problem]:
    return [_to_problem(model, doc, err, rule, base) for err in exc.errors()]


def validate_or_raise(model: type[M], data: Any, where: str, hint: str) -> M:
    """Validate data that has no file positions; the first error becomes a UsageError naming `where`."""
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        problems = problems_from(exc, model, Doc(rel=where, data=data), "schema")
        first = problems[0]
        spelling = first.hint if first.hint.startswith("did you mean") else ""
        raise UsageError(f"{where}: {first.message}{_more(problems)}",
                         hint="; ".join(h for h in (spelling, hint) if h)) from None


def first_problem_error(problems: list[Problem], fallback_hint: str = "", prefix: str = "") -> UsageError:
    """The exception a command raises for problems: the first at its place, and how many more there are."""
    first = problems[0]
    return UsageError(f"{prefix}{first.location()}: {first.message}{_more(problems)}",
                      hint=first.hint or fallback_hint)


def _more(problems: list[Problem]) -> str:
    return f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""


def _to_problem(model: type[BaseModel], doc: Doc, err: Any, rule: str, base: str) -> Problem:
    loc = [part for part in err["loc"] if not _is_union_tag(part)]
    pointer = base + "".join(f"/{escape(str(p))}" for p in loc)
    field = ".".join(str(p) for p in loc) or "(top level)"
    kind = err["type"]
    if kind == "extra_forbidden":
        message, hint = f"unknown key {field!r}", unknown_key_hint(str(loc[-1]), known_keys(model, loc[:-1]))
    elif kind == "missing":
        message, hint = f"missing required key {field!r}", "add it; see the JSON Schema in schemas/"
    else:
        message, hint = f"{field}: {err['msg']}", ""
        if "input" in err and not isinstance(err["input"], (dict, list)):
            message += f" (got {err['input']!r})"
    return doc.problem(pointer, rule, message, hint=hint)


def unknown_key_hint(key: str, known: list[str]) -> str:
    close = close_matches(key, known, n=1, cutoff=0.6)
    if close:
        return f"did you mean {close[0]!r}?"
    if known:
        return f"known keys here: {', '.join(sorted(known))}"
    return "remove it, or check its spelling against the JSON Schema in schemas/"


def known_keys(model: type[BaseModel], loc: list[Any]) -> list[str]:
    """The keys the model accepts at `loc` (a path of field names, list indexes and dict keys)."""
    types_here: list[Any] = [model]
    for part in loc:
        types_here = [t for here in types_here for t in _step(here, part)]
    return sorted({k for t in types_here if _is_model(t) for k in _field_keys(t)})


def _step(annotation: Any, part: Any) -> list[Any]:
    if _is_model(annotation):
        for name, info in annotation.model_fields.items():
            if part in (name, info.alias):
                return [info.annotation]
        return []
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if origin in (Union, types.UnionType):
        return [t for arg in args for t in _step(arg, part)]
    if origin in (list, tuple, set, frozenset) and args:
        return [args[0]]
    if origin is dict and len(args) == 2:
        return [args[1]]
    if origin is typing.Annotated:
        return _step(args[0], part)
    return []


def _field_keys(model: type[BaseModel]) -> list[str]:
    return [info.alias or name for name, info in model.model_fields.items()]


def _is_model(annotation: Any) -> bool:
    return isinstance(annotation, type) and issubclass(annotation, BaseModel)


def _is_union_tag(part: Any) -> bool:
    return isinstance(part, str) and bool(re.match(r"^(function-|tagged-union|literal\[|constrained-)", part))
