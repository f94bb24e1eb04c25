"""The one error currency of validation: a Problem with its place, rule and hint."""

from __future__ import annotations

from collections.abc import Iterable
from enum import StrEnum

from tuneplane.runtime.records import FrozenRecord


class Severity(StrEnum):
    ERROR = "error"
    WARNING = "warning"


class Problem(FrozenRecord):
    """One finding. `line`/`col` are 1-based; 0 means the whole file. Equal, ordered and hashed by
    everything but the hint (problems are sorted and deduplicated); immutable."""

    __slots__ = ("file", "line", "col", "rule", "message", "severity", "pointer", "hint")
    _fields = __slots__
    file: str
    line: int
    col: int
    rule: str
    message: str
    severity: Severity
    pointer: str
    hint: str

    def __init__(
        self,
        file: str,
        line: int,
        col: int,
        rule: str,
        message: str,
        severity: Severity = Severity.ERROR,
        pointer: str = "",
        hint: str = "",
    ) -> None:
        self._set(file, line, col, rule, message, severity, pointer, hint)

    def _values(self) -> tuple[object, ...]:
        return (self.file, self.line, self.col, self.rule, self.message, self.severity, self.pointer)

    def __lt__(self, other: object) -> bool:
        if other.__class__ is not self.__class__:
            return NotImplemented
        assert isinstance(other, Problem)
        return self._values() < other._values()

    def __le__(self, other: object) -> bool:
        if other.__class__ is not self.__class__:
            return NotImplemented
        assert isinstance(other, Problem)
        return self._values() <= other._values()

    def __gt__(self, other: object) -> bool:
        if other.__class__ is not self.__class__:
            return NotImplemented
        assert isinstance(other, Problem)
        return self._values() > other._values()

    def __ge__(self, other: object) -> bool:
        if other.__class__ is not self.__class__:
            return NotImplemented
        assert isinstance(other, Problem)
        return self._values() >= other._values()

    @property
    def is_error(self) -> bool:
        return self.severity is Severity.ERROR

    def location(self) -> str:
        return location(self.file, self.line, self.col)


def location(file: str, line: int, col: int) -> str:
    """`file:line:col`, the one way a place in a file is written (just `file` for the whole file)."""
    return f"{file}:{line}:{col}" if line else file


def has_errors(problems: list[Problem], strict: bool = False) -> bool:
    return any(p.is_error or strict for p in problems)


DID_YOU_MEAN = "did you mean "


def did_you_mean(word: str, possibilities: Iterable[str], cutoff: float = 0.6, then: str = "") -> str:
    """The one "did you mean 'x'?" hint: the closest of `possibilities` to `word`, followed by `then`;
    just `then` when none is close enough."""
    return did_you_mean_each([word], possibilities, then, cutoff)


def did_you_mean_each(words: Iterable[str], possibilities: Iterable[str], then: str = "", cutoff: float = 0.6) -> str:
    """The hint for several unknown words at once: the closest possibility to each, in one "did you
    mean 'a', 'b'?", followed by `then`; just `then` when none is close."""
    known = list(possibilities)
    close = [c for word in words for c in close_matches(word, known, n=1, cutoff=cutoff)]
    if not close:
        return then
    return f"{DID_YOU_MEAN}{', '.join(map(repr, close))}?" + (f" {then}" if then else "")


def close_matches(word: str, possibilities: Iterable[str], n: int = 3, cutoff: float = 0.6) -> list[str]:
    """`difflib.get_close_matches`, for a "did you mean" hint: only a problem needs one, so difflib (and
    heapq) load when the first hint is written, not with every command that validates."""
    # lazy: a rare branch (a name that does not exist) is the only user
    import difflib

    return difflib.get_close_matches(word, list(possibilities), n, cutoff)
