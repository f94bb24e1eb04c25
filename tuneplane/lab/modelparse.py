"""The one converter from a pydantic `ValidationError` to our messages.

`parse_model` validates a positioned file and returns every error as a Problem at its line; files
that have no positions (flags on the command line, a status file the bot reads) go through
`validate_or_raise`, which turns the first problem into a UsageError. Both name an unknown key's
closest known key ("did you mean `learning_rate`?"), found from the model's own fields, and give a wrong
value a hint saying what to write. A file kind with advice of its own (plugin.yaml, plugins.lock.json)
passes `refine`, which sees each pydantic error beside the problem made of it.
"""

from __future__ import annotations

import re
import types
import typing
from collections.abc import Callable
from typing import TypeGuard, TypeVar, Union

from pydantic import BaseModel, ValidationError
from pydantic_core import ErrorDetails

from tuneplane.errors import UsageError
from tuneplane.lab.yamlio import Doc, escape
from tuneplane.problems import DID_YOU_MEAN, Problem, did_you_mean

M = TypeVar("M", bound=BaseModel)
_SCHEMAS = "the JSON Schema in schemas/"  # the generic pointer, left out where a better hint is given
# A file kind's own advice: the pydantic error and the problem the converter made of it → the problem to report.
Refine = Callable[[ErrorDetails, Problem], Problem]
# Where an error is: field names, list indexes and dict keys, as pydantic reports them.
Loc = list[int | str]


def parse_model(
    model: type[M], doc: Doc, rule: str, pointer: str = "", *, refine: Refine | None = None
) -> tuple[M | None, list[Problem]]:
    """Validate `doc.data` as `model`; every error becomes a positioned Problem (`pointer` prefixes them)."""
    try:
        return model.model_validate(doc.data), []
    except ValidationError as exc:
        return None, problems_from(exc, model, doc, rule, pointer, refine=refine)


def problems_from(
    exc: ValidationError, model: type[BaseModel], doc: Doc, rule: str, base: str = "", *, refine: Refine | None = None
) -> list[Problem]:
    pairs = [(err, _to_problem(model, doc, err, rule, base)) for err in exc.errors()]
    respelled = {_suggested_pointer(p) for err, p in pairs if err["type"] == "extra_forbidden"}
    # `nmae:` is also a missing `name`; the unknown key's "did you mean 'name'?" says both
    pairs = [(err, p) for err, p in pairs if not (err["type"] == "missing" and p.pointer in respelled)]
    return [p if refine is None else refine(err, p) for err, p in pairs]


def _suggested_pointer(problem: Problem) -> str:
    """The pointer of the key an unknown key's hint suggests (its sibling), or "" without a suggestion."""
    if not problem.hint.startswith(DID_YOU_MEAN):
        return ""
    suggested = problem.hint.removeprefix(DID_YOU_MEAN).removesuffix("?").strip("'\"")
    return problem.pointer.rsplit("/", 1)[0] + "/" + escape(suggested)


def validate_or_raise(model: type[M], data: object, where: str, hint: str) -> M:
    """Validate data that has no file positions; the first error becomes a UsageError naming `where`."""
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        problems = problems_from(exc, model, Doc(rel=where, data=data), "schema")
        first = problems[0]
        raise UsageError(f"{where}: {first.message}{_more(problems)}", hint=_spelling_and(first, hint)) from None


def first_problem_error(
    problems: list[Problem], fallback_hint: str = "", prefix: str = "", *, always: bool = False
) -> UsageError:
    """The exception a command raises for problems: the first at its place, and how many more there are.
    The hint is the problem's own, else `fallback_hint`; with `always`, the fallback stays beside the
    problem's own hint (a file only the bot writes is restored, not edited)."""
    first = problems[0]
    hint = _spelling_and(first, fallback_hint) if always else first.hint or fallback_hint
    return UsageError(f"{prefix}{first.location()}: {first.message}{_more(problems)}", hint=hint)


def _spelling_and(problem: Problem, hint: str) -> str:
    """The problem's own hint when it is about this key (a spelling, the field's form), then `hint`."""
    own = problem.hint if problem.hint and _SCHEMAS not in problem.hint else ""
    return "; ".join(h for h in (own, hint) if h)


def _more(problems: list[Problem]) -> str:
    return f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""


