"""`tp new NAME --method FW/RECIPE`: scaffold an experiment from the catalog."""

from __future__ import annotations

from typing import Annotated

import typer

from tuneplane.cli.collector import PausedWhileLoading
from tuneplane.cli.say import say


def register(app: typer.Typer) -> None:
    app.command("new", help="Scaffold an experiment from a catalog recipe and lock it.")(new)


def new(
    name: Annotated[str, typer.Argument(help="Experiment name (letters, digits, . _ -).")],
    method: Annotated[str | None, typer.Option("--method", "-m", help="FRAMEWORK/RECIPE, see `tp methods`.")] = None,
    framework_version: Annotated[str | None, typer.Option("--framework-version", help="Runtime version key.")] = None,
    source: Annotated[str | None, typer.Option("--from", help="Start from an existing experiment.")] = None,
    root: Annotated[
        str | None,
        typer.Option(
            "--root",
            help="Experiment root to create it in, one of experiment_roots in tuneplane.yaml (default: the first).",
        ),
    ] = None,
) -> None:
    with PausedWhileLoading("tuneplane.author.scaffold"):
        # lazy: tp builds only the invoked command, so only it pays for these
        from tuneplane.author.scaffold import new_experiment
        from tuneplane.lab.load import open_lab

    lab = open_lab()
    path = new_experiment(lab, name, method, framework_version, source, root=root)
    say.line(f"created {lab.rel(path)}/")
    for p in sorted(path.rglob("*")):
        if p.is_file():
            say.line(f"  {p.relative_to(path).as_posix()}")
    say.line(f"next: edit it, then `tp validate {name}`")
