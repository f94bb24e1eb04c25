#!/usr/bin/env python3
"""Kahneman-Tversky optimization with TRL's KTOTrainer (the trl/kto recipe).

Data: rows with `prompt`, `completion` and a boolean `label` (true = desirable). Unlike DPO it
needs no pairs: each completion is judged on its own.

Shared with the other TRL recipes, in TrainingRun (tuneplane.lifecycle.trl_support): arguments
(`python train.py --help`), config.yaml with the --set values, data, LoRA, the metrics callback
and checkpoints/final. Keywords to run.train() reach KTOTrainer.
"""

from __future__ import annotations

from tuneplane.lifecycle.trl_support import TrainingRun


def main() -> int:
    run = TrainingRun.from_command_line("Kahneman-Tversky optimization (TRL)")
    # lazy: TRL loads torch; reading the arguments (and --help) does not need it
    from trl import KTOConfig, KTOTrainer

    return run.train(KTOTrainer, KTOConfig)


if __name__ == "__main__":
    raise SystemExit(main())
