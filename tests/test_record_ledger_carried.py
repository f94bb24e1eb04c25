"""What the ledger must carry from one bot run to the next, and what it must never take for its own:
the records of a lab whose `status/` a person removed in a depth-1 checkout (the workflow's), a refusal
whose cause is still committed, and a person's folder or page under `status/`.

Each case is the real `tp bot` through the CLI in real clones (the shallow one over smart HTTP), a
process where the case starts from a clone, in the test's process where it goes on from the settled lab.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from githttp import GitHttpServer
from support.repos import BRANCH, bot_pass, configure, git, tp_run
from test_record_ledger_adversary import A, B, _lab, _push, _settled, settled_template

from tuneplane.record.ledger import LEDGER

ENV = {"TUNEPLANE_STORAGE_ROOT": os.environ.get("TUNEPLANE_STORAGE_ROOT", "")}


@pytest.fixture(scope="module")
def settled(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The adversary suite's settled lab, made once per test process; each test copies it (`_lab`)."""
    return settled_template(tmp_path_factory)


def test_status_removed_whole_in_a_shallow_ci_checkout_submits_nothing_again(tmp_path: Path, settled: Path) -> None:
    _bot_clone, person = _lab(tmp_path, settled)
    before = {r: git(person, "show", f"HEAD:status/a/{r}.json") for r in A}
    for n in range(3):  # the bot's last commit a few commits back
        (person / f"notes-{n}.md").write_text("notes\n")
        _push(person, "notes")
    git(person, "rm", "-rq", "status")
    _push(person, "clean up the dashboard")
    server = GitHttpServer(tmp_path / "served").start()
    try:
        url = server.publish(Path(git(person, "remote", "get-url", "origin")), "lab.git")
        git(tmp_path, "clone", "-q", "--depth", "1", "-b", BRANCH, url, "ci")  # the workflow's checkout
        ci = tmp_path / "ci"
        configure(ci)
        assert git(ci, "rev-list", "--count", "HEAD") == "1"
        code, out = tp_run(ci, "bot", "reconcile", env=ENV, timeout=120)
    finally:
        server.stop()
    assert code == 0, out
    assert "submitted" not in out, out
    assert {r: git(ci, "show", f"HEAD:status/a/{r}.json") for r in A} == before


def _damaged_then_removed(person: Path) -> None:
    (person / LEDGER).write_text((person / LEDGER).read_text().replace('"a"', '"z"', 1))
    _push(person, "tidy the ledger")  # its digest no longer matches: it names no trees to restore from
    git(person, "rm", "-rq", "status")
    _push(person, "clean up the dashboard")


def test_status_removed_whole_after_its_ledger_was_damaged_is_restored_from_the_bots_record(
    tmp_path: Path, settled: Path
) -> None:
    """The bot's clone holds its record (refs/tuneplane/authority): its ledger, and every status it wrote,
    out of any pull request's reach. Nothing is submitted again, and the statuses come back."""
    bot, person = _lab(tmp_path, settled)
    before = {r: git(bot, "show", f"HEAD:status/a/{r}.json") for r in A}
    _damaged_then_removed(person)
    git(bot, "pull", "-q", "origin", BRANCH)

    code, out = tp_run(bot, "bot", "reconcile", env=ENV, timeout=120)

    assert code == 0 and "submitted as" not in out, out
    assert {r: git(bot, "show", f"HEAD:status/a/{r}.json") for r in A} == before


def test_status_removed_whole_after_its_ledger_was_damaged_is_refused_without_a_record(
    tmp_path: Path, settled: Path
) -> None:
    """A clone without the bot's record (a plain `git clone` fetches no refs/tuneplane/*): the history's
    ledger is damaged too, so nothing is guessed."""
    _bot_clone, person = _lab(tmp_path, settled)
    _damaged_then_removed(person)
    bot = tmp_path / "fresh"
    git(tmp_path, "clone", "-q", "-b", BRANCH, git(person, "remote", "get-url", "origin"), "fresh")
    configure(bot)

    code, out = tp_run(bot, "bot", "reconcile", env=ENV, timeout=120)

    assert code != 0, out
    assert "removes status/ with its ledger" in out and "git revert" in out, out
    assert "submitted as" not in out and "Traceback" not in out, out
    assert git(bot, "status", "--porcelain") == ""


