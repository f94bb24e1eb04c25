#!/usr/bin/env python3
"""On-policy distillation with TRL's DistillationTrainer (the trl/opsd recipe).

Data: rows with a `prompt` (a string or chat messages); no answers are needed. The student
samples completions and learns to match the teacher's token distribution on them. The teacher is
teacher_model_name_or_path in config.yaml; empty means the starting model (self-distillation).

The platform's arguments (`python train.py --help`), config.yaml, the --set values, data, LoRA,
metrics and checkpoints/final are handled by TrainingRun (tuneplane.lifecycle.trl_support).
"""

from __future__ import annotations

from tuneplane.lifecycle.trl_support import TrainingRun


def main() -> int:
    run = TrainingRun.from_command_line("On-policy distillation (TRL)")
    # lazy: TRL loads torch; reading the arguments (and --help) does not need it
    from trl import DistillationConfig, DistillationTrainer

    teacher = run.settings.get("teacher_model_name_or_path") or run.model
    run.settings["teacher_model_name_or_path"] = teacher
    return run.train(DistillationTrainer, DistillationConfig, teacher_model=teacher)


if __name__ == "__main__":
    raise SystemExit(main())
