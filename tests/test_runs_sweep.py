"""Sweeps as files: `tp sweep` writes sweeps/<name>.yaml and a request per trial in one commit, the bot
runs them like any request, and extend, cancel and rerun are one commit each. Real git, the real CLI,
the local backend running a trivial trainer."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from support.repos import clone, git, make_remote, quiet, remote_show, seed_lab
from support.wait import until

from tuneplane.bot.entry import BotOptions, reconcile, sync
from tuneplane.cli.main import run as tp
from tuneplane.lab.runs import RunKey, read_request, read_status, write_status
from tuneplane.lab.sweeps import read_sweep
from tuneplane.models.run import RUN_ID, RunStatus
from tuneplane.models.sweep import expand
from tuneplane.views.sweep import sweep_page

# reports a loss that differs per trial (a custom trainer sees its run id, not its --set values)
TRAIN = """#!/usr/bin/env bash
set -eu
mkdir -p "$TUNEPLANE_OUT_DIR/checkpoints"
python -c '
import os, zlib
from tuneplane import report
loss = zlib.crc32(os.environ["TUNEPLANE_RUN_ID"].encode()) % 1000 / 1000
for step in range(2):
    report.log({"loss": loss + 1 - step}, step=step)
report.finish()
'
"""
FLAGS = ["--profile", "local", "--image", "python:3.12", "--observability-url", "https://track.example.org/p"]
GRID = ["--grid", "lr=1e-5,3e-5", "--grid", "seed=0,1,2"]


@pytest.fixture
def lab(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    remote = make_remote(tmp_path)
    root = seed_lab(remote, tmp_path / "lab", {"demo": TRAIN})
    monkeypatch.chdir(root)
    return root


def cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str]:
    code = tp(list(args))
    out = capsys.readouterr()
    return code, out.out + out.err


def commits(root: Path) -> int:
    return int(git(root, "rev-list", "--count", "HEAD"))


def only_sweep(root: Path) -> str:
    (path,) = (root / "sweeps").glob("*.yaml")
    return path.stem


def run_to_end(bot: Path, run_ids: list[str]) -> None:
    """The bot submits the runs, then syncs every half second until each has Succeeded (2 minutes at most)."""
    reconcile(bot, BotOptions(push=True), echo=quiet)

    def phases() -> dict[str, str]:
        sync(bot, BotOptions(push=True), echo=quiet)
        return {r: read_status(bot, RunKey("demo", r)).phase for r in run_ids}  # type: ignore[union-attr]

    until(phases, lambda seen: set(seen.values()) == {"Succeeded"}, 120, "the runs never all Succeeded", every=0.5)


def test_a_2x3_sweep_is_written_validated_run_by_the_bot_and_compared(lab: Path, capsys) -> None:
    before = commits(lab)
    code, out = cli(capsys, "sweep", "demo", *GRID, *FLAGS)
    assert code == 0, out
    name = only_sweep(lab)
    assert commits(lab) == before + 1  # the sweep file and its six requests in one commit
    changed = git(lab, "show", "--name-only", "--format=", "HEAD").split()
    assert f"sweeps/{name}.yaml" in changed and len([c for c in changed if c.startswith("runs/demo/")]) == 6
    trials = expand(read_sweep(lab, name))
    assert sorted(t.params["lr"] for t in trials) == [1e-5] * 3 + [3e-5] * 3
    assert all(RUN_ID.match(t.run_id) for t in trials) and len({t.run_id for t in trials}) == 6
    for t in trials:
        req = read_request(lab, RunKey("demo", t.run_id))
        assert req.sweep == name and dict(req.set) == t.params

    assert cli(capsys, "validate")[0] == 0
    git(lab, "push", "-q", "origin", "HEAD:main")

    bot = clone(lab.parent / "remote.git", lab.parent / "bot")
    run_to_end(bot, [t.run_id for t in trials])

    git(lab, "pull", "-q", "origin", "main")
    code, out = cli(capsys, "job", "compare", "--sweep", name)
    assert code == 0, out
    for t in trials:
        assert t.run_id in out
    assert "lr=" in out and "seed=" in out  # the parameters that differ label each run

    page = sweep_page(lab, name)
    losses = [
        json.loads(remote_show(lab.parent / "remote.git", f"status/demo/{t.run_id}.json"))["metrics"]["train/loss"]
        for t in trials
    ]
    rows = [line for line in page.splitlines() if line.startswith("| ") and "`20" in line]
    shown = [float(line.rsplit("|", 2)[1]) for line in rows]
    assert shown == sorted(shown) and len(rows) == 6  # best (lowest loss) first
    assert sorted(shown) == pytest.approx(sorted(losses), rel=1e-3)
    assert "| # | run | phase | lr | seed | train/loss |" in page


def test_the_same_sweep_again_adds_nothing_and_expands_to_the_same_ids(lab: Path, capsys) -> None:
    assert cli(capsys, "sweep", "demo", *GRID, *FLAGS)[0] == 0
    name = only_sweep(lab)
    first = [t.run_id for t in expand(read_sweep(lab, name))]
    before = commits(lab)
    code, out = cli(capsys, "sweep", "demo", "--grid", "seed=0,1,2", "--grid", "lr=1e-5,3e-5", *FLAGS)
    assert code == 0, out
    assert "nothing to add" in out and commits(lab) == before
    assert [t.run_id for t in expand(read_sweep(lab, name))] == first
    code, out = cli(capsys, "sweep", "demo", "--name", name, "--grid", "lr=1e-4", *FLAGS)
    assert code == 2 and "already exists with other settings" in out


def test_sample_is_seeded_and_the_trial_cap_refuses_before_writing(lab: Path, capsys) -> None:
    assert cli(capsys, "sweep", "demo", *GRID, "--sample", "3", "--seed", "5", "--name", "a", *FLAGS)[0] == 0
    assert cli(capsys, "sweep", "demo", *GRID, "--sample", "3", "--seed", "5", "--name", "b", *FLAGS)[0] == 0
    a, b = (expand(read_sweep(lab, n)) for n in ("a", "b"))
    assert len(a) == 3 and [t.params for t in a] == [t.params for t in b]
    before = commits(lab)
    code, out = cli(capsys, "sweep", "demo", *GRID, "--max-trials", "4", *FLAGS)
    assert code == 2 and "6 trials, over its cap of 4" in out
    assert commits(lab) == before and git(lab, "status", "--porcelain") == ""


def test_extend_adds_only_the_new_trials_in_one_commit(lab: Path, capsys) -> None:
    assert cli(capsys, "sweep", "demo", *GRID, "--name", "s", *FLAGS)[0] == 0
    old = {t.run_id for t in expand(read_sweep(lab, "s"))}
    before = commits(lab)
    code, out = cli(capsys, "sweep", "extend", "s", "--grid", "lr=1e-4")
    assert code == 0, out
    new = {t.run_id for t in expand(read_sweep(lab, "s"))}
    assert old < new and len(new - old) == 3 and commits(lab) == before + 1
    assert len(git(lab, "show", "--name-only", "--format=", "HEAD").split()) == 4  # sweep + 3 requests
    code, out = cli(capsys, "sweep", "extend", "s", "--grid", "warmup=1")
    assert code == 2 and "warmup is not swept by s" in out


def test_cancel_marks_every_unfinished_trial_in_one_commit(lab: Path, capsys) -> None:
    assert cli(capsys, "sweep", "demo", *GRID, "--name", "s", *FLAGS)[0] == 0
    trials = expand(read_sweep(lab, "s"))
    _status(lab, trials[0].run_id, "Succeeded")  # an ended run is left as it is
    before = commits(lab)
    code, out = cli(capsys, "sweep", "cancel", "s")
    assert code == 0, out
    assert commits(lab) == before + 1
    cancelled = [read_request(lab, RunKey("demo", t.run_id)).cancel for t in trials]
    assert cancelled == [False] + [True] * 5
    assert cli(capsys, "sweep", "cancel", "s")[0] == 0 and commits(lab) == before + 1  # nothing more to do
    assert cli(capsys, "validate")[0] == 0


def test_rerun_failed_requests_each_failed_trial_again_in_one_commit(lab: Path, capsys) -> None:
    assert cli(capsys, "sweep", "demo", *GRID, "--name", "s", *FLAGS)[0] == 0
    trials = expand(read_sweep(lab, "s"))
    for t in trials:
        _status(lab, t.run_id, "Failed" if t.index in (1, 4) else "Succeeded")
    before = commits(lab)
    code, out = cli(capsys, "sweep", "rerun", "s", "--failed")
    assert code == 0, out
    assert commits(lab) == before + 1
    sweep = read_sweep(lab, "s")
    reruns = [t for t in expand(sweep) if t.rerun]
    assert [r.rerun_of for r in reruns] == [trials[1].run_id, trials[4].run_id]
    for r in reruns:
        req = read_request(lab, RunKey("demo", r.run_id))
        assert req.rerun_of == r.rerun_of and req.commit and dict(req.set) == r.params
    assert cli(capsys, "validate")[0] == 0
    assert cli(capsys, "sweep", "rerun", "s", "--failed")[0] == 0 and commits(lab) == before + 1  # not yet run


def test_validate_locates_requests_that_do_not_match_the_sweep(lab: Path, capsys) -> None:
    assert cli(capsys, "sweep", "demo", *GRID, "--name", "s", *FLAGS)[0] == 0
    trials = expand(read_sweep(lab, "s"))
    edited = lab / "runs" / "demo" / f"{trials[0].run_id}.yaml"
    edited.write_text(edited.read_text().replace("seed: 0", "seed: 9"))
    (lab / "runs" / "demo" / f"{trials[1].run_id}.yaml").unlink()
    code, out = cli(capsys, "validate")
    assert code == 1
    assert f"runs/demo/{trials[0].run_id}.yaml:" in out and "but trial 1 of sweep s says" in out
    assert "sweeps/s.yaml:" in out and f"trial 2 (lr=1e-05, seed=1) has no request runs/demo/{trials[1].run_id}" in out
    sweep_file = lab / "sweeps" / "s.yaml"
    sweep_file.write_text(
        sweep_file.read_text()
        .replace("profile: local", "profile: nope")
        .replace("max_trials: 64", "max_trials: 64\nearly_stopping: {patience: 2}")
    )
    code, out = cli(capsys, "validate")
    assert code == 1 and "[sweep-schema]" in out and "early_stopping" in out


def _status(root: Path, run_id: str, phase: str) -> None:
    write_status(root, RunStatus(experiment="demo", run_id=run_id, phase=phase))  # type: ignore[arg-type]
    git(root, "add", "status")
    git(root, "commit", "-q", "-m", f"status of {run_id}")


HAND_WRITTEN = """\
apiVersion: tuneplane/sweep/v1
kind: Sweep
name: hand
experiment: vision
profile: local
created_at: 20261202-101500
grid:
  learning_rate: [0.1, 20]
  optimizer: [adamw, adam]
  learning_rte: [1]
