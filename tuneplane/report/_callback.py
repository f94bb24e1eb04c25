"""`TunePlaneCallback`: the Hugging Face / TRL trainer callback, duck-typed.

Trainers dispatch callback events by method name, so this class needs no transformers import. Events
we do not use are answered by `__getattr__` with a no-op, which keeps us compatible with events that
newer transformers releases add.

It follows transformers' own reporting integrations (its wandb, MLflow and TensorBoard callbacks):
everything comes from `on_log`, where the Trainer hands over training and evaluation logs alike, with
`eval_*` keys under `eval/`, `test_*` under `test/` and the rest (TRL's `rewards/chosen` too) under
`train/`. `on_evaluate` sends
nothing, since its metrics already arrived through `on_log`; `on_predict` sends `predict()`'s
metrics under `test/`, which the Trainer never logs. The first event of any kind starts the session
with the trainer's arguments, so an evaluation-only run (`evaluate()` or `predict()` with no
`train()`, hence no `on_train_begin`) reports like a training run. `on_train_end` only flushes
(bounded): the session stays open for a later `trainer.evaluate()` or `log()`, and finishes at
process exit within the SDK's drain time.

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

FLUSH_AT_TRAIN_END = 5.0  # seconds; what is left is still sent by the exit-time finish()
_highest = [0]  # the highest step any callback reported in this process
# The arguments object of the Trainer that last began training. Held, not its id(): an id is reused
# once the object is freed. A few hundred bytes; the model is never held.
_owner: list[object] = [None]
# (output folder, step) of each checkpoint saved in this process -> the base its training used
_saved: dict[tuple[str | None, int], int] = {}
MAX_SAVED = 10_000


class TunePlaneCallback:
    """on_train_begin -> init, on_log / on_predict -> log (train/, eval/, test/), on_train_end -> flush."""

    def __init__(self, *, monitor_hardware: bool = True, prefix: str = "") -> None:
        self.monitor_hardware = monitor_hardware
        self.prefix = prefix
        self._started = False
        self._base = 0  # added to the trainer's global step (see the module's docstring)

    def on_train_begin(
        self, args: object = None, state: object = None, control: object = None, **kwargs: object
    ) -> object:
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
        self._log(args, state, logs)
        return control

    def on_predict(
        self,
        args: object = None,
        state: object = None,
        control: object = None,
        metrics: dict[str, object] | None = None,
        **kwargs: object,
    ) -> object:
        self._log(args, state, metrics)
        return control

    def _start(self, args: object) -> None:
        # lazy: tuneplane.report imports this module first
        from tuneplane.report import init

        self._started = True
        init(hparams=_hparams_of(args), monitor_hardware=self.monitor_hardware)

    def _log(self, args: object, state: object, logs: Mapping[str, object] | None) -> None:
        # lazy: tuneplane.report imports this module first
        from tuneplane.report import log

        if not self._started:
            self._start(args)
        if logs:
            step = self._base + _step_of(state)
            _highest[0] = max(_highest[0], step)
            log(rewrite_logs(logs), step=step, prefix=self.prefix)

    def on_save(self, args: object = None, state: object = None, control: object = None, **kwargs: object) -> object:
        if len(_saved) >= MAX_SAVED:
            _saved.clear()
        _saved[(_folder_of(args), _step_of(state))] = self._base
        return control

    def on_train_end(
        self, args: object = None, state: object = None, control: object = None, **kwargs: object
    ) -> object:
        # lazy: tuneplane.report imports this module first
        from tuneplane.report import flush

        flush(FLUSH_AT_TRAIN_END)
        return control

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
