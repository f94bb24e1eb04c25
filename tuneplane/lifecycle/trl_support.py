"""What the TRL templates' train.py and export.py share (their trainer_config.py re-exports it).

Read the experiment's config.yaml, apply the platform's validated overrides, find the output
directory, load data sets from local files or the Hub, and bridge tuneplane.report into the
Hugging Face Trainer. Runs in the job: the standard library at import; PyYAML, `datasets` and
`transformers` (the training image's) only inside the functions that use them.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

# Re-exported: the templates' trainer_config.py imports them from here.
from tuneplane.lifecycle.outputs import output_dir as output_dir
from tuneplane.lifecycle.overrides import apply_overrides as apply_overrides

# Keys of config.yaml that train.py consumes itself; everything else goes to the TRL config class.
SCRIPT_KEYS = (
    "model_name_or_path", "dataset_train_path", "dataset_eval_path",
    "use_peft", "lora_r", "lora_alpha", "lora_dropout", "lora_target_modules",
)
# Set by the platform from the run's output directory; a value in config.yaml is ignored.
PLATFORM_KEYS = ("output_dir", "logging_dir")
_DATA_SUFFIXES = {".jsonl": "json", ".json": "json", ".parquet": "parquet", ".csv": "csv"}


def load_config(path: Path) -> dict[str, Any]:
    """The experiment config as a dict (an empty file is an empty config)."""
    # lazy: PyYAML may be absent from a training image; the caller falls back
    import yaml

    data = yaml.safe_load(path.read_text(encoding="utf-8"))
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise SystemExit(f"{path}: the config must be a mapping of keys to values")
    return data


def read_overrides(text: str | None) -> dict[str, Any]:
    """--overrides-json: a JSON object inline, or `@path` to a file holding one."""
    if not text:
        return {}
    if text.startswith("@"):
        text = Path(text[1:]).read_text(encoding="utf-8")
    value = json.loads(text)
    if not isinstance(value, dict):
        raise SystemExit("--overrides-json must be a JSON object of dotted config paths to values")
    return value


def load_split(source: str, split: str = "train") -> Any:
    """A data set from a local .jsonl/.json/.parquet/.csv file or folder, or else a Hub name."""
    # lazy: a training-image library, absent where tp runs
    from datasets import load_dataset

    path = Path(source).expanduser()
    if path.is_dir():
        files = sorted(p for p in path.iterdir() if p.suffix in _DATA_SUFFIXES)
        if not files:
            raise SystemExit(f"{path}: no .jsonl, .json, .parquet or .csv files in this folder")
        builder = _DATA_SUFFIXES[files[0].suffix]
        return load_dataset(builder, data_files=[str(p) for p in files], split="train")
    if path.is_file():
        kind = _DATA_SUFFIXES.get(path.suffix)
        if kind is None:
            raise SystemExit(f"{path}: expected a .jsonl, .json, .parquet or .csv file")
        return load_dataset(kind, data_files=str(path), split="train")
    return load_dataset(source, split=split)


def latest_checkpoint(checkpoints: Path) -> Path:
    """`final` when training finished, else the checkpoint-<step> folder with the highest step."""
    final = checkpoints / "final"
    if final.is_dir():
        return final
    steps = [p for p in checkpoints.glob("checkpoint-*") if p.is_dir() and p.name.split("-")[-1].isdigit()]
    if not steps:
        raise SystemExit(f"no checkpoint under {checkpoints}: train first, or pass --checkpoint")
    return max(steps, key=lambda p: int(p.name.split("-")[-1]))


def platform_callbacks() -> list[Any]:
    """TunePlaneCallback wrapped as a real TrainerCallback, or nothing when the SDK is absent.

    The SDK's callback is duck-typed and implements only the four events it needs, while the
    Trainer calls every event on every callback, so a thin subclass forwards those four and lets
    the base class answer the rest. Only the main process reports, so points are not multiplied
    by the process count.
    """
    try:
        # lazy: the SDK starts only when the job reports
        from tuneplane.report import TunePlaneCallback
    except ImportError:
        print("tuneplane.report is not importable: metrics go to stdout only", file=sys.stderr)
        return []
    # lazy: a training-image library, absent where tp runs
    from transformers import TrainerCallback

    class ForwardToTunePlane(TrainerCallback):  # type: ignore[misc,unused-ignore]  # untyped without stubs
        def __init__(self) -> None:
            self.inner = TunePlaneCallback()

        def _forward(self, event: str, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            method = getattr(self.inner, event, None)
            if callable(method) and getattr(state, "is_world_process_zero", True):
                method(args, state, control, **kwargs)

        def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            self._forward("on_train_begin", args, state, control, **kwargs)

        def on_log(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            self._forward("on_log", args, state, control, **kwargs)

        def on_evaluate(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            self._forward("on_evaluate", args, state, control, **kwargs)

        def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            self._forward("on_train_end", args, state, control, **kwargs)

    return [ForwardToTunePlane()]
