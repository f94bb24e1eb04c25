"""Rules `code-python-syntax`, `code-shell-syntax`: the job's code parses (errors).

Every `.py` under the experiment and under the lab's shared code compiles, and every `.sh`/`.bash`
passes `bash -n`, so a missing `)` fails the pull request instead of the job an hour later.
Passing: `print("hello")`. Failing: `print("hello"` (`'(' was never closed`), `if true; then` without `fi`.

Python is parsed by the interpreter tp runs under. A tp older than Python 3.12 cannot read 3.12's new
syntax (`type X = …`, `def f[T]()`, `class C[T]:`, f-strings with nested quotes): there, an error on a
line that holds one of those forms is a warning naming the interpreter (the job's own Python may be
newer), and every other error stays an error. Shell scripts are checked by a function the
caller hands in (the check stages start no process); without one they are not checked.
"""

from __future__ import annotations

import ast
import sys
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path

from tuneplane.check.rules.context import ExperimentContext
from tuneplane.check.rules.lint import MAX_LINT_BYTES, code_files
from tuneplane.lab.load import Lab
from tuneplane.problems import Problem, Severity
from tuneplane.runtime.patterns import lazy_pattern

ShellCheck = Callable[[Path], "tuple[int, str] | None"]
SHELL_SUFFIXES = (".sh", ".bash")
NEW_GRAMMAR = (3, 12)
# lines Python 3.12 reads and 3.11 does not: a `type` alias, type parameters, an f-string (PEP 701)
_NEWER_FORMS = lazy_pattern(
    r"\s*(type\s+\w+\s*[=\[]|(async\s+)?def\s+\w+\s*\[|class\s+\w+\s*\[)"
    r"|.*(?<![\w])[rRbB]?[fF][rR]?['\"]"
)


def check(ctx: ExperimentContext) -> Iterator[Problem]:
    yield from check_tree(ctx.dir, ctx.rel, ctx.shell_check)


def check_shared(lab: Lab, shell_check: ShellCheck | None) -> list[Problem]:
    """The same over the lab's shared code folders (they ship with every job)."""
    out: list[Problem] = []
    for folder in lab.config.shared_code:
        base = lab.root / folder
        if base.is_dir() and not base.is_symlink():
            out += check_tree(base, folder.rstrip("/"), shell_check)
    return out


def check_tree(base: Path, rel: str, shell_check: ShellCheck | None) -> Iterator[Problem]:
    for path in code_files(base):
        shown = f"{rel}/{path.relative_to(base).as_posix()}"
        if path.suffix == ".py":
            problem = python_syntax(path, shown)
            if problem is not None:
                yield problem
        elif path.suffix in SHELL_SUFFIXES and shell_check is not None:
            found = shell_check(path)
            if found is not None:
                line, message = found
                yield Problem(
                    shown,
                    line,
                    1 if line else 0,
                    "code-shell-syntax",
                    f"bash -n: {message}",
                    hint="the job runs this script with bash, which stops at this line: fix the "
                    "syntax (`bash -n FILE` shows the same)",
                )


def python_syntax(path: Path, shown: str) -> Problem | None:
    try:
        if path.stat().st_size > MAX_LINT_BYTES:
            return None
        source = path.read_bytes()
    except OSError:
        return None
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # invalid escape sequences are the job's warnings, not errors
            ast.parse(source, filename=shown)
    except SyntaxError as exc:
        return _syntax_problem(shown, exc)
    except ValueError as exc:  # source with a NUL byte
        return Problem(
            shown,
            0,
            0,
            "code-python-syntax",
            f"Python cannot read this file: {exc}",
            hint="remove the NUL bytes, or keep binary data out of .py files",
        )
    return None


def _syntax_problem(shown: str, exc: SyntaxError) -> Problem:
    message = exc.msg or "invalid syntax"
    line, col = exc.lineno or 0, exc.offset or 0
    definite = (
        sys.version_info >= NEW_GRAMMAR or isinstance(exc, IndentationError) or not _NEWER_FORMS().match(exc.text or "")
    )
    if definite:
        return Problem(
            shown,
            line,
            max(col, 1) if line else 0,
            "code-python-syntax",
            f"SyntaxError: {message}",
            hint="Python stops at this line before the job trains: fix the syntax "
            "(`python -m py_compile FILE` shows the same)",
        )
    version = ".".join(map(str, sys.version_info[:2]))
    return Problem(
        shown,
        line,
        max(col, 1) if line else 0,
        "code-python-syntax",
        f"Python {version}, which tp runs under, cannot parse this: {message}",
        severity=Severity.WARNING,
        hint=f"if it is syntax of a newer Python the job's image has, ignore this; else fix it "
        f"(tp under Python {NEW_GRAMMAR[0]}.{NEW_GRAMMAR[1]} or newer checks it exactly)",
    )
