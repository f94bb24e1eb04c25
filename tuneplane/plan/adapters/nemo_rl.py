"""nemo-rl (grpo): a Ray driver running the experiment's entrypoint with NeMo-RL's `path=value` overrides;
export and eval through lifecycle.

    python3 <exp>/run_grpo.py --config <exp>/config.yaml policy.model_name="M" … <path>=<value> … \
        cluster.num_nodes=N cluster.gpus_per_node=G checkpointing.checkpoint_dir="$OUT" \
        logger.log_dir="$OUT/logs"
"""

from __future__ import annotations

from tuneplane.models.jobspec import JobSpec
from tuneplane.plan.adapters.base import check_common, config_path, hydra_value, out, python_entry
from tuneplane.plan.adapters.hydra import input_overrides, param_overrides, topology_overrides
from tuneplane.plan.adapters.launch import ray_driver
from tuneplane.plan.adapters.lifecycle import compile_lifecycle
from tuneplane.plan.launchplan import LaunchPlan


class NemoRlAdapter:
    name = "nemo-rl"

    def compile(self, spec: JobSpec) -> LaunchPlan:
        check_common(spec, self.name)
        if spec.spec.operation != "train":
            return compile_lifecycle(spec)
        recipe = spec.spec.recipe
        entry = python_entry(spec, recipe.entrypoint_kind, recipe.entrypoint)
        args = [*entry, "--config", config_path(spec), *input_overrides(spec), *param_overrides(spec),
                *topology_overrides(spec, "cluster.num_nodes", "cluster.gpus_per_node"),
                f"checkpointing.checkpoint_dir={hydra_value(out(spec))}",
                f"logger.log_dir={hydra_value(out(spec, 'logs'))}"]
        return ray_driver(spec, args)
