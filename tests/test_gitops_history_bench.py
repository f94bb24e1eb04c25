"""bench/history.py builds its history through the bot's own writer: kept runnable by a small build."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from helpers_git import BRANCH, git

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))
import history


def test_the_history_bench_builds_a_lab_the_bot_wrote(tmp_path: Path) -> None:
    remote, _seconds = history.build_history(tmp_path / "h", runs=40, batch=20)

    files = git(remote, "ls-tree", "-r", "--name-only", BRANCH).splitlines()
    statuses = [f for f in files if f.startswith("status/") and f.endswith(".json") and f.count("/") == 2]
    charts = [f for f in files if f.endswith(".svg")]
    assert len(statuses) == 40 and len(charts) == 40
    subjects = git(remote, "log", "--format=%s", "-6", BRANCH).splitlines()[::-1]
    assert subjects == ["request 20 runs", "tp bot: submitted 20 runs", "tp bot: succeeded 20 runs"] * 2
    first = json.loads(git(remote, "show", f"{BRANCH}:{statuses[0]}"))
    assert first["phase"] == "Succeeded" and first["metrics"]
    assert "<path" in git(remote, "show", f"{BRANCH}:{charts[0]}")
    rows = history.floor(tmp_path, remote) + history.clone_phases(tmp_path, remote)
    assert len(rows) == 8 and all(row[1] for row in rows)
    *full, bot = history.measure_clone(tmp_path, remote, 2)  # the bot's clone checks it got one commit
    assert all(v > 0 for v in full) and all(v > 0 for v in bot)
    assert not list(tmp_path.glob("shallow-*"))  # its clones are removed
