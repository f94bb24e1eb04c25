"""The ledger against everyone else who writes to the lab: each case changes what the ledger summarises
(by hand, by git, by force), then runs the real `tp bot reconcile` and `tp bot sync` in the bot's clone.

The oracle is the same every time (`_settled`): the bot's commit holds pages and counts equal to a full
re-render from its status files (`record.refresh_dashboard` in a fresh clone commits nothing), a
ledger the bot trusts whose tree ids are the commit's, a clean work tree, and a next run of either
verb that commits nothing. The lab's runs have all ended (statuses written through the bot's own
writer), so no case waits on a process.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from helpers_git import BRANCH, broken_links, clone, git, make_remote, seed_lab, tp_run

from tuneplane.gitops.ledger import LEDGER, Ledger
from tuneplane.gitops.record import Batch, refresh_dashboard
from tuneplane.lab.gitrepo import GitRepo
from tuneplane.models.run import RunStatus, Transition

A = ["20241231-235900-00000a", "20250101-000000-00000b", "20250101-000001-000000000c", "20250102-000000-00000d"]
B = ["20250103-000000-00000e", "20250104-000000-00000f"]


def _status(exp: str, run_id: str, phase: str = "Succeeded") -> RunStatus:
    day = f"{run_id[:4]}-{run_id[4:6]}-{run_id[6:8]}T00:00:00Z"
    return RunStatus(experiment=exp, run_id=run_id, phase=phase, profile="local",  # type: ignore[arg-type]
                     started_at=day, finished_at=day.replace("00:00:00", "00:00:07.5"),
                     history=[Transition(phase=phase, at=day)])  # type: ignore[arg-type]


def _lab(tmp_path: Path) -> tuple[Path, Path]:
    """A lab of two experiments whose runs all ended, settled by one bot run; (the bot's clone, a person's)."""
    remote = make_remote(tmp_path)
    runs = [("a", r) for r in A] + [("b", r) for r in B]
    seed = seed_lab(remote, tmp_path / "seed", {"a": "echo hi\n", "b": "echo hi\n"}, runs=runs)
    batch = Batch(GitRepo(seed))
    for exp, run_id in runs:
        batch.status(_status(exp, run_id, "Failed" if run_id == A[1] else "Succeeded"))
    batch.render([], [])
    batch.commit("tp bot: the runs ended")
    git(seed, "push", "-q", "origin", f"HEAD:{BRANCH}")
    bot = clone(remote, tmp_path / "bot")
    _bot(bot, "reconcile")
    _settled(bot, tmp_path / "check0")
    return bot, clone(remote, tmp_path / "person")


def _bot(root: Path, verb: str) -> str:
    env = {"TUNEPLANE_STORAGE_ROOT": os.environ["TUNEPLANE_STORAGE_ROOT"]}
    code, out = tp_run(root, "bot", verb, "--push", env=env, timeout=120)
    assert code == 0, out
    return out


def _push(person: Path, message: str) -> None:
    git(person, "add", "-A")
    git(person, "commit", "-q", "-m", message)
    git(person, "push", "-q", "origin", f"HEAD:{BRANCH}")


def _trees(root: Path, top: str) -> dict[str, str]:
    out = git(root, "ls-tree", "HEAD", "--", f"{top}/")
    return {line.split("\t")[1].split("/", 1)[1]: line.split()[2] for line in out.splitlines() if " tree " in line}


def _settled(bot: Path, check: Path, requests: bool = True) -> None:
    """The bot's commit is what a full re-render makes of it, and another run has nothing to do
    (`requests`: the ledger knows every request has its status; sync does not look at requests)."""
    assert git(bot, "status", "--porcelain") == ""
    assert git(bot, "rev-parse", "HEAD") == git(bot, "rev-parse", f"origin/{BRANCH}")
    ledger = Ledger.parse(git(bot, "show", f"HEAD:{LEDGER}"))
    assert ledger.found, ledger.problem
    assert ledger.statuses == _trees(bot, "status")
    if requests:
        assert ledger.requests == _trees(bot, "runs")
    git(check.parent, "clone", "-q", str(bot), check.name)
    git(check, "config", "user.name", "check")
    git(check, "config", "user.email", "check@example.org")
    made = refresh_dashboard(GitRepo(check), "full re-render")
    changed = git(check, "show", "--stat", "--format=", "HEAD") if made else ""
    assert made is None, f"the bot's pages or counts differ from a full re-render:\n{changed}\n" + (
        git(check, "show", "HEAD") if made else "")
    assert broken_links(bot) == []
    for verb in ("reconcile", "sync") if requests else ():
        head = git(bot, "rev-parse", "HEAD")
        _bot(bot, verb)
        assert git(bot, "rev-parse", "HEAD") == head, f"a second {verb} committed:\n" + git(bot, "show", "--stat")
        assert git(bot, "status", "--porcelain") == ""


# ── the pages the bot owns, edited by a person ─────────────────────────────────────────────────


@pytest.mark.parametrize("page", ["status/README.md", "status/a/README.md", "status/a/2024-12.md"])
@pytest.mark.parametrize("how", ["edited", "deleted"])
def test_a_page_edited_or_deleted_by_hand_is_rendered_again(tmp_path: Path, page: str, how: str) -> None:
    bot, person = _lab(tmp_path)
    target = person / page
    if not target.exists():  # the newest month's page is on the experiment page until the month ends
        pytest.fail(f"{page} should exist: {sorted(p.name for p in target.parent.iterdir())}")
    if how == "deleted":
        target.unlink()
    else:
        target.write_text(target.read_text().replace("Succeeded", "Fine") + "\nnotes of a person\n")
    _push(person, f"{how} {page}")

    _bot(bot, "sync")

    _settled(bot, tmp_path / "check")


# ── the ledger itself, damaged ─────────────────────────────────────────────────────────────────


def _ledger_data(person: Path) -> dict:  # type: ignore[type-arg]
    return json.loads((person / LEDGER).read_text())


def _rewrite(person: Path, change) -> None:  # type: ignore[no-untyped-def]
    data = _ledger_data(person)
    change(data)
    (person / LEDGER).write_text(json.dumps(data, indent=1) + "\n")


LEDGER_DAMAGE = {
    "deleted": lambda p: (p / LEDGER).unlink(),
    "truncated": lambda p: (p / LEDGER).write_text((p / LEDGER).read_text()[:40]),
    "empty": lambda p: (p / LEDGER).write_text(""),
    "not-json": lambda p: (p / LEDGER).write_text("{'version': 2}\n"),
    "conflict-markers": lambda p: (p / LEDGER).write_text(
        "<<<<<<< HEAD\n" + (p / LEDGER).read_text() + "=======\n{}\n>>>>>>> theirs\n"),
    "wrong-version": lambda p: _rewrite(p, lambda d: d.update(version=99)),
    "wrong-counts": lambda p: _rewrite(p, lambda d: d["counts"].update(a={"Succeeded": 40})),
    "wrong-trees": lambda p: _rewrite(p, lambda d: d["statuses"].update(a="0" * 40, b=d["statuses"]["a"])),
    "huge": lambda p: (p / LEDGER).write_text('{"pad": "' + "x" * (2 << 20) + '"}\n'),
    "a-list": lambda p: (p / LEDGER).write_text("[]\n"),
}


@pytest.mark.parametrize("damage", sorted(LEDGER_DAMAGE))
def test_a_damaged_ledger_is_noticed_and_rebuilt(tmp_path: Path, damage: str) -> None:
    bot, person = _lab(tmp_path)
    LEDGER_DAMAGE[damage](person)
    _push(person, f"ledger: {damage}")

    out = _bot(bot, "reconcile")

    assert damage in ("deleted", "empty") or LEDGER in out, out  # the bot says it did not use it
    _settled(bot, tmp_path / "check")


def test_a_ledger_taken_from_an_older_commit_is_not_trusted_for_what_changed_since(tmp_path: Path) -> None:
    bot, person = _lab(tmp_path)
    old = git(person, "rev-parse", "HEAD")
    (person / "status/b" / f"{B[0]}.json").write_text(
        (person / "status/b" / f"{B[0]}.json").read_text().replace('"Succeeded"', '"Failed"'))
    _push(person, "b's first run failed after all")
    _bot(bot, "sync")
    git(person, "pull", "-q", "origin", BRANCH)
    git(person, "checkout", old, "--", LEDGER)  # valid, digest and all, and out of date
    _push(person, "an old ledger back")

    _bot(bot, "sync")

    _settled(bot, tmp_path / "check")
    assert "1 failed · 1 succeeded" in git(bot, "show", "HEAD:status/README.md")


# ── status files and folders, changed by a person ──────────────────────────────────────────────


def _edit_phase(p: Path) -> None:
    path = p / "status/a" / f"{A[2]}.json"
    path.write_text(path.read_text().replace('"Succeeded"', '"Failed"'))


def _remove_run(p: Path) -> None:
    git(p, "rm", "-q", f"status/a/{A[0]}.json", f"runs/a/{A[0]}.yaml")


def _remove_experiment_b(p: Path) -> None:
    git(p, "rm", "-q", *[f"status/b/{r}.json" for r in B], *[f"runs/b/{r}.yaml" for r in B])


def _add_finished_run(p: Path) -> None:
    run_id = "20250101-000000-000000000e"  # in the middle of a month, beside the 6-hex ids
    req = (p / "runs/a" / f"{A[1]}.yaml").read_text().replace(A[1], run_id)
    (p / "runs/a" / f"{run_id}.yaml").write_text(req)
    data = json.loads((p / "status/a" / f"{A[2]}.json").read_text())
    data["run_id"] = run_id
    (p / "status/a" / f"{run_id}.json").write_text(json.dumps(data, indent=2) + "\n")


def _rename_experiment(p: Path) -> None:
    for top in ("experiments", "runs", "status"):
        git(p, "mv", f"{top}/b", f"{top}/c")


STATUS_CHANGES = {
    "phase-edited": _edit_phase,
    "run-removed": _remove_run,
    "experiment-emptied": _remove_experiment_b,
    "finished-run-added": _add_finished_run,
    "experiment-renamed": _rename_experiment,
}


@pytest.mark.parametrize("change", sorted(STATUS_CHANGES))
@pytest.mark.parametrize("verb", ["reconcile", "sync"])
def test_statuses_a_person_changed_are_noticed_by_the_next_run(tmp_path: Path, change: str, verb: str) -> None:
    bot, person = _lab(tmp_path)
    STATUS_CHANGES[change](person)
    _push(person, change)

    _bot(bot, verb)

    _settled(bot, tmp_path / "check", requests=verb == "reconcile")
    if verb == "sync":
        _bot(bot, "reconcile")
        _settled(bot, tmp_path / "check2")


# ── the no-op path reads no finished status, and a stale ledger makes it read them ─────────────

SPY = Path(__file__).with_name("readspy.py")


def _spied(root: Path, log: Path, verb: str) -> tuple[set[str], set[str]]:
    """Run `tp bot VERB --push` through the real CLI; (status files it opened, status blobs it read)."""
    import subprocess
    import sys

    log.unlink(missing_ok=True)
    env = {**os.environ, "TUNEPLANE_STORAGE_ROOT": os.environ["TUNEPLANE_STORAGE_ROOT"]}
    done = subprocess.run([sys.executable, str(SPY), str(log), "bot", verb, "--push"], cwd=root, env=env,
                          capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    blobs = {}
    for line in git(root, "ls-tree", "-r", "HEAD", "--", "status/").splitlines():
        meta, _, path = line.partition("\t")
        if path.endswith(".json") and path != LEDGER:
            blobs[meta.split()[2]] = path
    opened, asked = set(), set()
    for entry in map(json.loads, log.read_text().splitlines() if log.exists() else []):
        if "open" in entry and entry["open"].endswith(".json") and "/status/" in entry["open"]:
            opened.add(entry["open"].split("/status/", 1)[1])
        for word in [*entry.get("input", []), *entry.get("git", [])]:
            if word in blobs:
                asked.add(blobs[word].split("/", 1)[1])
            elif ":" in word and word.split(":", 1)[1] in blobs.values():
                asked.add(word.split(":", 1)[1].split("/", 1)[1])
    return opened - {"index.json"}, asked


def test_a_no_op_run_reads_no_finished_status_and_a_stale_ledger_makes_it_read_them(tmp_path: Path) -> None:
    remote = make_remote(tmp_path)
    ids = [f"2025{m:02d}01-{i:06d}-{i:06x}" for m in (1, 2) for i in range(60)]
    seed = seed_lab(remote, tmp_path / "seed", {"a": "echo hi\n"}, runs=[("a", r) for r in ids])
    batch = Batch(GitRepo(seed))
    for run_id in ids:
        batch.status(_status("a", run_id, "Pending" if run_id == ids[-1] else "Succeeded"))
    batch.render([], [])
    batch.commit("tp bot: 119 runs ended, one waits in a queue")
    git(seed, "push", "-q", "origin", f"HEAD:{BRANCH}")
    bot = clone(remote, tmp_path / "bot")
    _bot(bot, "reconcile")  # the ledger learns that every request has its status
    log = tmp_path / "reads.log"

    for verb in ("reconcile", "sync"):  # a watched run: the full path, which reads that run alone
        head = git(bot, "rev-parse", "HEAD")
        opened, asked = _spied(bot, log, verb)
        assert git(bot, "rev-parse", "HEAD") == head and git(bot, "status", "--porcelain") == ""
        assert opened == set() and asked == {f"a/{ids[-1]}.json"}, (verb, opened, asked)

    git(seed, "pull", "-q", "origin", BRANCH)
    batch = Batch(GitRepo(seed))
    batch.status(_status("a", ids[-1], "Succeeded"), watch=False)  # it ended (its machine committed it)
    batch.render([], [])
    batch.commit("tp submit --local: the last run ended")
    git(seed, "push", "-q", "origin", f"HEAD:{BRANCH}")
    _bot(bot, "sync")
    for verb in ("reconcile", "sync"):  # nothing watched: the idle path
        assert _spied(bot, log, verb) == (set(), set()), verb

    git(seed, "pull", "-q", "origin", BRANCH)
    git(seed, "rm", "-q", LEDGER)
    git(seed, "commit", "-q", "-m", "lose the ledger")
    git(seed, "push", "-q", "origin", f"HEAD:{BRANCH}")
    opened, asked = _spied(bot, log, "reconcile")
    assert opened | asked == {f"a/{r}.json" for r in ids}  # a stale ledger: every status is looked at again
    _settled(bot, tmp_path / "check")
