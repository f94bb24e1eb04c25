"""A local run whose machine went away (a CI runner's end) is marked Lost from its published heartbeat.

The supervisor publishes its heartbeat to the lab's remote as `refs/tuneplane/heartbeats/<exp>/<run>`
(no commit on a branch, no file under status/). A bot pass on another machine, which cannot see the
run directory, reads it: fresh, the run stays Running; older than `lost_after`, the run is Lost. A run
that published none is left as committed. Real git, the real local backend and supervisor processes.

Machine A is a bot (a CI runner) that started the run: it pushes with `--push`, so its record of the
run (`refs/tuneplane/authority`) goes to the remote with the run's status. Machine B is the next bot,
which fetches that record with the branch (`--push`): without it, the run would be one the bot never
started, which it never observes (`bot.trust.foreign`).
"""

from __future__ import annotations

import json
import time
from pathlib import Path

from support.local import kill_recorded
from support.repos import BRANCH, backend_factory, clone, git, make_remote, quiet, seed_lab
from support.wait import until, wait_until

from tuneplane.backends.local.files import log_name, read_state
from tuneplane.bot.entry import BotOptions, reconcile, sync
from tuneplane.lab.runs import RunKey, read_status

RUN = "20250102-100000-00000a"
REF = f"refs/tuneplane/heartbeats/demo/{RUN}"
KEY = RunKey("demo", RUN)
PUSH = BotOptions(push=True)  # as the bot runs in CI: fetch (with its record), commit, push
ZERO = "0" * 40


def _started(bot: Path) -> tuple[Path, dict[str, object]]:
    status = read_status(bot, KEY)
    assert status.backend is not None
    run_dir = Path(status.backend.run_dir)
    wait_until(lambda: (read_state(run_dir) or {}).get("pgid"), 30, 0.1, "the local run did not start")
    return run_dir, read_state(run_dir) or {}


def _published(remote: Path) -> str:
    return wait_until(
        lambda: git(remote, "for-each-ref", "--format=%(objectname)", REF), 30, 0.1, "no heartbeat was published"
    )


def _machine_gone(run_dir: Path, state: dict[str, object]) -> None:
    """As a runner's end does: every process of the run killed, its disk gone with it."""
    kill_recorded(state)  # the supervisor leads its own session
    storage = run_dir.parent.parent
    storage.rename(storage.with_name(storage.name + "-gone"))


def _age_heartbeat(remote: Path, seconds: int) -> None:
    """The published heartbeat as it would be after `seconds` of silence, without waiting for them."""
    when = f"{int(time.time()) - seconds} +0000"
    tree = git(remote, "rev-parse", f"{REF}^{{tree}}")
    old = git(
        remote, "commit-tree", tree, "-m", "an old heartbeat", env={"GIT_COMMITTER_DATE": when, "GIT_AUTHOR_DATE": when}
    )
    git(remote, "update-ref", REF, old)


def _log_pushes(remote: Path) -> Path:
    """Have the remote note every push it receives: one block of `old new ref` lines per push."""
    log = remote / "pushes.log"
    hook = remote / "hooks" / "pre-receive"
    hook.write_text(f"#!/bin/sh\n{{ cat; echo --; }} >> '{log}'\n", encoding="utf-8")
    hook.chmod(0o755)
    return log


def _pushes(log: Path) -> list[list[tuple[str, str, str]]]:
    blocks = log.read_text(encoding="utf-8").split("--\n")
    return [[tuple(line.split()) for line in b.splitlines() if line.strip()] for b in blocks if b.strip()]  # type: ignore[misc]


def _phase_at(remote: Path, commit: str) -> str:
    shown = git(remote, "show", f"{commit}:status/demo/{RUN}.json", check=False)
    return json.loads(shown).get("phase", "") if shown else ""


def _alive(pid: int) -> bool:
    """Whether `pid` runs (a zombie, ended and not yet reaped, does not)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False


def _ended(run_dir: Path, state: dict[str, object]) -> None:
    """Wait until the run's supervisor has recorded the end and left."""
    wait_until(lambda: not _alive(int(str(state["supervisor_pid"]))), 60, message="the run's supervisor did not leave")
    assert (read_state(run_dir) or {}).get("phase") == "Succeeded", read_state(run_dir)


def _synced_to_end(root: Path, every: float, why: str, opts: BotOptions | None = None) -> str:
    """`tp bot sync` every `every` seconds until the run's status is Succeeded or Failed (a minute at
    most); that phase."""

    def phase() -> str:
        sync(root, opts, echo=quiet)
        return read_status(root, KEY).phase  # type: ignore[union-attr]

    return until(phase, lambda seen: seen in ("Succeeded", "Failed"), 60, why, every=every)


