"""Rule `entrypoint`: an experiment entrypoint is a regular file inside the experiment directory.

Passing: `train.sh` next to recipe.lock.json.
Failing: `train.sh` renamed to `run.sh`, an entrypoint of `../../etc/passwd` or `/bin/sh`, or `train.sh`
being a symlink to a file outside the experiment → `custom entrypoint is missing or escapes the
experiment directory`, the same words the job would fail with an hour later.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path, PurePosixPath

from tuneplane.check.rules.context import ExperimentContext
from tuneplane.problems import Problem


def entrypoint_message(framework: str) -> str:
    return f"{framework or 'custom'} entrypoint is missing or escapes the experiment directory"


def resolve_entrypoint(exp_dir: Path, value: str) -> Path | None:
    """The entrypoint's real path when it is a regular file inside `exp_dir`, else None."""
    pure = PurePosixPath(value)
    if not value or pure.is_absolute() or ".." in pure.parts or "\\" in value:
        return None
    real_dir = os.path.realpath(exp_dir)
    real = os.path.realpath(exp_dir / value)
    if not real.startswith(real_dir + os.sep) or not os.path.isfile(real):
        return None
    return Path(real)


def check(ctx: ExperimentContext) -> Iterator[Problem]:
    lock, doc = ctx.lock, ctx.lock_doc
    if lock is None or doc is None:
        return
    bound = lock.bindings.entrypoint if lock.bindings else None
    kind, value = (bound.kind, bound.value) if bound else _catalog_entrypoint(ctx)
    if kind != "experiment":
        return
    if resolve_entrypoint(ctx.dir, value) is not None:
        return
    path = ctx.dir / value if value and not PurePosixPath(value).is_absolute() else None
    where = f"{ctx.rel}/{value}"
    if path is not None and path.is_symlink():
        yield Problem(
            where,
            1,
            1,
            "entrypoint",
            entrypoint_message(ctx.framework),
            hint=f"{value} is a symlink to {os.readlink(path)}; put the real file in {ctx.rel}/",
        )
        return
    pointer = "/bindings/entrypoint/value" if bound else "/recipe/name"
    yield doc.problem(
        pointer,
        "entrypoint",
        entrypoint_message(ctx.framework),
        hint=f"the recipe runs {value!r}: it must be a file inside {ctx.rel}/ (renamed or deleted? restore {value})",
    )


def _catalog_entrypoint(ctx: ExperimentContext) -> tuple[str, str]:
    if ctx.recipe is None:
        return "", ""
    return ctx.recipe.entrypoint.kind, ctx.recipe.entrypoint.value


def own_entrypoint(ctx: ExperimentContext) -> str | None:
    """The entrypoint the job starts when it is the experiment's own file (custom's train.sh, a
    template's train.py, an experiment override), else None."""
    if ctx.lock is None:
        return None
    bound = ctx.lock.bindings.entrypoint if ctx.lock.bindings else None
    recipe = ctx.recipe
    if bound is not None:
        kind, value = bound.kind, bound.value
    elif recipe is not None:
        kind, value = recipe.entrypoint.kind, recipe.entrypoint.value
    else:
        return None
    override = recipe.entrypoint.experiment_override if recipe is not None else ""
    if kind != "experiment" and override and resolve_entrypoint(ctx.dir, override) is not None:
        kind, value = "experiment", override
    if kind != "experiment" or resolve_entrypoint(ctx.dir, value) is None:
        return None  # a missing entrypoint is rule `entrypoint`'s
    return value
