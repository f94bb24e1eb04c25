"""A Python command line the launcher can run in its own interpreter (so the plugins it installed are in
effect), and the same entry re-entering the launcher in a child. Standard library only."""

from __future__ import annotations

import os
import re
import runpy
import sys
from collections.abc import Sequence

from tuneplane.runtime.records import FrozenRecord

_PYTHON_NAME = re.compile(r"python(?P<ver>3(?:\.\d+)?)?")


class PythonEntry(FrozenRecord):
    """A Python command line this interpreter can run itself: `-m mod`, a script, or `-c code`."""

    kind: str  # module | file | code
    target: str
    args: list[str]
    unbuffered: bool = False


def _is_this_python(arg0: str) -> bool:
    m = _PYTHON_NAME.fullmatch(os.path.basename(arg0))
    if m is None or m["ver"] not in (None, "3", f"{sys.version_info[0]}.{sys.version_info[1]}"):
        return False
    if os.sep in arg0:
        # Same directory as ours, not merely the same binary: a venv's python and its base
        # interpreter resolve to one file but see different site-packages.
        return os.path.dirname(os.path.abspath(arg0)) == os.path.dirname(os.path.abspath(sys.executable))
    # A bare `python`/`python3` is the job's interpreter: the one running this launcher.
    return True


def python_entry(argv: Sequence[str]) -> PythonEntry | None:
    """Recognise `python [-u] [-B] (-m mod | -c code | file.py) args…`; None for anything else.

    Interpreter options that cannot be reproduced in a running interpreter (-O, -E, -I, -X, -W …)
    make it not an in-process entry, so it is exec'd with its exact meaning.
    """
    if not argv or not _is_this_python(argv[0]):
        return None
    return entry_after_interpreter(list(argv[1:]))


def entry_after_interpreter(rest: list[str]) -> PythonEntry | None:
    unbuffered = False
    while rest and rest[0] in ("-u", "-B", "-uB", "-Bu"):
        unbuffered = unbuffered or "u" in rest[0]
        rest = rest[1:]
    if not rest:
        return None
    head = rest[0]
    if head in ("-m", "-c") and len(rest) >= 2:
        return PythonEntry("module" if head == "-m" else "code", rest[1], rest[2:], unbuffered)
    if head.startswith("-") and head != "-":
        return None
    if head == "-":
        return None
    return PythonEntry("file", head, rest[1:], unbuffered)


def run_python_entry(entry: PythonEntry) -> None:
    """Run the entry in this interpreter as `python` would, as `__main__`."""
    if entry.unbuffered:
        for stream in (sys.stdout, sys.stderr):
            reconfigure = getattr(stream, "reconfigure", None)
            if reconfigure is not None:
                reconfigure(write_through=True)
    if entry.kind == "module":
        sys.argv = [entry.target, *entry.args]
        if os.getcwd() not in sys.path:
            sys.path.insert(0, os.getcwd())
        runpy.run_module(entry.target, run_name="__main__", alter_sys=True)
    elif entry.kind == "code":
        sys.argv = ["-c", *entry.args]
        exec(compile(entry.target, "<string>", "exec"), {"__name__": "__main__"})  # python -c
    else:
        script = os.path.abspath(entry.target)
        sys.argv = [entry.target, *entry.args]
        sys.path.insert(0, os.path.dirname(script))
        runpy.run_path(script, run_name="__main__")


def reentry_argv(entry: PythonEntry) -> list[str]:
    """This interpreter re-entering the launcher to run `entry` (plugins are installed in that process)."""
    head = ["-u"] if entry.unbuffered else []
    if entry.kind == "module":
        body = ["-m", entry.target]
    elif entry.kind == "code":
        body = ["-c", entry.target]
    else:
        body = [entry.target]
    return [sys.executable, *head, "-m", "tuneplane.launcher", *body, *entry.args]
