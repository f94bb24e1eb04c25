"""The ledger against what people do to a lab: hand edits, deletions, a corrupted or edited index.

Every case drives `tp bot reconcile` / `tp bot sync` (the command line, in the test's process) in a
clone of a bare remote, with the local backend: a trainer that records each launch in a file and runs
until the test writes a stop file (bounded), so nothing depends on timing. Whatever a person did, the
bot must not forget a run it has not seen end, must not lose a status whose request is still there,
must not submit a run twice, and must leave a dashboard whose every link resolves in the committed tree.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
from support.repos import BRANCH, bot_pass, broken_links, clone, git, make_remote, seed_lab
from support.wait import wait_until

RUNS = ["20250102-100000-00000a", "20250102-100001-00000b"]


def _lab(tmp_path: Path) -> tuple[Path, Path, Path]:
    """A lab with two requested runs of `demo` whose trainer waits for `stop`; the bot's clone."""
    launches, stop = tmp_path / "launches", tmp_path / "stop"
    train = (
        f'#!/usr/bin/env bash\necho "$TUNEPLANE_RUN_ID" >> "{launches}"\n'
        f'for i in $(seq 1 600); do [ -e "{stop}" ] && exit 0; sleep 0.1; done\nexit 3\n'
    )
    remote = make_remote(tmp_path)
    seed_lab(remote, tmp_path / "seed", {"demo": train}, runs=[("demo", r) for r in RUNS])
    bot = clone(remote, tmp_path / "bot")
    return bot, launches, stop


def _phase(root: Path, run_id: str) -> str | None:
    text = git(root, "show", f"HEAD:status/demo/{run_id}.json", check=False)
    return json.loads(text)["phase"] if text else None


def _launched(launches: Path) -> list[str]:
    return launches.read_text().split() if launches.exists() else []


def _until_running(root: Path, launches: Path) -> None:
    """Once every run has launched, `tp bot sync` until the bot records each Running."""

    def running() -> bool:
        if len(_launched(launches)) != len(RUNS):
            return False
        bot_pass(root, "sync")
        return all(_phase(root, r) == "Running" for r in RUNS)

    wait_until(
        running,
        30,
        0.2,
        lambda: f"the runs did not start: launched {_launched(launches)}, phases {[_phase(root, r) for r in RUNS]}",
    )


def _until_ended(root: Path) -> str:
    """`tp bot sync` until the bot records each run Succeeded; what the syncs printed."""
    out: list[str] = []

    def ended() -> bool:
        out.append(bot_pass(root, "sync"))
        return all(_phase(root, r) == "Succeeded" for r in RUNS)

    wait_until(ended, 30, 0.2, lambda: f"the runs did not end: {[_phase(root, r) for r in RUNS]}\n{''.join(out)}")
    return "".join(out)


def _running_lab(tmp_path: Path) -> tuple[Path, Path, Path]:
    bot, launches, stop = _lab(tmp_path)
    bot_pass(bot, "reconcile")
    _until_running(bot, launches)
    return bot, launches, stop


def test_a_ledger_edited_by_hand_never_makes_the_bot_forget_a_running_run(tmp_path: Path) -> None:
    bot, launches, stop = _running_lab(tmp_path)
    ledger = json.loads((bot / "status/index.json").read_text())
    assert sorted(ledger["active"]) == [f"demo/{r}" for r in RUNS]
    ledger["active"].pop(f"demo/{RUNS[0]}")  # valid JSON, plausible, and wrong
    ledger["counts"]["demo"] = {"Succeeded": 7}
    (bot / "status/index.json").write_text(json.dumps(ledger, indent=1))
    git(bot, "commit", "-qam", "tidy the index")
    git(bot, "push", "-q", "origin", f"HEAD:{BRANCH}")
    stop.touch()

    out = _until_ended(bot)

    assert "status/index.json" in out and "not the one the bot recorded" in out, out  # it says what it did
    assert sorted(launches.read_text().split()) == RUNS  # nothing launched twice
    assert "**2 runs** · 2 succeeded" in git(bot, "show", "HEAD:status/README.md")
    assert json.loads(git(bot, "show", "HEAD:status/index.json"))["active"] == {}


