"""`bash -n` over a lab's shell scripts: the one process `tp validate` starts for them.

The check stages are pure (they start no process), so `tp validate` hands `bash_syntax` to them as a
function. A script whose first line names another interpreter (zsh, python) is not bash's to judge.
A process per script would be most of `tp validate --all` over many experiments (a scaffold's train.sh
is the same text in each), so results are kept by the script's digest: for this process, and for a
script bash accepted, as an empty file under the user's cache folder, so the next run skips it too.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
from pathlib import Path

TIMEOUT_S = 10.0
_LINE = re.compile(r"line (\d+): (.*)")
_SHEBANG = re.compile(rb"#!\s*(?:/usr)?(?:/local)?/bin/(?:env\s+)?(bash|sh|dash)\b")


_SEEN: dict[str, tuple[int, str] | None] = {}


def bash_syntax(path: Path) -> tuple[int, str] | None:
    """(line, bash's message) of the first syntax error of the script at `path`, or None when bash
    parses it, when its first line names another interpreter, when it cannot be read, or when no bash
    is installed."""
    try:
        raw = path.read_bytes()
    except OSError:
        return None
    bash = shutil.which("bash")
    if bash is None or (raw.startswith(b"#!") and not _SHEBANG.match(raw)):
        return None
    digest = hashlib.sha256(raw).hexdigest()
    if digest in _SEEN:
        return _SEEN[digest]
    cached = _cache_dir() / digest
    if cached.is_file():
        return None
    found = _run_bash(bash, path)
    _SEEN[digest] = found
    if found is None:
        _remember(cached)
    return found


def _cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "tuneplane" / "bash-n"


def _remember(cached: Path) -> None:
    try:
        cached.parent.mkdir(parents=True, exist_ok=True)
        cached.touch()
    except OSError:
        pass  # a read-only home: the next run asks bash again


def _run_bash(bash: str, path: Path) -> tuple[int, str] | None:
    try:
        done = subprocess.run(
            [bash, "-n", "--", path.name],
            cwd=path.parent,
            capture_output=True,
            text=True,
            errors="replace",
            timeout=TIMEOUT_S,
            check=False,
            env={"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LC_ALL": "C"},
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    if done.returncode == 0:
        return None
    first = done.stderr.strip().splitlines()[0] if done.stderr.strip() else "bash -n failed"
    match = _LINE.search(first)
    if match is None:
        return 0, first.removeprefix(f"{path.name}: ")
    return int(match.group(1)), match.group(2)
