"""The exceptions library code raises; only the CLI turns them into messages and exit codes.

Exit codes: 0 ok, 1 problems found, 2 usage or parse failure, 3 internal bug.
"""

from __future__ import annotations

from tuneplane.constants import EXIT_PROBLEMS, EXIT_USAGE


class TunePlaneError(Exception):
    """A failure the user can fix. `hint` says how."""

    exit_code = EXIT_USAGE

    def __init__(self, message: str, hint: str = "") -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint

    def __str__(self) -> str:
        return f"{self.message}\n  hint: {self.hint}" if self.hint else self.message


class UsageError(TunePlaneError):
    """Bad arguments, an unreadable lab, a refused request: exit 2."""


class RunNotFound(UsageError):
    """A run reference that names no run of the lab (a receiver may still hold its metrics)."""


class AmbiguousRun(UsageError):
    """A run reference that names several runs; `matches` lists them (as `lab.runs.RunKey`s)."""

    def __init__(self, message: str, hint: str = "", matches: list[object] | None = None) -> None:
        super().__init__(message, hint)
        self.matches = list(matches or [])


class ProblemsFound(TunePlaneError):
    """Validation found errors; the problems were already reported: exit 1."""

    exit_code = EXIT_PROBLEMS


class RunFailed(TunePlaneError):
    """A run ended in a failed phase: exit 1."""

    exit_code = EXIT_PROBLEMS
