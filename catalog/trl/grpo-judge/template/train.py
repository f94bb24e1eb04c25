#!/usr/bin/env python3
"""GRPO with a language model as the judge, on TRL's GRPOTrainer (the trl/grpo-judge recipe).

Data: rows with a `prompt` (a string or chat messages) and, when available, a reference `answer`
shown to the judge. The reward is judge.py's: the judge's probability that a completion is correct.
judge_model_name_or_path and judge_max_length in config.yaml are read here, not by TRL.

Arguments (`python train.py --help`), config.yaml and --set values, data, LoRA, metrics and
checkpoints/final work as in every TRL recipe: TrainingRun, tuneplane.lifecycle.trl_support.
"""

from __future__ import annotations

from tuneplane.lifecycle.trl_support import TrainingRun


def main() -> int:
    run = TrainingRun.from_command_line(
        "GRPO with an LLM judge (TRL)", own_keys=("judge_model_name_or_path", "judge_max_length")
    )
    # lazy: TRL and the judge load torch; reading the arguments (and --help) does not need it
    from judge import JudgeReward
    from trl import GRPOConfig, GRPOTrainer

    judge = JudgeReward(
        str(run.script.get("judge_model_name_or_path") or run.model), int(run.script.get("judge_max_length") or 1024)
    )
    return run.train(GRPOTrainer, GRPOConfig, reward_funcs=[judge])


if __name__ == "__main__":
    raise SystemExit(main())
