"""verl: grpo as a Ray driver (`python -m verl.trainer.main_ppo` + Hydra `a.b=<json>` overrides),
sft under torchrun; export and eval through lifecycle.

    python3 -m verl.trainer.main_ppo --config-path <exp> --config-name config \
        actor_rollout_ref.model.path="M" data.train_files="D" data.val_files="V" <path>=<json> … \
        trainer.nnodes=N trainer.n_gpus_per_node=G trainer.default_local_dir="$OUT/checkpoints" \
        trainer.resume_mode="auto"

A new attempt resumes from the newest complete checkpoint: with resume_mode auto, verl (its PPO and
SFT trainers alike) loads the global_step_<N> that latest_checkpointed_iteration.txt in
default_local_dir names, the very folder the launcher exports as TUNEPLANE_RESUME_FROM, and starts
afresh when there is none. The plan is fixed before the job starts, so the path itself is not passed.
"""

from __future__ import annotations

from tuneplane.models.jobspec import JobSpec
from tuneplane.plan.adapters.base import hydra_value, out
from tuneplane.plan.adapters.hydra import input_overrides, param_overrides, topology_overrides
from tuneplane.plan.adapters.launch import ray_driver, torchrun
from tuneplane.plan.adapters.lifecycle import LifecycleAdapter
from tuneplane.plan.launchplan import LaunchPlan


class VerlAdapter(LifecycleAdapter):
    name = "verl"

    def train(self, spec: JobSpec, entry: list[str]) -> LaunchPlan:
        args = [
            *entry,
            *_config_args(spec),
            *input_overrides(spec),
            *param_overrides(spec),
            *topology_overrides(spec, "trainer.nnodes", "trainer.n_gpus_per_node"),
            f"trainer.default_local_dir={hydra_value(out(spec, 'checkpoints'))}",
            f"trainer.resume_mode={hydra_value('auto')}",
        ]
        # verl's TensorBoard logger reads its folder from the environment only.
        env = {"TENSORBOARD_DIR": out(spec, "logs", "tensorboard")}
        if spec.spec.recipe.adapter.orchestrator == "ray":
            return ray_driver(spec, args, env)
        return torchrun(spec, args, env)


def _config_args(spec: JobSpec) -> list[str]:
    """Hydra reads the experiment's config.yaml (which extends verl's defaults through its search path)."""
    if spec.spec.recipe.adapter.config_mode != "hydra":
        return []
    return ["--config-path", spec.spec.paths.exp_dir, "--config-name", "config"]
