"""A plain clone has no `../shared` beside it: the tests that read it skip and name it; CI fails them.

A copy of the test helpers (the conftest, the cluster twin, the `support` package) is laid out in a
temporary folder with no `shared/` next to it, and a small pytest session there asks for the CRDs the
way every suite does: the twin loading its CRD schemas, the `shared_dir` fixture, `require_shared`.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent

PROBES = """
from fakekube import FakeKube
from support.shared import require_shared


def test_the_twin_loads_the_crds():
    FakeKube().start().stop()


def test_the_fixture(shared_dir):
    assert shared_dir.is_dir()


def test_the_helper():
    assert require_shared("fixtures", "starforge-lab").is_dir()
"""


def _clone_without_shared(tmp_path: Path) -> Path:
    """The test helpers of this checkout, in `<tmp>/clone/tests`, with no `<tmp>/shared`."""
    tests = tmp_path / "clone" / "tests"
    tests.mkdir(parents=True)
    for helper in HERE.glob("*.py"):
        if not helper.name.startswith("test_"):
            shutil.copy2(helper, tests / helper.name)
    shutil.copytree(HERE / "support", tests / "support", ignore=shutil.ignore_patterns("__pycache__"))
    (tests / "test_probes.py").write_text(PROBES, encoding="utf-8")
    (tests.parent / "pytest.ini").write_text("[pytest]\n", encoding="utf-8")
    assert not (tmp_path / "shared").exists()
    return tests.parent


def _session(clone: Path, ci: str | None) -> tuple[int, str]:
    env = {k: v for k, v in os.environ.items() if k != "CI" and not k.startswith("PYTEST_")}
    if ci is not None:
        env["CI"] = ci
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-p",
            "no:xdist",
            "-p",
            "no:cacheprovider",
            # its own temporary root: pytest's numbered folders under the system's temp directory are
            # cleaned at exit, and that cleanup would delete other sessions' leftovers on our clock
            f"--basetemp={clone / 'tmp'}",
            "-q",
            "-rsfE",
            "tests/test_probes.py",
        ],
        cwd=clone,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    return done.returncode, done.stdout + done.stderr


def _counts(output: str) -> dict[str, int]:
    last = output.strip().splitlines()[-1]
    return {word: int(n) for n, word in re.findall(r"(\d+) (passed|skipped|failed|errors?)", last)}


def test_without_shared_every_reader_skips_naming_it(tmp_path: Path) -> None:
    code, output = _session(_clone_without_shared(tmp_path), ci=None)
    assert code == 0, output
    assert _counts(output) == {"skipped": 3}, output
    reasons = [line for line in output.splitlines() if line.startswith("SKIPPED")]
    assert len(reasons) == 3 and all("../shared/" in line for line in reasons), output
    assert "k8s-crds" in output and "FileNotFoundError" not in output


def test_in_ci_a_missing_shared_fails(tmp_path: Path) -> None:
    code, output = _session(_clone_without_shared(tmp_path), ci="1")
    assert code == 1, output
    counts = _counts(output)
    assert "skipped" not in counts and "passed" not in counts, output
    assert counts.get("failed", 0) + counts.get("error", 0) + counts.get("errors", 0) == 3, output
    assert output.count("needs ../shared/") >= 3, output
