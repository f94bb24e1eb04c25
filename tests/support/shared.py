"""`../shared` beside the checkout: the public CRDs and fixtures some tests read at run time."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

# tests/support/shared.py → the checkout is parents[2]; `shared/` sits beside it
SHARED_DIR = Path(__file__).resolve().parents[2].parent / "shared"


def in_ci() -> bool:
    """CI sets `CI=true`: there a missing required thing fails the test instead of skipping it."""
    return os.environ.get("CI", "").strip().lower() in ("1", "true", "yes")


def require_shared(*parts: str) -> Path:
    """A path under `../shared` (public CRDs and fixtures); skips, with the reason, when it is absent.

    A fresh clone has no `../shared` beside it; the checks that need the real files then say so and
    skip. In CI (`CI=true`) the same absence is a failure, and `.ci/run` refuses to start without it.
    """
    path = SHARED_DIR.joinpath(*parts)
    if not path.exists():
        reason = f"needs ../shared/{'/'.join(parts) or ''} beside the checkout (real CRDs and fixtures); absent"
        if in_ci():
            pytest.fail(reason)
        pytest.skip(reason)
    return path
