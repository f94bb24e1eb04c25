"""The bot writes each sweep's page (`status/_sweeps/<name>.md`) with the statuses of its trials, and its
chart beside it (`<name>.svg`, every trial's primary metric overlaid), through the same batch and ledger
as the experiment pages: rewritten only when a trial's status (the chart: its points) changes, removed
when the sweep file goes, never written through a link. Real git, the real CLI, the local backend
running a trivial trainer."""

from __future__ import annotations

import os
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from support.repos import clone, git, quiet, remote_files, remote_show
from test_runs_sweep import FLAGS, GRID, cli, lab, only_sweep, run_to_end

from tuneplane.bot.entry import BotOptions, reconcile, sync
from tuneplane.lab.gitrepo import GitRepo
from tuneplane.lab.sweeps import read_sweep
from tuneplane.models.run import RunStatus
from tuneplane.models.sweep import expand
from tuneplane.record.batch import Batch
from tuneplane.record.publish import Target, publish
from tuneplane.views.sweep import sweep_chart

__all__ = ["lab"]  # the sweep tests' lab (a trivial trainer, a bare remote), for every test here


def sweep_page_rel(name: str) -> str:
    """Where the docs say a sweep's page is."""
    return f"status/_sweeps/{name}.md"


NS = "{http://www.w3.org/2000/svg}"


def sweep_chart_rel(name: str) -> str:
    """Where the docs say a sweep's chart is: beside its page."""
    return f"status/_sweeps/{name}.svg"


def legend_of(svg: str) -> list[str]:
    """The legend's lines (the texts beside its swatches)."""
    root = ET.fromstring(svg)  # well-formed XML, or this fails
    texts = [t for t in root.iter(f"{NS}text") if t.get("x") == "84"]
    return ["".join(t.itertext()) for t in texts]


def lines_of(svg: str) -> list[ET.Element]:
    return list(ET.fromstring(svg).iter(f"{NS}path"))


def remote_head(lab: Path) -> str:
    return git(lab.parent / "remote.git", "rev-parse", "main").strip()


def run_sweep(lab: Path, capsys: pytest.CaptureFixture[str]) -> str:
    """A 2×3 sweep written by `tp sweep` and merged (pushed to main)."""
    code, out = cli(capsys, "sweep", "demo", *GRID, *FLAGS)
    assert code == 0, out
    git(lab, "push", "-q", "origin", "HEAD:main")
    return only_sweep(lab)


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

    # the chart beside the page: every trial's loss, one line each, named by its parameters
    assert f"![train/loss of every trial]({name}.svg)" in page
    svg = remote_show(remote, sweep_chart_rel(name))
    assert len(lines_of(svg)) == 6
    named = {line.split(" — ")[0] for line in legend_of(svg)}
    assert named == {f"lr={lr} seed={seed}" for lr in ("1e-05", "3e-05") for seed in (0, 1, 2)}
    best = rows[0][3].strip("`"), rows[0][4].strip("`")  # the page's first row
    assert f"lr={best[0]} seed={best[1]} — best" in legend_of(svg)

    # the page's and the chart's last change came with a trial's status, never alone
    for drawn in (rel, sweep_chart_rel(name)):
        last = git(remote, "log", "-1", "--format=%H", "main", "--", drawn).strip()
        changed = git(remote, "show", "--name-only", "--format=", last).split()
        assert any(p.startswith("status/demo/") and p.endswith(".json") for p in changed)

    # `tp job compare --sweep` draws the trials' whole series overlaid, the loss among the panels
    git(lab, "pull", "-q", "origin", "main")
    code, out = cli(
        capsys, "job", "compare", "--sweep", name, "--key", "train/loss", "--plot", str(lab.parent / "c.svg")
    )
    assert code == 0, out
    compared = (lab.parent / "c.svg").read_text(encoding="utf-8")
    assert len(lines_of(compared)) == 6 and all("lr=" in line and "seed=" in line for line in legend_of(compared))

    head = remote_head(lab)
    sync(bot, BotOptions(push=True), echo=quiet)
    reconcile(bot, BotOptions(push=True), echo=quiet)
    assert remote_head(lab) == head  # nothing changed: no commit, the page is not rewritten

    git(lab, "rm", "-q", f"sweeps/{name}.yaml")
    git(lab, "commit", "-q", "-m", "drop the sweep file")
    git(lab, "push", "-q", "origin", "HEAD:main")
    sync(bot, BotOptions(push=True), echo=quiet)
    assert rel not in remote_files(remote, "status/") and sweep_chart_rel(name) not in remote_files(remote, "status/")
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


# ── the chart ────────────────────────────────────────────────────────────────────────────────────


def committed_files(repo: Path, commit: str) -> list[str]:
    return git(repo, "show", "--name-only", "--format=", commit).split()


def trial_status(exp: str, run_id: str, phase: str, history: list[float]) -> RunStatus:
    return RunStatus(
        experiment=exp,
        run_id=run_id,
        phase=phase,
        metrics={"train/loss": history[-1]} if history else {},
        metric_history={"train/loss": history} if history else {},
    )


