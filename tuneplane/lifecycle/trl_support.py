"""What the TRL templates share: one training run from the command line to checkpoints/final.

A template's train.py names only what is its method's: the trainer and config classes, its own
config keys, its reward functions. `TrainingRun.from_command_line()` reads the arguments the
platform passes, the experiment's config.yaml and the validated overrides, finds the output
directory, and `train()` builds the trainer with the model, the data sets (local files or the Hub),
the LoRA config and the platform's metrics callback, trains and writes checkpoints/final. export.py
(tuneplane.lifecycle.trl_export) uses the checkpoint helpers. Runs in the job: the standard library
at import; PyYAML, `datasets`, `transformers` and `peft` (the training image's) only inside the
functions that use them.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

# Re-exported: experiments scaffolded before TrainingRun import them from here (their trainer_config.py).
from tuneplane.constants import RESUME_FROM_ENV
from tuneplane.lifecycle.outputs import output_dir as output_dir
from tuneplane.lifecycle.overrides import apply_overrides as apply_overrides
from tuneplane.runtime.records import Record

# Keys of config.yaml that train.py consumes itself; everything else goes to the TRL config class.
SCRIPT_KEYS = (
    "model_name_or_path",
    "dataset_train_path",
    "dataset_eval_path",
    "use_peft",
    "lora_r",
    "lora_alpha",
    "lora_dropout",
    "lora_target_modules",
)
# Set by the platform from the run's output directory; a value in config.yaml is ignored.
PLATFORM_KEYS = ("output_dir", "logging_dir")
# What `report_to` may name for the platform's own reporting; transformers has no such integration.
REPORT_TO = "tuneplane"
_DATA_SUFFIXES = {".jsonl": "json", ".json": "json", ".parquet": "parquet", ".csv": "csv"}
LAUNCH = """\
The platform starts train.py with accelerate, one process per GPU:

    accelerate launch ... train.py --config <exp>/config.yaml \\
        --model <model> --train-data <data> --validation-data <data> \\
        --output-dir $TUNEPLANE_OUT_DIR --overrides-json '<validated --set values>'

