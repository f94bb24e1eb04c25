"""`tp bot reconcile|sync` with nothing to do, answered without Typer.

The bot runs on every merge and on a schedule; most of those runs find nothing to do (`bot.idle`
decides that from three git commands). Building Typer's command for them (Typer, Click and a pydantic
TypeAdapter per option) was most of such a run. This module parses exactly the options
`cmd_bot.reconcile` and `cmd_bot.sync` declare, with the standard library, asks `idle`, and prints
what `cmd_bot` prints for an idle run. Any other case — `--help`, an option it does not take as
written, a run with work to do, anything that goes wrong — goes to Typer and the full run, so every
message about the command line and every real run is the Typer command's own.
tests/test_cli_fastbot.py checks that both parsers declare the same options and that both answer an
idle run the same way.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable

from tuneplane.errors import TunePlaneError

VERBS = ("reconcile", "sync")


class _Refused(Exception):
    """The arguments are not ones this parser takes as written: Typer handles them."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        raise _Refused(message)


def _parser(verb: str) -> _Parser:
    parser = _Parser(prog=f"tp bot {verb}", usage=f"tp bot {verb}", add_help=False, allow_abbrev=False)
    parser.add_argument("--push", action="store_true")
    parser.add_argument("--remote")
    parser.add_argument("--branch")
    parser.add_argument("--kubeconfig")
    parser.add_argument("--context")
    parser.add_argument("--in-cluster", dest="in_cluster", action="store_true")
    return parser


def command(args: list[str]) -> Callable[[], int] | None:
    """The command to run for `args` without Typer (an idle bot run), or None when Typer should run it."""
    if len(args) < 2 or args[0] != "bot" or args[1] not in VERBS:
        return None
    verb, rest = args[1], args[2:]
    if any(a in ("--help", "-h") for a in rest):
        return None
    try:
        parsed = _parser(verb).parse_args(rest)
    except _Refused:
        return None
    # lazy: only `tp bot` pays for these, and they import neither Typer nor the pipeline
    from tuneplane.bot.idle import idle
    from tuneplane.bot.report import IDLE_MESSAGE, BotOptions
    from tuneplane.lab.fs import find_lab_root

    opts = BotOptions(push=parsed.push, remote=parsed.remote, branch=parsed.branch,
                      kubeconfig=parsed.kubeconfig, context=parsed.context, in_cluster=parsed.in_cluster)
    try:
        report = idle(find_lab_root(), verb, opts)
    except (TunePlaneError, OSError):
        return None  # the full run says what is wrong
    if report is None:
        return None

    def answer() -> int:
        sys.stdout.write(IDLE_MESSAGE + "\n")
        sys.stdout.flush()
        return 0

    return answer
