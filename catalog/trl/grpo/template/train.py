#!/usr/bin/env python3
"""Online reinforcement learning with TRL's GRPOTrainer (the trl/grpo recipe).

Data: a `prompt` column (a string, or a list of chat messages) and whatever columns the reward
functions in rewards.py read (the shipped ones read `answer`). For each prompt GRPO samples
`num_generations` completions, scores them with the reward functions and pushes the policy towards
the completions that beat their group's mean.

TrainingRun (tuneplane.lifecycle.trl_support) handles what all TRL recipes share: arguments (`python
train.py --help`), config.yaml and --set values, data, LoRA, metrics, checkpoints/final.
"""

from __future__ import annotations

from tuneplane.lifecycle.trl_support import TrainingRun


def main() -> int:
    run = TrainingRun.from_command_line("TRL GRPO training")
    # lazy: TRL loads torch, rewards.py is this experiment's; reading the arguments needs neither
    from rewards import REWARD_FUNCTIONS
    from trl import GRPOConfig, GRPOTrainer

    return run.train(GRPOTrainer, GRPOConfig, reward_funcs=REWARD_FUNCTIONS)


if __name__ == "__main__":
    raise SystemExit(main())
