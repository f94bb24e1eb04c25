"""Reading a final answer from generated text: the one parser `tp eval`'s answer_accuracy, TRL's
reward functions and verl's `compute_score` share, so a run is trained towards exactly what it is
scored on. Standard library only: it runs in the job (for verl, inside each Ray reward worker).
"""

from __future__ import annotations

import re

_BOXED = re.compile(r"\\boxed\{([^{}]*)\}")
_NUMBER = re.compile(r"-?\d[\d,]*(?:\.\d+)?")


def final_answer(text: str) -> str | None:
    """The last \\boxed{...}, else the last number, normalised; None when the text has neither."""
    boxed = _BOXED.findall(text)
    if boxed:
        return normalise(boxed[-1])
    numbers = _NUMBER.findall(text)
    return normalise(numbers[-1]) if numbers else None


def normalise(text: str) -> str:
    """Case, spacing, thousands separators and a closing full stop do not count."""
    return " ".join(text.replace(",", "").strip().lower().split()).rstrip(".")


def expected_answer(reference: str) -> str:
    """The answer a reference holds: its final answer when it has one (`#### 42`), else all of it."""
    return final_answer(reference) or normalise(reference)


def answer_score(text: str, reference: str) -> float:
    """1.0 when `text`'s final answer equals the reference's, else 0.0 (also when none can be read)."""
    got = final_answer(text)
    return 1.0 if got is not None and got == expected_answer(reference) else 0.0
