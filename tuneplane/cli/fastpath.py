"""`tp validate` without Typer: the command every pull request, pre-commit hook and editor save runs.

Building Typer's command for it (importing Typer and Click, one pydantic TypeAdapter per option) was a
sixth of `tp validate EXP`. This module parses exactly the options `cmd_validate.validate` declares, with
the standard library, and runs the same body. Anything it does not accept as written (`--help`, an
unknown or abbreviated option, a bad choice, a missing value) goes to Typer instead, so every message
about the command line is Typer's own. tests/test_cli_fastpath.py checks that both parsers declare the
same options and give the same output and exit code. `tp bot …` is handed to `fastbot` (an idle
bot run answered without Typer).
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable
from pathlib import Path

FORMATS = ("text", "json", "github", "sarif")


class _Refused(Exception):
    """The arguments are not ones this parser takes as written: Typer handles them."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        raise _Refused(message)


def _parser() -> _Parser:
    # a fixed usage: argparse would otherwise format one (regular expressions and all) on every parse
    parser = _Parser(prog="tp validate", usage="tp validate", add_help=False, allow_abbrev=False)
    parser.add_argument("targets", nargs="*")
    parser.add_argument("--all", dest="all_", action="store_true")
    parser.add_argument("--changed", action="store_true")
    parser.add_argument("--base")
    parser.add_argument("--format", "-f", dest="fmt", choices=FORMATS, default="text")
    parser.add_argument("--strict", action="store_true")
    return parser


def command(args: list[str]) -> Callable[[], int] | None:
    """The command to run for `args` without Typer, or None when Typer should handle them."""
    if args[:1] == ["bot"]:
        # lazy: only `tp bot` has this path
        from tuneplane.cli.fastbot import command as bot_command

        return bot_command(args)
    if args[:1] != ["validate"]:
        return None
    rest = args[1:]
    # `--help` anywhere, and `-h` as an option, are Typer's; so is a value glued to `-f` (`-fjson`),
    # which Click reads the same way but argparse's error text would differ on a bad one.
    if any(a in ("--help", "-h") for a in rest) or any(a.startswith("-f") and a != "-f" for a in rest):
        return None
    try:
        parsed = _parser().parse_intermixed_args(rest)
    except _Refused:
        return None
    return lambda: validate(parsed.targets or None, all_=parsed.all_, changed=parsed.changed,
                            base=parsed.base, fmt=parsed.fmt, strict=parsed.strict)


def validate(targets: list[str] | None, *, all_: bool = False, changed: bool = False,
             base: str | None = None, fmt: str = "text", strict: bool = False) -> int:
    """The body of `tp validate`: print the report, return the exit code (1 when it fails)."""
    # lazy: only the validate command pays for the pipeline
    from tuneplane.check import reporters
    from tuneplane.check.scope import scope_all, scope_for_args, scope_for_paths
    from tuneplane.check.validate import validate as run_validate
    from tuneplane.errors import UsageError
    from tuneplane.lab.load import load_lab
    from tuneplane.problems import has_errors

    lab = load_lab()
    if lab.settings is None and lab.doc is None and not lab.legacy:
        first = lab.problems[0]
        raise UsageError(f"{first.location()}: {first.message}", hint=first.hint)
    if changed:
        # lazy: only --changed needs git
        from tuneplane.lab.gitrepo import GitRepo

        scope = scope_for_paths(lab, GitRepo(lab.root).changed_files(base))
    elif targets and not all_:
        scope = scope_for_args(lab, targets)
    else:
        scope = scope_all(lab)
    problems = run_validate(lab, sorted(scope.experiments), sorted(scope.runs), plugins=sorted(scope.plugins))
    checked = scope.describe()
    sys.stdout.write(reporters.FORMATS[fmt](problems, checked))
    sys.stdout.flush()
    summary_file = os.environ.get("GITHUB_STEP_SUMMARY")
    if fmt == "github" and summary_file:
        with Path(summary_file).open("a", encoding="utf-8") as fh:
            fh.write(reporters.markdown(problems, checked))
    return 1 if has_errors(problems, strict) else 0
