"""Convert the run's newest NeMo-RL checkpoint to a Hugging Face folder at <output-dir>/hf_export.

NeMo-RL saves each checkpoint as step_<n>/ with the policy's sharded weights in policy/weights
(torch distributed-checkpoint format), the tokenizer in policy/tokenizer and the run's config in
config.yaml. NeMo-RL's own converter rebuilds the model from the config's policy.model_name and
loads the shards into it; this script picks the step (newest, or --checkpoint) and publishes the
result through `outputs.export_checkpoint`, so a failed conversion leaves the last export as it was.

Job side: the standard library at import; yaml and NeMo-RL are imported where they are used (the
NeMo-RL image has both).
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tuneplane.lifecycle.outputs import export_checkpoint


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description="convert a NeMo-RL checkpoint to Hugging Face format")
    parser.add_argument("--output-dir", help="run output folder (default: $TUNEPLANE_OUT_DIR)")
    parser.add_argument("--checkpoint", type=Path, help="a step_<n> folder (default: the newest)")
    return parser.parse_args(argv)


def newest_step(checkpoints: Path) -> Path:
    """NeMo-RL writes step_<n> straight into its checkpoint_dir: the out dir, or checkpoints/ in it."""
    steps = [
        p
        for base in (checkpoints.parent, checkpoints)
        for p in base.glob("step_*")
        if p.is_dir() and p.name.rsplit("_", 1)[-1].isdigit()
    ]
    if not steps:
        raise SystemExit(f"no step_<n> checkpoint under {checkpoints.parent}: train first, or pass --checkpoint")
    return max(steps, key=lambda p: int(p.name.rsplit("_", 1)[-1]))


def converter() -> Callable[..., Any]:
    """NeMo-RL's DCP-to-HF function; its module moved between releases."""
    # lazy: NeMo-RL exists only in its image
    try:
        from nemo_rl.utils.native_checkpoint import convert_dcp_to_hf
    except ImportError:
        from nemo_rl.utils.automodel_checkpoint import convert_dcp_to_hf
    return convert_dcp_to_hf  # type: ignore[no-any-return]


def convert(step: Path, folder: Path) -> None:
    # lazy: yaml is in the training image, not in the standard library
    import yaml

    config = yaml.safe_load((step / "config.yaml").read_text(encoding="utf-8"))
    model_name = config["policy"]["model_name"]
    tokenizer = step / "policy" / "tokenizer"
    converter()(
        dcp_ckpt_path=str(step / "policy" / "weights"),
        hf_ckpt_path=str(folder),
        model_name_or_path=model_name,
        tokenizer_name_or_path=str(tokenizer) if tokenizer.is_dir() else model_name,
        overwrite=True,
    )


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    export_checkpoint(args.output_dir, args.checkpoint, newest_step, convert)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