Data: a local .jsonl/.json/.parquet/.csv file or folder, or a Hub data set name. config.yaml holds
the TRL config class's keys, plus model_name_or_path, dataset_train_path, dataset_eval_path (the
arguments above win), use_peft and lora_*. Outputs under --output-dir: checkpoints/checkpoint-<step>
while training, checkpoints/final at the end (model and tokenizer), logs under <output-dir>/logs
(--logging-dir, which the platform does not pass, moves them).
A new attempt of the run resumes from $TUNEPLANE_RESUME_FROM (the newest complete checkpoint-<step>,
set by the launcher) when it is set.
"""


def load_config(path: Path) -> dict[str, Any]:
    """The experiment config as a dict (an empty file is an empty config)."""
    # lazy: PyYAML comes with the training image's transformers; importing this module needs none
    import yaml

    if not path.is_file():
        raise SystemExit(f"{path}: no such config file; pass --config <experiment>/config.yaml")
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as exc:
        raise SystemExit(f"{path}: not valid YAML: {exc}") from None
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
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise SystemExit(
            f"--overrides-json is not valid JSON: {exc.msg} at line {exc.lineno}, column {exc.colno}"
        ) from None
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


def resume_checkpoint() -> str | None:
    """$TUNEPLANE_RESUME_FROM when it names a Trainer checkpoint folder, else None (a fresh start).

    The launcher sets it to the newest complete checkpoint under $TUNEPLANE_OUT_DIR/checkpoints, where
    TrainingRun points the Trainer's output_dir; a folder without trainer_state.json is not one the
    Trainer can resume (another loop's marked folder), so it is named and training starts afresh.
    """
    value = os.environ.get(RESUME_FROM_ENV, "")
    if not value:
        return None
    if not (Path(value) / "trainer_state.json").is_file():
        print(
            f"{RESUME_FROM_ENV}={value} is not a Trainer checkpoint (no trainer_state.json): "
            "training starts from the beginning",
            file=sys.stderr,
        )
        return None
    print(f"resuming from {value}", flush=True)
    return value


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


class TrainingRun(Record):
    """One run of a TRL template's train.py, as the platform starts it.

    `settings` is what goes to the TRL config class: config.yaml with the overrides applied, less the
    keys the script reads itself (`script`: model, data, LoRA and the template's own keys) and the
    platform's, with output_dir under the run's out dir. A template may change either before train().
    """

    model: str
    train_data: str
    eval_data: str | None
    out: Path
    config_path: Path
    settings: dict[str, Any]
    script: dict[str, Any]

    @classmethod
    def from_command_line(
        cls, description: str, own_keys: Sequence[str] = (), argv: Sequence[str] | None = None
    ) -> TrainingRun:
        """Read the arguments, config.yaml and --overrides-json; `own_keys` stay out of `settings`."""
        args = _parser(description).parse_args(argv)
        config_path: Path = args.config or Path(sys.argv[0]).resolve().parent / "config.yaml"
        settings = load_config(config_path)
        apply_overrides(settings, read_overrides(args.overrides_json))
        script = {key: settings.pop(key) for key in (*SCRIPT_KEYS, *own_keys) if key in settings}
        for key in PLATFORM_KEYS:
            settings.pop(key, None)
        _report_to_without_tuneplane(settings)
        model = args.model or script.get("model_name_or_path")
        train_data = args.train_data or script.get("dataset_train_path")
        if not model or not train_data:
            raise SystemExit(
                "a model and training data are required: pass --model and --train-data "
                f"(or set model_name_or_path and dataset_train_path in {config_path})"
            )
        eval_data = args.validation_data or script.get("dataset_eval_path") or None
        out = output_dir(args.output_dir)
        # transformers reads the TensorBoard folder from the environment, not from TrainingArguments.
        os.environ.setdefault("TENSORBOARD_LOGGING_DIR", str(Path(args.logging_dir or out / "logs")))
        settings["output_dir"] = str(out / "checkpoints")
        if not eval_data:
            settings["eval_strategy"] = "no"
        return cls(
            str(model), str(train_data), str(eval_data) if eval_data else None, out, config_path, settings, script
        )

    def peft_config(self, task_type: str = "CAUSAL_LM") -> Any:
        """A LoRA config from use_peft and lora_* when use_peft is on (peft is imported only then)."""
        if not self.script.get("use_peft"):
            return None
        # lazy: a training-image library, needed only for LoRA
        from peft import LoraConfig

        return LoraConfig(
            r=int(self.script.get("lora_r", 16)),
            lora_alpha=int(self.script.get("lora_alpha", 32)),
            lora_dropout=float(self.script.get("lora_dropout", 0.05)),
            target_modules=self.script.get("lora_target_modules", "all-linear"),
            task_type=task_type,
        )

    def trl_config(self, config_class: Any) -> Any:
        """`config_class(**settings)`; a key or value it refuses is a message naming config.yaml."""
        try:
            return config_class(**self.settings)
        except (TypeError, ValueError) as exc:
            raise SystemExit(
                f"{self.config_path}: {config_class.__name__} refuses these settings: {exc}; "
                "fix or remove the key in config.yaml or the --set value"
            ) from None

    def trainer(
        self, trainer_class: Any, config_class: Any, *, peft_task_type: str = "CAUSAL_LM", **kwargs: Any
    ) -> Any:
        """The trainer with the run's model, TRL config, data sets, LoRA config and metrics callback.

        A keyword given here is passed on and replaces the default of the same name (`model=` a
        model object you built, `processing_class=` a tokenizer, `reward_funcs=`, ...).
        """
        self._check_reward_weights(kwargs.get("reward_funcs"))
        defaults: dict[str, Callable[[], Any]] = {
            "model": lambda: self.model,
            "args": lambda: self.trl_config(config_class),
            "train_dataset": lambda: load_split(self.train_data, "train"),
            "eval_dataset": lambda: load_split(self.eval_data, "validation") if self.eval_data else None,
            "peft_config": lambda: self.peft_config(peft_task_type),
            "callbacks": platform_callbacks,
        }
        for name, make in defaults.items():
            if name not in kwargs:
                kwargs[name] = make()
        return trainer_class(**kwargs)

    def train(self, trainer_class: Any, config_class: Any, *, peft_task_type: str = "CAUSAL_LM", **kwargs: Any) -> int:
        """Build the trainer (see trainer()), train, write checkpoints/final; 0 for the exit status.

        A new attempt of the run (a requeue, a replaced pod, a retry) resumes from the checkpoint the
        launcher found (see resume_checkpoint()): model, optimizer, scheduler, step and data order.
        """
        trainer = self.trainer(trainer_class, config_class, peft_task_type=peft_task_type, **kwargs)
        trainer.train(resume_from_checkpoint=resume_checkpoint())
        self.save(trainer)
        return 0

    def save(self, trainer: Any) -> None:
        """Write the trained model and tokenizer to checkpoints/final."""
        checkpoints = self.out / "checkpoints"
        trainer.save_model(str(checkpoints / "final"))
        if trainer.is_world_process_zero():
            # The Trainer drops a model card beside the checkpoints; it is not a checkpoint.
            (checkpoints / "README.md").unlink(missing_ok=True)

    def _check_reward_weights(self, reward_funcs: Any) -> None:
        """TRL wants one reward weight per reward function; say so before any model is loaded."""
        weights = self.settings.get("reward_weights")
        if reward_funcs is None or weights is None:
            return
        count = len(reward_funcs) if isinstance(reward_funcs, list | tuple) else 1
        if not isinstance(weights, list) or len(weights) != count:
            given = f"{len(weights)} weights" if isinstance(weights, list) else repr(weights)
            raise SystemExit(
                f"{self.config_path}: reward_weights is {given} for {count} reward functions: "
                "give one weight per function, in order, or remove reward_weights to weigh "
                "them equally"
            )


def _report_to_without_tuneplane(settings: dict[str, Any]) -> None:
    """`report_to: tuneplane` (alone or in a list) asks for what the platform's callback already does
    (see platform_callbacks); transformers knows no integration of that name and would refuse it as
    the trainer is built, so the name is taken out and the rest is kept (`none` when nothing is left)."""
    value = settings.get("report_to")
    names = value if isinstance(value, list) else [value] if isinstance(value, str) else None
    if names is None or REPORT_TO not in names:
        return
    rest = [name for name in names if name != REPORT_TO]
    settings["report_to"] = rest if rest else "none"
    print(f"report_to: {REPORT_TO!r} is the platform's metrics callback, which this run has already", flush=True)


def _parser(description: str) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        description=description, epilog=LAUNCH, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--config", type=Path, help="the experiment's config.yaml (default: beside train.py)")
    parser.add_argument("--model", help="Hub id or local path (else model_name_or_path in the config)")
    parser.add_argument("--train-data", help="training data (else dataset_train_path)")
    parser.add_argument("--validation-data", help="validation data (else dataset_eval_path)")
    parser.add_argument("--output-dir", help="run output folder (default: $TUNEPLANE_OUT_DIR)")
    parser.add_argument("--logging-dir", help="log folder (default: <output-dir>/logs)")
    parser.add_argument("--overrides-json", help="JSON object of config paths to values, or @file")
    return parser
