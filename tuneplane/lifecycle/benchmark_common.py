"""What the benchmark runner's modules share: its settings, a suite's score and its one error. Standard library only."""

from __future__ import annotations

import sys

from tuneplane.runtime.records import FrozenRecord


class BenchError(Exception):
    """A problem the user can fix: reported as one line on stderr, exit status 2, no traceback."""


class Settings(FrozenRecord):
    model: str
    runner: str
    suites: tuple[str, ...]
    num_fewshot: int | None
    limit: int
    batch_size: str
    max_new_tokens: int
    temperature: float
    apply_chat_template: bool
    seed: int
    dtype: str | None


class SuiteScore(FrozenRecord):
    metric: str
    score: float
    stderr: float | None


def warn(message: str) -> None:
    print(f"benchmark_eval: warning: {message}", file=sys.stderr)
