#!/usr/bin/env python3
"""MaxRL for this experiment (the nemo-rl/maxrl recipe): GRPO whose advantages are divided by the
group's mean reward instead of its standard deviation.

For a prompt whose responses succeed with empirical rate p, GRPO scales (r - p) by 1/std; MaxRL
scales it by 1/p, which weights hard prompts (small p) up and optimises the log-likelihood of
success rather than the expected reward. The platform runs this file as the driver of a Ray job,
with the arguments NeMo-RL's GRPO driver takes:

    python run.py --config <exp>/config.yaml cluster.num_nodes=N ... <path>=<value> ...

It replaces the GRPO advantage estimator's normalisation in this interpreter (idempotently), then
runs NeMo-RL's own examples/run_grpo.py from the image's NeMo-RL installation.
`grpo.normalize_rewards: false` in config.yaml turns the scaling off (plain mean-baselined REINFORCE).
"""

from __future__ import annotations

import os
import runpy
import sys
from pathlib import Path
from typing import Any

DRIVER = Path("examples") / "run_grpo.py"
EPSILON = 1e-6


def nemo_rl_root() -> Path:
    """The NeMo-RL checkout of the image: $NEMO_RL_ROOT, else the folder above the package."""
    if os.environ.get("NEMO_RL_ROOT"):
        return Path(os.environ["NEMO_RL_ROOT"])
    import nemo_rl

    return Path(nemo_rl.__file__).resolve().parents[1]


def mean_scaled(advantages: Any, prompt_ids: Any, rewards: Any) -> Any:
    """Divide each response's advantage by its prompt group's mean reward (groups with mean <= 0 kept)."""
    import torch

    _, group = torch.unique(prompt_ids, dim=0, return_inverse=True)
    sums = torch.zeros(int(group.max()) + 1, dtype=rewards.dtype, device=rewards.device).index_add_(0, group, rewards)
    means = sums / torch.bincount(group).to(rewards.dtype)
    scale = means[group]
    keep = scale > 0
    scaled = advantages.clone()
    scaled[keep] = scaled[keep] / (scale[keep].unsqueeze(-1) + EPSILON)
    return scaled


def install_maxrl() -> None:
    """Patch NeMo-RL's GRPO advantage estimator to scale by the group mean (once per interpreter)."""
    from nemo_rl.algorithms import advantage_estimator

    estimator = advantage_estimator.GRPOAdvantageEstimator
    original = estimator.compute_advantage
    if getattr(original, "maxrl", False):
        return

    def compute_advantage(self: Any, prompt_ids: Any, rewards: Any, mask: Any, **kwargs: Any) -> Any:
        normalize, self.normalize_rewards = self.normalize_rewards, False
        try:
            advantages = original(self, prompt_ids, rewards, mask, **kwargs)
        finally:
            self.normalize_rewards = normalize
        return mean_scaled(advantages, prompt_ids, rewards) if normalize else advantages

    compute_advantage.maxrl = True  # type: ignore[attr-defined]
    estimator.compute_advantage = compute_advantage


def main() -> int:
    install_maxrl()
    driver = nemo_rl_root() / DRIVER
    if not driver.is_file():
        raise SystemExit(f"{driver} is missing: no NeMo-RL GRPO driver there (set NEMO_RL_ROOT)")
    sys.argv = [str(driver), *sys.argv[1:]]
    runpy.run_path(str(driver), run_name="__main__")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
