"""What the shell completes: experiment names and run ids, read from the lab's folders alone.

A completion runs on every Tab, so it loads nothing (no settings, no models): an experiment is a
folder holding one of an experiment's files one level under a top-level folder (the lab's experiment
roots: `experiments/`, `smoke/`, …), a run is a request file under `runs/EXP/`. Anything unreadable
completes nothing rather than failing in the shell.
"""

from __future__ import annotations

from pathlib import Path

from tuneplane.errors import TunePlaneError
from tuneplane.lab.fs import find_lab_root

# what `tp new` writes (a lock, a config) and a StarForge experiment's file; the models are not imported
EXPERIMENT_FILES = ("recipe.lock.json", "config.yaml", "experiment.yaml")
SKIPPED = frozenset({"runs", "status", "plugins"})


def _root() -> Path | None:
    try:
        return find_lab_root()
    except (TunePlaneError, OSError):
        return None


def experiment_names(incomplete: str) -> list[str]:
    """The lab's experiment names that start with what was typed."""
    root = _root()
    if root is None:
        return []
    names: set[str] = set()
    try:
        for base in root.iterdir():
            if base.name in SKIPPED or base.name.startswith(".") or not base.is_dir():
                continue
            names.update(
                e.name
                for e in base.iterdir()
                if not e.name.startswith(".") and any((e / f).is_file() for f in EXPERIMENT_FILES)
            )
    except OSError:
        return sorted(n for n in names if n.startswith(incomplete))
    return sorted(n for n in names if n.startswith(incomplete))


def run_ids(incomplete: str) -> list[str]:
    """The lab's run ids (newest first) and EXP/RUN references that start with what was typed."""
    root = _root()
    if root is None:
        return []
    runs: list[tuple[str, str]] = []
    try:
        for folder in (root / "runs").iterdir():
            runs.extend((f.stem, folder.name) for f in folder.glob("*.yaml"))
    except OSError:
        return []
    if "/" in incomplete:
        return sorted((f"{exp}/{run}" for run, exp in runs if f"{exp}/{run}".startswith(incomplete)), reverse=True)
    return sorted((run for run, _exp in runs if run.startswith(incomplete)), reverse=True)
