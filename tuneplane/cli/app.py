"""The `tp` command line, declared once (Typer), with each command's module imported only when that
command runs, completes or shows its help.

`tp --help` lists the commands from `COMMANDS` (a name, the module that registers it, a one-line
help), so it imports no command module; `tp validate EXP` imports `cmd_validate` alone. A new
command is one line in `COMMANDS` and a `register(app)` in its module (tests/test_cli_main.py checks
the table against what each module registers).
"""

# No `from __future__ import annotations`: Typer reads the root callback's annotations, and resolving
# them from strings (typing.get_type_hints) costs every command.
import os
from collections.abc import Iterator, MutableMapping
from importlib import import_module
from typing import TYPE_CHECKING, Any

import typer
import typer.core
import typer.main
from typer._click import Command, Context, HelpFormatter

if TYPE_CHECKING:
    from typer._click.shell_completion import CompletionItem

from tuneplane import __version__
from tuneplane.cli.say import say
from tuneplane.constants import EXIT_INTERRUPTED, EXIT_USAGE

HELP = "TunePlane GitOps: ML training runs declared, checked and tracked in git."

# name: (module under tuneplane.cli, one-line help); the order is the order of `tp --help`
COMMANDS: dict[str, tuple[str, str]] = {
    "init": ("cmd_init", "Create a lab: tuneplane.yaml, folders, CI workflow, pre-commit hook, git."),
    "new": ("cmd_new", "Scaffold an experiment from a catalog recipe and lock it."),
    "ls": ("cmd_ls", "List experiments with their method, framework version and lock state."),
    "methods": ("cmd_methods", "List catalog methods, or show one method's parameters."),
    "validate": ("cmd_validate", "Check experiments, run requests and plugins (the pull-request check)."),
    "migrate": ("cmd_migrate", "Convert a StarForge lab (starforge.yaml, forge locks, lab plugins) in place."),
    "render": (
        "cmd_render",
        "Show the Kubernetes manifests or Slurm batch script a run request becomes (or their diff).",
    ),
    "export": ("cmd_lifecycle", "Render the job that exports a checkpoint, for example to Hugging Face format."),
    "eval": ("cmd_lifecycle", "Render the job that evaluates a checkpoint on held-out data."),
    "submit": ("cmd_submit", "Check a run, write runs/EXP/<run-id>.yaml and commit it; --local runs it here."),
    "rerun": ("cmd_rerun", "Request a run again: same overrides, inputs, image and profile, at the same commit."),
    "sweep": (
        "cmd_sweep",
        "Sweep an experiment over parameter values: sweeps/NAME.yaml and one run request per "
        "trial, in one commit. `tp sweep extend|cancel|rerun|show NAME` change or show one.",
    ),
    "recipe": ("cmd_recipe", "Manage recipe locks."),
    "job": ("cmd_job", "Inspect and control runs: ls, status, logs, cancel, metrics, compare."),
    "bot": ("cmd_bot", "The CI bot: submit merged run requests and write status back into git."),
    "cluster": (
        "cmd_cluster",
        "What the cluster needs for this lab (YAML for kubectl apply -f -): rbac, storage, sdk, ingest.",
    ),
    "plugin": ("cmd_plugin", "Algorithm plugins: scaffold, validate, lock."),
    "ingest": ("cmd_ingest", "The metrics ingest receiver."),
}


def load_module_commands(module: str) -> dict[str, Command]:
    """The Click commands a command module registers, by name (its module imported now)."""
    sub = typer.Typer(add_completion=False, rich_markup_mode=None, pretty_exceptions_enable=False)
    import_module(f"tuneplane.cli.{module}").register(sub)
    return dict(typer.main.get_group(sub).commands)


class LazyCommands(MutableMapping[str, Command]):
    """The root group's commands: looking one up imports its module alone; going through all of
    them (the command reference's generator) imports every module, in the order of `COMMANDS`."""

    def __init__(self) -> None:
        self.built: dict[str, Command] = {}

    def __getitem__(self, name: str) -> Command:
        if name not in self.built and name in COMMANDS:
            for found, command in load_module_commands(COMMANDS[name][0]).items():
                self.built.setdefault(found, command)
        return self.built[name]

    def __setitem__(self, name: str, command: Command) -> None:
        self.built[name] = command

    def __delitem__(self, name: str) -> None:
        del self.built[name]

    def __iter__(self) -> Iterator[str]:
        return iter([*COMMANDS, *(n for n in self.built if n not in COMMANDS)])

    def __len__(self) -> int:
        return len(set(COMMANDS) | set(self.built))


