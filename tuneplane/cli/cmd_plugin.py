"""`tp plugin new | validate | lock`: scaffold, check and pin a lab's algorithm plugins."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from tuneplane.cli.say import say
from tuneplane.errors import ProblemsFound

if TYPE_CHECKING:
    from tuneplane.problems import Problem


def _echo_problems(problems: list[Problem]) -> None:
    for p in sorted(problems):
        say.line(f"{p.location()}: {p.severity.value}: {p.message} [{p.rule}]")
        if p.hint:
            say.line(f"  hint: {p.hint}")


def new(
    name: Annotated[str, typer.Argument(help="Plugin name (its directory and manifest name).")],
    directory: Annotated[
        Path | None, typer.Option("--dir", help="Create <DIR>/<NAME>/ instead of plugins/<NAME>/ in the current lab.")
    ] = None,
) -> None:
    """Scaffold an algorithm plugin: plugin.yaml and a module with install(params)."""
    # lazy: tp builds only the invoked command, so only it pays for these
    from tuneplane.author.plugin_scaffold import scaffold_plugin
    from tuneplane.lab.layout import PLUGINS_DIR
    from tuneplane.lab.load import open_lab

    parent = directory if directory is not None else open_lab().root / PLUGINS_DIR
    target = scaffold_plugin(parent, name)
    say.line(f"created {target}/ (plugin.yaml, {next(target.glob('*.py')).name})")
    say.line(
        f"next: edit install(), then `tp plugin validate {target}` and `tp plugin lock <experiment> <owner>/{name}`"
    )


def validate(
    directory: Annotated[Path, typer.Argument(help="The plugin directory (holding plugin.yaml).")],
) -> None:
    """Check a plugin as publishing would: schema, entrypoint, shadowing names, symlinks."""
    # lazy: tp builds only the invoked command, so only it pays for these
    from tuneplane.check.plugin_dirs import validate_plugin_dir

    problems = validate_plugin_dir(directory)
    _echo_problems(problems)
    errors = sum(p.is_error for p in problems)
    if errors:
        raise ProblemsFound(f"{directory}: {errors} error(s)")
    say.line(f"ok: {directory}" + (f" ({len(problems)} warning(s))" if problems else ""))


def lock(
    experiment: Annotated[str, typer.Argument(help="Experiment name (a directory under experiments/).")],
    ref: Annotated[
        str, typer.Argument(metavar="OWNER/NAME[@VERSION]", help="The lab plugin plugins/NAME/, locked under OWNER.")
    ],
) -> None:
    """Pin a lab plugin into experiments/EXPERIMENT/plugins.lock.json (version and digest)."""
    # lazy: tp builds only the invoked command, so only it pays for these
    from tuneplane.author.plugin_lock import lock_plugin
    from tuneplane.lab.load import open_lab

    result = lock_plugin(open_lab().root, experiment, ref)
    previous = result.previous
    change = (
        ""
        if previous is None
        else (" (unchanged)" if previous == result.entry else f" (was {previous.version} {previous.digest})")
    )
    say.line(f"locked {result.entry.ref} {result.entry.digest} in {result.path}{change}")


def register(app: typer.Typer) -> None:
    plugin_app = typer.Typer(name="plugin", help="Algorithm plugins: scaffold, validate, lock.", no_args_is_help=True)
    plugin_app.command("new")(new)
    plugin_app.command("validate")(validate)
    plugin_app.command("lock")(lock)
    app.add_typer(plugin_app, name="plugin")
