"""`TunePlaneCallback`: the Hugging Face / TRL trainer callback, duck-typed.

Trainers dispatch callback events by method name, so this class needs no transformers import. Events
we do not use are answered by `__getattr__` with a no-op, which keeps us compatible with events that
newer transformers releases add.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


class TunePlaneCallback:
    """on_train_begin -> init, on_log -> log, on_evaluate -> log(prefix="validation"),
    on_train_end -> finish."""

    def __init__(self, *, monitor_hardware: bool = True, prefix: str = "") -> None:
        self.monitor_hardware = monitor_hardware
        self.prefix = prefix

    def on_train_begin(self, args: Any = None, state: Any = None, control: Any = None, **kwargs: Any) -> Any:
        # lazy: tuneplane.report imports this module first
        from tuneplane.report import init

        init(hparams=_hparams_of(args), monitor_hardware=self.monitor_hardware)
        return control

    def on_log(self, args: Any = None, state: Any = None, control: Any = None,
               logs: dict[str, Any] | None = None, **kwargs: Any) -> Any:
        # lazy: tuneplane.report imports this module first
        from tuneplane.report import log

        if logs:
            log(logs, step=_step_of(state), prefix=self.prefix)
        return control

    def on_evaluate(self, args: Any = None, state: Any = None, control: Any = None,
                    metrics: dict[str, Any] | None = None, **kwargs: Any) -> Any:
        # lazy: tuneplane.report imports this module first
        from tuneplane.report import log

        if metrics:
            log(metrics, step=_step_of(state), prefix="validation")
        return control

    def on_train_end(self, args: Any = None, state: Any = None, control: Any = None, **kwargs: Any) -> Any:
        # lazy: tuneplane.report imports this module first
        from tuneplane.report import finish

        finish()
        return control

    def __getattr__(self, name: str) -> Callable[..., Any]:
        if name.startswith("on_"):
            return _ignore
        raise AttributeError(name)


def _ignore(args: Any = None, state: Any = None, control: Any = None, **kwargs: Any) -> Any:
    return control


def _step_of(state: Any) -> int:
    try:
        return int(getattr(state, "global_step", 0) or 0)
    except (TypeError, ValueError):
        return 0


def _hparams_of(args: Any) -> dict[str, Any] | None:
    """TrainingArguments offer `to_sanitized_dict()`; other argument objects are left out."""
    try:
        if args is not None and hasattr(args, "to_sanitized_dict"):
            return dict(args.to_sanitized_dict()) or None
    except Exception:  # a broken args object must not stop training
        return None
    return None
