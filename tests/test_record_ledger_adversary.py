"""The ledger against everyone else who writes to the lab: each case changes what the ledger summarises
(by hand, by git, by force), then runs `tp bot reconcile` and `tp bot sync` in the bot's clone (the command
line, in the test's process; the one case of a bot killed half way starts it as a process).

The oracle is the same every time (`_settled`): the bot's commit holds pages and counts equal to a full
re-render from its status files (`record.refresh_dashboard` in a fresh clone commits nothing), a
ledger the bot trusts whose tree ids are the commit's, a clean work tree, and a next run of either
verb that commits nothing. The lab's runs have all ended (statuses written through the bot's own
writer), so no case waits on a process.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
from support.repos import BRANCH, bot_pass, broken_links, clone, git, make_remote, seed_lab, tp_run
from support.wait import wait_until

from tuneplane.lab.gitrepo import GitRepo
from tuneplane.models.run import BackendObject, RunStatus, Transition
from tuneplane.record.batch import Batch, refresh_dashboard
from tuneplane.record.ledger import LEDGER, VERSION, Ledger

A = ["20241231-235900-00000a", "20250101-000000-00000b", "20250101-000001-000000000c", "20250102-000000-00000d"]
B = ["20250103-000000-00000e", "20250104-000000-00000f"]


def _status(exp: str, run_id: str, phase: str = "Succeeded") -> RunStatus:
    day = f"{run_id[:4]}-{run_id[4:6]}-{run_id[6:8]}T00:00:00Z"
    return RunStatus(
        experiment=exp,
        run_id=run_id,
        phase=phase,
        profile="local",  # type: ignore[arg-type]
        started_at=day,
        finished_at=day.replace("00:00:00", "00:00:07.5"),
        history=[Transition(phase=phase, at=day)],
    )  # type: ignore[arg-type]


def _settle(tmp_path: Path) -> None:
    """A lab of two experiments whose runs all ended, settled by one bot run, in `tmp_path`: the
    remote, the bot's clone and a person's."""
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
    bot_pass(bot, "reconcile")
    _settled(bot, tmp_path / "check0")
    clone(remote, tmp_path / "person")


@pytest.fixture(scope="module")
def settled(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The settled lab, made once per test module and process: each test takes a copy (`_lab`)."""
    return settled_template(tmp_path_factory)


def settled_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """`_settle` in a folder of its own, with a storage root of its own (made before any test's isolation)."""
    root = tmp_path_factory.mktemp("settled")
    with pytest.MonkeyPatch.context() as patch:  # made before any test's isolation: give it its own storage
        patch.setenv("TUNEPLANE_STORAGE_ROOT", str(tmp_path_factory.mktemp("settled-storage")))
        _settle(root)
    return root


def _lab(tmp_path: Path, settled: Path) -> tuple[Path, Path]:
    """A copy of the settled lab in `tmp_path`, its clones pointed at the copied remote; (the bot's
    clone, a person's)."""
    for part in ("remote.git", "bot", "person"):
        shutil.copytree(settled / part, tmp_path / part, symlinks=True)
    for part in ("bot", "person"):
        git(tmp_path / part, "remote", "set-url", "origin", str(tmp_path / "remote.git"))
    return tmp_path / "bot", tmp_path / "person"


def _push(person: Path, message: str) -> None:
    git(person, "add", "-A")
    git(person, "commit", "-q", "-m", message)
    git(person, "pull", "-q", "--rebase", "origin", BRANCH)
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
        git(check, "show", "HEAD") if made else ""
    )
    assert broken_links(bot) == []
    for verb in ("reconcile", "sync") if requests else ():
        head = git(bot, "rev-parse", "HEAD")
        bot_pass(bot, verb)
        assert git(bot, "rev-parse", "HEAD") == head, f"a second {verb} committed:\n" + git(bot, "show", "--stat")
        assert git(bot, "status", "--porcelain") == ""


# ── the pages the bot owns, edited by a person ─────────────────────────────────────────────────


