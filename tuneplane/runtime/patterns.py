"""Regular expressions compiled on first use.

Compiling is most of what importing a module with a few patterns costs, and a command pays it for
every pattern of every module it imports, matched or not (`tp validate EXP` imports the image,
parameter and migration checks but matches few of their patterns). `lazy_pattern` gives a function
that compiles once, when first called. Standard library only: the job side may use it too.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from functools import cache


def lazy_pattern(regex: str, flags: int = 0) -> Callable[[], re.Pattern[str]]:
    """`pattern()` is `re.compile(regex, flags)`, compiled the first time it is called."""

    @cache
    def pattern() -> re.Pattern[str]:
        return re.compile(regex, flags)

    return pattern
