"""`TunePlaneCallback`: the Hugging Face / TRL trainer callback, duck-typed.

Trainers dispatch callback events by method name, so this class needs no transformers import. Events
we do not use are answered by `__getattr__` with a no-op, which keeps us compatible with events that
newer transformers releases add. For a type checker only, the class derives from transformers'
`TrainerCallback`, so `callbacks=[TunePlaneCallback()]` passes `mypy --strict` in a user's script.

What goes where, as the upstream guide has it (`on_log` → log, `on_evaluate` → validation):
- `on_log` sends the training logs with transformers' names (`loss` → `train/loss`, TRL's
  `rewards/chosen` → `train/rewards/chosen`, `test_*` → `test/*`; see `rewrite_logs`).
- An evaluation is sent once, by `on_evaluate`, under `validation/` (`eval_loss` →
  `validation/loss`). The Trainer first hands the same values to `on_log` (`eval_*` keys), which keeps
  them back for that `on_evaluate` (TRL adds its own `eval_*` values there, and they join it); should
  no `on_evaluate` follow (a loop of one's own), the next event of any kind sends them.
- The end-of-training summary (the log holding `train_loss` and `total_flos`) is sent under
  `summary/` with transformers' names (`summary/train_loss`, `summary/train_runtime`, ...): its
  `train_loss` is the mean over the run, not a step's loss, and must not join the `train/loss` series.
- `on_predict` sends `predict()`'s metrics under `test/`, which the Trainer never logs.
- `on_train_end` finishes the session (bounded by the SDK's finish timeout). A later event (a
  `trainer.evaluate()` after `train()`) starts a new one, with the trainer's arguments again.

The first event of any kind starts the session with the trainer's arguments, so an evaluation-only
run (`evaluate()` or `predict()` with no `train()`, hence no `on_train_begin`) reports like a training
run.

A second training in the same process (a second Trainer, or `train()` again) starts its steps
again at 0, and the receiver keeps one value per key and step: its points would replace the first
training's. So a different Trainer's training that begins below the highest step already reported
in this process continues from there (as wandb's own step counter does), and its evaluations and
predictions with it. A Trainer resuming a checkpoint that a training of this process saved (the
same output folder and step, seen in `on_save`) redoes that training's steps after it under their
numbers: it takes that training's base. One resuming any other checkpoint (another run's) continues
after the highest step too, like a new training. The same Trainer
beginning again (`auto_find_batch_size` reruns its training loop after an out-of-memory error;
`train()` once more) keeps its own steps: it redoes them. A Trainer is known by its arguments
object (the `args` every event gets), or by the callback when there is none.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    # Only what a type checker reads: with transformers installed, the callback is a TrainerCallback
    # to it, as the Trainer's `callbacks` parameter asks. At run time it derives from object.
    from transformers import TrainerCallback as _Base  # type: ignore[import-not-found,unused-ignore]
else:
    _Base = object

_highest = [0]  # the highest step any callback reported in this process
# The arguments object of the Trainer that last began training. Held, not its id(): an id is reused
# once the object is freed. A few hundred bytes; the model is never held.
_owner: list[object] = [None]
# (output folder, step) of each checkpoint saved in this process -> the base its training used
_saved: dict[tuple[str | None, int], int] = {}
MAX_SAVED = 10_000
VALIDATION = "validation/"
SUMMARY = "summary/"
# What the Trainer's end-of-training log holds besides the step's own values: `train_loss`,
# `total_flos`, `train_runtime` and the other `train_*` speed metrics, and the memory tracker's
# `init_mem_*`, `train_mem_*`, `before_init_mem_*` (with `skip_memory_metrics=False`).
_SUMMARY_MARKS = ("train_loss", "total_flos")
_SUMMARY_PREFIXES = ("train_", "init_mem_", "before_init_mem_")


class TunePlaneCallback(_Base):  # type: ignore[misc,valid-type,unused-ignore]  # object at run time
    """on_train_begin -> init, on_log -> train/ (and summary/), on_evaluate -> validation/,
    on_predict -> test/, on_train_end -> finish."""

    def __init__(self, *, monitor_hardware: bool = True, prefix: str = "") -> None:
        self.monitor_hardware = monitor_hardware
        self.prefix = prefix
        self._started = False
        self._base = 0  # added to the trainer's global step (see the module's docstring)
        # an evaluation's values on_log kept back for its on_evaluate: (step, {eval_x: value})
        self._held: tuple[int, dict[str, object]] | None = None

    def on_train_begin(
        self, args: object = None, state: object = None, control: object = None, **kwargs: object
    ) -> object:
        self._send_held()
        owner = args if args is not None else self
        if owner is not _owner[0]:  # a different Trainer: it continues the process's steps
            start = _step_of(state)
            saved = _saved.get((_folder_of(args), start)) if start else None
            # resuming a checkpoint this process saved redoes that training's steps; anything else
            # (a new training, another run's checkpoint) continues after the highest step
            self._base = saved if saved is not None else max(0, _highest[0] - start)
            _owner[0] = owner
        self._start(args)
        return control

    def on_log(
        self,
        args: object = None,
        state: object = None,
        control: object = None,
        logs: dict[str, object] | None = None,
        **kwargs: object,
    ) -> object:
        self._send_held()
        if logs:
            training, evaluation, summary = split_logs(logs)
            self._log(args, state, rewrite_logs(training) if training else None)
            self._log(args, state, {SUMMARY + key: value for key, value in summary.items()} or None)
            if evaluation:
                self._held = (self._step(state), evaluation)
        return control

    def on_evaluate(
        self,
        args: object = None,
        state: object = None,
        control: object = None,
        metrics: dict[str, object] | None = None,
        **kwargs: object,
    ) -> object:
        held = self._held if self._held is not None and self._held[0] == self._step(state) else None
        self._send_held(unless=held)
        self._held = None
        values = {**(held[1] if held else {}), **(metrics or {})}
        self._log(args, state, validation_names(values) or None)
        return control

    def on_predict(
        self,
        args: object = None,
        state: object = None,
        control: object = None,
        metrics: dict[str, object] | None = None,
        **kwargs: object,
    ) -> object:
        self._send_held()
        self._log(args, state, rewrite_logs(metrics) if metrics else None)
        return control

    def on_save(self, args: object = None, state: object = None, control: object = None, **kwargs: object) -> object:
        if len(_saved) >= MAX_SAVED:
            _saved.clear()
        _saved[(_folder_of(args), _step_of(state))] = self._base
        return control

    def on_train_end(
        self, args: object = None, state: object = None, control: object = None, **kwargs: object
    ) -> object:
        # lazy: tuneplane.report imports this module first
        from tuneplane.report import finish

        self._send_held()
        if self._started:
            self._started = False  # a later event (evaluate() after train()) starts a new session
            finish()
        return control

    def _start(self, args: object) -> None:
        # lazy: tuneplane.report imports this module first
        from tuneplane.report import init

        self._started = True
        init(hparams=_hparams_of(args), monitor_hardware=self.monitor_hardware)

    def _step(self, state: object) -> int:
        return self._base + _step_of(state)

    def _log(self, args: object, state: object, metrics: Mapping[str, object] | None, step: int | None = None) -> None:
        # lazy: tuneplane.report imports this module first
        from tuneplane.report import log

        if not self._started:
            self._start(args)
        if metrics:
            step = self._step(state) if step is None else step
            _highest[0] = max(_highest[0], step)
            log(metrics, step=step, prefix=self.prefix)

    def _send_held(self, unless: tuple[int, dict[str, object]] | None = None) -> None:
        """Send an evaluation on_log kept back whose on_evaluate never came (a loop of one's own)."""
        held, self._held = self._held, None
        if held is not None and held is not unless:
            self._log(None, None, validation_names(held[1]), step=held[0])

    def __getattr__(self, name: str) -> Callable[..., object]:
        if name.startswith("on_"):
            return _ignore
        raise AttributeError(name)


def forget_steps() -> None:
    """Start the process's step count over (`tuneplane.report._reset`: tests, long-lived tools)."""
    _highest[0] = 0
    _owner[0] = None
    _saved.clear()


def rewrite_logs(logs: Mapping[str, object]) -> dict[str, object]:
    """transformers' `rewrite_logs`, exactly: `eval_loss` -> `eval/loss`, `test_x` -> `test/x`, and
    everything else under `train/` (`loss` -> `train/loss`, TRL's `rewards/chosen` ->
    `train/rewards/chosen`), so keys read as they do in those integrations' dashboards."""
    out: dict[str, object] = {}
    for key, value in logs.items():
        name = str(key)
        if name.startswith("eval_"):
            out["eval/" + name[5:]] = value
        elif name.startswith("test_"):
            out["test/" + name[5:]] = value
        else:
            out["train/" + name] = value
    return out


def split_logs(logs: Mapping[str, object]) -> tuple[dict[str, object], dict[str, object], dict[str, object]]:
    """A Trainer log as (training values, an evaluation's `eval_*` values, the end-of-training summary).

    The summary is the log the Trainer writes once as training ends, known by `train_loss` and
    `total_flos` together; its `train_*`, memory and `total_flos` values are the summary, the rest
    (`epoch`, what TRL adds of its last steps) the step's own values.
    """
    training: dict[str, object] = {}
    evaluation: dict[str, object] = {}
    summary: dict[str, object] = {}
    ends = all(mark in logs for mark in _SUMMARY_MARKS)
    for key, value in logs.items():
        name = str(key)
        if name.startswith("eval_"):
            evaluation[name] = value
        elif ends and (name == "total_flos" or name.startswith(_SUMMARY_PREFIXES)):
            summary[name] = value
        else:
            training[name] = value
    return training, evaluation, summary


def validation_names(metrics: Mapping[str, object]) -> dict[str, object]:
    """An evaluation's metrics under `validation/`: `eval_loss` -> `validation/loss` (a named eval set's
    `eval_short_loss` -> `validation/short_loss`), another prefix's `test_loss` -> `validation/test_loss`.
    `epoch` is the trainer's progress, not a result: on_log sent it with the step's values."""
    out: dict[str, object] = {}
    for key, value in metrics.items():
        name = str(key)
        if name == "epoch":
            continue
        if name.startswith("eval_"):
            name = name[len("eval_") :]
        out[name if name.startswith(VALIDATION) else VALIDATION + name] = value
    return out


def _ignore(args: object = None, state: object = None, control: object = None, **kwargs: object) -> object:
    return control


def _step_of(state: object) -> int:
    try:
        return int(getattr(state, "global_step", 0) or 0)
    except (TypeError, ValueError):
        return 0


def _folder_of(args: object) -> str | None:
    """The output folder a Trainer saves its checkpoints in, resolved; None when it has none."""
    folder = getattr(args, "output_dir", None)
    try:
        return os.path.realpath(os.fspath(folder)) if folder else None
    except (TypeError, ValueError, OSError):
        return None


def _hparams_of(args: object) -> dict[str, object] | None:
    """TrainingArguments offer `to_sanitized_dict()`; other argument objects are left out."""
    try:
        if args is not None and hasattr(args, "to_sanitized_dict"):
            return dict(args.to_sanitized_dict()) or None
    except Exception:  # a broken args object must not stop training
        return None
    return None
