"""The bot writes each sweep's page (`status/_sweeps/<name>.md`) with the statuses of its trials, through
the same batch and ledger as the experiment pages: rewritten only when a trial's status changes, removed
when the sweep file goes, never written through a link. Real git, the real CLI, the local backend
running a trivial trainer."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest
from helpers_git import clone, git, quiet, remote_files, remote_show
from test_runs_sweep import FLAGS, GRID, cli, lab, only_sweep

from tuneplane.bot.entry import BotOptions, reconcile, sync
from tuneplane.lab.runs import RunKey, read_status
from tuneplane.lab.sweeps import read_sweep
from tuneplane.models.sweep import expand

__all__ = ["lab"]  # the sweep tests' lab (a trivial trainer, a bare remote), for every test here


def sweep_page_rel(name: str) -> str:
    """Where the docs say a sweep's page is."""
    return f"status/_sweeps/{name}.md"


def remote_head(lab: Path) -> str:
    return git(lab.parent / "remote.git", "rev-parse", "main").strip()


def run_sweep(lab: Path, capsys: pytest.CaptureFixture[str]) -> str:
    """A 2×3 sweep written by `tp sweep` and merged (pushed to main)."""
    code, out = cli(capsys, "sweep", "demo", *GRID, *FLAGS)
    assert code == 0, out
    git(lab, "push", "-q", "origin", "HEAD:main")
    return only_sweep(lab)


def run_to_end(bot: Path, trials: list[str]) -> None:
    reconcile(bot, BotOptions(push=True), echo=quiet)
    deadline = time.monotonic() + 120
    while True:
        sync(bot, BotOptions(push=True), echo=quiet)
        phases = {read_status(bot, RunKey("demo", r)).phase for r in trials}  # type: ignore[union-attr]
        if phases == {"Succeeded"} or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    assert phases == {"Succeeded"}


def table(page: str) -> list[list[str]]:
    """The trial rows of a sweep page, as cells."""
    return [[c.strip() for c in line.strip("|").split("|")] for line in page.splitlines() if line.startswith("| ")][1:]


