"""`tp`: the entry point. It maps exceptions to exit codes and hands the command line to Typer (`app`),
which builds only the invoked command's module. Command modules import only Typer and the standard
library at module level; each command imports its pipeline stages inside the function so `tp --help`
never pays for pydantic, Jinja, kubernetes or git.
"""

from __future__ import annotations

import os
import sys
import types
from collections.abc import Callable

from tuneplane.cli.collector import collect_less_often
from tuneplane.cli.say import say
from tuneplane.constants import EXIT_INTERNAL, EXIT_INTERRUPTED, EXIT_PROBLEMS
from tuneplane.errors import TunePlaneError


def run(argv: list[str] | None = None) -> int:
    """Entry point: run the CLI, translate our exceptions into messages and exit codes. Without `argv`
    this process is `tp` (the console script, `python -m tuneplane`) and ends with the exit code."""
    if argv is None:
        collect_less_often()
    skip_pydantic_plugins()
    args = sys.argv[1:] if argv is None else argv
    return _exit(_guarded(lambda: _typer(args)), argv)


def skip_pydantic_plugins() -> None:
    """pydantic scans every installed distribution's entry points for plugins on first use, a cost that
    grows with the environment; tp uses none, so this process skips the scan unless the user asked for
    plugins.

    With every plugin disabled, pydantic still imports its plugin loader on the first model it
    builds, and the loader imports importlib.metadata (and email with it), which `tp validate EXP` would
    pay for on every run (bench/validate.py measures the command).
    Its one use in pydantic is `get_plugins()`, which then returns nothing; answer that without the
    import. tests/test_cli_main.py fails if pydantic starts to use the loader for anything else."""
    os.environ.setdefault("PYDANTIC_DISABLE_PLUGINS", "__all__")
    if os.environ.get("PYDANTIC_DISABLE_PLUGINS") != "__all__" or "pydantic.plugin._loader" in sys.modules:
        return
    loader = types.ModuleType("pydantic.plugin._loader", "tp: pydantic plugins are disabled in this process")
    loader.get_plugins = tuple  # type: ignore[attr-defined]  # `get_plugins()` → (): no plugins
    sys.modules[loader.__name__] = loader


def _typer(args: list[str]) -> int:
    # lazy: an error said before Typer loads (a missing dependency) is still said by `_guarded`
    from tuneplane.cli.app import run_typer

    return run_typer(args)


def _guarded(call: Callable[[], int]) -> int:
    """`call()`'s exit code, with our errors as messages and a bug as exit 3 (the one place for both)."""
    try:
        return call()
    except TunePlaneError as exc:
        say.error(str(exc))
        return exc.exit_code
    except KeyboardInterrupt:
        say.note("interrupted")
        return EXIT_INTERRUPTED
    except Exception as exc:
        if os.environ.get("TUNEPLANE_DEBUG"):
            raise
        missing = _missing_dependency(exc) or _no_output(exc)
        if missing is not None:
            if missing:  # empty: standard output's reader went away, and wants nothing more
                say.note(missing)
            return EXIT_PROBLEMS
        say.note(
            f"internal error: {type(exc).__name__}: {exc}\n"
            "  this is a bug in tp; rerun with TUNEPLANE_DEBUG=1 for the traceback and report it"
        )
        return EXIT_INTERNAL


def _no_output(exc: Exception) -> str | None:
    """What to say when the machine, not tp, stopped the command: nothing when standard output's reader
    went away (`tp ls | head`), the words for a full disk. None for anything else."""
    # lazy: only a failed write needs it
    from tuneplane.runtime.streams import NO_SPACE, quiet_stdout, stdout_closed

    if stdout_closed(exc):
        return ""
    if not isinstance(exc, OSError) or exc.errno not in NO_SPACE:
        return None
    if exc.filename:
        return f"error: {exc.strerror} writing {exc.filename}\n  hint: free some space and run the command again"
    quiet_stdout()  # a stream without a file name: tp's own output, which the exit would flush again
    return f"error: cannot write tp's output: {exc.strerror or exc}"


def _missing_dependency(exc: Exception) -> str:
    """What to say when this Python lacks one of tp's packages (an image holding the wheel alone): not a
    bug. Empty for anything else."""
    missing = (exc.name or "").partition(".")[0] if isinstance(exc, ModuleNotFoundError) else ""
    if not missing or missing == "tuneplane":
        return ""
    return (
        f"error: tp needs the Python package {missing!r}, which {sys.executable} cannot import\n"
        "  hint: install tp with its dependencies (pip install tuneplane); an image that only runs "
        "jobs needs none of them (tuneplane.report, tuneplane-launch)"
    )


def _exit(code: int, argv: list[str] | None) -> int:
    if argv is None:
        sys.exit(code)
    return code
