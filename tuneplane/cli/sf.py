"""`sf`: StarForge's command, kept for the people and scripts that still type it.

`sf X` is `tp X`: it says so on standard error, then runs tp with the same arguments (a StarForge
command tp names differently is renamed; one tp has no counterpart for is refused with what to use),
so results, files and exit codes are tp's. What differs is the wording the StarForge edition's guide
promised: the messages it quotes in Chinese are said that way (`MESSAGES`).
"""

from __future__ import annotations

import re
import shlex
import sys

from tuneplane.cli.say import say
from tuneplane.constants import EXIT_USAGE

# StarForge commands that tp spells differently: (sf words) → (tp words)
RENAMED: dict[tuple[str, ...], tuple[str, ...]] = {("job", "stop"): ("job", "cancel")}
# StarForge commands of its console, which a GitOps lab does without, and what to do instead
NO_EQUIVALENT = {
    "login": "there is no console to log in to: runs are requested through git (`tp submit`)",
    "logout": "there is no console to log out of",
    "status": "use `tp job ls` for runs and their state",
    "clean": "run outputs live on the storage volume; remove them there",
    "serve": "the CI bot replaces the console: see `tp bot --help`",
    "admin": "administration is the lab's tuneplane.yaml and the cluster's RBAC (`tp cluster rbac`)",
    "dataset": "declare data sets under `datasets:` in tuneplane.yaml",
    "bench": "use an evalkit method: `tp methods evalkit/benchmark`",
}
# tp's message → the StarForge edition's words for it (the guide quotes these exactly)
MESSAGES: tuple[tuple[re.Pattern[str], str], ...] = (
    (re.compile(r"\b([\w-]+) entrypoint is missing or escapes the experiment directory"), r"\1 入口不存在或越界"),
    (
        re.compile(r"\b([\w-]+) external observability requires spec\.framework\.observability_url"),
        r"\1 external observability 要求 spec.framework.observability_url",
    ),
    (
        re.compile(r"custom adapter refuses ([\w-]+): custom/custom compiles only the train operation"),
        r"custom adapter 尚不支持 '\1'",
    ),
    (re.compile(r"no training command yet"), "还没填训练命令"),
)


def translate(text: str) -> str:
    """`text` in the StarForge edition's words where the guide quotes them; the rest as tp says it."""
    for pattern, words in MESSAGES:
        text = pattern.sub(words, text)
    return text


def tp_args(args: list[str]) -> list[str]:
    """The tp command line an sf command line stands for."""
    for sf_words, tp_words in RENAMED.items():
        if tuple(args[: len(sf_words)]) == sf_words:
            return [*tp_words, *args[len(sf_words) :]]
    return list(args)


def run(argv: list[str] | None = None) -> int:
    """Entry point of `sf`: say what it maps to, then run tp in the StarForge edition's words."""
    # lazy: `tp`'s own entry point, with everything it sets up
    from tuneplane.cli.main import run as tp_run

    args = sys.argv[1:] if argv is None else argv
    command = next((a for a in args if not a.startswith("-")), "")
    if command in NO_EQUIVALENT:
        say.error(f"`sf {command}` has no tp counterpart: {NO_EQUIVALENT[command]}")
        return _exit(EXIT_USAGE, argv)
    mapped = tp_args(args)
    say.note(f"sf is tp, StarForge's name kept for it: running `{shlex.join(['tp', *mapped])}`")
    say.translate = translate
    return _exit(tp_run(mapped), argv)


def _exit(code: int, argv: list[str] | None) -> int:
    if argv is None:
        sys.exit(code)
    return code
