"""The reward this verl run trains towards: edit compute_score to change it.

verl calls compute_score once per generated response, with the row's `data_source`, the decoded
response, the row's `reward_model.ground_truth` and its `extra_info`, and uses the returned float
as that response's reward. The shipped version fits question-answer data: 1.0 when the response's
final answer (the last \\boxed{...}, else the last number) equals the ground truth's, else 0.0,
read as `tp eval`'s answer_accuracy reads it (tuneplane.lifecycle.answers, installed in the image
beside the launcher), so the run is trained towards what it is scored on.
"""

from __future__ import annotations

from typing import Any

from tuneplane.lifecycle.answers import answer_score, final_answer

__all__ = ["compute_score", "final_answer"]


def compute_score(data_source: str, solution_str: str, ground_truth: Any, extra_info: Any = None) -> float:
    """1.0 for a correct final answer, 0.0 otherwise (including no readable answer)."""
    return answer_score(solution_str, str(ground_truth))
