"""The one polling loop of the tests: ask until the answer is yes, or fail saying what never happened.

`wait_until` asks a predicate; `until` asks for a value and a test of it, and fails showing the last value.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def wait_until(
    predicate: Callable[[], T],
    timeout: float,
    interval: float = 0.05,
    message: str | Callable[[], str] = "",
) -> T:
    """Call `predicate` every `interval` seconds until it returns something true, and return that.

    When `timeout` seconds pass first, the test fails with `message`; a callable message is built
    only then, so it can show the state that was being waited on (a log, a status) as it was at the end.
    The predicate is asked once more after the deadline, so a slow machine that got there late passes.
    """
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() >= deadline:
            told = message() if callable(message) else message
            raise AssertionError(told or f"not true within {timeout} s: {predicate!r}")
        time.sleep(interval)


def until(what: Callable[[], T], ok: Callable[[T], bool], timeout: float, why: str, every: float = 0.01) -> T:
    """`what()` once `ok` holds of it, asked every `every` seconds; past `timeout` seconds the test fails
    with `why` and the last value, so the failure shows what was seen instead (a status, a log)."""
    seen: list[T] = []

    def holds() -> bool:
        seen[:] = [what()]
        return ok(seen[0])

    wait_until(holds, timeout, every, lambda: f"{why}: {seen[0]}")
    return seen[0]
