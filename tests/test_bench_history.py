"""bench/history.py builds its history through the bot's own writer: kept runnable by a small build."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from support.repos import BRANCH, git

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
    assert len(rows) == 7 and all(row[1] for row in rows)
    structure, _tiny = history.structure_floor(remote)
    *full, bot, floor = history.measure_clone(tmp_path, remote, 2, structure)  # the bot's clone: one commit
    assert all(v > 0 for v in full) and all(v > 0 for v in bot) and all(v > 0 for v in floor)
    assert not list(tmp_path.glob("shallow-*")) and not list(tmp_path.glob("clone-structure-*"))


def test_the_structure_floor_keeps_the_history_and_drops_the_content(tmp_path: Path) -> None:
    remote, _seconds = history.build_history(tmp_path / "h", runs=40, batch=20)
    floor, tiny_bytes = history.structure_floor(remote)

    def log(repo: Path) -> list[str]:  # every commit's subject, author, date and changed paths
        return git(repo, "log", "--format=%s %an %ad", "--name-status", "--no-renames", BRANCH).splitlines()

    assert log(floor) == log(remote)
    assert git(floor, "ls-tree", "-r", "--name-only", BRANCH) == git(remote, "ls-tree", "-r", "--name-only", BRANCH)

    def blobs(repo: Path) -> list[int]:
        listed = git(repo, "cat-file", "--batch-all-objects", "--batch-check=%(objecttype) %(objectsize)")
        return [int(size) for kind, size in (line.split() for line in listed.splitlines()) if kind == "blob"]

    ours, tiny = blobs(remote), blobs(floor)
    assert len(tiny) == len(ours)  # one distinct blob per distinct file version, as the history has
    assert max(tiny) <= 6 and 100 * sum(tiny) < sum(ours) and sum(tiny) == tiny_bytes
    assert len(list((floor / "objects" / "pack").glob("*.pack"))) == 1


def test_the_content_floor_compresses_every_version(tmp_path: Path) -> None:
    remote, _seconds = history.build_history(tmp_path / "h", runs=40, batch=20)
    listed = git(remote, "cat-file", "--batch-all-objects", "--batch-check=%(objecttype) %(objectsize)")
    raw = sum(int(size) for kind, size in (line.split() for line in listed.splitlines()) if kind == "blob")
    floor = history.history_entropy(remote, preset=1)
    assert 0 < floor < raw / 10
    again = history.build_history(tmp_path / "again", runs=80, batch=20)[0]  # more runs hold more content
    assert history.history_entropy(again, preset=1) > floor


def test_the_bots_ci_job_is_measured_with_every_file_and_sparse(tmp_path: Path) -> None:
    remote, _seconds = history.build_history(tmp_path / "h", runs=40, batch=20)

    measured = history.measure_ci(tmp_path, remote, 1)

    (full_checkout, full_pass, full_files), (sparse_checkout, sparse_pass, sparse_files) = (
        measured[False],
        measured[True],
    )
    files = len(git(remote, "ls-tree", "-r", "--name-only", BRANCH).splitlines())
    assert full_files == files and sparse_files == files - 3 * 40  # each run's request, status and chart left out
    assert min(full_checkout, full_pass, sparse_checkout, sparse_pass) > 0
    rows = history.ci_rows(40, 1, measured)
    assert len(rows) == 2 and rows[1][2] == "≤ 3 s" and all(row[3] == history.MAIN_CI for row in rows)
    assert not list(tmp_path.glob("ci-*"))
