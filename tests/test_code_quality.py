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


def test_no_module_is_over_500_lines():
    """A module over 500 lines holds more than one job (docs/architecture.md): split it by what it does."""
    package = Path(__file__).resolve().parents[1] / "tuneplane"
    long = {path.relative_to(package).as_posix(): n for path in sorted(package.rglob("*.py"))
            if (n := len(path.read_text(encoding="utf-8").splitlines())) > 500}
    assert not long, long
