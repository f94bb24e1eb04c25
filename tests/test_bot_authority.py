"""`status/` belongs to the bot: a pull request cannot make it act on another team's run.

Each case is a hostile change merged into the lab (committed in the bot's clone, as a merge would),
then the real `reconcile`/`sync` against the cluster twin or the real local backend. The bot keeps
its own record of what it submitted (`refs/tuneplane/authority`, which no merge can move) and acts on
that only: a forged status is reported and never obeyed, an edited one is put back.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from fakekube import FakeKube
from support.local import kill_job
from support.repos import BRANCH, backend_factory, clone, git, make_remote, quiet, run_ids, seed_lab
from support.wait import wait_until

from tuneplane.backends.local.files import read_state
from tuneplane.bot.entry import BotOptions, reconcile, sync
from tuneplane.lab.gitrepo import GitRepo
from tuneplane.lab.runs import RunKey, read_status, write_request
from tuneplane.plan.names import object_name
from tuneplane.record.publish import Target, publish

pytest_plugins = ("fakekube",)

NS = "tuneplane"
SECRET = "DB_PASSWORD=hunter2-do-not-leak"
ATTACKER = "20250103-100000-0000ff"


def _cluster(tmp_path: Path) -> tuple[Path, list[str]]:
    remote = make_remote(tmp_path)
    ids = run_ids(1)
    seed_lab(
        remote,
        tmp_path / "seed",
        {"demo": "echo hi\n", "evil": "echo hi\n"},
        backend="kubernetes",
        runs=[("demo", r) for r in ids],
        profile="h200:8",
    )
    return clone(remote, tmp_path / "bot"), ids


def _forge(bot: Path, victim: RunKey, *, cancel: bool = False, phase: str = "Running") -> RunKey:
    """The attacker's merged PR: its own request, and a status for it that copies the victim's backend."""
    from support.repos import request

    key = RunKey("evil", ATTACKER)
    write_request(bot, request("evil", ATTACKER, "h200:8", cancel=cancel))
    stolen = json.loads((bot / victim.status_rel).read_text())
    forged = {**stolen, "experiment": "evil", "run_id": ATTACKER, "phase": phase, "history": []}
    (bot / key.status_rel).parent.mkdir(parents=True, exist_ok=True)
    (bot / key.status_rel).write_text(json.dumps(forged, indent=1) + "\n")
    git(bot, "add", "-A")
    git(bot, "commit", "-q", "-m", "Merge pull request #7: evil experiment")
    return key


def _committed_text(root: Path) -> str:
    return git(root, "grep", "-I", "-h", "-e", "hunter2", "HEAD", "--", ".", check=False)


def _fail_with_secret(fake_kube: FakeKube, job: str) -> None:
    labels = fake_kube.get("Job", NS, job)["spec"]["template"]["metadata"]["labels"]
    failed = {"name": "trainer", "state": {"terminated": {"exitCode": 1, "reason": "Error"}}}
    fake_kube.add_pod(NS, f"{job}-x", labels, "Failed", [failed], f"connecting\n{SECRET}\n")
    fake_kube.set_status(
        "Job",
        NS,
        job,
        {
            "startTime": "2025-01-01T00:00:00Z",
            "conditions": [
                {"type": "Failed", "status": "True", "reason": "BackoffLimitExceeded", "message": "backoff"}
            ],
        },
    )


def test_a_forged_status_never_reads_another_teams_job(tmp_path: Path, fake_kube: FakeKube) -> None:
    bot, ids = _cluster(tmp_path)
    victim = RunKey("demo", ids[0])
    reconcile(bot, backends=backend_factory(fake_kube), echo=quiet)
    forged = _forge(bot, victim)
    _fail_with_secret(fake_kube, object_name("demo", ids[0]))
    lines: list[str] = []

    report = sync(bot, backends=backend_factory(fake_kube), echo=lines.append)

    assert "hunter2" not in (bot / forged.status_rel).read_text()
    assert read_status(bot, forged).phase == "Running"  # not obeyed: never observed
    assert any(forged.status_rel in p and "kubernetes" in p for p in report.problems), report.problems
    assert read_status(bot, victim).phase == "Failed"  # the victim's own run is still followed


def test_a_forged_status_with_cancel_never_deletes_another_teams_job(tmp_path: Path, fake_kube: FakeKube) -> None:
    bot, ids = _cluster(tmp_path)
    victim = RunKey("demo", ids[0])
    reconcile(bot, backends=backend_factory(fake_kube), echo=quiet)
    forged = _forge(bot, victim, cancel=True)

    report = reconcile(bot, backends=backend_factory(fake_kube), echo=quiet)

    assert fake_kube.get("Job", NS, object_name("demo", ids[0])) is not None
    assert str(forged) not in report.cancelled and read_status(bot, victim).phase != "Cancelled"
    assert any(forged.status_rel in p for p in report.problems), report.problems


def test_an_edited_finished_status_is_restored_and_reported(tmp_path: Path, fake_kube: FakeKube) -> None:
    bot, ids = _cluster(tmp_path)
    key = RunKey("demo", ids[0])
    reconcile(bot, backends=backend_factory(fake_kube), echo=quiet)
    fake_kube.set_status(
        "Job",
        NS,
        object_name("demo", ids[0]),
        {
            "startTime": "2025-01-01T00:00:00Z",
            "completionTime": "2025-01-01T00:05:00Z",
            "conditions": [{"type": "Complete", "status": "True"}],
        },
    )
    sync(bot, backends=backend_factory(fake_kube), echo=quiet)
    honest = (bot / key.status_rel).read_text()
    data = json.loads(honest)
    data.update(phase="Failed", metrics={"accuracy": 0.99})
    (bot / key.status_rel).write_text(json.dumps(data))
    git(bot, "commit", "-qam", "Merge pull request #8: better numbers")
    lines: list[str] = []

    report = sync(bot, backends=backend_factory(fake_kube), echo=lines.append)

    assert (bot / key.status_rel).read_text() == honest
    assert str(key) in report.restored
    assert any(key.status_rel in line and "outside the bot" in line for line in lines), lines


def test_a_status_naming_another_run_than_its_path_is_reported(tmp_path: Path, fake_kube: FakeKube) -> None:
    bot, ids = _cluster(tmp_path)
    key = RunKey("demo", ids[0])
    reconcile(bot, backends=backend_factory(fake_kube), echo=quiet)
    honest = (bot / key.status_rel).read_text()
    data = json.loads(honest)
    data.update(experiment="evil", run_id=ATTACKER)
    (bot / key.status_rel).write_text(json.dumps(data))
    git(bot, "commit", "-qam", "rename")
    lines: list[str] = []

    report = sync(bot, backends=backend_factory(fake_kube), echo=lines.append)

    kept = read_status(bot, key)
    assert (kept.experiment, kept.run_id) == ("demo", ids[0]), report
    assert any(key.status_rel in line and "not its path" in line for line in lines), lines


# ── the local backend: processes and folders ─────────────────────────────────────────────────────


def _alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False


def test_a_forged_local_status_never_stops_another_run(tmp_path: Path) -> None:
    remote = make_remote(tmp_path)
    victim = RunKey("demo", run_ids(1)[0])
    seed_lab(remote, tmp_path / "seed", {"demo": "sleep 60\n", "evil": "echo hi\n"}, runs=[("demo", victim.run_id)])
    bot = clone(remote, tmp_path / "bot")
    reconcile(bot, echo=quiet)
    status = read_status(bot, victim)
    assert status.backend is not None
    run_dir = Path(status.backend.run_dir)
    wait_until(lambda: (read_state(run_dir) or {}).get("pgid"), 30, 0.1, "the victim's run did not start")
    state = read_state(run_dir) or {}
    pgid = int(state["pgid"])
    try:
        from support.repos import request

        key = RunKey("evil", ATTACKER)
        write_request(bot, request("evil", ATTACKER, cancel=True))
        forged = {**json.loads((bot / victim.status_rel).read_text()), "experiment": "evil", "run_id": ATTACKER}
        (bot / key.status_rel).parent.mkdir(parents=True, exist_ok=True)
        (bot / key.status_rel).write_text(json.dumps(forged))
        git(bot, "add", "-A")
        git(bot, "commit", "-q", "-m", "Merge pull request #9")

        report = reconcile(bot, echo=quiet)
        sync(bot, echo=quiet)

        assert _alive(pgid), "the bot stopped a run it did not start for this request"
        assert not (run_dir / "cancel").exists()
        assert read_status(bot, victim).phase != "Cancelled"
        assert str(key) not in report.cancelled
    finally:
        kill_job(state)


def test_a_forged_local_status_naming_any_folder_is_never_signalled(tmp_path: Path) -> None:
    remote = make_remote(tmp_path)
    seed_lab(remote, tmp_path / "seed", {"evil": "echo hi\n"})
    bot = clone(remote, tmp_path / "bot")
    reconcile(bot, echo=quiet)  # the bot has run: it has its record
    folder = tmp_path / "someone-elses"
    folder.mkdir()
    bystander = subprocess.Popen(["sleep", "60"], start_new_session=True)
    (folder / "state.json").write_text(json.dumps({"pgid": bystander.pid, "supervisor_pid": bystander.pid}))
    try:
        from support.repos import request

        key = RunKey("evil", ATTACKER)
        write_request(bot, request("evil", ATTACKER, cancel=True))
        forged = {
            "apiVersion": "tuneplane/status/v1",
            "kind": "RunStatus",
            "experiment": "evil",
            "run_id": ATTACKER,
            "phase": "Running",
            "backend": {"backend": "local", "kind": "Process", "name": "x", "namespace": str(folder), "uid": "u"},
        }
        (bot / key.status_rel).parent.mkdir(parents=True, exist_ok=True)
        (bot / key.status_rel).write_text(json.dumps(forged))
        git(bot, "add", "-A")
        git(bot, "commit", "-q", "-m", "Merge pull request #10")

        reconcile(bot, echo=quiet)
        sync(bot, echo=quiet)

        assert bystander.poll() is None, "the bot signalled a process group it never started"
        assert sorted(p.name for p in folder.iterdir()) == ["state.json"]
    finally:
        bystander.kill()
        bystander.wait()


# ── one bad path stops one experiment ────────────────────────────────────────────────────────────


def _two_experiments(tmp_path: Path) -> tuple[Path, Path, list[str]]:
    remote = make_remote(tmp_path)
    ids = run_ids(2)
    seed = seed_lab(
        remote,
        tmp_path / "seed",
        {"demo": "echo hi\n", "other": "echo hi\n"},
        backend="kubernetes",
        runs=[("other", ids[0])],
        profile="h200:8",
    )
    return remote, seed, ids


def test_a_linked_index_page_stops_nothing(tmp_path: Path, fake_kube: FakeKube) -> None:
    remote, seed, ids = _two_experiments(tmp_path)
    (seed / "status").mkdir(exist_ok=True)
    (seed / "status/README.md").symlink_to("/etc/hostname")
    git(seed, "add", "-A")
    git(seed, "commit", "-q", "-m", "a link where the index page belongs")
    git(seed, "push", "-q", "origin", f"HEAD:{BRANCH}")
    bot = clone(remote, tmp_path / "bot")

    report = reconcile(bot, backends=backend_factory(fake_kube), echo=quiet)

    assert report.commit and str(RunKey("other", ids[0])) in report.submitted
    assert read_status(bot, RunKey("other", ids[0])) is not None
    assert not (bot / "status/README.md").is_symlink()  # replaced: the link itself, never its target
    assert Path("/etc/hostname").read_text() != (bot / "status/README.md").read_text()


def test_an_experiment_whose_status_folder_is_a_file_stops_only_itself(tmp_path: Path, fake_kube: FakeKube) -> None:
    remote, seed, ids = _two_experiments(tmp_path)
    from support.repos import add_requests

    add_requests(seed, [("demo", ids[1])], profile="h200:8")
    (seed / "status").mkdir(exist_ok=True)
    (seed / "status/demo").write_text("not a folder\n")
    git(seed, "add", "-A")
    git(seed, "commit", "-q", "-m", "a file where a folder belongs")
    git(seed, "push", "-q", "origin", f"HEAD:{BRANCH}")
    bot = clone(remote, tmp_path / "bot")

    report = reconcile(bot, backends=backend_factory(fake_kube), echo=quiet)

    assert report.commit
    assert str(RunKey("other", ids[0])) in report.submitted
    assert str(RunKey("demo", ids[1])) not in report.submitted  # checked before any job was started
    assert any("status/demo" in p for p in [*report.problems, *report.errors])


def test_a_linked_experiment_page_stops_only_that_experiment(tmp_path: Path, fake_kube: FakeKube) -> None:
    remote, seed, ids = _two_experiments(tmp_path)
    bot = clone(remote, tmp_path / "bot")
    reconcile(bot, backends=backend_factory(fake_kube), echo=quiet)
    from support.repos import add_requests

    add_requests(bot, [("demo", ids[1])], profile="h200:8")
    target = tmp_path / "outside.md"
    target.write_text("keep me\n")
    page = bot / "status/other/README.md"
    page.unlink()
    page.symlink_to(target)
    git(bot, "add", "-A")
    git(bot, "commit", "-q", "-m", "a link where a page belongs")

    report = reconcile(bot, backends=backend_factory(fake_kube), echo=quiet)

    assert report.commit and str(RunKey("demo", ids[1])) in report.submitted
    assert target.read_text() == "keep me\n"
    assert read_status(bot, RunKey("demo", ids[1])) is not None


# ── the bot's git is the bot's ───────────────────────────────────────────────────────────────────


def test_a_committed_gitmodules_does_not_break_the_bots_fetch(tmp_path: Path, fake_kube: FakeKube) -> None:
    remote, seed, ids = _two_experiments(tmp_path)
    (seed / ".gitmodules").write_text('[submodule "x"]\n\tpath = x\n\turl = ./x\n\tupdate = !touch /tmp/pwned\n')
    git(seed, "add", "-A")
    git(seed, "commit", "-q", "-m", "a submodule")
    git(seed, "push", "-q", "origin", f"HEAD:{BRANCH}")
    bot = clone(remote, tmp_path / "bot")

    report = reconcile(bot, BotOptions(push=True), backends=backend_factory(fake_kube), echo=quiet)

    assert report.pushed and str(RunKey("other", ids[0])) in report.submitted


def test_the_labs_gitattributes_do_not_reach_the_bots_files(tmp_path: Path, fake_kube: FakeKube) -> None:
    remote, seed, ids = _two_experiments(tmp_path)
    (seed / ".gitattributes").write_text("status/** merge=union filter=lfs\n")
    git(seed, "add", "-A")
    git(seed, "commit", "-q", "-m", "attributes")
    git(seed, "push", "-q", "origin", f"HEAD:{BRANCH}")
    bot = clone(remote, tmp_path / "bot")

    reconcile(bot, BotOptions(push=True), backends=backend_factory(fake_kube), echo=quiet)

    rel = RunKey("other", ids[0]).status_rel
    said = git(bot, "check-attr", "merge", "filter", "--", rel)
    assert "union" not in said and "lfs" not in said, said


def test_racing_bots_never_join_two_statuses_under_a_union_merge_driver(tmp_path: Path, fake_kube: FakeKube) -> None:
    remote = make_remote(tmp_path)
    ids = run_ids(1)
    seed = seed_lab(
        remote,
        tmp_path / "seed",
        {"demo": "echo hi\n"},
        backend="kubernetes",
        runs=[("demo", ids[0])],
        profile="h200:8",
    )
    (seed / ".gitattributes").write_text("status/** merge=union\n")
    git(seed, "add", "-A")
    git(seed, "commit", "-q", "-m", "union")
    git(seed, "push", "-q", "origin", f"HEAD:{BRANCH}")
    first = clone(remote, tmp_path / "first")
    reconcile(first, BotOptions(push=True), backends=backend_factory(fake_kube), echo=quiet)
    second = clone(remote, tmp_path / "second")
    job = object_name("demo", ids[0])
    labels = fake_kube.get("Job", NS, job)["spec"]["template"]["metadata"]["labels"]
    fake_kube.add_pod(NS, f"{job}-x", labels, "Running", start_time="2025-01-01T00:01:00Z")
    sync(second, backends=backend_factory(fake_kube), echo=quiet)  # committed, not pushed yet
    fake_kube.set_status(
        "Job",
        NS,
        job,
        {
            "startTime": "2025-01-01T00:00:00Z",
            "completionTime": "2025-01-01T00:05:00Z",
            "conditions": [{"type": "Complete", "status": "True"}],
        },
    )
    sync(first, BotOptions(push=True), backends=backend_factory(fake_kube), echo=quiet)

    publish(GitRepo(second), Target("origin", BRANCH))  # its commit rebased onto the other's, then pushed

    rel = RunKey("demo", ids[0]).status_rel
    pushed = json.loads(git(remote, "show", f"{BRANCH}:{rel}"))  # one whole status, valid JSON
    assert pushed["phase"] == "Succeeded"
