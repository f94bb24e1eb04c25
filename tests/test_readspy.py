"""The read spy the ledger tests rely on (tests/readspy.py) catches every way git can print a status:
its verdicts on real argv, and a real run of the spy whose git commands are all logged."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import readspy
from support.repos import git

SPY = Path(__file__).parent / "readspy.py"


@pytest.mark.parametrize(
    "argv",
    [
        ["show", "HEAD:status/a/20250101-000000-00000b.json"],
        ["cat-file", "-p", "HEAD:status/a/20250101-000000-00000b.json"],
        ["show", "HEAD"],
        ["log", "-p", "--", "status/"],
        ["diff-tree", "-p", "HEAD~1", "HEAD"],
        ["diff", "HEAD~1", "HEAD", "--patch", "--", "status"],
        ["grep", "phase", "HEAD:status/a"],
        ["-c", "core.quotepath=off", "show", "HEAD"],
    ],
)
def test_a_command_that_prints_status_contents_is_flagged(argv: list[str]) -> None:
    assert readspy._reads_content(argv), argv


@pytest.mark.parametrize(
    "argv",
    [
        ["rev-parse", "-q", "--verify", "HEAD:status/README.md"],
        ["cat-file", "-e", "HEAD:status/a"],
        ["cat-file", "-t", "HEAD:status/a/20250101-000000-00000b.json"],
        ["ls-tree", "-z", "HEAD", "--", "status/"],
        ["diff-tree", "-z", "--no-renames", "abc", "def"],
        ["show", "--stat", "HEAD"],
        ["log", "--format=%H", "-1"],
    ],
)
def test_a_command_that_prints_no_contents_is_not(argv: list[str]) -> None:
    assert not readspy._reads_content(argv), argv


def test_the_spy_logs_every_git_command_and_flags_a_show(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    git(tmp_path, "init", "-q", repo.name)
    script = tmp_path / "tuneplane_probe.py"
    script.write_text(
        "import subprocess\n"
        f"subprocess.run(['git', 'rev-parse', '--is-inside-work-tree'], cwd={str(repo)!r}, capture_output=True)\n"
        f"subprocess.run(['git', 'show', 'HEAD:status/a/x.json'], cwd={str(repo)!r}, capture_output=True)\n"
    )
    log = tmp_path / "log"
    code = (
        f"import runpy, sys; sys.argv = [{str(SPY)!r}, {str(log)!r}]; import runpy as r; "
        f"r.run_module = lambda *a, **k: runpy.run_path({str(script)!r}); "
        f"runpy.run_path({str(SPY)!r}, run_name='__main__')"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)
    entries = [json.loads(line) for line in log.read_text().splitlines()]
    assert [e["git"][0] for e in entries] == ["rev-parse", "show"]
    assert [bool(e.get("content")) for e in entries] == [False, True]
