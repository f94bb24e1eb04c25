"""A quiet history: the bot's commits never stand in a person's way, and metric points alone wait.

Real git throughout: a bare remote, two people's clones and the bot's. A person's `git pull --rebase`
after bot passes must not conflict (the pages and the ledger are the bot's: a person's commits carry
only their runs' own files); a local run commits twice, at its start and at its end; a sync whose only
news is metric points of running runs commits nothing until `bot.metrics_every` has passed, while a
phase change commits at once (the kube twin and a real metrics receiver).
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from fakekube import FakeKube
from support.repos import (
    BRANCH,
    add_requests,
    backend_factory,
    clone,
    git,
    kube_lab,
    make_remote,
    quiet,
    run_ids,
    seed_lab,
    tp_run,
)
from support.wait import wait_until
from test_bot_sync_metrics import SECRET, _free_port, _post

from tuneplane.bot.entry import BotOptions, reconcile, sync
from tuneplane.bot.report import BotReport
from tuneplane.ingest.server import IngestServer
from tuneplane.lab.runs import RunKey, read_status, write_status
from tuneplane.plan.names import object_name

pytest_plugins = ("fakekube",)
PUSH = BotOptions(push=True)


def _commits(root: Path) -> int:
    return int(git(root, "rev-list", "--count", "HEAD"))


def _submit_local(person: Path) -> str:
    """`tp submit --local` in a person's clone (not pushed); returns the run id."""
    code, out = tp_run(
        person,
        *("submit", "demo", "--profile", "local", "--image", "python:3.12"),
        *("--observability-url", "https://track.example.org/p", "--local"),
    )
    assert code == 0, out
    return git(person, "log", "-1", "--format=%s").split()[3]  # "Status of run <id> of demo: Succeeded"


def test_a_persons_pull_rebase_after_three_bot_passes_does_not_conflict(tmp_path: Path) -> None:
    remote = make_remote(tmp_path)
    first, second = run_ids(2)
    seed_lab(remote, tmp_path / "seed", runs=[("demo", first)])
    alice, bob, bot = (clone(remote, tmp_path / name) for name in ("alice", "bob", "bot"))

    assert reconcile(bot, PUSH, echo=quiet).pushed  # pass 1: submits the merged request, pages and ledger
    mine = _submit_local(alice)  # a local run on Alice's machine: committed there, not pushed yet
    add_requests(bob, [("demo", second)])  # Bob requests a run and pushes it, after the bot's first pass
    git(bob, "pull", "--rebase", "-q", "origin", BRANCH)
    git(bob, "push", "-q", "origin", f"HEAD:{BRANCH}")
    assert reconcile(bot, PUSH, echo=quiet).pushed  # pass 2: submits Bob's run

    def both_recorded() -> tuple[BotReport, dict[str, str]] | None:
        report = sync(bot, PUSH, echo=quiet)
        phases = {r: read_status(bot, RunKey("demo", r)).phase for r in (first, second)}  # type: ignore[union-attr]
        return (report, phases) if set(phases.values()) == {"Succeeded"} else None

    # pass 3: the bot's runs end (they are processes here), and it records both ends
    report, _ = wait_until(both_recorded, 90, interval=0.1, message="the bot never recorded both runs Succeeded")
    assert report.pushed
    bot_paths = git(bot, "diff", "--name-only", f"{git(alice, 'rev-parse', f'origin/{BRANCH}')}", "HEAD")
    assert "status/README.md" in bot_paths and "status/index.json" in bot_paths  # the bot rewrote the pages

    pulled = git(alice, "pull", "--rebase", "-q", "origin", BRANCH, check=False)
    assert not git(alice, "status", "--porcelain"), pulled  # no conflict, nothing left half done
    assert (alice / f"status/demo/{mine}.json").is_file() and (alice / f"runs/demo/{second}.yaml").is_file()
    assert git(bob, "pull", "--rebase", "-q", "origin", BRANCH, check=False) == ""

    git(alice, "push", "-q", "origin", f"HEAD:{BRANCH}")
    assert reconcile(bot, PUSH, echo=quiet).pushed  # the bot renders Alice's run into its pages
    index = (bot / "status/README.md").read_text(encoding="utf-8")
    page = (bot / "status/demo/README.md").read_text(encoding="utf-8")
    assert "**3 runs**" in index and mine in page
    assert json.loads((bot / "status/index.json").read_text())["counts"]["demo"] == {"Succeeded": 3}