def _hand_written_request(person: Path) -> None:
    text = (person / "runs/a" / f"{A[0]}.yaml").read_text()
    (person / "runs/a/my-second-try.yaml").write_text(text)


def test_a_refusal_stays_on_the_index_through_an_unrelated_full_pass(tmp_path: Path, settled: Path) -> None:
    bot, person = _lab(tmp_path, settled)
    _hand_written_request(person)
    _push(person, "a request written by hand")
    bot_pass(bot, "reconcile")
    assert "my-second-try" in git(bot, "show", "HEAD:status/README.md")
    git(person, "pull", "-q", "origin", BRANCH)
    p = person / "status/b" / f"{B[0]}.json"
    p.write_text(p.read_text().replace('"Succeeded"', '"Failed"'))
    _push(person, "b failed")

    for verb in ("sync", "reconcile"):
        bot_pass(bot, verb)
        assert "my-second-try" in git(bot, "show", "HEAD:status/README.md"), verb

    git(person, "pull", "-q", "origin", BRANCH)
    git(person, "rm", "-q", "runs/a/my-second-try.yaml")
    _push(person, "it was a mistake")
    bot_pass(bot, "sync")  # the first run after the fix, whichever verb
    assert "my-second-try" not in git(bot, "show", "HEAD:status/README.md")
    _settled(bot, tmp_path / "check", requests=False)  # sync never records requests; reconcile does
    bot_pass(bot, "reconcile")
    _settled(bot, tmp_path / "check2")


def test_a_refusal_stays_on_the_index_through_a_pass_that_watches_a_run(tmp_path: Path, settled: Path) -> None:
    bot, person = _lab(tmp_path, settled)
    run_id = "20250106-000000-0000000012"
    req = (person / "runs/a" / f"{A[1]}.yaml").read_text().replace(A[1], run_id)
    (person / "runs/a" / f"{run_id}.yaml").write_text(req)
    data = json.loads((person / "status/a" / f"{A[2]}.json").read_text())
    data.update(run_id=run_id, phase="Pending")
    data.pop("finished_at", None)
    (person / "status/a" / f"{run_id}.json").write_text(json.dumps(data, indent=2) + "\n")
    _hand_written_request(person)
    _push(person, "a pending run from a laptop and a request written by hand")
    bot_pass(bot, "reconcile")
    assert "my-second-try" in git(bot, "show", "HEAD:status/README.md")
    head = git(bot, "rev-parse", "HEAD")

    bot_pass(bot, "sync")

    assert git(bot, "rev-parse", "HEAD") == head, git(bot, "show", "--stat", "HEAD")


@pytest.mark.parametrize("extra", ["links.json", "2025-03.md"])
def test_a_persons_folder_and_month_named_page_under_status_stay_theirs(
    tmp_path: Path, settled: Path, extra: str
) -> None:
    bot, person = _lab(tmp_path, settled)
    (person / "status/notes").mkdir()
    (person / "status/notes/README.md").write_text("# Notes of the team\n")
    (person / "status/notes" / extra).write_text('{"see": "wiki"}\n' if extra.endswith("json") else "plans\n")
    (person / "status/a/2025-03.md").write_text("march plans for a\n")
    _push(person, "notes beside the dashboard")

    bot_pass(bot, "reconcile")

    assert git(bot, "show", "HEAD:status/notes/README.md") == "# Notes of the team"
    assert git(bot, "show", "HEAD:status/a/2025-03.md") == "march plans for a"
    assert "notes" not in json.loads(git(bot, "show", "HEAD:status/index.json"))["counts"]
    _settled(bot, tmp_path / "check")


def test_a_run_removed_with_its_status_leaves_no_folder_in_the_bots_clone(tmp_path: Path, settled: Path) -> None:
    bot, person = _lab(tmp_path, settled)
    git(person, "rm", "-rq", "status/b", "runs/b")
    _push(person, "b is done with")

    bot_pass(bot, "reconcile")

    assert not (bot / "status/b").exists()
    _settled(bot, tmp_path / "check")
