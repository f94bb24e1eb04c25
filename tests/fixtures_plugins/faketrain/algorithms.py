"""The functions test plugins patch, as a real plugin patches a framework's algorithm module."""

from __future__ import annotations

# How many times a plugin wrapped something here: a second wrap would show as 2.
PATCH_CALLS = 0


def compute_advantages(rewards: list[float]) -> list[float]:
    """Rewards minus their mean."""
    mean = sum(rewards) / len(rewards)
    return [r - mean for r in rewards]


def token_budget(text: str) -> int:
    """Tokens a sample may use; a deferred plugin replaces it once the tokenizer exists."""
    return len(text)
