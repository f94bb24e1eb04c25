"""The Typer app: the command modules wired together, built for one command or for all of them."""

from __future__ import annotations

from importlib import import_module

import typer

from tuneplane import __version__
from tuneplane.cli.main import COMMAND_MODULES, owner
from tuneplane.constants import EXIT_INTERRUPTED, EXIT_USAGE


def _version(value: bool) -> None:
    if value:
        typer.echo(f"tp {__version__}")
        raise typer.Exit()


def build_app(only: str | None = None) -> typer.Typer:
    """The Typer app; with `only`, just the module that registers that command (the fast path)."""
    app = typer.Typer(
        name="tp",
        help="TunePlane GitOps: ML training runs declared, checked and tracked in git.",
        no_args_is_help=True,
        add_completion=False,
        pretty_exceptions_enable=False,
        rich_markup_mode=None,
        context_settings={"help_option_names": ["-h", "--help"]},
    )

    @app.callback()
    def _root(
        version: bool = typer.Option(False, "--version", "-V", callback=_version, is_eager=True,
                                     help="Show the version and exit."),
    ) -> None:
        """TunePlane GitOps: ML training runs declared, checked and tracked in git."""

    for name in (only,) if only else COMMAND_MODULES:
        try:
            module = import_module(f"tuneplane.cli.cmd_{name}")
        except ModuleNotFoundError as exc:
            if exc.name != f"tuneplane.cli.cmd_{name}":
                raise
            continue  # a command not built yet
        module.register(app)
    return app


def run_typer(args: list[str]) -> int:
    """Run `args` through the Typer app that has only the invoked command built."""
    app = build_app(owner(args))
    try:
        # without standalone mode, Exit(n) comes back as n; the program is `tp` however it was started
        code = app(args=args, prog_name="tp", standalone_mode=False)
    except typer.Exit as exc:
        return exc.exit_code
    except typer.Abort:
        typer.echo("aborted", err=True)
        return EXIT_INTERRUPTED
    except Exception as exc:
        if _is_click_usage_error(exc):
            exc.show()  # type: ignore[attr-defined]
            return EXIT_USAGE
        raise
    return code if isinstance(code, int) else 0


def _is_click_usage_error(exc: BaseException) -> bool:
    """Click's own errors (bad option, unknown command); Typer may vendor Click, so match by class name."""
    return any(cls.__name__ == "ClickException" for cls in type(exc).__mro__)
