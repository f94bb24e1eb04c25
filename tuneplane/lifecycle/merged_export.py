"""Shared by the ms-swift and OpenRLHF exports (`tp export`): the run's model as a Hugging Face
folder at <output-dir>/hf_export, replaced only when complete. Job side: standard library only.

A LoRA checkpoint (it has adapter_config.json) is merged into its base model by the framework's
own tool, run in this interpreter as its CLI would run (`run_tool`); a full-weights checkpoint is
already a Hugging Face folder and is copied without its optimizer and trainer state.
"""

from __future__ import annotations

import argparse
import os
import runpy
import shutil
import sys
from collections.abc import Callable
from pathlib import Path

# what a checkpoint holds besides the model: optimizer, scheduler, RNG and DeepSpeed state
TRAINING_STATE = ("optimizer.pt", "scheduler.pt", "training_args.bin", "trainer_state.json", "latest",
                  "zero_to_fp32.py", "rng_state*.pth", "global_step*")


def parse_args(argv: list[str] | None, what: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=f"export a {what} checkpoint to Hugging Face format")
    parser.add_argument("--output-dir", help="run output folder (default: $TUNEPLANE_OUT_DIR)")
    parser.add_argument("--checkpoint", type=Path, required=True, help="checkpoint folder to export")
    return parser.parse_args(argv)


def is_lora(checkpoint: Path) -> bool:
    return (checkpoint / "adapter_config.json").is_file()


def run_tool(module: str, argv: list[str]) -> None:
    """`python -m module argv…` in this interpreter (plugins the launcher installed stay in force)."""
    saved = sys.argv
    sys.argv = [module, *argv]
    try:
        runpy.run_module(module, run_name="__main__", alter_sys=True)
    finally:
        sys.argv = saved


def export(argv: list[str] | None, what: str, merge: Callable[[Path, Path], None]) -> int:
    """Export `--checkpoint` into hf_export: `merge(checkpoint, tmp)` for a LoRA one, a copy else."""
    args = parse_args(argv, what)
    out = Path(args.output_dir or os.environ.get("TUNEPLANE_OUT_DIR") or "out")
    checkpoint = args.checkpoint
    if not checkpoint.is_dir():
        raise SystemExit(f"--checkpoint {checkpoint}: no such folder")
    if not is_lora(checkpoint) and not (checkpoint / "config.json").is_file():
        raise SystemExit(f"{checkpoint} is neither a LoRA adapter (adapter_config.json) nor a Hugging Face "
                         "model folder (config.json): name a checkpoint the run wrote")
    target = out / "hf_export"
    tmp = out / f".hf_export.tmp-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    out.mkdir(parents=True, exist_ok=True)
    try:
        if is_lora(checkpoint):
            merge(checkpoint, tmp)
            if not (tmp / "config.json").is_file():
                raise SystemExit(f"the {what} merge wrote no model into {tmp}")
        else:
            shutil.copytree(checkpoint, tmp, ignore=shutil.ignore_patterns(*TRAINING_STATE))
        shutil.rmtree(target, ignore_errors=True)
        os.replace(tmp, target)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print(f"exported {checkpoint} to {target}")
    return 0