"""


@pytest.fixture
def vision(lab: Path) -> Path:
    """The lab with an experiment whose recipe declares typed, bounded parameters."""
    from tuneplane.author.scaffold import new_experiment
    from tuneplane.lab.load import load_lab

    new_experiment(load_lab(lab), "vision", "pytorch/image-classification", None)
    git(lab, "add", "-A")
    git(lab, "commit", "-q", "-m", "vision")
    return lab


def test_swept_parameters_are_checked_like_set_before_anything_is_written(vision: Path, capsys) -> None:
    before = commits(vision)
    code, out = cli(capsys, "sweep", "vision", "--grid", "learning_rte=0.1,0.2", "--profile", "local")
    assert code == 2 and "unknown hyperparameter 'learning_rte'" in out and "did you mean 'learning_rate'" in out
    code, out = cli(capsys, "sweep", "vision", "--grid", "optimizer=adamw,adam", "--profile", "local")
    assert code == 2 and "'adam') is not one of: adamw, sgd" in out
    assert commits(vision) == before and not (vision / "sweeps").exists()


def test_validate_locates_bad_parameters_at_their_value_and_extend_completes_a_hand_written_sweep(
    vision: Path, capsys
) -> None:
    (vision / "sweeps").mkdir()
    (vision / "sweeps" / "hand.yaml").write_text(HAND_WRITTEN)
    code, out = cli(capsys, "validate", "vision")
    assert code == 1
    assert "sweeps/hand.yaml:8:24: error [sweep-params] --set learning_rate: 20 is above the maximum 10" in out
    assert "sweeps/hand.yaml:9:22: error [sweep-params]" in out and "'adam') is not one of" in out
    assert "sweeps/hand.yaml:10:" in out and "unknown hyperparameter 'learning_rte'" in out
    assert "has no request" in out

    text = HAND_WRITTEN.replace(", 20]", "]").replace(", adam]", "]").replace("  learning_rte: [1]\n", "")
    (vision / "sweeps" / "hand.yaml").write_text(text)
    before = commits(vision)
    code, out = cli(capsys, "sweep", "extend", "hand")
    assert code == 0, out
    assert commits(vision) == before + 1 and git(vision, "status", "--porcelain") == ""
    assert cli(capsys, "validate", "vision")[0] == 0
