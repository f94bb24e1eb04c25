"""The strict base model and the one function that turns a ValidationError into Problems."""

from __future__ import annotations

import re
from typing import Any, TypeVar

from pydantic import BaseModel, ConfigDict, ValidationError

from tuneplane.lab.yamlio import Doc, escape
from tuneplane.problems import Problem

NAME_RE = r"^[A-Za-z0-9][A-Za-z0-9._-]*$"
LAB_NAME_RE = r"^[A-Za-z0-9._-]+$"
DIGEST_RE = r"^sha256:[0-9a-f]{64}$"


class Strict(BaseModel):
    """Everything users write: unknown keys refused, values immutable once loaded."""

    # defer_build: a command validates a few of the many models; build each validator on first use
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True, defer_build=True)


M = TypeVar("M", bound=BaseModel)


def parse_model(model: type[M], doc: Doc, rule: str, pointer: str = "") -> tuple[M | None, list[Problem]]:
    """Validate `doc.data` (or the part at `pointer`) as `model`; every error becomes a positioned Problem."""
    data = doc.data
    try:
        return model.model_validate(data), []
    except ValidationError as exc:
        return None, [_to_problem(doc, err, rule, pointer) for err in exc.errors()]


def _to_problem(doc: Doc, err: Any, rule: str, base: str) -> Problem:
    loc = [part for part in err["loc"] if not _is_union_tag(part)]
    pointer = base + "".join(f"/{escape(str(p))}" for p in loc)
    field = ".".join(str(p) for p in loc) or "(top level)"
    kind = err["type"]
    if kind == "extra_forbidden":
        message, hint = f"unknown key {field!r}", _known_keys_hint(err)
    elif kind == "missing":
        message, hint = f"missing required key {field!r}", "add it; see the JSON Schema in schemas/"
    else:
        message, hint = f"{field}: {err['msg']}", ""
        if "input" in err and not isinstance(err["input"], (dict, list)):
            message += f" (got {err['input']!r})"
    return doc.problem(pointer, rule, message, hint=hint)


def _is_union_tag(part: Any) -> bool:
    return isinstance(part, str) and bool(re.match(r"^(function-|tagged-union|literal\[|constrained-)", part))


def _known_keys_hint(err: Any) -> str:
    return "remove it, or check its spelling against the JSON Schema in schemas/"
