"""The bot from a shallow clone (`git clone --depth 1` over smart HTTP, as the lab's workflow checks out).

The remote is a real `git http-backend` (tests/githttp.py) in front of a bare repository with several
merges of history; the bot's clone holds the tip commit only. What needs older commits must fetch them
on demand: a request pinned to an older commit, a rebase onto another writer's push whose merge base
the clone lacks, `tp rerun` of a request added a few commits back. What cannot be fetched is a clear
message naming the request, the commit and the fix, never "no such commit".
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from fakekube import FakeKube
from githttp import GitHttpServer
from support.repos import (
    BRANCH,
    add_requests,
    backend_factory,
    configure,
    git,
    kubeconfig,
    make_remote,
    quiet,
    remote_files,
    remote_show,
    request,
    run_ids,
    seed_lab,
    tp_here,
)
from support.wait import wait_until

from tuneplane.bot.entry import BotOptions, reconcile
from tuneplane.lab.runs import RunKey, read_request, read_status, write_request
from tuneplane.plan.names import object_name

pytest_plugins = ("fakekube",)  # the fake_kube fixture

NS = "tuneplane"


@dataclass
class ShallowLab:
    remote: Path  # the bare repository the server serves
    writer: Path  # a full clone another writer pushes from (straight to the bare repository)
    url: str
    server: GitHttpServer
    commits: list[str]  # the tip of each merge, oldest first

    def shallow_clone(self, dest: Path) -> Path:
        git(dest.parent, "clone", "-q", "--depth", "1", "-b", BRANCH, self.url, dest.name)
        configure(dest)
        assert git(dest, "rev-parse", "--is-shallow-repository") == "true"
        assert git(dest, "rev-list", "--count", "HEAD") == "1"
        return dest

    def push_from_writer(self, message: str, paths: dict[str, str]) -> str:
        git(self.writer, "pull", "-q", "--rebase", "origin", BRANCH)
        for rel, text in paths.items():
            (self.writer / rel).parent.mkdir(parents=True, exist_ok=True)
            (self.writer / rel).write_text(text, encoding="utf-8")
        git(self.writer, "add", "-A")
        git(self.writer, "commit", "-q", "-m", message)
        git(self.writer, "push", "-q", "origin", f"HEAD:{BRANCH}")
        return git(self.writer, "rev-parse", "HEAD")

    def pinned_and_plain(self, pinned: str, plain: str, dest: Path) -> tuple[str, str, Path]:
        """A request pinned to an older commit and a plain one, pushed by the writer, then a shallow
        clone (which lacks the pinned commit): the pinned commit, the pushed head and the clone."""
        old = self.commits[1]
        write_request(self.writer, request("demo", pinned, "h200:8", commit=old, rerun_of="x"))
        write_request(self.writer, request("demo", plain, "h200:8"))
        head = self.push_from_writer("two requests", {})
        return old, head, self.shallow_clone(dest)

    def reconciled_clone(self, tmp_path: Path, fake_kube: FakeKube) -> tuple[Path, Path, str]:
        """One run request pushed by the writer, then a shallow bot clone that reconciled it (committed,
        not pushed): the clone, its kubeconfig and the run id."""
        (run_id,) = run_ids(1)
        add_requests(self.writer, [("demo", run_id)], profile="h200:8")
        git(self.writer, "push", "-q", "origin", f"HEAD:{BRANCH}")
        bot = self.shallow_clone(tmp_path / "bot")
        config = kubeconfig(tmp_path / "kubeconfig", fake_kube.url)
        code, out = tp_here(bot, "bot", "reconcile", "--kubeconfig", str(config))
        assert code == 0, out
        return bot, config, run_id


def _merge(writer: Path, branch: str, files: dict[str, str]) -> str:
    """A pull request merged with a merge commit, as a git host does."""
    git(writer, "checkout", "-q", "-b", branch)
    for rel, text in files.items():
        (writer / rel).write_text(text, encoding="utf-8")
    git(writer, "add", "-A")
    git(writer, "commit", "-q", "-m", f"{branch}: change")
    git(writer, "checkout", "-q", BRANCH)
    git(writer, "merge", "-q", "--no-ff", "-m", f"Merge {branch}", branch)
    git(writer, "push", "-q", "origin", f"HEAD:{BRANCH}")
    return git(writer, "rev-parse", "HEAD")


def _served_lab(tmp_path: Path, backend: str, profile: str, script: str) -> tuple[Path, Path, list[str]]:
    """A lab with four merges of history (the trainer changes in each: `script` formatted with n)."""
    served = tmp_path / "srv"
    served.mkdir()
    remote = make_remote(served, "lab.git")
    writer = seed_lab(remote, tmp_path / "writer", {"demo": script.format(n=0)}, backend=backend, profile=profile)
    commits = [git(writer, "rev-parse", "HEAD")]
    for n in range(1, 4):
        commits.append(_merge(writer, f"pr-{n}", {"experiments/demo/train.sh": script.format(n=n)}))
    return remote, writer, commits


@pytest.fixture
def shallow_lab(tmp_path: Path) -> Iterator[ShallowLab]:
    """A cluster lab with four merges of history on a smart-HTTP remote."""
    remote, writer, commits = _served_lab(tmp_path, "kubernetes", "h200:8", "echo v{n}\n")
    server = GitHttpServer(remote.parent).start()
    try:
        yield ShallowLab(remote, writer, server.url(remote.name), server, commits)
    finally:
        server.stop()


def _init_commit(fake_kube: FakeKube, run_id: str) -> str:
    job = fake_kube.get("Job", NS, object_name("demo", run_id))
    init = job["spec"]["template"]["spec"]["initContainers"][0]
    return str(next(e["value"] for e in init["env"] if e["name"] == "TUNEPLANE_COMMIT"))


def _has_object(root: Path, oid: str) -> bool:
    return bool(git(root, "rev-parse", "--verify", "-q", f"{oid}^{{commit}}", check=False))


# ── a request pinned to a commit the clone lacks ─────────────────────────────────────────────────


def test_a_pinned_commit_missing_from_the_shallow_clone_is_fetched(
    shallow_lab: ShallowLab, tmp_path: Path, fake_kube: FakeKube
) -> None:
    pinned, plain = "20250106-000000-000001", "20250106-000000-000002"
    old, head, bot = shallow_lab.pinned_and_plain(pinned, plain, tmp_path / "bot")
    assert not _has_object(bot, old)

    report = reconcile(bot, backends=backend_factory(fake_kube), echo=quiet)

    assert sorted(report.submitted) == [f"demo/{pinned}", f"demo/{plain}"], report
    status = read_status(bot, RunKey("demo", pinned))
    assert status is not None and status.phase == "Submitted" and status.provenance.commit == old
    assert _init_commit(fake_kube, pinned) == old and _init_commit(fake_kube, plain) == head
    assert git(bot, "rev-parse", "--is-shallow-repository") == "true"  # one commit fetched, not the history
    # the lab's history only: the bot's record (refs/tuneplane/*) is its own commit, not fetched history
    assert int(git(bot, "rev-list", "--count", "--exclude=refs/tuneplane/*", "--all")) <= 3


def test_a_pinned_commit_the_remote_does_not_have_is_refused_with_the_fix(
    shallow_lab: ShallowLab, tmp_path: Path, fake_kube: FakeKube
) -> None:
    ghost = "0123456789abcdef0123456789abcdef01234567"
    run_id = "20250106-000000-000003"
    write_request(shallow_lab.writer, request("demo", run_id, "h200:8", commit=ghost, rerun_of="x"))
    shallow_lab.push_from_writer("a request pinned to a commit nobody pushed", {})
    bot = shallow_lab.shallow_clone(tmp_path / "bot")

    report = reconcile(bot, backends=backend_factory(fake_kube), echo=quiet)

    assert report.refused == [f"demo/{run_id}"]
    status = read_status(bot, RunKey("demo", run_id))
    assert status is not None and status.phase == "Failed"
    message = status.message
    assert f"runs/demo/{run_id}.yaml" in message and ghost in message
    assert "origin" in message  # where it was looked for
    assert "push" in message and "commit:" in message  # the fix: push the commit, or drop the pin
    assert "Traceback" not in message


def test_a_pinned_commit_that_cannot_be_fetched_now_is_retried_not_refused(
    shallow_lab: ShallowLab, tmp_path: Path, fake_kube: FakeKube
) -> None:
    pinned, plain = "20250106-000000-000004", "20250106-000000-000005"
    old, _head, bot = shallow_lab.pinned_and_plain(pinned, plain, tmp_path / "bot")
    git(bot, "remote", "set-url", "origin", "http://127.0.0.1:9/lab.git")  # the host is down for now

    first = reconcile(bot, backends=backend_factory(fake_kube), echo=quiet)

    assert first.submitted == [f"demo/{plain}"] and first.waiting == [f"demo/{pinned}"], first
    assert read_status(bot, RunKey("demo", pinned)) is None  # not marked as failed: retried next time
    git(bot, "remote", "set-url", "origin", shallow_lab.url)
    second = reconcile(bot, backends=backend_factory(fake_kube), echo=quiet)
    assert second.submitted == [f"demo/{pinned}"]
    assert _init_commit(fake_kube, pinned) == old


# ── rebasing onto another writer's push ──────────────────────────────────────────────────────────


def test_a_rebase_whose_merge_base_is_not_in_the_clone_deepens_it(
    shallow_lab: ShallowLab, tmp_path: Path, fake_kube: FakeKube
) -> None:
    bot, config, run_id = shallow_lab.reconciled_clone(tmp_path, fake_kube)  # committed, not pushed
    for n in range(3):  # meanwhile other writers push several commits, one of them changes the trainer
        other = shallow_lab.push_from_writer(
            f"other writer {n}", {f"notes/{n}.md": f"note {n}\n", "experiments/demo/train.sh": f"echo w{n}\n"}
        )
    # the branch refreshed at depth 1 (as a shallow CI step would): its tip's parent is not in the clone
    git(bot, "fetch", "-q", "--depth", "1", "origin", f"+refs/heads/{BRANCH}:refs/remotes/origin/{BRANCH}")
    assert git(bot, "merge-base", "HEAD", f"origin/{BRANCH}", check=False) == ""

    code, out = tp_here(bot, "bot", "reconcile", "--push", "--kubeconfig", str(config))

    assert code == 0, out
    assert "Traceback" not in out
    git(shallow_lab.writer, "fetch", "-q", "origin")
    tip = git(shallow_lab.writer, "rev-parse", f"origin/{BRANCH}")
    git(shallow_lab.writer, "merge-base", "--is-ancestor", other, tip)  # nothing of the other writer lost
    assert f"status/demo/{run_id}.json" in remote_files(shallow_lab.remote, "status")
    assert sorted(remote_files(shallow_lab.remote, "notes")) == [f"notes/{n}.md" for n in range(3)]
    # the bot's commit was replayed on the other writer's: a linear history, only status/ changed
    changed = git(shallow_lab.writer, "diff", "--name-only", other, tip).splitlines()
    assert changed and all(p.startswith("status/") for p in changed), changed
    assert git(shallow_lab.writer, "rev-list", "--count", f"{other}..{tip}") == "1"


def test_a_remote_rewritten_to_unrelated_history_is_a_clear_error(
    shallow_lab: ShallowLab, tmp_path: Path, fake_kube: FakeKube
) -> None:
    bot, config, _ = shallow_lab.reconciled_clone(tmp_path, fake_kube)
    orphan = tmp_path / "orphan"  # someone force-pushed a history with no commit in common
    seed_lab(make_remote(tmp_path, "other.git"), orphan, {"demo": "echo other\n"}, backend="kubernetes")
    git(orphan, "push", "-q", "--force", str(shallow_lab.remote), f"HEAD:{BRANCH}")
    before = git(bot, "rev-parse", "HEAD")

    code, out = tp_here(bot, "bot", "reconcile", "--push", "--kubeconfig", str(config))

    assert code != 0 and "Traceback" not in out, out
    assert "no commit in common" in out and f"origin/{BRANCH}" in out, out
    assert git(bot, "rev-parse", "HEAD") == before  # the bot's commit is kept, nothing half rebased
    assert not (Path(git(bot, "rev-parse", "--absolute-git-dir")) / "rebase-merge").exists()


# ── tp rerun in a shallow clone ──────────────────────────────────────────────────────────────────


def test_rerun_of_an_unsubmitted_request_finds_the_commit_that_added_it(
    shallow_lab: ShallowLab, tmp_path: Path
) -> None:
    from tuneplane.runs.rerun import rerun

    run_id = "20250107-000000-000001"
    write_request(shallow_lab.writer, request("demo", run_id, "h200:8"))
    added = shallow_lab.push_from_writer("request a run", {})
    for n in range(2):  # later merges: the clone's one commit is not the one that added the request
        shallow_lab.push_from_writer(f"later {n}", {f"notes/{n}.md": f"note {n}\n"})
    bot = shallow_lab.shallow_clone(tmp_path / "bot")

    again = rerun(run_id, bot, echo=quiet)

    assert read_request(bot, again.result.key).commit == added
    assert again.result.spec.provenance.commit == added


# ── end to end: the workflow's bot jobs, as whole processes, in a depth-1 clone over HTTP ────────────

TRAIN = """#!/usr/bin/env bash
set -eu
mkdir -p "$TUNEPLANE_OUT_DIR/checkpoints"
echo ok > "$TUNEPLANE_OUT_DIR/checkpoints/step-1.txt"
echo "trained by version {n}"
"""


def test_the_bot_jobs_run_from_a_depth_1_clone_over_http(tmp_path: Path) -> None:
    remote, writer, commits = _served_lab(tmp_path, "local", "local", TRAIN)
    plain, pinned, later = run_ids(3)
    write_request(writer, request("demo", plain))
    write_request(writer, request("demo", pinned, commit=commits[1], rerun_of="20250101-000000-000000"))
    git(writer, "add", "-A")
    git(writer, "commit", "-q", "-m", "request two runs, one pinned to an older merge")
    git(writer, "push", "-q", "origin", f"HEAD:{BRANCH}")
    writer_commits = [git(writer, "rev-parse", "HEAD")]
    server = GitHttpServer(remote.parent).start()
    try:
        url = server.url(remote.name)
        bot = tmp_path / "bot"  # what actions/checkout does with fetch-depth: 1
        git(tmp_path, "clone", "-q", "--depth", "1", "-b", BRANCH, url, bot.name)
        configure(bot)
        assert git(bot, "rev-list", "--count", "HEAD") == "1"

        code, out = tp_here(bot, "bot", "reconcile", "--push")
        assert code == 0, out
        _wait_done(remote, [plain, pinned])
        # another writer merges a request while the jobs run: the sync below must fetch and rebase
        git(writer, "pull", "-q", "--rebase", "origin", BRANCH)
        write_request(writer, request("demo", later))
        (writer / "notes.md").write_text("a note\n", encoding="utf-8")
        git(writer, "add", "-A")
        git(writer, "commit", "-q", "-m", "request one more run")
        git(writer, "push", "-q", "origin", f"HEAD:{BRANCH}")
        writer_commits.append(git(writer, "rev-parse", "HEAD"))

        code, out = tp_here(bot, "bot", "sync", "--push")
        assert code == 0, out
        code, out = tp_here(bot, "bot", "reconcile", "--push")  # the push event of the writer's merge
        assert code == 0, out
        _wait_done(remote, [later])
        code, out = tp_here(bot, "bot", "sync", "--push")
        assert code == 0, out
        pushes = [path for method, path, status in server.requests if method == "POST" and status == 200]
    finally:
        server.stop()

    assert any(p.endswith("/git-receive-pack") for p in pushes)  # the bot pushed over smart HTTP
    statuses = {r: json.loads(remote_show(remote, f"status/demo/{r}.json")) for r in (plain, pinned, later)}
    assert {r: s["phase"] for r, s in statuses.items()} == dict.fromkeys((plain, pinned, later), "Succeeded")
    assert statuses[pinned]["provenance"]["commit"] == commits[1]
    assert statuses[plain]["provenance"]["commit"] == writer_commits[0]
    assert "trained by version 1" in _run_log(statuses[pinned])  # the pinned commit's trainer ran
    assert "trained by version 3" in _run_log(statuses[plain])
    tip = git(remote, "rev-parse", BRANCH)
    for commit in [*commits, *writer_commits]:  # nobody's commit lost
        git(remote, "merge-base", "--is-ancestor", commit, tip)
    assert git(remote, "show", f"{BRANCH}:notes.md") == "a note"
    assert git(bot, "status", "--porcelain") == "" and git(bot, "rev-parse", "HEAD") == tip
    assert git(bot, "rev-parse", "--is-shallow-repository") == "true"  # it never fetched the whole history
    assert int(git(bot, "rev-list", "--count", "HEAD")) < int(git(remote, "rev-list", "--count", BRANCH))


def _wait_done(remote: Path, ids: list[str]) -> None:
    """Until the local jobs of these runs have ended (their run directories say so)."""
    from tuneplane.backends.local import read_state

    for run_id in ids:
        status = json.loads(remote_show(remote, f"status/demo/{run_id}.json"))
        assert status["phase"] != "Failed", f"{run_id} was not run: {status['message']}"
        run_dir = Path(status["out_dir"]).parent
        wait_until(
            lambda: (read_state(run_dir) or {}).get("phase") in ("Succeeded", "Failed", "Cancelled"),  # noqa: B023
            60,
            interval=0.1,
            message=f"local run {run_id} did not finish",
        )


def _run_log(status: dict[str, object]) -> str:
    return (Path(str(status["out_dir"])).parent / "run.log").read_text(encoding="utf-8")


def test_the_workflow_checks_the_bot_out_at_depth_1_and_the_check_with_history() -> None:
    import yaml

    from tuneplane.author.scaffold import lab_files

    jobs = yaml.safe_load(lab_files("demo")[".github/workflows/tuneplane.yml"])["jobs"]

    def depth(job: str) -> object:
        checkout = next(s for s in jobs[job]["steps"] if str(s.get("uses", "")).startswith("actions/checkout@"))
        return checkout["with"]["fetch-depth"]

    assert depth("reconcile") == depth("sync") == 1  # the tip only: what each bot run pays
    assert depth("check") == 0  # `--changed --base origin/<base>` needs the base branch and the merge base


def test_status_files_others_wrote_are_found_when_the_ledgers_tree_is_not_in_the_clone(
    shallow_lab: ShallowLab, tmp_path: Path, fake_kube: FakeKube
) -> None:
    from tuneplane.bot.scan import scan
    from tuneplane.record.ledger import Ledger

    first, other = run_ids(2)
    add_requests(shallow_lab.writer, [("demo", first)], profile="h200:8")
    reconcile(shallow_lab.writer, BotOptions(push=True), backends=backend_factory(fake_kube), echo=quiet)
    ledger = Ledger.parse(git(shallow_lab.writer, "show", f"{BRANCH}:status/index.json"))
    status = json.loads(git(shallow_lab.writer, "show", f"{BRANCH}:status/demo/{first}.json"))
    status.update(run_id=other, phase="Running")  # as `tp submit --local` commits a run it started
    write_request(shallow_lab.writer, request("demo", other, "h200:8"))
    shallow_lab.push_from_writer("a run started by hand", {f"status/demo/{other}.json": json.dumps(status) + "\n"})
    shallow_lab.push_from_writer("a later merge", {"notes.md": "later\n"})
    bot = shallow_lab.shallow_clone(tmp_path / "bot")
    old_tree = ledger.statuses["demo"]
    assert git(bot, "cat-file", "-t", old_tree, check=False) == ""  # the bot's last tree is not in the clone

    work = scan(bot)

    assert work.ledger.active.get(f"demo/{other}") == "Running"  # watched: sync will follow it
    assert other in [row[0] for row in work.changed_statuses["demo"]]  # its pages are rendered again
