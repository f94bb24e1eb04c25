"""`GitRepo` in a shallow clone: what it lacks is fetched on demand, never taken for "no such commit".

The remote is `git http-backend` over smart HTTP (tests/githttp.py). Protocol v2, which git speaks by
default, serves any commit a branch reaches; a client held to protocol v0 plays a host that serves
branch tips only, so the fallback (the whole history) is exercised too.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from githttp import GitHttpServer
from support.repos import BRANCH, configure, git, make_remote
from support.wait import wait_until

from tuneplane.constants import EXIT_INTERRUPTED
from tuneplane.errors import UsageError
from tuneplane.lab import gitrepo
from tuneplane.lab.gitrepo import CommitUnavailable, GitRepo


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[Path, str, list[str]]]:
    """A bare remote of six commits on `main` and a side branch of two, served over HTTP."""
    remote = make_remote(tmp_path / "srv", "lab.git")
    work = tmp_path / "work"
    git(tmp_path, "clone", "-q", str(remote), "work")
    configure(work)
    commits = []
    for n in range(6):
        (work / "file.txt").write_text(f"{n}\n", encoding="utf-8")
        if n == 2:
            (work / "added.txt").write_text("added at 2\n", encoding="utf-8")
        git(work, "add", "-A")
        git(work, "commit", "-q", "-m", f"commit {n}")
        commits.append(git(work, "rev-parse", "HEAD"))
    git(work, "push", "-q", "origin", f"HEAD:{BRANCH}")
    server = GitHttpServer(remote.parent).start()
    try:
        yield work, server.url("lab.git"), commits
    finally:
        server.stop()


def _shallow(url: str, dest: Path) -> GitRepo:
    git(dest.parent, "clone", "-q", "--depth", "1", "-b", BRANCH, url, dest.name)
    configure(dest)
    return GitRepo(dest)


def test_a_full_id_is_fetched_alone(served: tuple[Path, str, list[str]], tmp_path: Path) -> None:
    _, url, commits = served
    repo = _shallow(url, tmp_path / "bot")
    assert repo.is_shallow() and not repo.has_commit(commits[1])

    assert repo.ensure_commit(commits[1]) == commits[1]

    assert repo.is_shallow()  # that commit only, not the history
    assert repo.shallow_roots() == {commits[1], commits[-1]}
    assert repo.ensure_commit(commits[-1]) == commits[-1]  # present: nothing fetched


def test_a_host_that_serves_branch_tips_only_costs_the_history(
    served: tuple[Path, str, list[str]], tmp_path: Path
) -> None:
    _, url, commits = served
    repo = _shallow(url, tmp_path / "bot")
    git(repo.root, "config", "protocol.version", "0")  # upload-pack v0 refuses unadvertised objects

    assert repo.ensure_commit(commits[1]) == commits[1]

    assert not repo.is_shallow()


def test_a_short_id_or_a_name_fetches_the_history(served: tuple[Path, str, list[str]], tmp_path: Path) -> None:
    _, url, commits = served
    repo = _shallow(url, tmp_path / "bot")

    assert repo.ensure_commit(commits[2][:12]) == commits[2]
    assert not repo.is_shallow()


def test_a_commit_the_remote_does_not_have_is_said_so(served: tuple[Path, str, list[str]], tmp_path: Path) -> None:
    _, url, _ = served
    repo = _shallow(url, tmp_path / "bot")
    ghost = "0123456789abcdef0123456789abcdef01234567"

    with pytest.raises(CommitUnavailable) as caught:
        repo.ensure_commit(ghost)

    assert not caught.value.transient
    assert ghost in caught.value.message and "origin has no such commit" in caught.value.message
    assert "push" in caught.value.hint


@pytest.mark.parametrize("bad", ["--upload-pack=touch /tmp/pwned", "", " abc", "a\nb"])
def test_what_is_no_commit_id_never_reaches_git_fetch(tmp_path: Path, bad: str) -> None:
    root = tmp_path / "repo"
    root.mkdir()
    git(root, "init", "-q")
    git(root, "remote", "add", "origin", str(tmp_path / "nowhere"))
    with pytest.raises(CommitUnavailable, match="is not a commit id"):
        GitRepo(root).ensure_commit(bad)


def test_a_remote_that_cannot_be_reached_is_transient(served: tuple[Path, str, list[str]], tmp_path: Path) -> None:
    _, url, commits = served
    repo = _shallow(url, tmp_path / "bot")
    git(repo.root, "remote", "set-url", "origin", "http://127.0.0.1:9/lab.git")

    with pytest.raises(CommitUnavailable) as caught:
        repo.ensure_commit(commits[1])

    assert caught.value.transient and "fetching it from origin failed" in caught.value.message


def test_a_remote_that_never_answers_is_given_up_on_in_bounded_time(
    served: tuple[Path, str, list[str]], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _, url, commits = served
    repo = _shallow(url, tmp_path / "bot")
    silent = socket.create_server(("127.0.0.1", 0))  # accepts connections, never answers
    accepted: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        silent.settimeout(0.2)
        while not stop.is_set():
            try:
                accepted.append(silent.accept()[0])
            except OSError:
                continue

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    monkeypatch.setattr(gitrepo, "NETWORK_TIMEOUT", 2)
    git(repo.root, "remote", "set-url", "origin", f"http://127.0.0.1:{silent.getsockname()[1]}/lab.git")
    try:
        with pytest.raises(CommitUnavailable) as caught:
            repo.ensure_commit(commits[1])
    finally:
        stop.set()
        thread.join(timeout=5)
        for conn in accepted:
            conn.close()
        silent.close()
    assert caught.value.transient and "no answer within 2 s" in caught.value.message


def test_no_remote_to_fetch_from_is_said_so(tmp_path: Path) -> None:
    root = tmp_path / "repo"
    root.mkdir()
    git(root, "init", "-q")
    with pytest.raises(CommitUnavailable, match="no remote 'origin'") as caught:
        GitRepo(root).ensure_commit("0123456789abcdef0123456789abcdef01234567")
    assert not caught.value.transient


def test_the_merge_base_is_found_by_deepening(served: tuple[Path, str, list[str]], tmp_path: Path) -> None:
    work, url, commits = served
    repo = _shallow(url, tmp_path / "bot")
    (repo.root / "mine.txt").write_text("mine\n", encoding="utf-8")
    repo.add_and_commit(["mine.txt"], "the bot's commit")
    for n in range(3):
        (work / "theirs.txt").write_text(f"{n}\n", encoding="utf-8")
        git(work, "add", "-A")
        git(work, "commit", "-q", "-m", f"theirs {n}")
    git(work, "push", "-q", "origin", f"HEAD:{BRANCH}")
    git(repo.root, "fetch", "-q", "--depth=1", "origin", f"+refs/heads/{BRANCH}:refs/remotes/origin/{BRANCH}")
    assert git(repo.root, "merge-base", "HEAD", f"origin/{BRANCH}", check=False) == ""

    assert repo.merge_base_deepening(f"origin/{BRANCH}", "origin", BRANCH) == commits[-1]


def test_unrelated_histories_have_no_merge_base(tmp_path: Path) -> None:
    one, two = tmp_path / "one", tmp_path / "two"
    for root in (one, two):
        root.mkdir()
        git(root, "init", "-q", "-b", BRANCH)
        configure(root)
        (root / "f").write_text(root.name, encoding="utf-8")
        git(root, "add", "-A")
        git(root, "commit", "-q", "-m", root.name)
    git(one, "fetch", "-q", str(two), f"+refs/heads/{BRANCH}:refs/remotes/two/{BRANCH}")

    assert GitRepo(one).merge_base_deepening(f"two/{BRANCH}", "two", BRANCH) == ""


def test_the_commit_that_added_a_file_is_not_the_shallow_boundary(
    served: tuple[Path, str, list[str]], tmp_path: Path
) -> None:
    _, url, commits = served
    repo = _shallow(url, tmp_path / "bot")
    assert git(repo.root, "log", "--diff-filter=A", "--format=%H", "-1", "--", "added.txt") == commits[-1]

    assert repo.added_in("added.txt") == commits[2]
    assert repo.added_in("never.txt") == ""


def test_changed_files_in_a_shallow_clone_without_the_merge_base_is_an_error(
    served: tuple[Path, str, list[str]], tmp_path: Path
) -> None:
    work, url, _ = served
    repo = _shallow(url, tmp_path / "bot")
    (repo.root / "mine.txt").write_text("mine\n", encoding="utf-8")
    repo.add_and_commit(["mine.txt"], "a change")
    (work / "theirs.txt").write_text("theirs\n", encoding="utf-8")
    git(work, "add", "-A")
    git(work, "commit", "-q", "-m", "theirs")
    git(work, "push", "-q", "origin", f"HEAD:{BRANCH}")
    git(repo.root, "fetch", "-q", "--depth=1", "origin", f"+refs/heads/{BRANCH}:refs/remotes/origin/{BRANCH}")

    with pytest.raises(UsageError, match="this clone is shallow") as caught:
        repo.changed_files(None)  # not "nothing changed"
    assert "--base" in caught.value.hint
    with pytest.raises(UsageError) as caught:
        repo.verify_commit("origin/nope")
    assert "shallow" in caught.value.hint


def test_changed_files_in_a_full_clone_is_unchanged(served: tuple[Path, str, list[str]], tmp_path: Path) -> None:
    work, _, _ = served
    repo = GitRepo(work)
    git(work, "checkout", "-q", "-b", "topic")
    (work / "new.txt").write_text("x\n", encoding="utf-8")
    repo.add_and_commit(["new.txt"], "topic")
    assert repo.changed_files(None) == ["new.txt"]


def _processes_naming(text: str) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                cmdline = (entry / "cmdline").read_bytes()
            except OSError:
                continue
            if text.encode() in cmdline:
                found.append(int(entry.name))
    return found


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_an_interrupted_fetch_leaves_no_git_behind(tmp_path: Path, signum: int) -> None:
    """git runs in its own process group (so a timeout kills its transport helper too); a Ctrl-C or
    a cancelled CI job's SIGTERM must stop it as well, not leave a fetch or push running alone."""
    work = tmp_path / "work"
    git(tmp_path, "init", "-q", "work")
    silent = socket.create_server(("127.0.0.1", 0))  # accepts connections (the backlog), never answers
    url = f"http://127.0.0.1:{silent.getsockname()[1]}/lab-{signum}.git"
    git(work, "remote", "add", "origin", url)
    # a shell starts tp with Ctrl-C at its default; a test worker may pass it on ignored or blocked (a
    # library another test loaded in it), which would make this test time out, not our code fail
    script = (
        "import signal, sys; from pathlib import Path; from tuneplane.lab.gitrepo import GitRepo\n"
        "signal.signal(signal.SIGINT, signal.default_int_handler)\n"
        "signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT, signal.SIGTERM})\n"
        f"GitRepo(Path({str(work)!r})).fetch('origin', 'main')\n"
    )
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        wait_until(lambda: _processes_naming(url), 30, message="git never started talking to the remote")
        time.sleep(0.2)
        proc.send_signal(signum)
        proc.communicate(timeout=30)
        wait_until(
            lambda: _processes_naming(url) == [],
            10,
            message=lambda: f"git outlived the interrupted process: {_processes_naming(url)}",
        )
        assert proc.returncode in (128 + signum, -signum, EXIT_INTERRUPTED), proc.returncode
    finally:
        if proc.poll() is None:
            proc.kill()
        for pid in _processes_naming(url):
            os.kill(pid, signal.SIGKILL)
        silent.close()
