#!/usr/bin/env python3
"""Direct preference optimization with TRL's DPOTrainer (the trl/dpo recipe).

Data: rows with `prompt`, `chosen` and `rejected` (strings, or lists of chat messages). The
reference model is the starting model, frozen (or the base without adapters under LoRA).

TrainingRun (tuneplane.lifecycle.trl_support) reads the platform's arguments, config.yaml and the
--set values, loads the data and writes checkpoints/final, as for every TRL recipe; see `python
train.py --help`. Extra keywords to run.train() are passed to DPOTrainer.
"""

from __future__ import annotations

from tuneplane.lifecycle.trl_support import TrainingRun


def main() -> int:
    run = TrainingRun.from_command_line("Direct preference optimization (TRL)")
    # lazy: TRL loads torch; reading the arguments (and --help) does not need it
    from trl import DPOConfig, DPOTrainer

    return run.train(DPOTrainer, DPOConfig)


if __name__ == "__main__":
    raise SystemExit(main())
