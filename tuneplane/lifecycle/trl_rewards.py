"""Reward functions for TRL's online trainers (GRPO, RLOO) on question-answer data, and their parts.

TRL calls each reward function with the batch's `completions` (strings, or lists of chat messages
for conversational data) and every other data-set column as a keyword argument holding one value
per completion; each returns one float per completion, or None where it does not apply, and TRL
reports it as rewards/<function name>/mean. The two here fit data with an `answer` column holding
the expected final answer (a number, or the content of a \\boxed{...}), read from a completion as
`tp eval`'s answer_accuracy reads it (tuneplane.lifecycle.answers). A template's rewards.py
lists the functions a run uses; write your own there with `completion_text` and `final_answer`.
Standard library only: it runs in the job.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TypeAlias

from tuneplane.lifecycle.answers import answer_score, final_answer

# One completion: its text, or for conversational data its chat messages ({"role", "content"}).
Completion: TypeAlias = "str | Sequence[Mapping[str, object]]"

__all__ = ["accuracy_reward", "completion_text", "final_answer", "format_reward"]


def completion_text(completion: Completion) -> str:
    """The generated text of one completion, conversational or not."""
    if isinstance(completion, str):
        return completion
    return "".join(str(m.get("content", "")) for m in completion if m.get("role") == "assistant")


def accuracy_reward(
    completions: list[Completion], answer: list[object] | None = None, **_: object
) -> list[float | None]:
    """1.0 when the completion's final answer equals the row's `answer`, else 0.0."""
    if answer is None:
        return [None] * len(completions)
    return [answer_score(completion_text(c), str(expected)) for c, expected in zip(completions, answer, strict=True)]


def format_reward(completions: list[Completion], **_: object) -> list[float | None]:
    """1.0 when a final answer can be read from the completion at all: a small shaping term."""
    return [1.0 if final_answer(completion_text(c)) is not None else 0.0 for c in completions]
