"""`tp migrate`: convert a StarForge lab to TunePlane formats, in place."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from tuneplane.cli.say import say
from tuneplane.constants import EXIT_PROBLEMS

if TYPE_CHECKING:  # the pipeline loads inside the command
    from tuneplane.problems import Problem


def register(app: typer.Typer) -> None:
    app.command("migrate", help="Convert a StarForge lab (starforge.yaml, forge locks, lab plugins) in place.")(migrate)


def migrate(
    directory: Annotated[Path, typer.Argument(help="Root of the StarForge lab.")] = Path("."),
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Show the plan; write nothing.")] = False,
) -> None:
    # lazy: tp builds only the invoked command, so only it pays for these
    from tuneplane.author.migrate import apply, checked, plan_migration, unconverted

    root = directory.resolve()
    plan = plan_migration(root)
    verb = "would write" if dry_run else "wrote"
    for rel in plan.writes:
        say.line(f"{verb} {rel}")
    for rel in plan.deletes:
        say.line(f"{'would remove' if dry_run else 'removed'} {rel}")
    if not dry_run:
        apply(root, plan)
    if plan.notes:
        say.line("\nto check:")
        for note in plan.notes:
            say.line(f"  - {note}")
    # every error `tp validate` would still report is in the list above or listed here
    left = checked(root, plan, applied=not dry_run)
    failed = unconverted(left)
    own = [p for p in left if p not in failed]
    _problems(f"\n{'would remain' if dry_run else 'left'} for you (tp validate; not StarForge formats):", own)
    _problems("\nnot converted (a StarForge form tp migrate does not know):", failed)
    say.line("\ndry run: nothing written" if dry_run else "\nnext: tp validate, then commit the result")
    if failed:
        done = "the rest of the lab would be converted" if dry_run else "the rest of the lab is converted"
        say.error(f"{len(failed)} StarForge form(s) above are not converted ({done}): fix them by hand")
        raise typer.Exit(EXIT_PROBLEMS)


def _problems(title: str, problems: list[Problem]) -> None:
    if not problems:
        return
    say.line(title)
    for problem in problems:
        say.line(f"  - {problem.location()}: {problem.rule}: {problem.message}")
        if problem.hint:
            say.line(f"      hint: {problem.hint}")
