"""The one error currency of validation: a Problem with its place, rule and hint."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum


class Severity(StrEnum):
    ERROR = "error"
    WARNING = "warning"


@dataclass(frozen=True, order=True)
class Problem:
    """One finding. `line`/`col` are 1-based; 0 means the whole file."""

    file: str
    line: int
    col: int
    rule: str
    message: str
    severity: Severity = Severity.ERROR
    pointer: str = ""
    hint: str = field(default="", compare=False)

    @property
    def is_error(self) -> bool:
        return self.severity is Severity.ERROR

    def location(self) -> str:
        return f"{self.file}:{self.line}:{self.col}" if self.line else self.file


def has_errors(problems: list[Problem], strict: bool = False) -> bool:
    return any(p.is_error or strict for p in problems)
