#!/usr/bin/env python3
"""Convert the run's newest NeMo-RL checkpoint to a Hugging Face folder at <output-dir>/hf_export.

NeMo-RL saves each checkpoint as step_<n>/ with the policy's sharded weights in
policy/weights (torch distributed-checkpoint format), the tokenizer in policy/tokenizer and the
run's config in config.yaml. NeMo-RL's own converter rebuilds the model from the config's
policy.model_name and loads the shards into it; this script picks the step (newest, or
--checkpoint), converts into a temporary folder and renames it to hf_export when done.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
from pathlib import Path

import yaml


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description="convert a NeMo-RL checkpoint to Hugging Face format")
    parser.add_argument("--output-dir", help="run output folder (default: $TUNEPLANE_OUT_DIR)")
    parser.add_argument("--checkpoint", type=Path, help="a step_<n> folder (default: the newest)")
    return parser.parse_args()


def newest_step(out: Path) -> Path:
    """NeMo-RL writes step_<n> straight into its checkpoint_dir: the out dir, or checkpoints/ in it."""
    steps = [p for base in (out, out / "checkpoints") for p in base.glob("step_*")
             if p.is_dir() and p.name.rsplit("_", 1)[-1].isdigit()]
    if not steps:
        raise SystemExit(f"no step_<n> checkpoint under {out}: train first, or pass --checkpoint")
    return max(steps, key=lambda p: int(p.name.rsplit("_", 1)[-1]))


def converter():
    """NeMo-RL's DCP-to-HF function; its module moved between releases."""
    try:
        from nemo_rl.utils.native_checkpoint import convert_dcp_to_hf
    except ImportError:
        from nemo_rl.utils.automodel_checkpoint import convert_dcp_to_hf
    return convert_dcp_to_hf


def main() -> int:
    args = parse_args()
    out = Path(args.output_dir or os.environ.get("TUNEPLANE_OUT_DIR") or "out").resolve()
    step = (args.checkpoint or newest_step(out)).resolve()
    config = yaml.safe_load((step / "config.yaml").read_text(encoding="utf-8"))
    model_name = config["policy"]["model_name"]
    tokenizer = step / "policy" / "tokenizer"
    partial, target = out / "hf_export.partial", out / "hf_export"
    shutil.rmtree(partial, ignore_errors=True)
    converter()(
        dcp_ckpt_path=str(step / "policy" / "weights"),
        hf_ckpt_path=str(partial),
        model_name_or_path=model_name,
        tokenizer_name_or_path=str(tokenizer) if tokenizer.is_dir() else model_name,
        overwrite=True,
    )
    shutil.rmtree(target, ignore_errors=True)
    partial.rename(target)
    print(f"exported {step} -> {target}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