def _delete(bot: Path, run: str) -> None:
    git(bot, "rm", "-q", f"status/demo/{run}.json")
    git(bot, "commit", "-qm", "remove a status")


def _corrupt(bot: Path, run: str) -> None:
    (bot / f"status/demo/{run}.json").write_text('{"phase": "Succeeded", oops\n')
    git(bot, "commit", "-qam", "a merge tool left this")


@pytest.mark.parametrize(
    ("damage", "run", "verb"),
    [(_delete, RUNS[1], "reconcile"), (_corrupt, RUNS[0], "sync")],
    ids=["deleted", "edited-into-no-json"],
)
def test_a_damaged_status_of_a_running_run_is_restored_and_the_run_still_ends(
    tmp_path: Path, damage: Callable[[Path, str], None], run: str, verb: str
) -> None:
    bot, launches, stop = _running_lab(tmp_path)
    damage(bot, run)
    git(bot, "push", "-q", "origin", f"HEAD:{BRANCH}")

    out = bot_pass(bot, verb)

    assert f"status/demo/{run}.json" in out and "restored" in out, out
    assert _phase(bot, run) == "Running"
    stop.touch()
    _until_ended(bot)
    assert sorted(launches.read_text().split()) == RUNS
    assert broken_links(bot) == []


def test_a_deleted_status_of_a_finished_run_comes_back_and_is_never_submitted_again(tmp_path: Path) -> None:
    bot, launches, stop = _running_lab(tmp_path)
    stop.touch()
    _until_ended(bot)
    before = git(bot, "show", f"HEAD:status/demo/{RUNS[0]}.json")
    git(bot, "rm", "-q", f"status/demo/{RUNS[0]}.json")
    git(bot, "commit", "-qm", "remove a status")
    git(bot, "push", "-q", "origin", f"HEAD:{BRANCH}")

    bot_pass(bot, "reconcile")
    (bot / "status/index.json").unlink()  # and later the ledger is lost: the request must still have its status
    git(bot, "commit", "-qam", "drop the ledger")
    git(bot, "push", "-q", "origin", f"HEAD:{BRANCH}")
    bot_pass(bot, "reconcile")

    assert git(bot, "show", f"HEAD:status/demo/{RUNS[0]}.json") == before
    assert sorted(launches.read_text().split()) == RUNS
    assert "**2 runs** · 2 succeeded" in git(bot, "show", "HEAD:status/README.md")


def test_a_deleted_request_or_experiment_leaves_no_broken_link_and_no_stale_count(tmp_path: Path) -> None:
    bot, _launches, stop = _running_lab(tmp_path)
    stop.touch()
    _until_ended(bot)
    git(bot, "rm", "-q", f"runs/demo/{RUNS[0]}.yaml")
    git(bot, "commit", "-qm", "forget a request; its status stays as history")
    git(bot, "push", "-q", "origin", f"HEAD:{BRANCH}")
    bot_pass(bot, "reconcile")
    assert broken_links(bot) == []
    assert _phase(bot, RUNS[0]) == "Succeeded"

    git(bot, "rm", "-rq", "runs/demo", "status/demo", "experiments/demo")
    git(bot, "commit", "-qm", "delete the experiment")
    git(bot, "push", "-q", "origin", f"HEAD:{BRANCH}")
    bot_pass(bot, "sync")  # either verb notices

    index = git(bot, "show", "HEAD:status/README.md")
    assert "demo" not in index and "**0 runs**" in index, index
    assert git(bot, "ls-tree", "-r", "--name-only", "HEAD", "--", "status/demo") == ""
    assert broken_links(bot) == []
    ledger = json.loads(git(bot, "show", "HEAD:status/index.json"))
    assert "demo" not in ledger["statuses"] and "demo" not in ledger["counts"]


