"""`tp recipe upgrade`: re-lock experiments against the current catalog."""

from __future__ import annotations

from typing import Annotated

import typer

from tuneplane.cli.say import say
from tuneplane.errors import UsageError

recipe_app = typer.Typer(help="Manage recipe locks.", no_args_is_help=True)


def register(app: typer.Typer) -> None:
    app.add_typer(recipe_app, name="recipe")


@recipe_app.command("upgrade", help="Rewrite recipe.lock.json of experiments to the current catalog.")
def upgrade(
    experiments: Annotated[list[str] | None, typer.Argument(help="Experiments to upgrade.")] = None,
    all_: Annotated[bool, typer.Option("--all", help="Every experiment of the lab.")] = False,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Show what would change; write nothing.")] = False,
    method: Annotated[
        str | None,
        typer.Option(
            "--method",
            metavar="FRAMEWORK/RECIPE",
            help="The recipe of an experiment that has no recipe.lock.json (else its config.yaml names it).",
        ),
    ] = None,
) -> None:
    # lazy: tp builds only the invoked command, so only it pays for these
    from tuneplane.author.upgrade import upgrade as run_upgrade
    from tuneplane.lab.load import open_lab

    lab = open_lab()
    if all_:
        names = lab.experiment_names()
    elif experiments:
        names = experiments
    else:
        raise UsageError("name the experiments to upgrade, or pass --all")
    results = run_upgrade(lab, names, dry_run, method=method)
    for r in results:
        if not r.changed:
            say.line(f"{r.experiment}: up to date ({r.method} {r.new_version})")
            continue
        verb = "would update" if dry_run else "updated"
        say.line(f"{r.experiment}: {verb} lock of {r.method}")
        for change in r.changes:
            say.line(f"    {change}")
    if dry_run and any(r.changed for r in results):
        say.line("dry run: nothing written")
