"""custom/custom: `bash <abs path of experiments/<exp>/train.sh>` from the job package root. Train only.

The script owns everything else: it reads no config.yaml through us, `--set` values stay in
spec.hyperparams, `--model`/`--train-data` are ignored, and on several nodes it runs once per node
with `TUNEPLANE_NODE_RANK`, `MASTER_ADDR` and `MASTER_PORT` to start its own process group.
"""

from __future__ import annotations

from pathlib import PurePosixPath

from tuneplane.check.rules.entrypoint import entrypoint_message
from tuneplane.errors import UsageError
from tuneplane.models.jobspec import JobSpec
from tuneplane.plan.adapters.base import check_common, exp_path, make_plan
from tuneplane.plan.adapters.launch import group_env
from tuneplane.plan.launchplan import LaunchMode, LaunchPlan


class CustomAdapter:
    name = "custom"

    def compile(self, spec: JobSpec) -> LaunchPlan:
        check_common(spec, self.name, no_algorithm_plugins=True)
        recipe = spec.spec.recipe
        if recipe.entrypoint_kind != "experiment" or not _inside(recipe.entrypoint):
            raise UsageError(
                entrypoint_message("custom"), hint="the custom recipe runs experiments/<name>/train.sh; restore it"
            )
        if not spec.spec.image:
            raise UsageError(
                "custom/custom needs --image: it has no catalog image",
                hint="pass --image registry/repository:tag (pin @sha256:… in production)",
            )
        mode: LaunchMode = "process-group" if spec.spec.resources.nodes > 1 else "direct"
        argv = ["bash", exp_path(spec, recipe.entrypoint)]
        return make_plan(spec, argv, mode=mode, extra_env=group_env(spec))


def _inside(value: str) -> bool:
    pure = PurePosixPath(value)
    return bool(value) and not pure.is_absolute() and ".." not in pure.parts and "\\" not in value
