"""Write the run's model as a Hugging Face folder at <output-dir>/hf_export (`tp export`).

Takes checkpoints/final when training finished, else the newest checkpoint-<step>, or --checkpoint.
A LoRA checkpoint is merged into its base model first, so the export loads with
AutoModelForCausalLM.from_pretrained (AutoModelForSequenceClassification for a reward model) and
needs no peft. Weights are written as safetensors into a temporary folder that replaces hf_export
only when complete.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from tuneplane.lifecycle.outputs import export_checkpoint
from tuneplane.lifecycle.trl_support import latest_checkpoint


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description="export a checkpoint to Hugging Face format")
    parser.add_argument("--output-dir", help="run output folder (default: $TUNEPLANE_OUT_DIR)")
    parser.add_argument("--checkpoint", type=Path, help="checkpoint folder (default: the newest)")
    return parser.parse_args()


def load_model(checkpoint: Path) -> Any:
    """The full model at `checkpoint`, merging a LoRA adapter into its base when there is one.

    It is loaded as the class it was trained as: a reward model (trl/rm, a sequence classifier)
    keeps its score head; everything else is a causal language model.
    """
    adapter = checkpoint / "adapter_config.json"
    if adapter.is_file():
        # lazy: a training-image library, absent where tp runs
        from peft import AutoPeftModelForCausalLM, AutoPeftModelForSequenceClassification

        if _json(adapter).get("task_type") == "SEQ_CLS":
            # TRL's RewardTrainer gives the base model a one-output score head; the adapter holds it
            head = AutoPeftModelForSequenceClassification.from_pretrained(str(checkpoint), num_labels=1)
            return head.merge_and_unload()
        return AutoPeftModelForCausalLM.from_pretrained(str(checkpoint)).merge_and_unload()
    config = checkpoint / "config.json"
    if not config.is_file():
        raise SystemExit(
            f"{checkpoint}: no model here (neither config.json nor adapter_config.json); "
            "pass --checkpoint with a checkpoint-<step> or final folder"
        )
    # lazy: a training-image library, absent where tp runs
    from transformers import AutoModelForCausalLM, AutoModelForSequenceClassification

    architectures = _json(config).get("architectures") or []
    classifier = any(str(a).endswith("ForSequenceClassification") for a in architectures)
    model_class = AutoModelForSequenceClassification if classifier else AutoModelForCausalLM
    return model_class.from_pretrained(str(checkpoint))


def _json(path: Path) -> dict[str, Any]:
    try:
        value = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise SystemExit(f"{path}: not readable JSON ({exc})") from None
    return value if isinstance(value, dict) else {}


def load_tokenizer(checkpoint: Path) -> Any:
    """The tokenizer saved with the checkpoint, else the one of the adapter's base model."""
    # lazy: a training-image library, absent where tp runs
    from transformers import AutoTokenizer

    try:
        return AutoTokenizer.from_pretrained(str(checkpoint))
    except (OSError, ValueError):
        # lazy: a training-image library, absent where tp runs
        from peft import PeftConfig

        base = PeftConfig.from_pretrained(str(checkpoint)).base_model_name_or_path
        return AutoTokenizer.from_pretrained(base)


def save(checkpoint: Path, folder: Path) -> None:
    load_model(checkpoint).save_pretrained(str(folder), safe_serialization=True)
    load_tokenizer(checkpoint).save_pretrained(str(folder))


def main() -> int:
    args = parse_args()
    export_checkpoint(args.output_dir, args.checkpoint, latest_checkpoint, save)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
