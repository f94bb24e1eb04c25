"""ms-swift and OpenRLHF: the framework's CLI module with config.yaml rendered as flags. Pure.

    torchrun … -m tuneplane.launcher -m tuneplane.lifecycle.cli_flags --style flat \
        --config <exp>/config.yaml --overrides-json '<hyperparams>' --platform-json '<owned flags>' \
        -- swift.cli.sft
(OpenRLHF: `--style dotted`; its Ray recipes run the same as the driver of a Ray job; `tp export` and
`tp eval` run the recipe's lifecycle entrypoint, see adapters.lifecycle.) The job-side
helper lays the hyperparameters and then the platform's flags (bound inputs, output and TensorBoard
folders) over config.yaml and starts the module in the same interpreter, so plugins apply.

A new attempt of a run resumes from its newest checkpoint. ms-swift's Trainer-based entrypoints take
the checkpoint the launcher found as `--resume_from_checkpoint`, known only in the job, so the helper
is told the flag (`--resume-flag`) and adds it when $TUNEPLANE_RESUME_FROM is set; its Megatron
entrypoints write Megatron checkpoints, which the launcher does not offer. OpenRLHF resumes by
itself: its DeepSpeed checkpoints go to `--ckpt.path` under the out dir, and `--ckpt.load_enable`
loads the newest there when there is one.
"""

from __future__ import annotations

import json

from tuneplane.models.jobspec import JobSpec
from tuneplane.plan.adapters.base import config_path, out, overrides_json
from tuneplane.plan.adapters.launch import ray_driver, torchrun
from tuneplane.plan.adapters.lifecycle import LifecycleAdapter
from tuneplane.plan.launchplan import LaunchPlan

RENDERER = "tuneplane.lifecycle.cli_flags"


# The entrypoints that take $TUNEPLANE_RESUME_FROM, and the flag they take it as.
RESUME_FLAGS = {"swift.cli.sft": "resume_from_checkpoint", "swift.cli.rlhf": "resume_from_checkpoint"}


def platform_flags(spec: JobSpec, owned: dict[str, str | bool]) -> dict[str, str | bool]:
    bindings, inputs = spec.spec.recipe.adapter.bindings, spec.spec.inputs
    flags: dict[str, str | bool] = {
        bindings[name]: getattr(inputs, name)
        for name in ("model", "train_data", "validation_data")
        if name in bindings and getattr(inputs, name)
    }
    flags.update(owned)
    return flags


class _CliFlagsAdapter(LifecycleAdapter):
    style = "flat"

    def owned(self, spec: JobSpec) -> dict[str, str | bool]:
        raise NotImplementedError

    def train(self, spec: JobSpec, entry: list[str]) -> LaunchPlan:
        platform = json.dumps(platform_flags(spec, self.owned(spec)), sort_keys=True, separators=(",", ":"))
        resume = RESUME_FLAGS.get(spec.spec.recipe.entrypoint, "")
        args = [
            "-m",
            RENDERER,
            "--style",
            self.style,
            "--config",
            config_path(spec),
            "--overrides-json",
            overrides_json(spec),
            "--platform-json",
            platform,
            *(["--resume-flag", resume] if resume else []),
            "--",
            entry[-1],
        ]
        if spec.spec.recipe.adapter.orchestrator == "ray":
            return ray_driver(spec, args)
        return torchrun(spec, args)


class MsSwiftAdapter(_CliFlagsAdapter):
    name = "ms-swift"
    style = "flat"

    def owned(self, spec: JobSpec) -> dict[str, str | bool]:
        return {
            "output_dir": out(spec, "checkpoints"),
            "logging_dir": out(spec, "logs", "tensorboard"),
            "add_version": "false",
            "report_to": "tensorboard",
        }


class OpenRlhfAdapter(_CliFlagsAdapter):
    name = "openrlhf"
    style = "dotted"

    def owned(self, spec: JobSpec) -> dict[str, str | bool]:
        # DeepSpeed's resumable checkpoints (ckpt.path) would default to a folder in the work dir
        return {
            "ckpt.output_dir": out(spec, "checkpoints"),
            "ckpt.path": out(spec, "checkpoints", "deepspeed"),
            "ckpt.load_enable": True,
            "logger.tensorboard_dir": out(spec, "logs", "tensorboard"),
        }
