"""`tp validate` without Typer: the command every pull request, pre-commit hook and editor save runs.

Building Typer's command for it (importing Typer and Click, one pydantic TypeAdapter per option) was a
sixth of `tp validate EXP`. This module parses exactly the options `cmd_validate.validate` declares
(in a few lines: argparse's imports alone were 2 % of the command) and runs the same body. Anything it
does not accept as written (`--help`, an unknown or abbreviated option, a bad choice, a missing value)
goes to Typer instead, so every message about the command line is Typer's own.
tests/test_cli_fastpath.py checks that both parsers declare the same options and give the same output
and exit code. `tp bot …` is handed to `fastbot` (an idle bot run answered without Typer).
"""

from __future__ import annotations

import gc
import os
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING

from tuneplane.constants import EXIT_OK, EXIT_PROBLEMS

if TYPE_CHECKING:  # typing only: the fast path imports the pipeline lazily
    from tuneplane.lab.load import Lab
    from tuneplane.problems import Problem

FORMATS = ("text", "json", "github", "sarif")
FLAGS = {"--all": "all_", "--changed": "changed", "--strict": "strict"}  # option → parameter
VALUED = {"--base": "base", "--format": "fmt", "-f": "fmt"}


def command(args: list[str]) -> Callable[[], int] | None:
    """The command to run for `args` without Typer, or None when Typer should handle them."""
    if args[:1] == ["bot"]:
        # lazy: only `tp bot` has this path
        from tuneplane.cli.fastbot import command as bot_command

        return bot_command(args)
    if args[:1] != ["validate"]:
        return None
    parsed = parse(args[1:])
    if parsed is None:
        return None
    targets, options = parsed
    return lambda: validate(targets or None, **options)  # type: ignore[arg-type]


def parse(rest: list[str]) -> tuple[list[str], dict[str, object]] | None:
    """(targets, options) as Click reads `rest` for the validate command, or None for anything else:
    `--help`/`-h`, an unknown or abbreviated option, a flag given a value, a missing value, a value
    that looks like an option, a format that is not a choice, a value glued to `-f`."""
    targets: list[str] = []
    options: dict[str, object] = {"all_": False, "changed": False, "base": None, "fmt": "text", "strict": False}
    items = iter(rest)
    for item in items:
        if item == "--":
            targets += items
            break
        if not item.startswith("-") or item == "-":
            targets.append(item)
            continue
        name, glued, value = item.partition("=") if item.startswith("--") else (item, "", "")
        if name in FLAGS and not glued:
            options[FLAGS[name]] = True
            continue
        if name not in VALUED:
            return None
        if not glued:
            value = next(items, "")
            if not value or value.startswith("-"):
                return None
        if name != "--base" and value not in FORMATS:
            return None
        options[VALUED[name]] = value
    return targets, options


class _CollectorPaused:
    """Importing the pipeline (pydantic, PyYAML, the models) allocates a few hundred thousand objects
    that live as long as the process: the cyclic collector's ~50 passes over them found nothing and
    were 4 % of `tp validate EXP`. The first import in a process runs with the collector paused, and
    what it made is then frozen (left out of every later pass); validating runs with it as usual.
    A process that imported the pipeline before (a test, an embedding program) is left as it is."""

    def __enter__(self) -> None:
        self.paused = gc.isenabled() and "tuneplane.check.validate" not in sys.modules
        if self.paused:
            gc.disable()

    def __exit__(self, *exc: object) -> None:
        if self.paused:
            gc.freeze()
            gc.enable()


def validate(targets: list[str] | None, *, all_: bool = False, changed: bool = False,
             base: str | None = None, fmt: str = "text", strict: bool = False) -> int:
    """The body of `tp validate`: print the report, return the exit code (1 when it fails)."""
    with _CollectorPaused():
        # lazy: only the validate command pays for the pipeline
        from tuneplane.check import reporters
        from tuneplane.check.scope import scope_all, scope_for_args, scope_for_paths
        from tuneplane.check.validate import validate as run_validate
        from tuneplane.lab.load import load_lab
        from tuneplane.lab.shellsyntax import bash_syntax
        from tuneplane.problems import has_errors

    lab = load_lab()
    if lab.settings is None and lab.doc is None and not lab.legacy:
        lab.require_settings()
    if changed:
        # lazy: only --changed needs git
        from tuneplane.lab.gitrepo import GitRepo

        scope = scope_for_paths(lab, GitRepo(lab.root).changed_files(base))
    elif targets and not all_:
        scope = scope_for_args(lab, targets)
    else:
        scope = scope_all(lab)
    problems = run_validate(lab, sorted(scope.experiments), sorted(scope.runs), plugins=sorted(scope.plugins),
                            shell_check=bash_syntax)
    if changed:
        problems = sorted({*problems, *_status_problems(lab, base)})
    checked = scope.describe()
    sys.stdout.write(reporters.FORMATS[fmt](problems, checked))
    sys.stdout.flush()
    summary_file = os.environ.get("GITHUB_STEP_SUMMARY")
    if fmt == "github" and summary_file:
        with open(summary_file, "a", encoding="utf-8") as fh:
            fh.write(reporters.markdown(problems, checked))
    return EXIT_PROBLEMS if has_errors(problems, strict) else EXIT_OK


def _status_problems(lab: Lab, base: str | None) -> list[Problem]:
    """Rule `status-owned` on the run statuses the change touches (status/ is the bot's)."""
    from tuneplane.check.rules import status_rules  # lazy: as above
    from tuneplane.check.rules.status import StatusContext
    from tuneplane.lab.gitrepo import GitRepo
    from tuneplane.lab.gittrees import status_changes

    ctx = StatusContext(lab, status_changes(GitRepo(lab.root), base))
    return [p for rule in status_rules() for p in rule(ctx)] if ctx.changes else []
