"""Which checkpoint a new attempt resumes from: the newest *complete* one under `$TUNEPLANE_OUT_DIR/checkpoints`.

Standard library only (it runs in training images). A checkpoint counts as complete only when the
framework that wrote it left its own "done" marker, so a folder half-written when the job was killed
is never offered for resuming:

- Hugging Face Trainer (TRL): `checkpoint-<N>/trainer_state.json` (written last by `_save_checkpoint`);
- verl: `latest_checkpointed_iteration.txt` naming N, beside `global_step_<N>/`;
- NeMo-RL: `step_<N>/training_info.json`;
- a custom loop: the folder it passed to `mark_complete(path, step)` once every file was written.

    from tuneplane.report.checkpoints import mark_complete
    save_everything(ckpt_dir)            # your own code
    mark_complete(ckpt_dir, step=1200)   # now a new attempt may resume from it
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

from tuneplane.runtime.files import atomic_write

CHECKPOINTS_DIR = "checkpoints"
MARKER = ".tuneplane-complete.json"
_HF = re.compile(r"^checkpoint-(\d+)$")
_NEMO = re.compile(r"^step_(\d+)$")


def mark_complete(path: str | os.PathLike[str], step: int) -> Path:
    """Declare the checkpoint folder `path` complete at `step`; returns the marker written (atomically)."""
    folder = Path(path)
    if isinstance(step, bool) or not isinstance(step, int) or step < 0:
        raise ValueError(f"step must be a non-negative integer, got {step!r}")
    if not folder.is_dir():
        raise ValueError(f"{folder} is not a directory: mark a checkpoint folder after writing it")
    marker = folder / MARKER
    atomic_write(marker, json.dumps({"step": step}))
    return marker


def newest_complete(out_dir: str | os.PathLike[str]) -> Path | None:
    """The newest complete checkpoint under `<out_dir>/checkpoints` (highest step), or None."""
    root = Path(out_dir) / CHECKPOINTS_DIR
    found = complete_checkpoints(root)
    if not found:
        return None
    return max(found, key=lambda item: (item[0], _mtime(item[1])))[1]


def complete_checkpoints(root: Path) -> list[tuple[int, Path]]:
    """(step, folder) of every complete checkpoint directly under `root`."""
    try:
        entries = sorted(os.scandir(root), key=lambda e: e.name)
    except OSError:
        return []
    found: list[tuple[int, Path]] = []
    for entry in entries:
        if not entry.is_dir(follow_symlinks=False):
            continue
        step = _step_of(Path(entry.path), entry.name)
        if step is not None:
            found.append((step, Path(entry.path)))
    verl = _verl_latest(root)
    if verl is not None:
        found.append(verl)
    return found


def _step_of(folder: Path, name: str) -> int | None:
    marked = _marked_step(folder / MARKER)
    if marked is not None:
        return marked
    hf = _HF.match(name)
    if hf and (folder / "trainer_state.json").is_file():
        return int(hf.group(1))
    nemo = _NEMO.match(name)
    if nemo and (folder / "training_info.json").is_file():
        return int(nemo.group(1))
    return None


def _marked_step(marker: Path) -> int | None:
    try:
        data = json.loads(marker.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    step = data.get("step") if isinstance(data, dict) else None
    return step if isinstance(step, int) and not isinstance(step, bool) and step >= 0 else None


def _verl_latest(root: Path) -> tuple[int, Path] | None:
    """verl writes the iteration file only after `global_step_<N>/` is saved: it is the completeness mark."""
    try:
        text = (root / "latest_checkpointed_iteration.txt").read_text(encoding="utf-8").strip()
    except OSError:
        return None
    if not text.isdigit():
        return None
    folder = root / f"global_step_{int(text)}"
    return (int(text), folder) if folder.is_dir() else None


def _mtime(path: Path) -> float:
    try:
        return path.stat().st_mtime
    except OSError:
        return 0.0