def test_the_push_that_records_a_runs_end_deletes_its_heartbeat_for_good(tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setenv("TUNEPLANE_HEARTBEAT_PUBLISH", "0.2")  # often: a beat after the end would show
    stop = tmp_path / "stop"
    remote = make_remote(tmp_path)
    seed_lab(remote, tmp_path / "seed", {"demo": f"while [ ! -e {stop} ]; do sleep 0.1; done\n"}, runs=[("demo", RUN)])
    log = _log_pushes(remote)
    bot = clone(remote, tmp_path / "bot")
    reconcile(bot, PUSH, echo=quiet)
    run_dir, state = _started(bot)
    _published(remote)

    stop.touch()
    assert _synced_to_end(bot, 0.2, "the bot never recorded the run's end", PUSH) == "Succeeded"
    _ended(run_dir, state)

    assert not git(remote, "for-each-ref", REF)  # gone, and the supervisor that ended published no more
    pushes = _pushes(log)
    ending = next(
        i
        for i, block in enumerate(pushes)
        if any(ref == f"refs/heads/{BRANCH}" and _phase_at(remote, new) == "Succeeded" for _, new, ref in block)
    )
    assert any(ref == REF and new == ZERO for _, new, ref in pushes[ending]), pushes[ending]  # in the same push
    assert not [b for b in pushes[ending + 1 :] if any(ref == REF and new != ZERO for _, new, ref in b)]


def test_racing_bots_both_record_the_end_and_the_heartbeat_is_deleted_once(tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """Two bots of one machine see the run end; one pushes the end (and the deletion) while the other is
    about to push the same: the second rebases onto the first and pushes without an error."""
    from tuneplane.lab.gitrepo import GitRepo

    stop = tmp_path / "stop"
    remote = make_remote(tmp_path)
    seed_lab(remote, tmp_path / "seed", {"demo": f"while [ ! -e {stop} ]; do sleep 0.1; done\n"}, runs=[("demo", RUN)])
    first = clone(remote, tmp_path / "first")
    reconcile(first, PUSH, echo=quiet)
    run_dir, state = _started(first)
    _published(remote)
    second = clone(remote, tmp_path / "second")
    stop.touch()
    _ended(run_dir, state)
    assert git(remote, "for-each-ref", REF)  # nobody has recorded the end yet

    real_push = GitRepo.push
    raced: list[object] = []

    def push(repo: GitRepo, *args, **kwargs):  # type: ignore[no-untyped-def]
        if repo.root == second.resolve() and not raced:  # the first bot gets there just before
            raced.append(sync(first, PUSH, echo=quiet))
        return real_push(repo, *args, **kwargs)

    monkeypatch.setattr(GitRepo, "push", push)
    report = sync(second, PUSH, echo=quiet)

    assert raced and raced[0].pushed and report.pushed and not report.errors, (raced, report)  # type: ignore[attr-defined]
    assert read_status(second, KEY).phase == "Succeeded"
    assert _phase_at(remote, git(remote, "rev-parse", BRANCH)) == "Succeeded"
    assert not git(remote, "for-each-ref", "refs/tuneplane/heartbeats")


def test_a_heartbeat_of_a_run_no_longer_in_the_lab_is_deleted_and_a_watched_ones_kept(tmp_path: Path) -> None:
    remote = make_remote(tmp_path)
    seed_lab(remote, tmp_path / "seed", {"demo": "sleep 300\n"}, runs=[("demo", RUN)])
    bot = clone(remote, tmp_path / "bot")
    reconcile(bot, PUSH, echo=quiet)
    run_dir, state = _started(bot)
    _published(remote)
    gone = "refs/tuneplane/heartbeats/demo/20250101-090000-00000f"  # its request was never merged
    git(remote, "update-ref", gone, git(remote, "rev-parse", REF))
    try:
        sync(bot, PUSH, echo=quiet)

        assert read_status(bot, KEY).phase == "Running"
        assert git(remote, "for-each-ref", REF)  # a run the bot watches keeps its heartbeat
        assert not git(remote, "for-each-ref", gone)
    finally:
        _machine_gone(run_dir, state)


def test_a_run_whose_machine_went_away_is_lost_once_its_published_heartbeat_is_stale(tmp_path: Path) -> None:
    remote = make_remote(tmp_path)
    seed_lab(remote, tmp_path / "seed", {"demo": "sleep 300\n"}, runs=[("demo", RUN)])
    machine_a = clone(remote, tmp_path / "a")
    reconcile(machine_a, echo=quiet)
    run_dir, state = _started(machine_a)
    _published(remote)
    sync(machine_a, PUSH, echo=quiet)  # the runner pushed the run's status, and its record of the run
    assert git(remote, "for-each-ref", "refs/tuneplane/authority")
    branches = git(remote, "for-each-ref", "--format=%(refname)", "refs/heads")
    _machine_gone(run_dir, state)

    machine_b = clone(remote, tmp_path / "b")
    assert read_status(machine_b, KEY).phase == "Running"
    elsewhere = backend_factory(None, storage=tmp_path / "b-storage")
    lines: list[str] = []
    sync(machine_b, PUSH, backends=elsewhere, echo=lines.append)  # fetches the bot's record first
    assert read_status(machine_b, KEY).phase == "Running", lines  # its heartbeat is fresh

    _age_heartbeat(remote, 3600)
    last = git(remote, "log", "-1", "--format=%cd", "--date=format-local:%Y-%m-%dT%H:%M:%SZ", REF)
    sync(machine_b, PUSH, backends=elsewhere, echo=lines.append)

    after = read_status(machine_b, KEY)
    assert after.phase == "Failed" and after.reason == "Lost", (after, lines)
    assert after.attempts and after.attempts[-1].reason == "Lost"
    assert last in after.message
    assert not git(remote, "for-each-ref", REF)  # the push that recorded the loss deleted the heartbeat
    # the heartbeat added no branch and no commit to the lab's history, and no status file
    assert git(remote, "for-each-ref", "--format=%(refname)", "refs/heads") == branches
    assert not list((machine_b / "status").rglob("*heartbeat*"))


def test_a_run_that_published_no_heartbeat_is_left_as_committed(tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setenv("TUNEPLANE_HEARTBEAT_PUBLISH", "0")  # publishing off: as a lab without push access
    remote = make_remote(tmp_path)
    seed_lab(remote, tmp_path / "seed", {"demo": "sleep 300\n"}, runs=[("demo", RUN)])
    machine_a = clone(remote, tmp_path / "a")
    reconcile(machine_a, echo=quiet)
    run_dir, state = _started(machine_a)
    sync(machine_a, PUSH, echo=quiet)
    _machine_gone(run_dir, state)
    machine_b = clone(remote, tmp_path / "b")
    lines: list[str] = []

    sync(machine_b, PUSH, backends=backend_factory(None, storage=tmp_path / "b-storage"), echo=lines.append)

    assert read_status(machine_b, KEY).phase == "Running"
    assert any("no published heartbeat" in line for line in lines), lines
    assert not git(remote, "for-each-ref", "refs/tuneplane/heartbeats")  # the bot's record is there, no heartbeat


def test_a_failing_heartbeat_push_never_breaks_the_run(tmp_path: Path) -> None:
    remote = make_remote(tmp_path)
    seed_lab(remote, tmp_path / "seed", {"demo": "echo trained\n"}, runs=[("demo", RUN)])
    bot = clone(remote, tmp_path / "bot")
    hook = remote / "hooks" / "pre-receive"  # the remote refuses every push from now on
    hook.write_text("#!/bin/sh\necho 'heartbeats refused here' >&2\nexit 1\n", encoding="utf-8")
    hook.chmod(0o755)
    reconcile(bot, echo=quiet)
    run_dir, _ = _started(bot)
    assert _synced_to_end(bot, 0.3, "the run did not end") == "Succeeded"
    log = (run_dir / log_name(1)).read_text(encoding="utf-8")
    assert log.count("heartbeat could not be published") == 1, log


def test_a_lab_without_a_remote_runs_and_publishes_nothing(tmp_path: Path) -> None:
    remote = make_remote(tmp_path)
    seed_lab(remote, tmp_path / "seed", {"demo": "echo trained\n"}, runs=[("demo", RUN)])
    lab = clone(remote, tmp_path / "lab")
    git(lab, "remote", "remove", "origin")
    reconcile(lab, echo=quiet)
    run_dir, _ = _started(lab)
    assert _synced_to_end(lab, 0.3, "the run did not end") == "Succeeded"
    assert "heartbeat could not be published" not in (run_dir / log_name(1)).read_text(encoding="utf-8")
    assert not git(remote, "for-each-ref", "refs/tuneplane")


def test_a_push_that_hangs_is_killed_and_reported(tmp_path: Path) -> None:
    """A remote that never answers: the publish is killed after its timeout and says so."""
    import pytest

    from tuneplane.lab.gitrepo import GitFailed, GitRepo
    from tuneplane.lab.heartbeats import publish

    remote = make_remote(tmp_path)
    seed_lab(remote, tmp_path / "seed", {"demo": "echo trained\n"})
    lab = clone(remote, tmp_path / "lab")
    marker = tmp_path / "hung"
    git(lab, "config", "protocol.ext.allow", "always")
    git(lab, "remote", "set-url", "origin", f"ext::sh -c touch% {marker};sleep% 120")

    with pytest.raises(GitFailed, match="no answer within"):
        publish(GitRepo(lab), "origin", "demo", RUN, "a heartbeat", timeout=2)
    assert marker.exists()  # the remote was reached, and hung
    assert not git(remote, "for-each-ref", "refs/tuneplane")
