#!/usr/bin/env python3
"""Direct preference optimization (TRL) (the trl/dpo recipe).

The platform starts it with accelerate, one process per GPU:

    accelerate launch ... train.py --config <exp>/config.yaml \
        --model <model> --train-data <data> --validation-data <data> \
        --output-dir $TUNEPLANE_OUT_DIR --logging-dir $TUNEPLANE_OUT_DIR/logs \
        --overrides-json '<validated --set values>'

Data: rows with `prompt`, `chosen` and `rejected` (strings, or lists of chat messages).

Outputs under --output-dir: checkpoints/checkpoint-<step> while training, checkpoints/final at the
end (model and tokenizer), TensorBoard-style logs under --logging-dir when enabled in report_to.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import Any

from trainer_config import (
    PLATFORM_KEYS,
    SCRIPT_KEYS,
    apply_overrides,
    load_config,
    load_split,
    output_dir,
    platform_callbacks,
    read_overrides,
)

# Keys of config.yaml this script reads itself, beside the shared ones (model, data, LoRA).
OWN_KEYS = ()


def parse_args() -> argparse.Namespace:
    here = Path(__file__).resolve().parent
    parser = argparse.ArgumentParser(description="Direct preference optimization (TRL)")
    parser.add_argument("--config", type=Path, default=here / "config.yaml")
    parser.add_argument("--model", help="Hub id or local path (else model_name_or_path in the config)")
    parser.add_argument("--train-data", help="training data (else dataset_train_path)")
    parser.add_argument("--validation-data", help="validation data (else dataset_eval_path)")
    parser.add_argument("--output-dir", help="run output folder (default: $TUNEPLANE_OUT_DIR)")
    parser.add_argument("--logging-dir", help="log folder (default: <output-dir>/logs)")
    parser.add_argument("--overrides-json", help="JSON object of config paths to values, or @file")
    return parser.parse_args()


def split_config(config: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """(script settings, TRL settings); platform-owned keys are dropped from the latter."""
    script = {key: config.pop(key) for key in (*SCRIPT_KEYS, *OWN_KEYS) if key in config}
    for key in PLATFORM_KEYS:
        config.pop(key, None)
    return script, config


def peft_config(script: dict[str, Any], task_type: str = "CAUSAL_LM") -> Any:
    """A LoRA config when use_peft is on; peft is imported only then."""
    if not script.get("use_peft"):
        return None
    from peft import LoraConfig

    return LoraConfig(
        r=int(script.get("lora_r", 16)),
        lora_alpha=int(script.get("lora_alpha", 32)),
        lora_dropout=float(script.get("lora_dropout", 0.05)),
        target_modules=script.get("lora_target_modules", "all-linear"),
        task_type=task_type,
    )


def main() -> int:
    args = parse_args()
    config = load_config(args.config)
    apply_overrides(config, read_overrides(args.overrides_json))
    script, trl_settings = split_config(config)
    model = args.model or script.get("model_name_or_path")
    train_source = args.train_data or script.get("dataset_train_path")
    eval_source = args.validation_data or script.get("dataset_eval_path")
    if not model or not train_source:
        raise SystemExit("a model and training data are required: --model and --train-data")

    out = output_dir(args.output_dir)
    # transformers reads the TensorBoard folder from the environment, not from TrainingArguments.
    os.environ.setdefault("TENSORBOARD_LOGGING_DIR", str(Path(args.logging_dir or out / "logs")))
    trl_settings["output_dir"] = str(out / "checkpoints")
    if not eval_source:
        trl_settings["eval_strategy"] = "no"

    from trl import DPOConfig, DPOTrainer

    trainer = DPOTrainer(
        model=model,
        args=DPOConfig(**trl_settings),
        train_dataset=load_split(train_source, "train"),
        eval_dataset=load_split(eval_source, "validation") if eval_source else None,
        peft_config=peft_config(script, "CAUSAL_LM"),
        callbacks=platform_callbacks(),
    )
    trainer.train()
    trainer.save_model(str(out / "checkpoints" / "final"))
    if trainer.is_world_process_zero():
        # The Trainer drops a model card beside the checkpoints; it is not a checkpoint.
        (out / "checkpoints" / "README.md").unlink(missing_ok=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
