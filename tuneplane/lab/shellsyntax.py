"""`bash -n` over a lab's shell scripts: the one process `tp validate` starts for them.

The check stages are pure (they start no process), so `tp validate` hands `bash_syntax` to them as a
function. A script whose first line names another interpreter (zsh, python) is not bash's to judge.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

TIMEOUT_S = 10.0
_LINE = re.compile(r"line (\d+): (.*)")
_SHEBANG = re.compile(rb"#!\s*(?:/usr)?(?:/local)?/bin/(?:env\s+)?(bash|sh|dash)\b")


def bash_syntax(path: Path) -> tuple[int, str] | None:
    """(line, bash's message) of the first syntax error of the script at `path`, or None when bash
    parses it, when its first line names another interpreter, or when no bash is installed."""
    bash = shutil.which("bash")
    if bash is None or not _is_bash(path):
        return None
    try:
        done = subprocess.run([bash, "-n", "--", path.name], cwd=path.parent, capture_output=True, text=True,
                              errors="replace", timeout=TIMEOUT_S, check=False,
                              env={"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LC_ALL": "C"})
    except (OSError, subprocess.TimeoutExpired):
        return None
    if done.returncode == 0:
        return None
    first = done.stderr.strip().splitlines()[0] if done.stderr.strip() else "bash -n failed"
    match = _LINE.search(first)
    if match is None:
        return 0, first.removeprefix(f"{path.name}: ")
    return int(match.group(1)), match.group(2)


def _is_bash(path: Path) -> bool:
    try:
        with path.open("rb") as fh:
            first = fh.readline(256)
    except OSError:
        return False
    return not first.startswith(b"#!") or _SHEBANG.match(first) is not None