def test_the_sweep_chart_overlays_each_trials_points_and_changes_only_with_them(
    lab: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """One line per trial with points, named by its differing parameters, the best one thicker; trials
    without points are named as such; the chart is committed again only when a trial's points change."""
    code, out = cli(capsys, "sweep", "demo", *GRID, *FLAGS)
    assert code == 0, out
    name = only_sweep(lab)
    trials = expand(read_sweep(lab, name))
    label = {t.run_id: f"lr={t.params['lr']:.4g} seed={t.params['seed']}" for t in trials}
    histories = {t.run_id: [2.0, 1.5 - n / 10, 1.0 - n / 10] for n, t in enumerate(trials[:4])}
    best = trials[3].run_id  # the lowest last loss
    repo = GitRepo(lab)

    batch = Batch(repo)
    for t in trials[:4]:
        batch.status(trial_status("demo", t.run_id, "Running", histories[t.run_id]))
    batch.status(trial_status("demo", trials[4].run_id, "Pending", []))  # trials[5]: no status at all
    batch.render([], [])
    first = batch.commit("statuses")
    assert first is not None and sweep_chart_rel(name) in committed_files(lab, first)

    svg = (lab / sweep_chart_rel(name)).read_text(encoding="utf-8")
    legend = legend_of(svg)
    assert len(legend) == 6 and {line.split(" — ")[0] for line in legend} == set(label.values())
    assert f"{label[best]} — best" in legend
    assert {f"{label[t.run_id]} — no points yet" for t in trials[4:]} <= set(legend)
    paths = lines_of(svg)
    assert len(paths) == 4  # one line per trial with points, in one panel
    assert [p.get("stroke-width") for p in paths] == ["1.5", "1.5", "1.5", "3"]  # the best drawn last, thicker
    assert "lr=3e-05 seed=0" in label.values() and "lr=1e-05 seed=2" in label.values()
    page = (lab / sweep_page_rel(name)).read_text(encoding="utf-8")
    assert f"![train/loss of every trial]({name}.svg)" in page

    # a trial's status changes but not its points: its status and the page are committed, the chart is not
    batch = Batch(repo)
    batch.status(trial_status("demo", trials[4].run_id, "Running", []))
    batch.render([], [])
    second = batch.commit("a phase")
    assert second is not None
    assert sweep_chart_rel(name) not in committed_files(lab, second)
    assert (lab / sweep_chart_rel(name)).read_text(encoding="utf-8") == svg

    # a new point: the chart is drawn again, the trial's line and the legend follow
    batch = Batch(repo)
    batch.status(trial_status("demo", trials[4].run_id, "Running", [2.0, 0.1]))
    batch.render([], [])
    third = batch.commit("a point")
    assert third is not None and sweep_chart_rel(name) in committed_files(lab, third)
    redrawn = (lab / sweep_chart_rel(name)).read_text(encoding="utf-8")
    assert len(lines_of(redrawn)) == 5
    assert f"{label[trials[4].run_id]} — best" in legend_of(redrawn)
    assert f"{label[best]}" in legend_of(redrawn)  # no longer the best: named alone

    # nothing new: no commit at all
    batch = Batch(repo)
    batch.render([], [])
    assert batch.commit("nothing") is None


def test_a_sweep_chart_is_removed_with_its_sweep_and_a_persons_svg_stays(
    lab: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out = cli(capsys, "sweep", "demo", *GRID, "--name", "mine", *FLAGS)
    assert code == 0, out
    code, out = cli(capsys, "sweep", "demo", *GRID, "--name", "gone", *FLAGS)
    assert code == 0, out
    repo = GitRepo(lab)
    batch = Batch(repo)
    for name in ("mine", "gone"):
        trial = expand(read_sweep(lab, name))[0]
        batch.status(trial_status("demo", trial.run_id, "Running", [1.0, 0.5]))
    batch.render([], [])
    assert batch.commit("statuses") is not None
    assert (lab / sweep_chart_rel("gone")).is_file()
    person = '<svg xmlns="http://www.w3.org/2000/svg"><text>my own chart</text></svg>\n'
    (lab / sweep_chart_rel("mine")).write_text(person, encoding="utf-8")
    git(lab, "rm", "-q", "sweeps/gone.yaml")
    git(lab, "commit", "-q", "-am", "drop a sweep; a chart of my own")

    batch = Batch(repo)
    batch.sweeps_changed = True  # what the bot's pass sets when sweeps/ changed
    batch.render([], [])
    assert batch.commit("sweeps changed") is not None
    assert not (lab / sweep_chart_rel("gone")).exists() and not (lab / sweep_page_rel("gone")).exists()
    assert (lab / sweep_chart_rel("mine")).read_text(encoding="utf-8") == person


def test_a_rebase_draws_the_sweep_chart_again_from_both_sides_statuses(
    lab: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Two writers each commit statuses of other trials and so each a chart: the one that pushes second
    rebases, and its chart is drawn again from every status, never one side's chart kept."""
    name = run_sweep(lab, capsys)
    trials = expand(read_sweep(lab, name))
    remote = lab.parent / "remote.git"
    ours, theirs = clone(remote, lab.parent / "ours"), clone(remote, lab.parent / "theirs")
    for root, side in ((theirs, trials[:2]), (ours, trials[2:4])):
        batch = Batch(GitRepo(root))
        for t in side:
            batch.status(trial_status("demo", t.run_id, "Running", [2.0, 1.0 + t.index / 10]))
        batch.render([], [])
        assert batch.commit("statuses") is not None
    git(theirs, "push", "-q", "origin", "HEAD:main")

    publish(GitRepo(ours), Target("origin", "main"))
    svg = remote_show(remote, sweep_chart_rel(name))
    assert len(lines_of(svg)) == 4  # both sides' trials
    assert svg == sweep_chart(ours, name).rstrip("\n")
