#!/usr/bin/env python3
"""Start NeMo-RL's GRPO training for this experiment (the nemo-rl/grpo recipe).

The platform runs it as the driver of a Ray job:

    python run_grpo.py --config <exp>/config.yaml cluster.num_nodes=N cluster.gpus_per_node=G \
        checkpointing.checkpoint_dir=$TUNEPLANE_OUT_DIR logger.log_dir=$TUNEPLANE_OUT_DIR/logs \
        grpo.num_generations_per_prompt=16 ...

It resolves the experiment config against its base (`defaults:`, looked up beside the config and
then in the NeMo-RL installation), writes the merged result next to the run's outputs so the run
records exactly what it trained with, and hands it with the `path=value` overrides to the GRPO
driver that ships with the installed NeMo-RL (examples/run_grpo.py). Delegating keeps this file
valid across NeMo-RL releases, whose Python setup API changes between versions; replace the last
step with your own driver when you need a custom environment or data pipeline.
"""

from __future__ import annotations

import argparse
import os
import runpy
import sys
import tempfile
from pathlib import Path
from typing import Any

import yaml

DRIVER = Path("examples") / "run_grpo.py"


def nemo_rl_root() -> Path:
    """The NeMo-RL checkout the image installed: $NEMO_RL_ROOT, else the folder above the package."""
    if os.environ.get("NEMO_RL_ROOT"):
        return Path(os.environ["NEMO_RL_ROOT"])
    import nemo_rl

    return Path(nemo_rl.__file__).resolve().parents[1]


def find_base(reference: str, config_dir: Path, root: Path | None) -> Path:
    """A `defaults` entry as given, beside the config that names it, or inside NeMo-RL."""
    candidates = [Path(reference), config_dir / reference]
    if root is not None:
        candidates.append(root / reference)
    for candidate in candidates:
        if candidate.is_file():
            return candidate.resolve()
    raise SystemExit(f"defaults: {reference!r} not found beside {config_dir} or in the NeMo-RL installation")


def merge(base: Any, top: Any) -> Any:
    """Deep-merge mappings; `_override_: true` in `top` replaces instead of merging."""
    if isinstance(top, dict):
        replace = bool(top.get("_override_"))
        merged = {} if replace or not isinstance(base, dict) else dict(base)
        for key, value in top.items():
            if key != "_override_":
                merged[key] = merge(None if replace else merged.get(key), value)
        return merged
    return top


def resolve_config(path: Path, root: Path | None) -> dict[str, Any]:
    """The config at `path` laid over its `defaults` chain (bases may name bases of their own)."""
    config = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    references = config.pop("defaults", None) or []
    if isinstance(references, str):
        references = [references]
    resolved: dict[str, Any] = {}
    for reference in references:
        resolved = merge(resolved, resolve_config(find_base(str(reference), path.parent, root), root))
    return merge(resolved, config)


def write_resolved(config: dict[str, Any]) -> Path:
    """Keep the merged config with the run's outputs (a temp folder outside a job)."""
    out = os.environ.get("TUNEPLANE_OUT_DIR") or tempfile.mkdtemp(prefix="nemo-rl-")
    target = Path(out) / "logs" / "nemo_rl_config.yaml"
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(yaml.safe_dump(config, sort_keys=False), encoding="utf-8")
    return target


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="NeMo-RL GRPO for this experiment")
    parser.add_argument("--config", type=Path, default=Path(__file__).resolve().parent / "config.yaml")
    args, overrides = parser.parse_known_args(argv)
    root = nemo_rl_root()
    resolved = write_resolved(resolve_config(args.config.resolve(), root))
    driver = root / DRIVER
    if not driver.is_file():
        raise SystemExit(f"{driver} is missing: no NeMo-RL GRPO driver there (set NEMO_RL_ROOT)")
    print(f"config  : {resolved}\ndriver  : {driver}\noverrides: {' '.join(overrides)}", flush=True)
    sys.argv = [str(driver), "--config", str(resolved), *overrides]
    runpy.run_path(str(driver), run_name="__main__")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