def test_a_local_run_commits_at_its_start_and_at_its_end_with_its_own_files_only(tmp_path: Path) -> None:
    remote = make_remote(tmp_path)
    seed_lab(remote, tmp_path / "seed")
    alice = clone(remote, tmp_path / "alice")
    before = _commits(alice)

    run = _submit_local(alice)

    assert _commits(alice) == before + 2
    start, end = git(alice, "log", "-2", "--format=%H").splitlines()[::-1]
    assert git(alice, "show", "--format=", "--name-only", start).splitlines() == [f"runs/demo/{run}.yaml"]
    files = set(git(alice, "show", "--format=", "--name-only", end).splitlines())
    assert files == {f"status/demo/{run}.json"} or files == {f"status/demo/{run}.json", f"status/demo/{run}.svg"}
    assert read_status(alice, RunKey("demo", run)).phase == "Succeeded"  # type: ignore[union-attr]
    assert not git(alice, "status", "--porcelain")


def _running_lab(
    tmp_path: Path, fake_kube: FakeKube, monkeypatch: pytest.MonkeyPatch, every: int
) -> tuple[Path, str, int]:
    """A Kubernetes lab with a metrics receiver port and `bot.metrics_every: every`, its run submitted and
    running on the twin."""
    bot, (run_id,) = kube_lab(tmp_path)
    port = _free_port()
    config = bot / "tuneplane.yaml"
    text = config.read_text().replace('    endpoint: ""', f'    endpoint: "http://127.0.0.1:{port}"', 1)
    config.write_text(text + f"bot:\n  metrics_every: {every}\n")
    git(bot, "commit", "-qam", "the lab's receiver, and how often the bot commits metric points")
    monkeypatch.setenv("TUNEPLANE_INGEST_SECRET", SECRET.decode())
    reconcile(bot, backends=backend_factory(fake_kube), echo=quiet)
    name = object_name("demo", run_id)
    labels = fake_kube.get("Job", "tuneplane", name)["spec"]["template"]["metadata"]["labels"]
    fake_kube.add_pod("tuneplane", f"{name}-x", labels, "Running", start_time="2025-01-01T00:01:00Z")
    return bot, run_id, port


def test_metric_points_alone_wait_for_the_interval_and_a_phase_change_commits_at_once(
    tmp_path: Path, fake_kube: FakeKube, monkeypatch: pytest.MonkeyPatch
) -> None:
    bot, run_id, port = _running_lab(tmp_path, fake_kube, monkeypatch, every=3600)
    key = RunKey("demo", run_id)
    server = IngestServer(tmp_path / "ingest.sqlite", SECRET, port=port).start()
    try:
        _post(server.url, run_id, [("train/loss", 1, 3.0)])
        first = sync(bot, backends=backend_factory(fake_kube), echo=quiet)  # Running: a phase change
        assert first.commit and read_status(bot, key).metrics == {"train/loss": 3.0}  # type: ignore[union-attr]
        head = git(bot, "rev-parse", "HEAD")

        for step, loss in ((2, 2.0), (3, 1.5)):  # two syncs whose only news is metric points
            _post(server.url, run_id, [("train/loss", step, loss)])
            lines: list[str] = []
            report = sync(bot, backends=backend_factory(fake_kube), echo=lines.append)
            assert report.commit is None and report.held == [str(key)], lines
            assert any("bot.metrics_every is 3600 s" in line for line in lines), lines
        assert git(bot, "rev-parse", "HEAD") == head and not git(bot, "status", "--porcelain")

        name = object_name("demo", run_id)
        fake_kube.set_status(
            "Job",
            "tuneplane",
            name,
            {
                "startTime": "2025-01-01T00:01:00Z",
                "completionTime": "2025-01-01T00:09:00Z",
                "conditions": [{"type": "Complete", "status": "True"}],
            },
        )
        ended = sync(bot, backends=backend_factory(fake_kube), echo=quiet)  # the end commits at once
    finally:
        server.stop()
    assert ended.commit and git(bot, "rev-list", "--count", f"{head}..HEAD") == "1"
    status = read_status(bot, key)
    assert status.phase == "Succeeded" and status.metrics == {"train/loss": 1.5}  # type: ignore[union-attr]


