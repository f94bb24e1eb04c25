"""`tp export` of an OpenRLHF run: its model as a Hugging Face folder at <output-dir>/hf_export.

    python -m tuneplane.lifecycle.openrlhf_export --checkpoint DIR [--output-dir DIR]

OpenRLHF saves the trained model in Hugging Face format under ckpt.output_dir (the run's
checkpoints/), which is copied; a LoRA adapter there is merged by OpenRLHF's own combiner,
`python -m openrlhf.cli.lora_combiner --model_path <base> --lora_path <checkpoint> --output_path
<folder>` (in this interpreter), with the base model the adapter names in adapter_config.json and
`--is_rm` for a reward model. Standard library only at import.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from tuneplane.lifecycle.merged_export import export, run_tool

MODULE = "openrlhf.cli.lora_combiner"


def merge_argv(checkpoint: Path, target: Path) -> list[str]:
    """The combiner's flags for the adapter at `checkpoint`."""
    config = json.loads((checkpoint / "adapter_config.json").read_text(encoding="utf-8"))
    base = config.get("base_model_name_or_path")
    if not base:
        raise SystemExit(f"{checkpoint}/adapter_config.json names no base_model_name_or_path to merge into")
    reward = config.get("task_type") == "SEQ_CLS"
    return [
        "--model_path",
        str(base),
        "--lora_path",
        str(checkpoint),
        "--output_path",
        str(target),
        *(["--is_rm"] if reward else []),
    ]


def main(argv: list[str] | None = None) -> int:
    return export(argv, "OpenRLHF", lambda checkpoint, tmp: run_tool(MODULE, merge_argv(checkpoint, tmp)))


if __name__ == "__main__":
    sys.exit(main())