def test_the_bot_writes_the_sweep_page_rewrites_it_only_on_change_and_removes_it_with_the_sweep(
    lab: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    name = run_sweep(lab, capsys)
    trials = [t.run_id for t in expand(read_sweep(lab, name))]
    bot = clone(lab.parent / "remote.git", lab.parent / "bot")
    remote = lab.parent / "remote.git"
    rel = sweep_page_rel(name)

    reconcile(bot, BotOptions(push=True), echo=quiet)
    submitted = remote_show(remote, rel)  # written with the trials' first statuses
    assert all(t in submitted for t in trials) and "Submitted" in submitted

    run_to_end(bot, trials)
    page = remote_show(remote, rel)
    assert f"# Sweep {name}" in page and "| # | run | phase | lr | seed | train/loss |" in page
    rows = table(page)
    assert len(rows) == 6 and {r[2] for r in rows} == {"Succeeded"}
    assert {r[1].split("`")[1] for r in rows} == set(trials)
    losses = [float(r[5]) for r in rows]
    assert losses == sorted(losses)  # a loss: lowest first
    assert sorted((r[3], r[4]) for r in rows) == sorted(
        (f"`{lr}`", f"`{seed}`") for lr in ("1e-05", "3e-05") for seed in (0, 1, 2)
    )
    for r in rows:  # each row links its status, relative to the page
        run_id = r[1].split("`")[1]
        assert f"(../demo/{run_id}.json)" in r[1]
        assert (bot / rel).parent.joinpath(f"../demo/{run_id}.json").resolve().is_file()
    index = remote_show(remote, "status/README.md")
    assert f"[{name}](_sweeps/{name}.md)" in index

    # the page's last change came with a trial's status, never alone
    last = git(remote, "log", "-1", "--format=%H", "main", "--", rel).strip()
    changed = git(remote, "show", "--name-only", "--format=", last).split()
    assert any(p.startswith("status/demo/") and p.endswith(".json") for p in changed)

    head = remote_head(lab)
    sync(bot, BotOptions(push=True), echo=quiet)
    reconcile(bot, BotOptions(push=True), echo=quiet)
    assert remote_head(lab) == head  # nothing changed: no commit, the page is not rewritten

    git(lab, "pull", "-q", "origin", "main")
    git(lab, "rm", "-q", f"sweeps/{name}.yaml")
    git(lab, "commit", "-q", "-m", "drop the sweep file")
    git(lab, "push", "-q", "origin", "HEAD:main")
    sync(bot, BotOptions(push=True), echo=quiet)
    assert rel not in remote_files(remote, "status/")
    assert f"_sweeps/{name}.md" not in remote_show(remote, "status/README.md")
    assert all(f"status/demo/{t}.json" in remote_files(remote, "status/") for t in trials)  # statuses stay

    head = remote_head(lab)
    sync(bot, BotOptions(push=True), echo=quiet)
    assert remote_head(lab) == head


def test_a_page_edited_by_hand_is_written_again(lab: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The bot's page (it carries the bot's note) edited by hand is the bot's again on its next pass,
    though no trial changed; a file without the note is a person's and stays, as in experiment folders."""
    name = run_sweep(lab, capsys)
    bot = clone(lab.parent / "remote.git", lab.parent / "bot")
    reconcile(bot, BotOptions(push=True), echo=quiet)
    rel = sweep_page_rel(name)
    written = remote_show(lab.parent / "remote.git", rel)
    git(lab, "pull", "-q", "origin", "main")
    (lab / rel).write_text(written + "my notes\n", encoding="utf-8")
    git(lab, "commit", "-q", "-am", "edit the sweep page")
    git(lab, "push", "-q", "origin", "HEAD:main")
    reconcile(bot, BotOptions(push=True), echo=quiet)
    assert remote_show(lab.parent / "remote.git", rel) == written


def test_a_link_at_the_sweep_page_does_not_stop_the_bot(
    lab: Path, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    code, out = cli(capsys, "sweep", "demo", *GRID, *FLAGS)
    assert code == 0, out
    name = only_sweep(lab)
    outside = tmp_path / "outside.md"
    outside.write_text("not the lab's\n", encoding="utf-8")
    rel = sweep_page_rel(name)
    (lab / rel).parent.mkdir(parents=True)
    os.symlink(outside, lab / rel)
    git(lab, "add", rel)
    git(lab, "commit", "-q", "-m", "a link where the sweep page goes")
    git(lab, "push", "-q", "origin", "HEAD:main")
    trials = [t.run_id for t in expand(read_sweep(lab, name))]

    bot = clone(lab.parent / "remote.git", lab.parent / "bot")
    reconcile(bot, BotOptions(push=True), echo=quiet)
    remote = lab.parent / "remote.git"
    assert all(f"status/demo/{t}.json" in remote_files(remote, "status/") for t in trials)
    assert outside.read_text(encoding="utf-8") == "not the lab's\n"  # never written through
    assert not (bot / rel).is_symlink() and f"# Sweep {name}" in remote_show(remote, rel)


def test_a_link_at_the_sweep_pages_folder_stops_only_the_pages(
    lab: Path, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    code, out = cli(capsys, "sweep", "demo", *GRID, *FLAGS)
    assert code == 0, out
    name = only_sweep(lab)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    folder = Path(sweep_page_rel(name)).parent
    os.symlink(elsewhere, lab / folder)
    git(lab, "add", str(folder))
    git(lab, "commit", "-q", "-m", "a link where the sweep pages go")
    git(lab, "push", "-q", "origin", "HEAD:main")
    trials = [t.run_id for t in expand(read_sweep(lab, name))]

    bot = clone(lab.parent / "remote.git", lab.parent / "bot")
    report = reconcile(bot, BotOptions(push=True), echo=quiet)
    assert all(f"status/demo/{t}.json" in remote_files(lab.parent / "remote.git", "status/") for t in trials)
    assert list(elsewhere.iterdir()) == []
    assert any(str(folder) in e for e in report.errors)
