"""`tp validate`: check experiments, run requests and plugins; every problem at once."""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated

import typer


class Format(StrEnum):
    text = "text"
    json = "json"
    github = "github"
    sarif = "sarif"


def register(app: typer.Typer) -> None:
    app.command("validate", help="Check experiments, run requests and plugins (the pull-request check).")(validate)


def validate(
    targets: Annotated[list[str] | None, typer.Argument(help="Experiment names or file paths.")] = None,
    all_: Annotated[bool, typer.Option("--all", help="Everything in the lab (the default with no targets).")] = False,
    changed: Annotated[bool, typer.Option("--changed", help="Only what changed since --base.")] = False,
    base: Annotated[str | None, typer.Option("--base", help="Git ref for --changed; default the merge base "
                                                               "with the default branch.")] = None,
    fmt: Annotated[Format, typer.Option("--format", "-f", help="Output format.")] = Format.text,
    strict: Annotated[bool, typer.Option("--strict", help="Warnings fail too.")] = False,
) -> None:
    # lazy: tp builds only the invoked command, so only it pays for these
    import os
    from pathlib import Path

    from tuneplane.check import reporters
    from tuneplane.check.scope import scope_all, scope_for_args, scope_for_paths
    from tuneplane.check.validate import validate as run_validate
    from tuneplane.lab.load import load_lab
    from tuneplane.problems import has_errors

    lab = load_lab()
    if lab.settings is None and lab.doc is None and not lab.legacy:
        # lazy: tp builds only the invoked command, so only it pays for these
        from tuneplane.errors import UsageError

        first = lab.problems[0]
        raise UsageError(f"{first.location()}: {first.message}", hint=first.hint)
    if changed:
        # lazy: tp builds only the invoked command, so only it pays for these
        from tuneplane.lab.gitrepo import GitRepo

        scope = scope_for_paths(lab, GitRepo(lab.root).changed_files(base))
    elif targets and not all_:
        scope = scope_for_args(lab, targets)
    else:
        scope = scope_all(lab)
    problems = run_validate(lab, sorted(scope.experiments), sorted(scope.runs), plugins=sorted(scope.plugins))
    checked = scope.describe()
    typer.echo(reporters.FORMATS[fmt.value](problems, checked), nl=False)
    summary_file = os.environ.get("GITHUB_STEP_SUMMARY")
    if fmt is Format.github and summary_file:
        with Path(summary_file).open("a", encoding="utf-8") as fh:
            fh.write(reporters.markdown(problems, checked))
    if has_errors(problems, strict):
        raise typer.Exit(1)
