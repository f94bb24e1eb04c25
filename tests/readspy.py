"""Runs `python -m tuneplane ARGS` and logs what it reads: every file opened under the lab's `status/`
and every git command it runs (the objects asked by id on its input, or by name in its arguments);
one that can print a status's contents (a `REV:status/…` argument, a patch, a `git show`) is flagged.

    python tests/readspy.py LOG ARGS...

The log (one JSON object per line) lets a test prove which status files a real bot run read, through
the real CLI, without strace: `{"open": path}` and `{"git": argv, "input": [lines], "content": true}`
(`content` only when flagged)."""

from __future__ import annotations

import builtins
import io
import json
import os
import runpy
import subprocess
import sys

LOG = ""
_real_open, _real_run = io.open, subprocess.run


def _note(entry: dict[str, object]) -> None:
    with _real_open(LOG, "a", encoding="utf-8") as out:
        out.write(json.dumps(entry) + "\n")


def _open(file, *args, **kwargs):  # type: ignore[no-untyped-def]
    if isinstance(file, str | os.PathLike) and "status" in os.fspath(file):
        _note({"open": os.path.abspath(os.fspath(file))})
    return _real_open(file, *args, **kwargs)


def _run(args, *rest, **kwargs):  # type: ignore[no-untyped-def]
    argv = [os.fspath(a) for a in args] if isinstance(args, list | tuple) else [str(args)]
    if argv[:1] == ["git"]:
        given = kwargs.get("input") or b""
        if isinstance(given, str):
            given = given.encode("utf-8", "replace")
        entry: dict[str, object] = {"git": argv[1:], "input": given.decode("ascii", "replace").split()}
        if _reads_content(argv[1:]):
            entry["content"] = True  # a command that prints file contents: a test decides whether it may
        _note(entry)
    return _real_run(args, *rest, **kwargs)


def _reads_content(argv: list[str]) -> bool:
    """Whether a git command can print a status file's contents by name or as a patch: a `REV:status/…`
    argument to a command that prints what it names (show, cat-file -p, diff, grep…), a patch (-p,
    --patch, -u), or a `git show` of a commit (a patch by default)."""
    verb = next((a for a in argv if not a.startswith("-") and "=" not in a), "")
    quiet = {"-e", "-t", "-s", "--no-patch", "--stat", "--name-only", "--name-status", "--quiet"}
    if verb not in PRINTS or any(a in quiet for a in argv):
        return False
    if any(":status/" in a or a.startswith(":status/") for a in argv):
        return True
    if any(a in ("-p", "-u", "--patch", "--patch-with-stat", "--patch-with-raw") for a in argv):
        return True
    return verb == "show" and not any(a.startswith(("--format", "--pretty")) for a in argv)


PRINTS = {
    "show",
    "cat-file",
    "diff",
    "diff-tree",
    "log",
    "whatchanged",
    "grep",
    "archive",
    "blame",
    "format-patch",
    "range-diff",
}


if __name__ == "__main__":  # imported by its own test for `_reads_content`
    LOG = sys.argv.pop(1)
    builtins.open = io.open = _open  # type: ignore[assignment]
    subprocess.run = _run  # type: ignore[assignment]
    sys.argv[0] = "tp"
    runpy.run_module("tuneplane", run_name="__main__", alter_sys=True)
