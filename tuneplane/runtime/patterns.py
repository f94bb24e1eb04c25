"""Regular expressions compiled on first use.

Compiling is most of what importing a module with a few patterns costs, and a command pays it for
every pattern of every module it imports, matched or not (`tp validate EXP` imports the image,
parameter and migration checks but matches few of their patterns). `lazy_pattern` gives a function
that compiles once, when first called; `compiled_on_first_use` does the same for a library's own
module-level patterns while it is imported. Standard library only: the job side may use it too.
"""

from __future__ import annotations

import re
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from functools import cache
from typing import Any


def lazy_pattern(regex: str, flags: int = 0) -> Callable[[], re.Pattern[str]]:
    """`pattern()` is `re.compile(regex, flags)`, compiled the first time it is called."""

    @cache
    def pattern() -> re.Pattern[str]:
        return re.compile(regex, flags)

    return pattern


class DeferredPattern:
    """Stands for `re.compile(pattern, flags)`: compiled when one of its attributes (`match`,
    `search`, `pattern`, ...) is first read, and that compiled pattern answers from then on. Two
    threads reading it first at once may both compile it, to the same pattern."""

    __slots__ = ("_args", "_compiled")

    def __init__(self, pattern: str | bytes, flags: int) -> None:
        self._args = (pattern, flags)
        self._compiled: re.Pattern[Any] | None = None

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):  # its own slots before they are set (a copy being made): not the pattern's
            raise AttributeError(name)
        return getattr(self.compiled(), name)

    def __reduce__(self) -> tuple[Any, ...]:
        """Copied or pickled as the compiled pattern it stands for."""
        return (_COMPILE, self._args)

    def compiled(self) -> re.Pattern[Any]:
        if self._compiled is None:
            self._compiled = _COMPILE(*self._args)
        return self._compiled

    def __repr__(self) -> str:
        return f"DeferredPattern({self._args[0]!r}, {self._args[1]!r})"


_COMPILE = re.compile
_SWAPPING = threading.RLock()  # one block at a time swaps `re.compile` (a block may hold another)


@contextmanager
def compiled_on_first_use(package: str) -> Iterator[None]:
    """While the block imports `package`, a `re.compile` called by the package's own modules, in
    the thread running the block, returns a `DeferredPattern`.

    PyYAML compiles patterns when it is imported that its C parser, the one tp reads with, never
    matches (the pure-Python reader's check for unprintable characters, the costliest, and the
    constructor's timestamp); every `tp` command that reads YAML paid for them (`bench/validate.py`).
    Any other caller of `re.compile` (another module, another thread) gets a compiled pattern as
    always, so nothing outside the package can receive a stand-in where a `re.Pattern` is expected;
    the package's own code only calls methods of its patterns, which a stand-in forwards. A package
    imported before the block is left as it is."""
    owner = threading.get_ident()

    def deferring(pattern: Any, flags: int = 0) -> Any:
        caller = sys._getframe(1).f_globals.get("__name__", "")
        ours = caller == package or caller.startswith(package + ".")
        if ours and threading.get_ident() == owner and isinstance(pattern, (str, bytes)):
            return DeferredPattern(pattern, flags)
        return previous(pattern, flags)

    with _SWAPPING:
        previous = re.compile
        re.compile = deferring
        try:
            yield
        finally:
            re.compile = previous
