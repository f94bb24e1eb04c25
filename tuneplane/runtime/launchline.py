"""The launch line of a train script: the `exec` that hands the job to the trainer. Standard library only.

A custom job runs `bash train.sh`; what the person wrote as their launch is the script's `exec`
command, which the job log shows first (the local backend's supervisor) and which `tp validate`
points at. The script is read as text, never run: a command continued over several lines with a
trailing backslash is one command, comments are dropped, and an `exec` that only redirects the
script's own output (`exec > >(tee log) 2>&1`) is not a launch.
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence

_COMMENT = re.compile(r"(^|\s)#")
_EXEC = re.compile(r"^\s*exec\s+(\S)")
# an `exec` whose first word is a redirection (`exec 2>&1`, `exec >log`, `exec {fd}<file`) runs nothing
_REDIRECTION = re.compile(r"^(\d*[<>&]|\{\w+\}[<>])")
MAX_SHOWN = 2000  # characters of a launch line a log repeats
MAX_SCRIPT_BYTES = 512 * 1024
# set by a backend that already wrote the launch line at the top of the job's log
SHOWN_ENV = "TUNEPLANE_LAUNCH_LINE_SHOWN"


def shell_commands(text: str) -> list[tuple[int, str]]:
    """(first line number, command) of each non-blank line, with continuations joined, comments dropped."""
    commands: list[tuple[int, str]] = []
    start, parts = 0, list[str]()
    for number, raw in enumerate(text.splitlines(), 1):
        line = strip_comment(raw)
        if not parts:
            start = number
        continued = line.rstrip().endswith("\\")
        parts.append(line.rstrip()[:-1].strip() if continued else line.strip())
        if not continued:
            command = " ".join(p for p in parts if p)
            if command:
                commands.append((start, command))
            parts = []
    if parts and any(parts):
        commands.append((start, " ".join(p for p in parts if p)))
    return commands


def launch_line(text: str) -> tuple[int, str] | None:
    """(line number, command) of the script's first `exec` that starts a program, else None."""
    for number, command in shell_commands(text):
        m = _EXEC.match(command)
        if m and not _REDIRECTION.match(command[m.start(1) :]):
            return number, command[:MAX_SHOWN]
    return None


def strip_comment(line: str) -> str:
    """A shell line without its comment (a `#` that starts a word), columns kept."""
    m = _COMMENT.search(line)
    return line[: m.start()] if m else line


def own_launch_line(argv: Sequence[str], work_dir: str) -> str | None:
    """`<script>:<line>: <launch>` when the job runs a person's own shell script (`bash <script>` in
    the job package), the first line its log shows; None for any other start or a script without one."""
    if len(argv) != 2 or os.path.basename(argv[0]) != "bash":
        return None
    script, work = os.path.realpath(argv[1]), os.path.realpath(work_dir)
    if not script.startswith(work + os.sep):
        return None
    try:
        if os.path.getsize(script) > MAX_SCRIPT_BYTES:
            return None
        with open(script, encoding="utf-8") as fh:
            found = launch_line(fh.read())
    except (OSError, UnicodeDecodeError):
        return None
    if found is None:
        return None
    rel = os.path.relpath(script, work).replace(os.sep, "/")
    return f"{rel}:{found[0]}: {found[1]}"
