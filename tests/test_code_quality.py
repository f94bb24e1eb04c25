"""The code style the project holds itself to: ruff (with complexity limits), mypy --strict, short
modules, and tests named after what they test."""

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


# Suites about the whole project rather than one part of it, each with what it covers.
WHOLE_PROJECT = {
    "code_quality": "linters and the shape of the code",
    "layers": "the import contracts between the stages",
    "project": "README commands, the CI script, the workflows, the installed wheel",
    "e2e_local": "tp init to a status file in git, on one machine",
    "upstream_compat": "the upstream client reporting to our receiver",
}


def _module_names() -> set[str]:
    """`gitops_bot` for tuneplane/gitops/bot.py, and `gitops` for the package, and so on."""
    package = ROOT / "tuneplane"
    names = set()
    for path in package.rglob("*.py"):
        parts = [p.lstrip("_") for p in path.relative_to(package).with_suffix("").parts
                 if p not in ("__init__", "__main__")]
        names.update("_".join(parts[:i]) for i in range(1, len(parts) + 1))
    return names


def test_every_test_file_is_named_after_what_it_tests():
    """tests/test_<stage>_<module>[_<topic>].py: the tests of gitops/bot.py are test_gitops_bot*.py.

    A suite may instead be named after a folder of the repository it checks (catalog/, docs/,
    schemas/, bench/), a test double in tests/ (fakekube.py), or be one of the whole-project suites.
    """
    subjects = _module_names()
    subjects |= {p.name for p in ROOT.iterdir() if p.is_dir() and not p.name.startswith(".")} - {"tests", "build"}
    subjects |= {p.stem for p in (ROOT / "tests").glob("*.py") if not p.name.startswith("test_")}
    subjects |= set(WHOLE_PROJECT)
    unnamed = [path.name for path in sorted((ROOT / "tests").glob("test_*.py"))
               if not any(path.stem[5:] == s or path.stem[5:].startswith(s + "_") for s in subjects)]
    assert not unnamed, f"name these after the module they test (tests/test_<stage>_<module>.py): {unnamed}"
