"""`tp validate`: check experiments, run requests and plugins; every problem at once.

Every pull request, pre-commit hook and editor save runs it, so it imports only what it uses: `tp`
builds this module's command alone (`cli.app`), and the pipeline loads with the collector paused.
"""

# No `from __future__ import annotations`: Typer reads the parameters' annotations, and resolving them
# from strings (typing.get_type_hints) was a third of building this command.
import os
from enum import StrEnum
from typing import TYPE_CHECKING, Annotated

import typer

from tuneplane.cli.collector import PausedWhileLoading
from tuneplane.cli.completion import experiment_names
from tuneplane.cli.say import say
from tuneplane.constants import EXIT_OK, EXIT_PROBLEMS

if TYPE_CHECKING:  # the pipeline loads inside the command, for start-up
    from tuneplane.lab.load import Lab
    from tuneplane.problems import Problem


class Format(StrEnum):
    text = "text"
    json = "json"
    github = "github"
    sarif = "sarif"


def register(app: typer.Typer) -> None:
    app.command("validate", help="Check experiments, run requests and plugins (the pull-request check).")(validate)


def validate(
    targets: Annotated[
        list[str] | None, typer.Argument(help="Experiment names or file paths.", autocompletion=experiment_names)
    ] = None,
    all_: Annotated[bool, typer.Option("--all", help="Everything in the lab (the default with no targets).")] = False,
    changed: Annotated[bool, typer.Option("--changed", help="Only what changed since --base.")] = False,
    base: Annotated[
        str | None,
        typer.Option("--base", help="Git ref for --changed; default the merge base with the default branch."),
    ] = None,
    fmt: Annotated[Format, typer.Option("--format", "-f", help="Output format.")] = Format.text,
    strict: Annotated[bool, typer.Option("--strict", help="Warnings fail too.")] = False,
) -> None:
    code = run(targets, all_=all_, changed=changed, base=base, fmt=fmt.value, strict=strict)
    if code:
        raise typer.Exit(code)


def run(
    targets: list[str] | None,
    *,
    all_: bool = False,
    changed: bool = False,
    base: str | None = None,
    fmt: str = "text",
    strict: bool = False,
) -> int:
    """The body of `tp validate`: print the report, return the exit code (1 when it fails)."""
    with PausedWhileLoading("tuneplane.check.validate"):
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
    changed_files: list[str] = []
    if changed:
        # lazy: only --changed needs git
        from tuneplane.lab.gitrepo import GitRepo

        changed_files = GitRepo(lab.root).changed_files(base)
        scope = scope_for_paths(lab, changed_files)
    elif targets and not all_:
        scope = scope_for_args(lab, targets)
    else:
        scope = scope_all(lab)
    problems = run_validate(
        lab, sorted(scope.experiments), sorted(scope.runs), plugins=sorted(scope.plugins), shell_check=bash_syntax
    )
    if changed:
        problems = sorted({*problems, *_status_problems(lab, base), *_budget_problems(lab, changed_files, base)})
    checked = scope.describe()
    report = reporters.FORMATS[fmt](problems, checked)
    if fmt == "text":
        say.text(report)  # coloured on a terminal
    else:  # for a program: never painted
        say.data(report)
    summary_file = os.environ.get("GITHUB_STEP_SUMMARY")
    if fmt == "github" and summary_file:
        with open(summary_file, "a", encoding="utf-8") as fh:
            fh.write(reporters.markdown(problems, checked))
    return EXIT_PROBLEMS if has_errors(problems, strict) else EXIT_OK


def _status_problems(lab: "Lab", base: str | None) -> "list[Problem]":
    """Rule `status-owned` on the run statuses the change touches (status/ is the bot's)."""
    from tuneplane.check.rules import status_rules  # lazy: only --changed reads what changed under status/
    from tuneplane.check.rules.status import StatusContext
    from tuneplane.lab.gitrepo import GitRepo
    from tuneplane.lab.gittrees import status_changes

    ctx = StatusContext(lab, status_changes(GitRepo(lab.root), base))
    return [p for rule in status_rules() for p in rule(ctx)] if ctx.changes else []


def _budget_problems(lab: "Lab", changed_files: list[str], base: str | None) -> "list[Problem]":
    """Rules `budget-exceeded` and `budget-unknown`: the change's new run requests against this month's budgets."""
    from tuneplane.constants import utc_moment
    from tuneplane.lab.gitrepo import GitRepo
    from tuneplane.runs import budget  # lazy: only --changed reads the statuses' GPU-hours

    repo = GitRepo(lab.root)
    ran = budget.ran_at_base(repo, base)
    author = os.environ.get(budget.AUTHOR_ENV, "").strip() or None  # the workflow's word, never the change's
    if skipped := budget.person_skipped(lab, author):
        say.note(skipped)
    statuses = budget.statuses_at_base(repo, base)  # what was spent: the bot's record, read only for a budget
    return budget.budget_problems(lab, budget.estimates(lab, changed_files, ran), utc_moment(), author, statuses)
