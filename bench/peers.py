"""Shared helpers for the benchmarks: find python3.12, install the upstream client, time commands.

Peers are installed into `bench/.work/` (git-ignored), never into the project's environment.
"""

from __future__ import annotations

import glob
import os
import resource
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

WORK = Path(__file__).resolve().parent / ".work"
UPSTREAM_SPEC = "tuneplane==0.4.0"


def find_python312() -> str | None:
    """A python3.12 that runs: on PATH, else a pyenv-installed one (pyenv shims may not be selectable)."""
    candidates = [shutil.which("python3.12")]
    for root in filter(None, [os.environ.get("PYENV_ROOT", ""), os.path.expanduser("~/.pyenv")]):
        candidates += sorted(glob.glob(os.path.join(root, "versions", "3.12*", "bin", "python3.12")), reverse=True)
    for candidate in filter(None, candidates):
        if subprocess.run([candidate, "-c", "pass"], capture_output=True).returncode == 0:
            return candidate
    return None


def peer_venv(name: str, requirements: list[str], python: str | None = None) -> Path | None:
    """A cached venv under bench/.work/<name> with `requirements`; None (with a message) if impossible."""
    python = python or sys.executable
    env_dir = WORK / name
    marker = env_dir / ".installed"
    if marker.exists() and marker.read_text() == " ".join(requirements):
        return env_dir
    try:
        shutil.rmtree(env_dir, ignore_errors=True)
        subprocess.run([python, "-m", "venv", str(env_dir)], check=True, capture_output=True)
        subprocess.run(
            [str(env_dir / "bin" / "python"), "-m", "pip", "install", "-q", *requirements],
            check=True,
            capture_output=True,
            timeout=900,
        )
    except (subprocess.SubprocessError, OSError) as exc:
        print(f"  (could not install {' '.join(requirements)} for {name}: {exc}; skipped)")
        return None
    marker.write_text(" ".join(requirements))
    return env_dir


def upstream_venv() -> Path | None:
    py = find_python312()
    if py is None:
        print("  (python3.12 not found: the upstream client is skipped)")
        return None
    return peer_venv("upstream", [UPSTREAM_SPEC], py)


def ours_installed() -> Path | None:
    """This checkout installed the way a user gets it: built as a wheel and installed into its own venv
    (bench/.work/ours), like the upstream client in its venv. The dependencies are installed once; the
    package itself on every call, so the venv runs the code of this checkout."""
    root = Path(__file__).resolve().parent.parent
    env_dir = peer_venv("ours", [str(root)])  # first time: the package and its dependencies
    if env_dir is None:
        return None
    try:
        subprocess.run(
            [
                str(env_dir / "bin" / "python"),
                "-m",
                "pip",
                "install",
                "-q",
                "--no-deps",
                "--force-reinstall",
                str(root),
            ],
            check=True,
            capture_output=True,
            timeout=900,
        )
    except (subprocess.SubprocessError, OSError) as exc:
        print(f"  (could not install this checkout into {env_dir}: {exc}; skipped)")
        return None
    return env_dir


def bytecode_env() -> dict[str, str]:
    """The environment with bytecode caching on. An installed package (ours from a wheel, the peers'
    from PyPI) has its `.pyc` files written at install time; an editable checkout under
    PYTHONDONTWRITEBYTECODE=1 would instead recompile every module on every run, which no user sees."""
    env = dict(os.environ)
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    return env


def time_interleaved(
    commands: list[tuple[list[str], Path, object]], runs: int, env: dict[str, str] | None = None
) -> list[tuple[float, float]]:
    """Median wall and CPU time of each command, the commands run in turn within each round (one
    untimed round first), so a machine that slows down or speeds up mid-run affects all alike and
    the ratio between them holds (run one after the other, a busy minute lands on one of them)."""
    env = bytecode_env() if env is None else env
    walls: list[list[float]] = [[] for _ in commands]
    cpus: list[list[float]] = [[] for _ in commands]
    for i in range(-1, runs):
        for k, (argv, cwd, setup) in enumerate(commands):
            if setup:
                setup(max(i, 0))  # type: ignore[operator]
            before = resource.getrusage(resource.RUSAGE_CHILDREN)
            start = time.perf_counter()
            result = subprocess.run(argv, cwd=cwd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
            wall = time.perf_counter() - start
            after = resource.getrusage(resource.RUSAGE_CHILDREN)
            if result.returncode not in (0, 1):
                raise RuntimeError(f"{' '.join(argv)} failed ({result.returncode}): {result.stderr.decode()[-500:]}")
            if i >= 0:
                walls[k].append(wall)
                cpus[k].append(after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime)
    return [(statistics.median(w), statistics.median(c)) for w, c in zip(walls, cpus, strict=True)]


def time_process(
    argv: list[str], cwd: Path, runs: int = 7, env: dict[str, str] | None = None, setup=None
) -> tuple[float, float]:
    """Median wall time and median CPU time (user + system) of the whole process, in seconds, after
    one untimed warm-up run (which writes the bytecode cache). `setup(i)` runs untimed before each run."""
    return time_interleaved([(argv, cwd, setup)], runs, env)[0]


def time_command(argv: list[str], cwd: Path, runs: int = 7, env: dict[str, str] | None = None, setup=None) -> float:
    """Median wall time of the whole process, in seconds (see `time_process`)."""
    return time_process(argv, cwd, runs, env, setup)[0]


def table(rows: list[list[str]], headers: list[str]) -> str:
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(headers)]
    out = [
        "| " + " | ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True)) + " |",
        "|" + "|".join("-" * (w + 2) for w in widths) + "|",
    ]
    out += ["| " + " | ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)) + " |" for r in rows]
    return "\n".join(out)
