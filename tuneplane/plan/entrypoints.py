"""Which program a train run starts, from the recipe's entrypoint kind and the experiment's files.

- `experiment`: a file of the experiment (it must exist inside the experiment directory);
- `module`: a module of the image (`python -m <module>`);
- `file`: a file of the framework inside the image, relative to the locked runtime's `root`
  (NeMo-RL's `examples/run_grpo.py` under `/opt/nemo-rl`).
A `module` or `file` entrypoint may name an `experiment_override` (`run.py`): when the experiment
has that file, it is started instead, with the same arguments. On this machine (a local run) the
framework's checkout need not sit where the image keeps it: `<FRAMEWORK>_ROOT` (`NEMO_RL_ROOT` for
nemo-rl) in the environment names it instead.
"""

from __future__ import annotations

import re
from pathlib import Path, PurePosixPath

from tuneplane.check.rules.entrypoint import entrypoint_message, resolve_entrypoint
from tuneplane.errors import UsageError
from tuneplane.models.lock import RecipeLock
from tuneplane.models.recipe import Recipe


def locked_entrypoint(lock: RecipeLock, recipe: Recipe) -> tuple[str, str]:
    """(kind, value) as the lock binds it, else as the catalog recipe says."""
    bound = lock.bindings.entrypoint if lock.bindings else None
    return (bound.kind, bound.value) if bound else (recipe.entrypoint.kind, recipe.entrypoint.value)


def root_variable(framework: str) -> str:
    """The environment variable naming a framework's checkout on this machine: NEMO_RL_ROOT for nemo-rl."""
    return re.sub(r"[^A-Za-z0-9]", "_", framework).upper() + "_ROOT"


def effective_entrypoint(
    exp_dir: Path, lock: RecipeLock, recipe: Recipe, local_env: dict[str, str] | None = None
) -> tuple[str, str]:
    """(kind, value) the job starts: the experiment's override when present, else the recipe's entry.

    A `file` entry comes back as its absolute path in the image. UsageError when an `experiment`
    entrypoint is missing or leaves the experiment directory.
    """
    kind, value = locked_entrypoint(lock, recipe)
    if kind == "experiment":
        if resolve_entrypoint(exp_dir, value) is None:
            raise UsageError(
                entrypoint_message(recipe.framework),
                hint=f"the recipe runs {value!r}: it must be a regular file inside "
                f"experiments/{exp_dir.name}/ (renamed or deleted? restore it)",
            )
        return kind, value
    override = recipe.entrypoint.experiment_override
    if override and resolve_entrypoint(exp_dir, override) is not None:
        return "experiment", override
    if kind == "file":
        local_root = (local_env or {}).get(root_variable(recipe.framework))
        return kind, _in_image(recipe, lock.framework.version, value, local_root)
    return kind, value


def _in_image(recipe: Recipe, version: str, value: str, local_root: str | None) -> str:
    if PurePosixPath(value).is_absolute():
        return value
    runtime = recipe.runtime.versions.get(version)
    root = local_root or (runtime.root if runtime else "")
    if not root:
        raise UsageError(
            f"{recipe.name} starts {value!r} from the framework's folder in the image, but "
            f"runtime {version!r} names no root folder",
            hint=f"add run.py to the experiment, or use a runtime of {recipe.name} that names its root",
        )
    return f"{root.rstrip('/')}/{value}"