@pytest.mark.parametrize("page", ["status/README.md", "status/a/README.md", "status/a/2024-12.md"])
@pytest.mark.parametrize("how", ["edited", "deleted"])
def test_a_page_edited_or_deleted_by_hand_is_rendered_again(tmp_path: Path, settled: Path, page: str, how: str) -> None:
    bot, person = _lab(tmp_path, settled)
    target = person / page
    if not target.exists():  # the newest month's page is on the experiment page until the month ends
        pytest.fail(f"{page} should exist: {sorted(p.name for p in target.parent.iterdir())}")
    if how == "deleted":
        target.unlink()
    else:
        target.write_text(target.read_text().replace("Succeeded", "Fine") + "\nnotes of a person\n")
    _push(person, f"{how} {page}")

    bot_pass(bot, "sync")

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
        "<<<<<<< HEAD\n" + (p / LEDGER).read_text() + "=======\n{}\n>>>>>>> theirs\n"
    ),
    "wrong-version": lambda p: _rewrite(p, lambda d: d.update(version=99)),
    "wrong-counts": lambda p: _rewrite(p, lambda d: d["counts"].update(a={"Succeeded": 40})),
    "wrong-trees": lambda p: _rewrite(p, lambda d: d["statuses"].update(a="0" * 40, b=d["statuses"]["a"])),
    "huge": lambda p: (p / LEDGER).write_text('{"pad": "' + "x" * (2 << 20) + '"}\n'),
    "a-list": lambda p: (p / LEDGER).write_text("[]\n"),
}


@pytest.mark.parametrize("damage", sorted(LEDGER_DAMAGE))
def test_a_damaged_ledger_is_noticed_and_rebuilt(tmp_path: Path, settled: Path, damage: str) -> None:
    bot, person = _lab(tmp_path, settled)
    LEDGER_DAMAGE[damage](person)
    _push(person, f"ledger: {damage}")

    out = bot_pass(bot, "reconcile")

    assert damage in ("deleted", "empty") or LEDGER in out, out  # the bot says it did not use it
    _settled(bot, tmp_path / "check")


def test_a_ledger_taken_from_an_older_commit_is_not_trusted_for_what_changed_since(
    tmp_path: Path, settled: Path
) -> None:
    bot, person = _lab(tmp_path, settled)
    old = git(person, "rev-parse", "HEAD")
    _remove_run(person)
    _push(person, "a's first run taken out")
    bot_pass(bot, "sync")
    git(person, "pull", "-q", "origin", BRANCH)
    git(person, "checkout", old, "--", LEDGER)  # valid, digest and all, and out of date
    _push(person, "an old ledger back")

    out = bot_pass(bot, "sync")

    assert LEDGER in out, out  # the bot goes by the ledger it recorded, and says so
    bot_pass(bot, "reconcile")  # sync leaves the requests to reconcile
    _settled(bot, tmp_path / "check")
    assert "**5 runs**" in git(bot, "show", "HEAD:status/README.md")


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
}


@pytest.mark.parametrize("change", sorted(STATUS_CHANGES))
@pytest.mark.parametrize("verb", ["reconcile", "sync"])
def test_statuses_a_person_changed_are_noticed_by_the_next_run(
    tmp_path: Path, settled: Path, change: str, verb: str
) -> None:
    bot, person = _lab(tmp_path, settled)
    STATUS_CHANGES[change](person)
    _push(person, change)

    bot_pass(bot, verb)

    _settled(bot, tmp_path / "check", requests=verb == "reconcile")
    if verb == "sync":
        bot_pass(bot, "reconcile")
        _settled(bot, tmp_path / "check2")


def test_statuses_moved_to_another_experiments_folder_are_reported_not_taken(tmp_path: Path, settled: Path) -> None:
    """A status names its run; one under another experiment's folder is a claim about another run."""
    bot, person = _lab(tmp_path, settled)
    _rename_experiment(person)
    _push(person, "experiment-renamed")

    out = bot_pass(bot, "reconcile")

    assert f"status/c/{B[0]}.json names experiment 'b'" in out, out
    assert f"status/c/{B[0]}.json" in git(bot, "show", "HEAD:status/README.md")  # on the dashboard too


