"""Where a lifecycle program writes: the run's output folder, and an export published whole.

Job side: the standard library only.
"""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Callable
from pathlib import Path

from tuneplane.constants import OUT_DIR_ENV
from tuneplane.runtime.files import publish_dir


def output_dir(cli_value: str | None) -> Path:
    """--output-dir, else $TUNEPLANE_OUT_DIR, else ./out for a local try."""
    return Path(cli_value or os.environ.get(OUT_DIR_ENV) or "out").resolve()


def export_checkpoint(
    cli_output: str | None, checkpoint: Path | None, newest: Callable[[Path], Path], write: Callable[[Path, Path], None]
) -> Path:
    """Export a checkpoint (the one given, else `newest` under <out>/checkpoints) to <out>/hf_export.

    `write(checkpoint, folder)` fills `hf_export.partial`, which takes the place of `hf_export` only
    once it is complete: a reader never sees half an export, and a failed one leaves the last as it was.
    """
    out = output_dir(cli_output)
    source = (checkpoint or newest(out / "checkpoints")).resolve()
    target = out / "hf_export"
    partial = target.with_name(target.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    write(source, partial)
    shutil.rmtree(target, ignore_errors=True)
    publish_dir(partial, target)
    print(f"exported {source} -> {target}", file=sys.stderr)
    return target