def test_a_depth_1_clone_restores_a_status_deleted_before_it_was_cloned(tmp_path: Path) -> None:
    bot, launches, stop = _running_lab(tmp_path)
    stop.touch()
    _until_ended(bot)
    before = git(bot, "show", f"HEAD:status/demo/{RUNS[1]}.json")
    git(bot, "rm", "-q", f"status/demo/{RUNS[1]}.json")
    git(bot, "commit", "-qm", "remove a status")
    git(bot, "push", "-q", "origin", f"HEAD:{BRANCH}")
    remote = git(bot, "remote", "get-url", "origin")
    git(tmp_path, "clone", "-q", "--depth", "1", "-b", BRANCH, f"file://{remote}", "ci")  # the workflow's checkout
    ci = tmp_path / "ci"
    for key, value in (("user.name", "ci"), ("user.email", "ci@example.org")):
        git(ci, "config", key, value)

    out = bot_pass(ci, "reconcile")

    assert "restored" in out, out
    assert git(ci, "show", f"origin/{BRANCH}:status/demo/{RUNS[1]}.json") == before
    assert sorted(launches.read_text().split()) == RUNS


def test_a_request_the_bot_cannot_read_by_its_name_is_named_not_ignored(tmp_path: Path) -> None:
    bot, _launches, stop = _lab(tmp_path)
    stop.touch()  # its two runs end at once
    text = (bot / "runs/demo" / f"{RUNS[0]}.yaml").read_text()
    (bot / "runs/demo/20250105-100000-00000c.yml").write_text(text)  # hand-written, the wrong suffix
    (bot / "runs/demo/my-second-try.yaml").write_text(text)
    (bot / "runs/demo/sweep").mkdir()
    (bot / "runs/demo/sweep/20250105-100000-00000d.yaml").write_text(text)
    git(bot, "add", "-A")
    git(bot, "commit", "-qm", "requests written by hand")
    git(bot, "push", "-q", "origin", f"HEAD:{BRANCH}")

    out = bot_pass(bot, "reconcile")

    for name in ("runs/demo/20250105-100000-00000c.yml", "runs/demo/my-second-try.yaml", "runs/demo/sweep/"):
        assert name in out and "tp submit" in out, out
    assert "runs/demo/my-second-try.yaml is not read as a run request" in git(bot, "show", "HEAD:status/README.md")


def test_a_request_deleted_while_its_run_runs_leaves_the_run_watched_to_its_end(tmp_path: Path) -> None:
    bot, launches, stop = _running_lab(tmp_path)
    git(bot, "rm", "-q", f"runs/demo/{RUNS[0]}.yaml")
    git(bot, "commit", "-qm", "withdraw a request (cancel: true is the way, but people do this)")
    git(bot, "push", "-q", "origin", f"HEAD:{BRANCH}")

    bot_pass(bot, "reconcile")
    assert broken_links(bot) == []
    stop.touch()
    _until_ended(bot)

    assert sorted(launches.read_text().split()) == RUNS
    assert json.loads(git(bot, "show", "HEAD:status/index.json"))["active"] == {}
    assert broken_links(bot) == []


def test_a_running_runs_request_and_status_deleted_together_still_get_its_end_recorded(tmp_path: Path) -> None:
    bot, launches, stop = _running_lab(tmp_path)
    git(bot, "rm", "-q", f"runs/demo/{RUNS[0]}.yaml", f"status/demo/{RUNS[0]}.json")
    git(bot, "commit", "-qm", "take the run out of the lab (while its job runs)")
    git(bot, "push", "-q", "origin", f"HEAD:{BRANCH}")

    out = bot_pass(bot, "sync")

    assert f"status/demo/{RUNS[0]}.json was deleted while its run is still Running" in out, out
    stop.touch()
    _until_ended(bot)
    assert json.loads(git(bot, "show", "HEAD:status/index.json"))["active"] == {}

    git(bot, "rm", "-q", f"status/demo/{RUNS[0]}.json")  # after its end, the removal stands
    git(bot, "commit", "-qm", "take the ended run out of the lab")
    git(bot, "push", "-q", "origin", f"HEAD:{BRANCH}")
    bot_pass(bot, "reconcile")
    assert _phase(bot, RUNS[0]) is None and _phase(bot, RUNS[1]) == "Succeeded"
    assert "**1 run** · 1 succeeded" in git(bot, "show", "HEAD:status/README.md")
    assert sorted(launches.read_text().split()) == RUNS
    assert broken_links(bot) == []
