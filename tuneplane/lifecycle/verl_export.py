"""Merge the run's newest verl checkpoint into a Hugging Face folder at <output-dir>/hf_export.

verl saves sharded FSDP state under checkpoints/global_step_<n>; its own merger
(`python -m verl.model_merger merge`) turns a shard set into safetensors plus config and
tokenizer. This script picks the checkpoint (newest, or --checkpoint), writes into a temporary
folder and renames it to hf_export only when the merger succeeded.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

from tuneplane.lifecycle.outputs import export_checkpoint


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description="merge a verl checkpoint into Hugging Face format")
    parser.add_argument("--output-dir", help="run output folder (default: $TUNEPLANE_OUT_DIR)")
    parser.add_argument("--checkpoint", type=Path, help="a global_step_<n> folder (default: the newest)")
    parser.add_argument("--backend", default="fsdp", choices=["fsdp", "megatron"])
    return parser.parse_args()


def newest_step(checkpoints: Path) -> Path:
    steps = [p for p in checkpoints.glob("global_step_*") if p.is_dir() and p.name.rsplit("_", 1)[-1].isdigit()]
    if not steps:
        raise SystemExit(f"no global_step_<n> under {checkpoints}: train first, or pass --checkpoint")
    return max(steps, key=lambda p: int(p.name.rsplit("_", 1)[-1]))


def shard_folder(step: Path) -> Path:
    """RL runs keep the policy under actor/; SFT runs save the shards in the step folder itself."""
    actor = step / "actor"
    return actor if actor.is_dir() else step


def merge(step: Path, folder: Path, backend: str) -> None:
    command = [
        sys.executable,
        "-m",
        "verl.model_merger",
        "merge",
        "--backend",
        backend,
        "--local_dir",
        str(shard_folder(step)),
        "--target_dir",
        str(folder),
    ]
    print("+ " + " ".join(command), file=sys.stderr, flush=True)
    subprocess.run(command, check=True)


def main() -> int:
    args = parse_args()
    export_checkpoint(
        args.output_dir, args.checkpoint, newest_step, lambda step, folder: merge(step, folder, args.backend)
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
