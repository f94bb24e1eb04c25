"""Rule `lint-no-metrics`: an experiment's own training entrypoint that reports no metric (a warning).

A run's metrics come from `tuneplane.report` (`init`/`log`/`finish`, or `TunePlaneCallback` in a
Hugging Face trainer) or from native files the collector reads (`metrics.native`, declared by the
recipe or in experiment.yaml). Printed numbers are logs, not metrics: a trainer with neither
succeeds with an empty status, `tp job metrics` and chart. Only an entrypoint the experiment owns
(`train.sh` of custom/custom, a template's `train.py`) is checked; the experiment's code and the lab's
shared code are searched, comments and docstrings excepted. A scaffold still to be edited is
`lint-scaffold`'s.
Passing: `train.sh` execs `train.py`, which calls `from tuneplane.report import log`.
Failing: `train.sh` execs `train.py`, which only prints its loss → `lint-no-metrics` at the exec line.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

from tuneplane.check.rules.context import ExperimentContext
from tuneplane.check.rules.entrypoint import own_entrypoint
from tuneplane.check.rules.lint import code_files, code_lines, read_code
from tuneplane.problems import Problem, Severity
from tuneplane.runtime.launchline import launch_line

RULE = "lint-no-metrics"
# what starts reporting: the SDK, its callback, or the platform's TRL helper that adds the callback
_REPORTS = re.compile(
    r"\bTunePlaneCallback\b|\btuneplane\.report\b|\bfrom\s+tuneplane\s+import\s[^\n]*\breport\b"
    r"|\btuneplane\.lifecycle\.trl_support\b"
)
_SCAFFOLD = "no training command yet"


def check(ctx: ExperimentContext) -> Iterator[Problem]:
    entrypoint = own_entrypoint(ctx)
    if entrypoint is None or _declares_native(ctx):
        return
    path = ctx.dir / entrypoint
    text = read_code(path) or ""
    shell = not entrypoint.endswith(".py")
    if shell and _SCAFFOLD in "\n".join(code_lines(text, shell)):
        return
    if any(_reports(folder) for folder in _searched(ctx)):
        return
    found = launch_line(text) if shell else None
    yield Problem(
        f"{ctx.rel}/{entrypoint}",
        found[0] if found else 1,
        1,
        RULE,
        f"this training entrypoint reports no metrics: nothing in {ctx.rel}/ uses tuneplane.report or "
        "TunePlaneCallback and no native metrics output is declared, so the run's status, `tp job metrics` "
        "and its chart stay empty (printed numbers are only logs)",
        severity=Severity.WARNING,
        hint="call tuneplane.report's init/log/finish from the trainer, or pass "
        "callbacks=[TunePlaneCallback()] to a Hugging Face trainer; or declare the TensorBoard or JSON "
        "lines files it writes under metrics.native in experiment.yaml",
    )


def _declares_native(ctx: ExperimentContext) -> bool:
    recipe_native = bool(ctx.recipe and ctx.recipe.metrics.native)
    return recipe_native or bool(ctx.manifest and ctx.manifest.metrics.native)


def _searched(ctx: ExperimentContext) -> list[Path]:
    shared = [ctx.lab.root / folder for folder in ctx.lab.config.shared_code]
    return [ctx.dir, *(folder for folder in shared if folder.is_dir() and not folder.is_symlink())]


def _reports(folder: Path) -> bool:
    for path in code_files(folder):
        text = read_code(path)
        if text and _REPORTS.search("\n".join(code_lines(text, shell=path.suffix != ".py"))):
            return True
    return False
