"""nemo-rl (grpo): a Ray driver running the experiment's entrypoint with NeMo-RL's `path=value` overrides;
export and eval through lifecycle.

    python3 <exp>/run_grpo.py --config <exp>/config.yaml policy.model_name="M" … <path>=<value> … \
        cluster.num_nodes=N cluster.gpus_per_node=G checkpointing.checkpoint_dir="$OUT/checkpoints" \
        logger.log_dir="$OUT/logs" logger.tensorboard_enabled=true

A new attempt resumes by itself: with checkpointing enabled, NeMo-RL's algorithms load the newest
step_<N> under checkpoint_dir (where the launcher finds it too, as TUNEPLANE_RESUME_FROM).
"""

from __future__ import annotations

from tuneplane.models.jobspec import JobSpec
from tuneplane.plan.adapters.base import config_path, hydra_value, out
from tuneplane.plan.adapters.hydra import input_overrides, param_overrides, topology_overrides
from tuneplane.plan.adapters.launch import ray_driver
from tuneplane.plan.adapters.lifecycle import LifecycleAdapter
from tuneplane.plan.launchplan import LaunchPlan


class NemoRlAdapter(LifecycleAdapter):
    name = "nemo-rl"

    def train(self, spec: JobSpec, entry: list[str]) -> LaunchPlan:
        args = [
            *entry,
            "--config",
            config_path(spec),
            *input_overrides(spec),
            *param_overrides(spec),
            *topology_overrides(spec, "cluster.num_nodes", "cluster.gpus_per_node"),
            f"checkpointing.checkpoint_dir={hydra_value(out(spec, 'checkpoints'))}",
            f"logger.log_dir={hydra_value(out(spec, 'logs'))}",
            # the collector reads <log_dir>/exp_<n>/tensorboard: the platform's metrics need it on
            "logger.tensorboard_enabled=true",
        ]
        return ray_driver(spec, args)