# ── the no-op path reads no finished status, and a stale ledger makes it read them ─────────────

SPY = Path(__file__).with_name("readspy.py")


def _spied(root: Path, log: Path, verb: str) -> tuple[set[str], set[str]]:
    """Run `tp bot VERB --push` through the real CLI; (status files it opened, status blobs it read)."""
    import subprocess
    import sys

    log.unlink(missing_ok=True)
    env = {**os.environ, "TUNEPLANE_STORAGE_ROOT": os.environ["TUNEPLANE_STORAGE_ROOT"]}
    done = subprocess.run(
        [sys.executable, str(SPY), str(log), "bot", verb, "--push"],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
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
        named = [w for w in entry.get("git", []) if ":status/" in w or w.startswith(":status/")]
        if entry.get("content") and not all(w.endswith(":" + LEDGER) for w in named or ["?"]):
            if not any(":" in w and w.split(":", 1)[1] in blobs.values() for w in named):
                asked.add("git " + " ".join(entry["git"]))  # prints contents the log cannot pin to a status
    return opened - {"index.json"}, asked


def _laptop(status: RunStatus, tmp_path: Path) -> RunStatus:
    """A run of `tp submit --local` on another machine: the bot never started it, its machine commits it."""
    where = str(tmp_path / "laptop" / "runs" / status.experiment / status.run_id)
    return status.model_copy(
        update={"backend": BackendObject(backend="local", kind="Process", name=status.run_id, run_dir=where, uid="u")}
    )


def test_a_no_op_run_reads_no_finished_status_and_a_stale_ledger_makes_it_read_them(tmp_path: Path) -> None:
    remote = make_remote(tmp_path)
    ids = [f"2025{m:02d}01-{i:06d}-{i:06x}" for m in (1, 2) for i in range(60)]
    seed = seed_lab(remote, tmp_path / "seed", {"a": "echo hi\n"}, runs=[("a", r) for r in ids])
    batch = Batch(GitRepo(seed))
    for run_id in ids:
        batch.status(_laptop(_status("a", run_id, "Pending" if run_id == ids[-1] else "Succeeded"), tmp_path))
    batch.render([], [])
    batch.commit("tp submit --local: 119 runs ended, one waits in a queue")
    git(seed, "push", "-q", "origin", f"HEAD:{BRANCH}")
    bot = clone(remote, tmp_path / "bot")
    bot_pass(bot, "reconcile")  # the ledger learns that every request has its status
    log = tmp_path / "reads.log"

    for verb in ("reconcile", "sync"):  # a watched run: the full path, which reads that run alone
        head = git(bot, "rev-parse", "HEAD")
        opened, asked = _spied(bot, log, verb)
        assert git(bot, "rev-parse", "HEAD") == head and git(bot, "status", "--porcelain") == ""
        assert opened == set() and asked == {f"a/{ids[-1]}.json"}, (verb, opened, asked)

    git(seed, "pull", "-q", "origin", BRANCH)
    batch = Batch(GitRepo(seed))
    batch.status(_laptop(_status("a", ids[-1], "Succeeded"), tmp_path), watch=False)  # its machine says it ended
    batch.render([], [])
    batch.commit("tp submit --local: the last run ended")
    git(seed, "push", "-q", "origin", f"HEAD:{BRANCH}")
    bot_pass(bot, "sync")
    for verb in ("reconcile", "sync"):  # nothing watched: the idle path
        assert _spied(bot, log, verb) == (set(), set()), verb

    git(seed, "pull", "-q", "origin", BRANCH)
    git(seed, "rm", "-q", LEDGER)
    git(seed, "commit", "-q", "-m", "lose the ledger")
    git(seed, "push", "-q", "origin", f"HEAD:{BRANCH}")
    opened, asked = _spied(bot, log, "reconcile")
    assert opened | asked == set()  # the branch's ledger is gone, the bot's record has it: nothing to read
    assert git(bot, "show", f"HEAD:{LEDGER}")  # and it is committed again

    git(seed, "pull", "-q", "origin", BRANCH)
    git(seed, "rm", "-q", LEDGER)
    git(seed, "commit", "-q", "-m", "lose the ledger again")
    git(seed, "push", "-q", "origin", f"HEAD:{BRANCH}")
    for where, ref in (
        (remote, "refs/tuneplane/authority"),
        (bot, "refs/tuneplane/authority"),
        (bot, "refs/tuneplane-upstream/origin/authority"),
    ):
        git(where, "update-ref", "-d", ref)  # and the record lost too
    opened, asked = _spied(bot, log, "reconcile")
    assert opened | asked == {f"a/{r}.json" for r in ids}  # no ledger to trust: every status is looked at again
    _settled(bot, tmp_path / "check")


# ── git rewrites what the ledger summarises ────────────────────────────────────────────────────


def _bot_commit_with_change(bot: Path, person: Path) -> str:
    """A bot commit that answers a person's change (a status edited by hand: put back): its id."""
    _edit_phase(person)
    _push(person, "a run failed after all")
    bot_pass(bot, "sync")
    commit = git(bot, "rev-parse", "HEAD")
    assert git(bot, "log", "-1", "--format=%s", commit).startswith("tp bot"), git(bot, "log", "-3", "--oneline")
    git(person, "pull", "-q", "origin", BRANCH)
    return commit


def test_a_reverted_bot_commit_is_noticed(tmp_path: Path, settled: Path) -> None:
    bot, person = _lab(tmp_path, settled)
    commit = _bot_commit_with_change(bot, person)
    git(person, "revert", "--no-edit", commit)  # the pages and the ledger back, the status edit too
    git(person, "push", "-q", "origin", f"HEAD:{BRANCH}")

    bot_pass(bot, "reconcile")

    _settled(bot, tmp_path / "check")
    assert "1 failed · 3 succeeded" in git(bot, "show", "HEAD:status/README.md")  # the bot's status, again


def test_a_force_push_that_drops_bot_commits_is_noticed_by_a_kept_clone(tmp_path: Path, settled: Path) -> None:
    bot, person = _lab(tmp_path, settled)
    _bot_commit_with_change(bot, person)
    git(person, "reset", "-q", "--hard", "HEAD~1")  # the bot's commit is dropped, the person's edit stays
    _remove_run(person)
    git(person, "commit", "-q", "-m", "and a run taken out")
    git(person, "push", "-q", "--force", "origin", f"HEAD:{BRANCH}")

    bot_pass(bot, "sync")
    bot_pass(bot, "reconcile")

    _settled(bot, tmp_path / "check")
    index = git(bot, "show", "HEAD:status/README.md")
    assert "**5 runs** · 1 failed · 4 succeeded" in index, index  # the edit put back, the removal kept


def test_a_merge_that_adds_an_experiment_the_ledger_never_saw(tmp_path: Path, settled: Path) -> None:
    bot, person = _lab(tmp_path, settled)
    git(person, "checkout", "-q", "-b", "topic")
    for top in ("experiments", "runs", "status"):  # a finished run of a new experiment, from another lab
        (person / top / "c").mkdir()
    (person / "experiments/c").rmdir()
    git(person, "mv", "experiments/b", "experiments/c")
    git(person, "checkout", "-q", "HEAD", "--", "experiments/b")
    run_id = "20250105-000000-0000000010"
    text = (person / "runs/b" / f"{B[0]}.yaml").read_text().replace(B[0], run_id)
    (person / "runs/c" / f"{run_id}.yaml").write_text(text.replace("experiment: b", "experiment: c"))
    data = json.loads((person / "status/b" / f"{B[0]}.json").read_text())
    data.update(experiment="c", run_id=run_id)
    (person / "status/c" / f"{run_id}.json").write_text(json.dumps(data, indent=2) + "\n")
    git(person, "add", "-A")
    git(person, "commit", "-q", "-m", "experiment c")
    git(person, "checkout", "-q", BRANCH)
    _edit_phase(person)
    git(person, "commit", "-q", "-am", "meanwhile on main")
    git(person, "merge", "-q", "--no-edit", "topic")
    git(person, "push", "-q", "origin", f"HEAD:{BRANCH}")

    bot_pass(bot, "reconcile")

    _settled(bot, tmp_path / "check")
    assert "[c](c/README.md) | 1 | 1 succeeded" in git(bot, "show", "HEAD:status/README.md")


# ── full months: real bot commits rewrite only the pages that changed ──────────────────────────


def _month_lab(tmp_path: Path) -> tuple[Path, Path, list[str]]:
    """Experiment `a`: 150 ended runs in December (two parts), 120 in January (one full part); settled."""
    remote = make_remote(tmp_path)
    ids = [f"202412{1 + i // 10:02d}-{i:06d}-{i:06x}" for i in range(150)]
    ids += [f"202501{1 + i // 10:02d}-{i:06d}-{i:010x}" for i in range(120)]
    seed = seed_lab(remote, tmp_path / "seed", {"a": "echo hi\n"}, runs=[("a", r) for r in ids])
    batch = Batch(GitRepo(seed))
    for run_id in ids:
        batch.status(_status("a", run_id))
    batch.render([], [])
    batch.commit("tp bot: the runs ended")
    git(seed, "push", "-q", "origin", f"HEAD:{BRANCH}")
    bot = clone(remote, tmp_path / "bot")
    bot_pass(bot, "reconcile")
    return bot, clone(remote, tmp_path / "person"), ids


def _stat(root: Path) -> list[str]:
    return sorted(git(root, "show", "--name-only", "--format=", "HEAD").splitlines())


def test_new_runs_in_a_month_of_full_pages_rewrite_no_month_page(tmp_path: Path) -> None:
    from support.repos import add_requests

    bot, person, _ids = _month_lab(tmp_path)
    assert {"status/a/2024-12.md", "status/a/2024-12-p2.md", "status/a/2025-01.md"} <= set(
        git(bot, "ls-tree", "-r", "--name-only", "HEAD", "--", "status/a").splitlines()
    )
    new = [f"20250131-0000{i:02d}-{i:06x}" for i in range(3)]
    add_requests(person, [("a", r) for r in new])
    git(person, "push", "-q", "origin", f"HEAD:{BRANCH}")

    bot_pass(bot, "reconcile")

    pages = ["status/README.md", "status/a/README.md", LEDGER]
    assert _stat(bot) == sorted([*pages, *(f"status/a/{r}.json" for r in new)])

    def ended() -> bool:
        """One `tp bot sync`, which rewrites no month page; whether the newest run has Succeeded."""
        bot_pass(bot, "sync")
        changed = _stat(bot)
        assert not [p for p in changed if p.endswith(".md") and p not in pages], changed
        return '"Succeeded"' in git(bot, "show", f"HEAD:status/a/{new[-1]}.json")

    def phases() -> dict[str, str]:
        return {r: json.loads(git(bot, "show", f"HEAD:status/a/{r}.json"))["phase"] for r in new}

    wait_until(ended, 60, 0.3, lambda: f"the runs did not end: {phases()}")
    _settled(bot, tmp_path / "check")


@pytest.mark.parametrize("how", ["added", "removed"])
def test_a_run_added_or_removed_in_the_middle_of_a_full_month_moves_the_parts(tmp_path: Path, how: str) -> None:
    bot, person, ids = _month_lab(tmp_path)
    if how == "added":
        run_id = "20241201-000000-0000000001"  # sorts just after the month's first run
        (person / "runs/a" / f"{run_id}.yaml").write_text(
            (person / "runs/a" / f"{ids[0]}.yaml").read_text().replace(ids[0], run_id)
        )
        data = json.loads((person / "status/a" / f"{ids[0]}.json").read_text())
        data.update(run_id=run_id, phase="Failed")
        (person / "status/a" / f"{run_id}.json").write_text(json.dumps(data, indent=2) + "\n")
    else:
        git(person, "rm", "-q", f"status/a/{ids[3]}.json", f"runs/a/{ids[3]}.yaml")
    _push(person, f"a December run {how} by hand")

    bot_pass(bot, "reconcile")

    assert {"status/a/2024-12.md", "status/a/2024-12-p2.md"} <= set(_stat(bot))
    assert "status/a/2025-01.md" not in _stat(bot)
    _settled(bot, tmp_path / "check")


# ── two bots: one pushes first, the other rebases its commit onto it ───────────────────────────


@pytest.mark.parametrize("verb", ["sync", "reconcile"])
def test_a_bot_whose_commit_is_rebased_onto_another_bots_leaves_the_pages_right(
    tmp_path: Path, settled: Path, verb: str
) -> None:
    from tuneplane.bot.report import CRASH_ENV, CRASH_EXIT

    bot, person = _lab(tmp_path, settled)
    other = clone(Path(git(bot, "remote", "get-url", "origin")), tmp_path / "other")
    _edit_phase(person)
    _push(person, "a run of a failed after all")
    env = {"TUNEPLANE_STORAGE_ROOT": os.environ["TUNEPLANE_STORAGE_ROOT"], CRASH_ENV: "committed"}
    code, out = tp_run(bot, "bot", verb, "--push", env=env)
    assert code == CRASH_EXIT, out  # committed, never pushed: as if the other bot pushed first
    assert git(bot, "rev-list", "--count", f"origin/{BRANCH}..HEAD") == "1"
    path = person / "status/b" / f"{B[1]}.json"
    path.write_text(path.read_text().replace('"Succeeded"', '"Cancelled"'))
    _remove_run(person)
    _push(person, "more hand edits")
    bot_pass(other, verb)  # sees both experiments change, and pushes first

    bot_pass(bot, verb)  # rebases its own commit onto the other's

    _settled(bot, tmp_path / "check", requests=verb == "reconcile")
    index = git(bot, "show", "HEAD:status/README.md")
    assert "**5 runs** · 1 failed · 4 succeeded" in index, index  # the edits put back, the removal kept


# ── what the bot did not write stays; what it wrote for a removed run goes ─────────────────────


def test_a_persons_file_in_status_stays_and_the_next_run_is_idle(tmp_path: Path, settled: Path) -> None:
    bot, person = _lab(tmp_path, settled)
    (person / "status/notes").mkdir()
    (person / "status/notes/README.md").write_text("# Notes of the team\n")
    (person / "status/a/notes.md").write_text("why run 3 failed\n")
    _push(person, "notes beside the dashboard")

    bot_pass(bot, "reconcile")

    for rel in ("status/notes/README.md", "status/a/notes.md"):
        assert git(bot, "cat-file", "-t", f"HEAD:{rel}") == "blob", rel
    _settled(bot, tmp_path / "check")


def test_the_chart_of_a_run_taken_out_of_the_lab_goes_with_it(tmp_path: Path, settled: Path) -> None:
    bot, person = _lab(tmp_path, settled)
    svg = '<svg xmlns="http://www.w3.org/2000/svg"/>\n'
    for run_id in (A[0], B[0], B[1]):  # as the bot's sync writes them when a run ends
        (person / "status" / ("a" if run_id in A else "b") / f"{run_id}.svg").write_text(svg)
    _push(person, "charts")
    bot_pass(bot, "reconcile")
    _remove_run(person)
    _remove_experiment_b(person)
    _push(person, "runs taken out of the lab")

    bot_pass(bot, "reconcile")

    assert git(bot, "ls-tree", "-r", "--name-only", "HEAD", "--", "status/a", "status/b").count(".svg") == 0
    _settled(bot, tmp_path / "check")


def test_a_depth_1_bot_clone_renders_again_a_page_edited_before_it_was_cloned(tmp_path: Path, settled: Path) -> None:
    _bot_clone, person = _lab(tmp_path, settled)
    for _ in range(3):  # the bot's last commit is a few commits back
        for page in ("status/a/2024-12.md", "status/README.md"):
            (person / page).write_text((person / page).read_text() + "\nmore notes\n")
        _push(person, "notes on the dashboard")
    remote = git(person, "remote", "get-url", "origin")
    git(tmp_path, "clone", "-q", "--depth", "1", "-b", BRANCH, f"file://{remote}", "ci")  # the workflow's checkout
    ci = tmp_path / "ci"
    for key, value in (("user.name", "ci"), ("user.email", "ci@example.org")):
        git(ci, "config", key, value)

    bot_pass(ci, "sync")

    for page in ("status/a/2024-12.md", "status/README.md"):
        assert "more notes" not in git(ci, "show", f"HEAD:{page}"), page
    git(ci, "fetch", "-q", "--unshallow", check=False)  # the bot may have deepened it all already
    _settled(ci, tmp_path / "check", requests=False)


def test_a_refusal_on_the_index_goes_once_its_cause_is_fixed(tmp_path: Path, settled: Path) -> None:
    bot, person = _lab(tmp_path, settled)
    text = (person / "runs/a" / f"{A[0]}.yaml").read_text()
    (person / "runs/a/my-second-try.yaml").write_text(text)
    _push(person, "a request written by hand")
    bot_pass(bot, "reconcile")
    assert "my-second-try.yaml is not read as a run request" in git(bot, "show", "HEAD:status/README.md")

    git(person, "pull", "-q", "origin", BRANCH)
    git(person, "rm", "-q", "runs/a/my-second-try.yaml")
    _push(person, "it was a mistake")
    bot_pass(bot, "reconcile")

    index = git(bot, "show", "HEAD:status/README.md")
    assert "my-second-try" not in index and "Refused by the bot" not in index, index
    _settled(bot, tmp_path / "check")


def test_a_huge_status_added_by_hand_is_shown_unreadable_not_read(tmp_path: Path, settled: Path) -> None:
    bot, person = _lab(tmp_path, settled)
    run_id = "20250105-000000-0000000011"
    data = json.loads((person / "status/a" / f"{A[2]}.json").read_text())
    data.update(run_id=run_id, message="x" * (3 << 20))
    (person / "status/a" / f"{run_id}.json").write_text(json.dumps(data))
    _push(person, "a status with the whole log in it")

    bot_pass(bot, "reconcile")

    page = git(bot, "show", "HEAD:status/a/README.md")
    assert f"| `{run_id}` | | | ⚠️ unreadable |" in page, page
    _settled(bot, tmp_path / "check")


def test_a_version_2_ledger_is_read_and_upgraded_without_a_rebuild(tmp_path: Path, settled: Path) -> None:
    from tuneplane.record.ledger import _digest

    bot, person = _lab(tmp_path, settled)
    data = _ledger_data(person)
    del data["index"]
    data["version"] = 2  # as the bot wrote it before it knew the index page's blob id
    data["digest"] = _digest({k: data[k] for k in ("requests", "statuses", "active", "counts")})
    (person / LEDGER).write_text(json.dumps(data, indent=1) + "\n")
    _push(person, "the ledger of the previous tp")

    out = bot_pass(bot, "sync")

    assert "was not used" not in out, out
    assert json.loads(git(bot, "show", f"HEAD:{LEDGER}"))["version"] == VERSION
    _settled(bot, tmp_path / "check")


def test_status_removed_whole_with_its_ledger_comes_back_and_nothing_runs_again(tmp_path: Path, settled: Path) -> None:
    bot, person = _lab(tmp_path, settled)
    before = {r: git(person, "show", f"HEAD:status/a/{r}.json") for r in A}
    git(person, "rm", "-rq", "status")
    _push(person, "clean up the dashboard")

    out = bot_pass(bot, "reconcile")

    assert "submitted" not in out, out
    assert {r: git(bot, "show", f"HEAD:status/a/{r}.json") for r in A} == before
    _settled(bot, tmp_path / "check")
