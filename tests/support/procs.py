"""What a test's child process runs with."""

from __future__ import annotations

import os
from collections.abc import Mapping


def child_env(env: Mapping[str, str | None] | None = None) -> dict[str, str]:
    """This test's environment with `env` laid over it: a value sets a variable, None removes it."""
    merged = dict(os.environ)
    for key, value in (env or {}).items():
        if value is None:
            merged.pop(key, None)
        else:
            merged[key] = value
    return merged
