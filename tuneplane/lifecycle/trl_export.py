"""Write the run's model as a Hugging Face folder at <output-dir>/hf_export (`tp export`).

Takes checkpoints/final when training finished, else the newest checkpoint-<step>, or --checkpoint.
A LoRA checkpoint is merged into its base model first, so the export loads with
AutoModelForCausalLM.from_pretrained and needs no peft. Weights are written as safetensors into a
temporary folder that replaces hf_export only when complete.
"""

from __future__ import annotations

import argparse
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
    """The full model at `checkpoint`, merging a LoRA adapter into its base when there is one."""
    if (checkpoint / "adapter_config.json").is_file():
        # lazy: a training-image library, absent where tp runs
        from peft import AutoPeftModelForCausalLM

        return AutoPeftModelForCausalLM.from_pretrained(str(checkpoint)).merge_and_unload()
    # lazy: a training-image library, absent where tp runs
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(str(checkpoint))


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