class LazyGroup(typer.core.TyperGroup):
    """The root group: commands come from `COMMANDS`, each built on first use."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.commands = LazyCommands()

    def list_commands(self, ctx: Context) -> list[str]:
        return list(COMMANDS)

    def get_command(self, ctx: Context, cmd_name: str) -> Command | None:
        return self.commands.get(cmd_name)

    def _main_shell_completion(
        self, ctx_args: MutableMapping[str, object], prog_name: str, complete_var: str | None = None
    ) -> None:
        """Typer's completion classes (its bash, zsh and fish answers) are registered only when a
        completion is asked for: every other run of `tp` skips them."""
        if os.environ.get(complete_var or COMPLETE_VAR):
            from typer._completion_classes import completion_init  # lazy: only a completion needs it

            completion_init()
        super()._main_shell_completion(ctx_args, prog_name, complete_var)

    def parse_args(self, ctx: Context, args: list[str]) -> list[str]:
        """`tp --install-completion` and `tp --show-completion` alone are for the shell `tp` runs under
        (Typer's vendored Click has no option whose value may be left out)."""
        if args and args[-1] in ("--show-completion", "--install-completion"):
            args = [*args, DETECT]
        return super().parse_args(ctx, args)

    def format_commands(self, ctx: Context, formatter: HelpFormatter) -> None:
        """The command list from the table: `tp --help` imports no command module."""
        with formatter.section("Commands"):
            formatter.write_dl([(name, text) for name, (_module, text) in COMMANDS.items()])

    def shell_complete(self, ctx: Context, incomplete: str) -> "list[CompletionItem]":
        """`tp <Tab>`: the command names from the table, with their help, importing no command module."""
        from typer._click.shell_completion import CompletionItem  # lazy: only a completion needs it

        if incomplete.startswith("-"):
            return super().shell_complete(ctx, incomplete)
        return [
            CompletionItem(name, help=text) for name, (_module, text) in COMMANDS.items() if name.startswith(incomplete)
        ]


def _version(value: bool) -> None:
    if value:
        say.line(f"tp {__version__}")
        raise typer.Exit()


SHELLS = ("bash", "zsh", "fish")
DETECT = "detect"  # the shell `tp` runs under
COMPLETE_VAR = "_TP_COMPLETE"  # what the completion scripts set when they ask `tp` for candidates


def _shell(value: str) -> str:
    """The shell named, or the one `tp` runs under."""
    # lazy: only the completion options need Typer's completion support
    from typer._completion_shared import _get_shell_name

    shell = (_get_shell_name() or "") if value == DETECT else value
    if shell not in SHELLS:
        raise typer.BadParameter(
            f"no completion for shell {shell or '(not detected)'!r}; name one of {', '.join(SHELLS)}"
        )
    return shell


def _show_completion(value: str | None) -> None:
    if value is not None:
        from typer._completion_shared import get_completion_script  # lazy: as above

        say.line(get_completion_script(prog_name="tp", complete_var=COMPLETE_VAR, shell=_shell(value)))
        raise typer.Exit()


def _install_completion(value: str | None) -> None:
    if value is not None:
        from typer._completion_shared import install  # lazy: as above

        shell, path = install(shell=_shell(value), prog_name="tp", complete_var=COMPLETE_VAR)
        say.note(f"{shell} completion installed in {path}; it takes effect in a new shell")
        raise typer.Exit()


def build_app() -> typer.Typer:
    """The Typer app of `tp`, with shell completion (`--install-completion`, `--show-completion`)."""
    app = typer.Typer(
        name="tp",
        cls=LazyGroup,
        add_completion=False,  # the completion options are the root's own: they take the shell by name
        help=HELP,
        no_args_is_help=True,
        pretty_exceptions_enable=False,
        rich_markup_mode=None,
        context_settings={"help_option_names": ["-h", "--help"]},
    )

    @app.callback()
    def _root(
        version: bool = typer.Option(
            False, "--version", "-V", callback=_version, is_eager=True, help="Show the version and exit."
        ),
        show: str | None = typer.Option(
            None,
            "--show-completion",
            metavar="[SHELL]",
            callback=_show_completion,
            is_eager=True,
            expose_value=False,
            help="Print the completion script for SHELL (bash, zsh, fish; default this shell).",
        ),
        install: str | None = typer.Option(
            None,
            "--install-completion",
            metavar="[SHELL]",
            callback=_install_completion,
            is_eager=True,
            expose_value=False,
            help="Install completion for SHELL (default this shell).",
        ),
    ) -> None:
        """TunePlane GitOps: ML training runs declared, checked and tracked in git."""

    return app


def run_typer(args: list[str]) -> int:
    """Run `args` through the `tp` command line; the exit code."""
    command = typer.main.get_command(build_app())
    try:
        # without standalone mode, Exit(n) comes back as n; the program is `tp` however it was started
        code = command.main(args=args, prog_name="tp", standalone_mode=False)
    except typer.Exit as exc:
        return exc.exit_code
    except typer.Abort:
        say.note("aborted")
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
