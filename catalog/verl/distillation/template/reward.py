"""The reward verl's GRPO run trains towards: edit compute_score to change it.

verl calls compute_score once per generated response, with the row's `data_source`, the decoded
response, the row's `reward_model.ground_truth` and its `extra_info`, and uses the returned float
as that response's reward. The shipped version fits question-answer data: 1.0 when the response's
final answer (the last \\boxed{...}, else the last number) equals the ground truth, else 0.0.
"""

from __future__ import annotations

import re
from typing import Any

_BOXED = re.compile(r"\\boxed\{([^{}]*)\}")
_NUMBER = re.compile(r"-?\d[\d,]*(?:\.\d+)?")


def final_answer(text: str) -> str | None:
    """The last \\boxed{...}, else the last number, normalised; None when there is neither."""
    boxed = _BOXED.findall(text)
    if boxed:
        return _normalise(boxed[-1])
    numbers = _NUMBER.findall(text)
    return _normalise(numbers[-1]) if numbers else None


def _normalise(text: str) -> str:
    return " ".join(text.replace(",", "").strip().lower().split()).rstrip(".")


def compute_score(data_source: str, solution_str: str, ground_truth: Any, extra_info: Any = None) -> float:
    """1.0 for a correct final answer, 0.0 otherwise (including no readable answer)."""
    expected = str(ground_truth)
    want = final_answer(expected) or _normalise(expected)
    return 1.0 if final_answer(solution_str) == want else 0.0
