#!/usr/bin/env python3
"""Supervised fine-tuning with TRL's SFTTrainer (the trl/sft recipe).

Data: rows in any format SFTTrainer accepts: `messages` (conversations), `prompt` + `completion`,
or `text`.

The steps every TRL template shares (arguments, config.yaml and --set values, data sets, LoRA,
metrics, checkpoints/final) are TrainingRun's, from tuneplane.lifecycle.trl_support: `python
train.py --help` lists the arguments; keywords to run.train() go to the trainer and replace its
defaults, e.g. run.train(SFTTrainer, SFTConfig, processing_class=my_tokenizer).
"""

from __future__ import annotations

from tuneplane.lifecycle.trl_support import TrainingRun


def main() -> int:
    run = TrainingRun.from_command_line("TRL supervised fine-tuning")
    # lazy: TRL loads torch; reading the arguments (and --help) does not need it
    from trl import SFTConfig, SFTTrainer

    return run.train(SFTTrainer, SFTConfig)


if __name__ == "__main__":
    raise SystemExit(main())
