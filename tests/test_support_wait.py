"""`support.wait`: the suite's one polling loop, and `until` built on it, keep the contract the tests rely on."""

from __future__ import annotations

import pytest
from support.wait import until, wait_until


def test_until_returns_the_first_value_that_passes_its_test() -> None:
    values = iter([1, 2, 3, 4])
    assert until(lambda: next(values), lambda v: v >= 3, 60, "never three", every=0) == 3


def test_until_fails_with_why_and_the_last_value_it_saw() -> None:
    values = iter(range(100))
    with pytest.raises(AssertionError, match=r"^never negative: 0$"):
        until(lambda: next(values), lambda v: v < 0, 0, "never negative", every=0)


def test_wait_until_builds_its_message_only_when_it_fails() -> None:
    built: list[str] = []

    def message() -> str:
        built.append("built")
        return "never true"

    assert wait_until(lambda: "yes", 60, 0, message) == "yes" and built == []
    with pytest.raises(AssertionError, match=r"^never true$"):
        wait_until(lambda: "", 0, 0, message)
    assert built == ["built"]
