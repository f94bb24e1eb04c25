"""`python -m tuneplane.dev.schemagen`: writes the schemas, and bad arguments get a usage message."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tuneplane.dev.schemagen import render_all


def _schemagen(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tuneplane.dev.schemagen", *args], cwd=cwd, capture_output=True, text=True, timeout=120
    )


def test_help_and_a_missing_folder_are_usage_not_a_traceback(tmp_path: Path) -> None:
    shown = _schemagen("--help", cwd=tmp_path)
    assert shown.returncode == 0 and "usage:" in shown.stdout
    missing = _schemagen("nowhere", cwd=tmp_path)
    assert missing.returncode == 2 and "nowhere is not a folder" in missing.stderr
    assert "Traceback" not in missing.stderr and not (tmp_path / "nowhere").exists()


def test_it_writes_every_schema_into_the_folder_named(tmp_path: Path) -> None:
    done = _schemagen(str(tmp_path), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(render_all())
