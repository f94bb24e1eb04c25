"""`tp validate`: check experiments, run requests and plugins; every problem at once."""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated

import typer

from tuneplane.cli.fastpath import validate as run


class Format(StrEnum):  # the same choices as tuneplane.cli.fastpath.FORMATS (a test checks)
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
    code = run(targets, all_=all_, changed=changed, base=base, fmt=fmt.value, strict=strict)
    if code:
        raise typer.Exit(code)
