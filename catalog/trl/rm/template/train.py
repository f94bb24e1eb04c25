#!/usr/bin/env python3
"""A reward model trained with TRL's RewardTrainer (the trl/rm recipe).

Data: rows with `chosen` and `rejected` (and optionally `prompt`), strings or chat messages. The
model gets a one-output classification head, so LoRA adapters are for sequence classification.

Everything not specific to reward modelling (arguments, see `python train.py --help`; config.yaml
and --set values; data; metrics; checkpoints/final) is TrainingRun's, in
tuneplane.lifecycle.trl_support. Keywords to run.train() go to RewardTrainer.
"""

from __future__ import annotations

from tuneplane.lifecycle.trl_support import TrainingRun


def main() -> int:
    run = TrainingRun.from_command_line("Reward model (TRL)")
    # lazy: TRL loads torch; reading the arguments (and --help) does not need it
    from trl import RewardConfig, RewardTrainer

    return run.train(RewardTrainer, RewardConfig, peft_task_type="SEQ_CLS")


if __name__ == "__main__":
    raise SystemExit(main())
