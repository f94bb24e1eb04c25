#!/usr/bin/env python3
"""REINFORCE leave-one-out with TRL's RLOOTrainer (the trl/rloo recipe).

Data: rows with a `prompt` (a string or chat messages) and whatever columns rewards.py reads (the
shipped functions read `answer`). Each completion's baseline is the mean reward of the other
completions sampled for the same prompt.

The rest (arguments: `python train.py --help`; config.yaml with the --set values; data; LoRA;
metrics; checkpoints/final) is shared by the TRL recipes in TrainingRun, tuneplane.lifecycle.trl_support.
"""

from __future__ import annotations

from tuneplane.lifecycle.trl_support import TrainingRun


def main() -> int:
    run = TrainingRun.from_command_line("REINFORCE leave-one-out (TRL)")
    # lazy: TRL loads torch, rewards.py is this experiment's; reading the arguments needs neither
    from rewards import REWARD_FUNCTIONS
    from trl import RLOOConfig, RLOOTrainer

    return run.train(RLOOTrainer, RLOOConfig, reward_funcs=REWARD_FUNCTIONS)


if __name__ == "__main__":
    raise SystemExit(main())
