"""export and eval of catalog recipes: one process running the recipe's lifecycle entrypoint. Pure.

`LifecycleAdapter` is the base of the adapters that write only the train command themselves.

    export: <entry> --output-dir $TUNEPLANE_OUT_DIR --checkpoint <checkpoint>
    eval:   <entry> --data <data> --report $TUNEPLANE_OUT_DIR/eval/report.json --model <checkpoint>
                    --output-dir $TUNEPLANE_OUT_DIR
An entrypoint ending in `.py` is a file of the experiment; anything else is a module of the image.
"""

from __future__ import annotations

from tuneplane.errors import UsageError
from tuneplane.models.jobspec import JobSpec
from tuneplane.plan.adapters.base import check_common, out, python_entry, require_value
from tuneplane.plan.adapters.launch import single
from tuneplane.plan.launchplan import LaunchPlan


class LifecycleAdapter:
    """A framework whose export and eval run the recipe's lifecycle entrypoints; `train` is its own."""

    name = ""

    def compile(self, spec: JobSpec) -> LaunchPlan:
        check_common(spec, self.name)
        if spec.spec.operation != "train":
            return compile_lifecycle(spec)
        recipe = spec.spec.recipe
        return self.train(spec, python_entry(spec, recipe.entrypoint_kind, recipe.entrypoint))

    def train(self, spec: JobSpec, entry: list[str]) -> LaunchPlan:
        """The train plan; `entry` is the recipe's entrypoint as `python3` arguments."""
        raise NotImplementedError


def compile_lifecycle(spec: JobSpec) -> LaunchPlan:
    op, recipe, inputs = spec.spec.operation, spec.spec.recipe, spec.spec.inputs
    value = recipe.adapter.lifecycle[op]
    entry = python_entry(spec, "experiment" if value.endswith(".py") else "module", value)
    checkpoint = require_value(
        inputs.checkpoint,
        f"{op} needs --checkpoint",
        "name a checkpoint of an earlier run, e.g. runs/<user>/<exp>/<run>/out/checkpoints/…",
    )
    _check_format(spec)
    if op == "export":
        return single(spec, [*entry, "--output-dir", out(spec), "--checkpoint", checkpoint])
    data = require_value(
        inputs.data,
        f"{recipe.name} eval needs --data (the evaluation data set)",
        "pass --data with a file or folder under the storage root, or a hub data set name",
    )
    return single(
        spec,
        [
            *entry,
            "--data",
            data,
            "--report",
            out(spec, "eval", "report.json"),
            "--model",
            checkpoint,
            "--output-dir",
            out(spec),
        ],
    )


def _check_format(spec: JobSpec) -> None:
    """`--checkpoint-format` must name what the recipe writes, when the recipe declares it."""
    given = spec.spec.inputs.checkpoint_format
    known = {a.format for a in spec.spec.recipe.adapter.artifacts if a.kind == "checkpoint" and a.format}
    if given and known and given not in known:
        raise UsageError(
            f"{spec.spec.recipe.name} writes {', '.join(sorted(known))} checkpoints, not {given!r}",
            hint=f"pass --checkpoint-format {sorted(known)[0]} or leave it out",
        )