def test_metric_points_are_committed_once_the_interval_has_passed(
    tmp_path: Path, fake_kube: FakeKube, monkeypatch: pytest.MonkeyPatch
) -> None:
    import tuneplane.bot.sync as bot_sync

    bot, run_id, port = _running_lab(tmp_path, fake_kube, monkeypatch, every=3600)
    key = RunKey("demo", run_id)
    server = IngestServer(tmp_path / "ingest.sqlite", SECRET, port=port).start()
    try:
        _post(server.url, run_id, [("train/loss", 1, 3.0)])
        assert sync(bot, backends=backend_factory(fake_kube), echo=quiet).commit  # Running, with its points
        committed_at = json.loads((bot / "status/index.json").read_text())["metrics_at"]
        assert committed_at
        _post(server.url, run_id, [("train/loss", 2, 2.0)])
        assert sync(bot, backends=backend_factory(fake_kube), echo=quiet).commit is None

        later = time.time() + 3601  # an hour on: the clock the interval is measured by
        monkeypatch.setattr(bot_sync, "now", lambda: later)
        report = sync(bot, backends=backend_factory(fake_kube), echo=quiet)
    finally:
        server.stop()
    assert report.commit and report.updated == [str(key)] and not report.held
    assert read_status(bot, key).metrics == {"train/loss": 2.0}  # type: ignore[union-attr]
    assert json.loads((bot / "status/index.json").read_text())["metrics_at"] > committed_at


def test_metrics_every_zero_commits_new_points_on_every_sync(
    tmp_path: Path, fake_kube: FakeKube, monkeypatch: pytest.MonkeyPatch
) -> None:
    bot, run_id, port = _running_lab(tmp_path, fake_kube, monkeypatch, every=0)
    server = IngestServer(tmp_path / "ingest.sqlite", SECRET, port=port).start()
    try:
        commits = []
        for step in (1, 2, 3):
            _post(server.url, run_id, [("train/loss", step, 1.0 / step)])
            commits.append(sync(bot, backends=backend_factory(fake_kube), echo=quiet).commit)
    finally:
        server.stop()
    assert all(commits) and len(set(commits)) == 3
    assert read_status(bot, RunKey("demo", run_id)).metrics == {"train/loss": 1.0 / 3}  # type: ignore[union-attr]


def test_a_run_after_a_killed_one_commits_once_with_what_the_killed_one_left(
    tmp_path: Path, fake_kube: FakeKube
) -> None:
    bot, (first,) = kube_lab(tmp_path)
    reconcile(bot, backends=backend_factory(fake_kube), echo=quiet)
    left = read_status(bot, RunKey("demo", first))
    assert left is not None
    write_status(bot, left.model_copy(update={"message": "written by a bot killed before its commit"}))
    (second,) = run_ids(1, day="20250103")
    add_requests(bot, [("demo", second)])  # merged meanwhile
    before = git(bot, "rev-parse", "HEAD")

    report = reconcile(bot, backends=backend_factory(fake_kube), echo=quiet)

    assert report.submitted == [f"demo/{second}"] and report.commit == git(bot, "rev-parse", "HEAD")
    assert git(bot, "rev-list", "--count", f"{before}..HEAD") == "1"
    assert "killed before its commit" in git(bot, "show", f"HEAD:status/demo/{first}.json")
    assert "interrupted bot run" in git(bot, "log", "-1", "--format=%B") and not git(bot, "status", "--porcelain")
