"""ms-swift and OpenRLHF: the framework's CLI module with config.yaml rendered as flags. Pure.

    torchrun … -m tuneplane.launcher -m tuneplane.lifecycle.cli_flags --style flat \
        --config <exp>/config.yaml --overrides-json '<hyperparams>' --platform-json '<owned flags>' \
        -- swift.cli.sft
(OpenRLHF: `--style dotted`; its Ray recipes run the same as the driver of a Ray job; `tp export` and
`tp eval` run the recipe's lifecycle entrypoint, see adapters.lifecycle.) The job-side
helper lays the hyperparameters and then the platform's flags (bound inputs, output and TensorBoard
folders) over config.yaml and starts the module in the same interpreter, so plugins apply.
"""

from __future__ import annotations

import json

from tuneplane.models.jobspec import JobSpec
from tuneplane.plan.adapters.base import config_path, out, overrides_json
from tuneplane.plan.adapters.launch import ray_driver, torchrun
from tuneplane.plan.adapters.lifecycle import LifecycleAdapter
from tuneplane.plan.launchplan import LaunchPlan

RENDERER = "tuneplane.lifecycle.cli_flags"


def platform_flags(spec: JobSpec, owned: dict[str, str]) -> dict[str, str]:
    bindings, inputs = spec.spec.recipe.adapter.bindings, spec.spec.inputs
    flags = {bindings[name]: getattr(inputs, name) for name in ("model", "train_data", "validation_data")
             if name in bindings and getattr(inputs, name)}
    flags.update(owned)
    return flags


class _CliFlagsAdapter(LifecycleAdapter):
    style = "flat"

    def owned(self, spec: JobSpec) -> dict[str, str]:
        raise NotImplementedError

    def train(self, spec: JobSpec, entry: list[str]) -> LaunchPlan:
        platform = json.dumps(platform_flags(spec, self.owned(spec)), sort_keys=True, separators=(",", ":"))
        args = ["-m", RENDERER, "--style", self.style, "--config", config_path(spec),
                "--overrides-json", overrides_json(spec), "--platform-json", platform, "--", entry[-1]]
        if spec.spec.recipe.adapter.orchestrator == "ray":
            return ray_driver(spec, args)
        return torchrun(spec, args)


class MsSwiftAdapter(_CliFlagsAdapter):
    name = "ms-swift"
    style = "flat"

    def owned(self, spec: JobSpec) -> dict[str, str]:
        return {"output_dir": out(spec, "checkpoints"), "logging_dir": out(spec, "logs", "tensorboard"),
                "add_version": "false", "report_to": "tensorboard"}


class OpenRlhfAdapter(_CliFlagsAdapter):
    name = "openrlhf"
    style = "dotted"

    def owned(self, spec: JobSpec) -> dict[str, str]:
        return {"ckpt.output_dir": out(spec, "checkpoints"), "logger.tensorboard_dir": out(spec, "logs", "tensorboard")}
