"""The strict base model every file a person or the bot writes is parsed into, and its name patterns."""

import re
from collections.abc import Callable
from typing import Annotated, Any, TypeVar

from pydantic import AfterValidator, BaseModel, ConfigDict, Field

from tuneplane.constants import DEFAULT_RETRY_ON, NAME_PATTERN, AttemptReason
from tuneplane.runtime.patterns import lazy_pattern

# In JSON Schema and pydantic (Rust regex) `$` is the end of the text; Python's `re` also lets `$`
# match before a final newline, so Python code checks names with `name_error`, anchored with `\Z`.
NAME_RE = rf"^{NAME_PATTERN}$"
_LAB_NAME_PATTERN = r"[A-Za-z0-9._-]+"
LAB_NAME_RE = rf"^{_LAB_NAME_PATTERN}$"
DIGEST_RE = r"^sha256:[0-9a-f]{64}$"
GITHUB_LOGIN = r"[A-Za-z0-9][A-Za-z0-9-]{0,38}(\[bot\])?"  # a user's login, or an App's (`dependabot[bot]`)
MAX_NAME = 100  # a name becomes a directory, temp-file and object name: the filesystem allows 255 bytes
NAME = re.compile(NAME_PATTERN + r"\Z")  # a whole name, for Python code (`$` would allow a final newline)
_LAB_NAME = lazy_pattern(_LAB_NAME_PATTERN + r"\Z")


def name_error(name: str, what: str = "name", lab: bool = False) -> str:
    """Why `name` is not a valid name, or "" when it is (lab names may also start with . _ -)."""
    if len(name) > MAX_NAME:
        return f"{what} is {len(name)} characters long; at most {MAX_NAME} characters are allowed"
    if not (_LAB_NAME() if lab else NAME).match(name) or name in (".", ".."):
        return f"{what} {name!r} is not allowed"
    return ""


class Strict(BaseModel):
    """Everything users write: unknown keys refused, values immutable once loaded."""

    # defer_build: a command validates a few of the many models; build each validator on first use
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True, defer_build=True)


def empty_list() -> list[Any]:
    """The default factory of every list field. pydantic inspects each factory's signature, and for the
    builtin `list` that means tokenizing its text signature (a few ms of every command that builds a
    model); a plain function is read from its code object."""
    return []


def empty_dict() -> dict[Any, Any]:
    """The default factory of every mapping field (see `empty_list`)."""
    return {}


M = TypeVar("M", bound=BaseModel)


def defaults_of(model: type[M], **values: Any) -> Callable[[], M]:
    """The default factory of a field holding a model: `model(**values)`, made without running the
    model's own validator. Calling `model()` would first build that validator (the enclosing model's
    validator already checks what people write there), a few ms per model for every file that leaves
    the section out. The values are constants of this package; tests/test_models_base.py checks that
    each default validates and equals `model(**values)`."""

    def factory() -> M:
        return model.model_construct(**values)

    factory.__qualname__ = f"defaults_of({model.__name__})"
    return factory


def _ignored(_value: object) -> None:
    return None


# `$schema` in a JSON file tp writes (locks, status files): where an editor finds the file's JSON Schema
# inside the lab. Accepted and then forgotten: it says nothing about the run, so a file read back
# equals the one written, and digests and comparisons never see it.
EditorSchema = Annotated[
    str | None,
    AfterValidator(_ignored),
    Field(
        alias="$schema",
        exclude=True,
        description="Where an editor finds this file's JSON Schema (a path in the lab); ignored by tp.",
    ),
]


class RetryPolicy(Strict):
    """How often a run is tried, and after which endings (`retry:` of tuneplane.yaml, a profile or a run
    request; the most specific one wins whole). The engine's own requeues and restarts and the bot's
    resubmissions all count against `attempts`, and the count never resets."""

    attempts: int = Field(3, ge=1, le=100, description="Most attempts a run gets, the first included.")
    on: list[AttemptReason] = Field(
        default_factory=lambda: list(DEFAULT_RETRY_ON),
        description="The reasons an attempt is retried for; `Error` only when named.",
    )
    backoff_seconds: int = Field(60, ge=0, le=24 * 3600, description="Seconds before the bot submits the next attempt.")
