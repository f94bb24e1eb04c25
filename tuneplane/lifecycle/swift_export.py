"""`tp export` of an ms-swift run: its checkpoint as a Hugging Face folder at <output-dir>/hf_export.

    python -m tuneplane.lifecycle.swift_export --checkpoint DIR [--output-dir DIR]

A LoRA checkpoint is merged by ms-swift's own export, `swift export --adapters <checkpoint>
--merge_lora true --output_dir <folder>` (the module `swift.cli.export`, run in this interpreter),
which reads the base model and template from the checkpoint's args.json; a full-weights checkpoint
is copied (see tuneplane.lifecycle.merged_export). Standard library only at import.
"""

from __future__ import annotations

import sys
from pathlib import Path

from tuneplane.lifecycle.merged_export import export, run_tool

MODULE = "swift.cli.export"


def merge_argv(checkpoint: Path, target: Path) -> list[str]:
    """The `swift export` flags that merge the adapter at `checkpoint` into `target`."""
    return ["--adapters", str(checkpoint), "--merge_lora", "true", "--output_dir", str(target)]


def main(argv: list[str] | None = None) -> int:
    return export(argv, "ms-swift", lambda checkpoint, tmp: run_tool(MODULE, merge_argv(checkpoint, tmp)))


if __name__ == "__main__":
    sys.exit(main())
