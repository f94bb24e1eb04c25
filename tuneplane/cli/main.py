"""`tp`: wires the command modules into one Typer app and maps exceptions to exit codes.

Command modules import only Typer and the standard library at module level; each command imports its
pipeline stages inside the function so `tp --help` never pays for pydantic, Jinja, kubernetes or git.
"""

from __future__ import annotations

import os
import sys
from importlib import import_module

import typer

from tuneplane import __version__

# Each module exposes `register(app)`; order is the order of `tp --help`.
COMMAND_MODULES = (
    "init",
    "new",
    "ls",
    "methods",
    "validate",
    "recipe",
    "migrate",
    "render",
    "lifecycle",
    "submit",
    "rerun",
    "job",
    "bot",
    "plugin",
    "ingest",
)
# Which module registers each top-level command (tests check this against what the modules register).
# Running one command builds only its module's Click command: building all of them (importing every
# command module and resolving every parameter annotation) was a fifth of `tp validate EXP`.
COMMAND_OWNERS = {name: name for name in COMMAND_MODULES if name != "lifecycle"} | {
    "export": "lifecycle", "eval": "lifecycle"}


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


def run(argv: list[str] | None = None) -> int:
    """Entry point: run the CLI, translate our exceptions into messages and exit codes."""
    # pydantic scans every installed distribution's entry points for plugins on first use (~10 ms of
    # a 150 ms command); tp uses none, so skip the scan in this process unless the user asked for one.
    os.environ.setdefault("PYDANTIC_DISABLE_PLUGINS", "__all__")
    # lazy: tp builds only the invoked command, so only it pays for these
    from tuneplane.errors import TunePlaneError

    app = build_app(_owner(sys.argv[1:] if argv is None else argv))
    try:
        code = app(args=argv, standalone_mode=False)  # without standalone mode, Exit(n) comes back as n
    except TunePlaneError as exc:
        typer.echo(f"error: {exc}", err=True)
        return _exit(exc.exit_code, argv)
    except typer.Exit as exc:
        return _exit(exc.exit_code, argv)
    except typer.Abort:
        typer.echo("aborted", err=True)
        return _exit(130, argv)
    except KeyboardInterrupt:
        typer.echo("interrupted", err=True)
        return _exit(130, argv)
    except Exception as exc:  # the one place that turns a bug into exit 3
        if _is_click_usage_error(exc):
            exc.show()  # type: ignore[attr-defined]
            return _exit(2, argv)
        if os.environ.get("TUNEPLANE_DEBUG"):
            raise
        typer.echo(f"internal error: {type(exc).__name__}: {exc}\n"
                   "  this is a bug in tp; rerun with TUNEPLANE_DEBUG=1 for the traceback and report it",
                   err=True)
        return _exit(3, argv)
    return _exit(code if isinstance(code, int) else 0, argv)


def _owner(args: list[str]) -> str | None:
    """The module owning the command in `args`, when the first argument names one."""
    return COMMAND_OWNERS.get(args[0]) if args else None


def _is_click_usage_error(exc: BaseException) -> bool:
    """Click's own errors (bad option, unknown command); Typer may vendor Click, so match by class name."""
    return any(cls.__name__ == "ClickException" for cls in type(exc).__mro__)


def _exit(code: int, argv: list[str] | None) -> int:
    if argv is None:
        sys.exit(code)
    return code
