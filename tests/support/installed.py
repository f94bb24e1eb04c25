"""`needs`: skip a test unless the packages it starts in a child process are installed."""

from __future__ import annotations

from importlib.util import find_spec

import pytest


def needs(*modules: str, reason: str = "") -> None:
    """Skip unless each module's top-level package is installed: found on the path, never imported.

    `pytest.importorskip` imports what it checks, in the pytest worker: torch, transformers and TRL
    cost seconds of CPU each, paid by every worker that ran a test which only starts them in a child
    process. Where the test itself uses the module, it imports it (or calls `importorskip`) as usual."""
    missing = [module for module in modules if find_spec(module.partition(".")[0]) is None]
    if missing:
        pytest.skip(reason or f"{', '.join(missing)} {'is' if len(missing) == 1 else 'are'} not installed")
