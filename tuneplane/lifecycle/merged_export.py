"""Shared by the ms-swift and OpenRLHF exports (`tp export`): the run's model as a Hugging Face
folder at <output-dir>/hf_export, published whole (`outputs.export_checkpoint`). Job side: standard
library only.

A LoRA checkpoint (it has adapter_config.json) is merged into its base model by the framework's
own tool, run in this interpreter as its CLI would run (`run_tool`); a full-weights checkpoint is
already a Hugging Face folder and is copied without its optimizer and trainer state.
"""

from __future__ import annotations

import argparse
import runpy
import shutil
import sys
from collections.abc import Callable
from pathlib import Path

from tuneplane.lifecycle.outputs import export_checkpoint

# what a checkpoint holds besides the model: optimizer, scheduler, RNG and DeepSpeed state
TRAINING_STATE = (
    "optimizer.pt",
    "scheduler.pt",
    "training_args.bin",
    "trainer_state.json",
    "latest",
    "zero_to_fp32.py",
    "rng_state*.pth",
    "global_step*",
)


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
    """Export `--checkpoint` into hf_export: `merge(checkpoint, folder)` for a LoRA one, a copy else
    (published whole by `outputs.export_checkpoint`)."""
    args = parse_args(argv, what)
    checkpoint = args.checkpoint
    if not checkpoint.is_dir():
        raise SystemExit(f"--checkpoint {checkpoint}: no such folder")
    if not is_lora(checkpoint) and not (checkpoint / "config.json").is_file():
        raise SystemExit(
            f"{checkpoint} is neither a LoRA adapter (adapter_config.json) nor a Hugging Face "
            "model folder (config.json): name a checkpoint the run wrote"
        )

    def write(source: Path, folder: Path) -> None:
        try:
            if is_lora(source):
                merge(source, folder)
                if not (folder / "config.json").is_file():
                    raise SystemExit(f"the {what} merge wrote no model into {folder}")
            else:
                shutil.copytree(source, folder, ignore=shutil.ignore_patterns(*TRAINING_STATE))
        except BaseException:
            shutil.rmtree(folder, ignore_errors=True)  # nothing half-written stays behind
            raise

    export_checkpoint(args.output_dir, checkpoint, _given_only, write)
    return 0


def _given_only(checkpoints: Path) -> Path:
    raise SystemExit("--checkpoint is required")  # argparse requires it; never reached