def _to_problem(model: type[BaseModel], doc: Doc, err: ErrorDetails, rule: str, base: str) -> Problem:
    loc = [part for part in err["loc"] if not _is_union_tag(part)]
    pointer = base + "".join(f"/{escape(str(p))}" for p in loc)
    field = ".".join(str(p) for p in loc) or "(top level)"
    kind = err["type"]
    if kind == "extra_forbidden":
        message, hint = f"unknown key {field!r}", unknown_key_hint(str(loc[-1]), known_keys(model, loc[:-1]))
    elif kind == "missing":
        message, hint = f"missing required key {field!r}", f"add it; see {_SCHEMAS}"
    else:
        key = str(loc[-1]) if loc else ""
        described = field_description(model, loc)
        message, hint = f"{field}: {error_reason(err, described)}", value_hint(err, key, described)
    return doc.problem(pointer, rule, message, hint=hint)


def field_description(model: type[BaseModel], loc: Loc) -> str:
    """The description the model gives the field at `loc` ("NAME or NAME:TOTAL_GPUS."), or ""."""
    if not loc:
        return ""
    parents: list[object] = [model]
    for part in loc[:-1]:
        parents = [t for here in parents for t in _step(here, part)]
    for parent in (m for here in parents for m in _models_in(here)):
        for name, info in parent.model_fields.items():
            if loc[-1] in (name, info.alias) and info.description:
                return info.description.rstrip(".")
    return ""


def error_reason(err: ErrorDetails, described: str = "") -> str:
    """pydantic's message for a wrong value, without its "Value error, " prefix, with the value it got.
    A value of the wrong form is told the key's form in words when the field `described` it (the hint
    gives it), its pattern otherwise, never pydantic's "String should match pattern"."""
    if err["type"] == "string_pattern_mismatch" and "input" in err:
        pattern = (err.get("ctx") or {}).get("pattern", "")
        if described or not pattern:
            return f"{err['input']!r} does not have the form this key takes"
        return f"{err['input']!r} does not match `{pattern}`"
    message = str(err["msg"]).removeprefix("Value error, ")
    if "input" in err and not isinstance(err["input"], (dict, list)) and err["type"] != "value_error":
        message += f" (got {err['input']!r})"
    return message


_WRITE = {  # what a value of each kind is written as, by the error type pydantic reports
    "int": "a whole number, e.g. `{key}: 4`",
    "float": "a number, e.g. `{key}: 0.5`",
    "bool": "true or false",
    "dict": "a mapping (indented `key: value` lines)",
    "list": "a list (`- item` lines, or `[a, b]`)",
    "string": "text, in quotes if it looks like a number",
    "model": "a mapping of the keys this section takes",
}


def value_hint(err: ErrorDetails, key: str, described: str = "") -> str:
    """How to write the value a wrong-value error is about (the field's own description first); never empty."""
    kind = str(err["type"])
    context = err.get("ctx") or {}
    if kind == "string_type" and isinstance(err.get("input"), int | float) and not isinstance(err["input"], bool):
        return f'quote it: {key}: "{err["input"]}"'
    if kind in ("literal_error", "enum") and "expected" in context:
        return f"write one of {context['expected']}"
    if described and (kind == "string_pattern_mismatch" or kind.endswith(("_type", "_parsing"))):
        return f"{key}: {described}"
    if kind == "string_pattern_mismatch":
        return f"write it in the form {_SCHEMAS} gives for this key"
    for prefix, what in _WRITE.items():
        if kind.startswith(prefix + "_"):
            return "write " + what.format(key=key or "key")
    return f"see {_SCHEMAS} for what this key takes"


def unknown_key_hint(key: str, known: list[str]) -> str:
    if hint := did_you_mean(key, known):
        return hint
    if known:
        return f"known keys here: {', '.join(sorted(known))}"
    return f"remove it, or check its spelling against {_SCHEMAS}"


def known_keys(model: type[BaseModel], loc: Loc) -> list[str]:
    """The keys the model accepts at `loc` (a path of field names, list indexes and dict keys)."""
    types_here: list[object] = [model]
    for part in loc:
        types_here = [t for here in types_here for t in _step(here, part)]
    return sorted({k for here in types_here for t in _models_in(here) for k in _field_keys(t)})


def _models_in(annotation: object) -> list[type[BaseModel]]:
    """The models an annotation stands for: `Bindings | None` is Bindings, `Annotated[M, …]` is M."""
    if _is_model(annotation):
        return [annotation]
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if origin in (Union, types.UnionType):
        return [m for arg in args for m in _models_in(arg)]
    if origin is typing.Annotated:
        return _models_in(args[0])
    return []


def _step(annotation: object, part: int | str) -> list[object]:
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


def _is_model(annotation: object) -> TypeGuard[type[BaseModel]]:
    return isinstance(annotation, type) and issubclass(annotation, BaseModel)


def _is_union_tag(part: int | str) -> bool:
    return isinstance(part, str) and bool(re.match(r"^(function-|tagged-union|literal\[|constrained-)", part))
