"""The code style the project holds itself to: ruff (with complexity limits) and mypy --strict."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def test_ruff_is_clean():
    ruff = shutil.which("ruff") or pytest.fail("ruff is a test dependency: pip install -e '.[test]'")
    result = subprocess.run([ruff, "check", "--output-format", "concise", "tuneplane", "tests", "bench"],
                            cwd=ROOT, capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.slow
def test_mypy_strict_is_clean():
    result = subprocess.run([sys.executable, "-m", "mypy", "tuneplane"], cwd=ROOT, capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr
