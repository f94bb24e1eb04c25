"""Runs `python -m tuneplane ARGS` and logs what it reads: every file opened under the lab's `status/`
and every git object asked of `git cat-file` (by id on its input, or by name in its arguments).

    python tests/readspy.py LOG ARGS...

The log (one JSON object per line) lets a test prove which status files a real bot run read, through
the real CLI, without strace: `{"open": path}` and `{"git": argv, "input": [lines]}`."""

from __future__ import annotations

import builtins
import io
import json
import os
import runpy
import subprocess
import sys

LOG = sys.argv.pop(1)
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
    if argv[:1] == ["git"] and "cat-file" in argv:
        given = kwargs.get("input") or b""
        _note({"git": argv[1:], "input": given.decode("ascii", "replace").split()})
    return _real_run(args, *rest, **kwargs)


builtins.open = io.open = _open  # type: ignore[assignment]
subprocess.run = _run  # type: ignore[assignment]
sys.argv[0] = "tp"
runpy.run_module("tuneplane", run_name="__main__", alter_sys=True)
