"""`tp ls`: the lab's experiments with method, framework version and lock state."""

from __future__ import annotations

from typing import Annotated

import typer

from tuneplane.cli.say import say


def register(app: typer.Typer) -> None:
    app.command("ls", help="List experiments with their method, framework version and lock state.")(ls)


def ls(
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON (see the JSON outputs reference).")] = False,
) -> None:
    # lazy: tp builds only the invoked command, so only it pays for these
    from tuneplane.check.inventory import experiment_rows
    from tuneplane.lab.load import open_lab

    rows = experiment_rows(open_lab())
    if as_json:
        say.json(rows)
        return
    if not rows:
        say.line("no experiments yet: tp new NAME --method custom/custom")
        return
    # lazy: tp builds only the invoked command, so only it pays for these
    from tuneplane.cli.tables import table

    say.line(
        table(
            ["experiment", "method", "framework", "lock"],
            [[r["name"], r["method"], r["framework_version"], r["lock"]] for r in rows],
        )
    )
