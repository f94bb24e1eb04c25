"""A bot run with nothing to do reads the commit's top trees and the ledger, and nothing else.

The common CI run of `tp bot reconcile` follows a merge that requested nothing, and `tp bot sync` runs on
a schedule in a lab whose runs have all ended. Both must cost what `tp --help` costs however many runs
the lab holds: a few git commands and no pipeline import. Every case runs real git; the processes are
real `python -m tuneplane` runs, with a `git` on PATH that logs each command and runs the real one.
And whatever the idle check skips, the full run must still see: a new request, a status someone else
wrote, a watched run, a remote that moved on, a link where a folder belongs, a rebase left half done.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from support.repos import BRANCH, add_requests, clone, git, make_remote, request, run_ids, seed_lab

from tuneplane.bot.entry import reconcile, sync
from tuneplane.bot.idle import idle
from tuneplane.bot.report import BotOptions

RUNS = 40
PIPELINE = (
    "tuneplane.bot.reconcile",
    "tuneplane.bot.sync",
    "tuneplane.record.batch",
    "tuneplane.bot.scan",
    "tuneplane.lab.runs",
    "tuneplane.lab.load",
    "tuneplane.models.run",
    "tuneplane.backends.factory",
    "ruamel.yaml",
    "yaml",
    "jinja2",
    "kubernetes",
)  # the CLI asks bot.idle first: an idle run loads no pipeline (Typer loads pydantic)


def _finished_lab(tmp_path: Path, count: int = RUNS) -> tuple[Path, list[str]]:
    """`count` finished runs committed and pushed, then the bot's first run (it writes the ledger)."""
    from tuneplane.lab.runs import write_status
    from tuneplane.models.run import RunStatus, Transition

    remote = make_remote(tmp_path)
    lab = seed_lab(remote, tmp_path / "lab", {"demo": "echo hi\n"}, backend="kubernetes", profile="h200:8")
    ids = run_ids(count)
    add_requests(lab, [("demo", r) for r in ids], profile="h200:8", commit=False)
    for run_id in ids:
        write_status(
            lab,
            RunStatus(
                experiment="demo",
                run_id=run_id,
                method="custom/custom",
                profile="h200:8",
                phase="Succeeded",
                submitted_at="2025-01-02T10:00:00Z",
                finished_at="2025-01-02T11:00:00Z",
                exit_code=0,
                history=[
                    Transition(phase="Submitted", at="2025-01-02T10:00:00Z"),
                    Transition(phase="Succeeded", at="2025-01-02T11:00:00Z"),
                ],
            ),
        )
    git(lab, "add", "-A")
    git(lab, "commit", "-q", "-m", f"{count} finished runs")
    git(lab, "push", "-q", "origin", f"HEAD:{BRANCH}")
    report = reconcile(lab, echo=lambda _line: None)  # reads everything once, commits pages and ledger
    assert report.commit is not None
    return lab, ids


def _logging_git(tmp_path: Path) -> tuple[dict[str, str], Path]:
    """An environment whose `git` logs its arguments (one JSON list a line) and runs the real git."""
    real = shutil.which("git")
    assert real is not None
    shim = tmp_path / "shim"
    shim.mkdir()
    log = tmp_path / "git.log"
    (shim / "git").write_text(
        textwrap.dedent(f"""\
        #!{sys.executable}
        import json, os, sys
        with open({str(log)!r}, "a", encoding="utf-8") as fh:
            fh.write(json.dumps(sys.argv[1:]) + "\\n")
        os.execv({real!r}, [{real!r}, *sys.argv[1:]])
        """),
        encoding="utf-8",
    )
    (shim / "git").chmod(0o755)
    env = dict(os.environ)
    env["PATH"] = f"{shim}{os.pathsep}{env.get('PATH', '')}"
    return env, log


def test_an_idle_run_is_three_git_commands_and_no_pipeline_import(tmp_path: Path) -> None:
    lab, ids = _finished_lab(tmp_path)
    env, log = _logging_git(tmp_path)
    head = git(lab, "rev-parse", "HEAD")
    status_blobs = {git(lab, "rev-parse", f"HEAD:status/demo/{r}.json") for r in ids}
    probe = textwrap.dedent("""\
        import json, sys
        from tuneplane.cli.main import run
        sys.argv = ["tp", "bot", sys.argv[1]]
        try:
            run()
        except SystemExit as exc:
            code = exc.code
        else:
            code = 0
        print(json.dumps({"code": code, "modules": sorted(sys.modules)}))
        """)
    for verb in ("reconcile", "sync"):
        log.write_text("", encoding="utf-8")
        done = subprocess.run(
            [sys.executable, "-c", probe, verb],
            cwd=lab,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert done.returncode == 0, done.stderr
        first, last = done.stdout.splitlines()[0], json.loads(done.stdout.splitlines()[-1])
        assert first == "nothing to do: every run request has its status"
        assert last["code"] in (0, None)
        imported = set(last["modules"])
        assert not imported & set(PIPELINE), f"an idle `tp bot {verb}` imported {sorted(imported & set(PIPELINE))}"
        commands = [json.loads(line) for line in log.read_text(encoding="utf-8").splitlines()]
        assert len(commands) <= 3, commands
        assert not [c for c in commands if "status" in c and c[0] == "status"], "the work tree was scanned"
        assert not status_blobs & {arg for c in commands for arg in c}, "a finished status was read"
        assert git(lab, "rev-parse", "HEAD") == head and not git(lab, "status", "--porcelain")


def _commit(lab: Path, message: str) -> None:
    git(lab, "add", "-A")
    git(lab, "commit", "-q", "-m", message)


def test_idle_sees_a_new_request_but_sync_does_not_care(tmp_path: Path) -> None:
    lab, _ids = _finished_lab(tmp_path)
    opts = BotOptions()
    assert idle(lab, "reconcile", opts) is not None and idle(lab, "sync", opts) is not None
    from tuneplane.lab.runs import write_request

    write_request(lab, request("demo", "20250301-000000-0000aa", "h200:8"))
    _commit(lab, "a new run request")
    assert idle(lab, "reconcile", opts) is None  # reconcile must submit it
    assert idle(lab, "sync", opts) is not None  # nothing runs yet: nothing to refresh


def test_a_status_written_by_someone_else_takes_the_full_run_once(tmp_path: Path) -> None:
    lab, ids = _finished_lab(tmp_path)
    path = lab / "status" / "demo" / f"{ids[3]}.json"
    data = json.loads(path.read_text(encoding="utf-8"))
    data["message"] = "edited by hand"
    path.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
    _commit(lab, "a hand edit")
    assert idle(lab, "sync", BotOptions()) is None
    report = sync(lab, echo=lambda _line: None)
    assert report.commit is not None  # the pages and the ledger learned of the edit
    assert idle(lab, "sync", BotOptions()) is not None and idle(lab, "reconcile", BotOptions()) is not None


def test_a_watched_run_or_a_missing_ledger_takes_the_full_run(tmp_path: Path) -> None:
    lab, ids = _finished_lab(tmp_path)
    ledger = json.loads((lab / "status" / "index.json").read_text(encoding="utf-8"))
    ledger["active"] = {f"demo/{ids[0]}": "Running"}
    (lab / "status" / "index.json").write_text(json.dumps(ledger) + "\n", encoding="utf-8")
    _commit(lab, "a watched run")
    assert idle(lab, "sync", BotOptions()) is None and idle(lab, "reconcile", BotOptions()) is None
    git(lab, "rm", "-q", "status/index.json")
    git(lab, "commit", "-q", "-m", "no ledger")
    assert idle(lab, "sync", BotOptions()) is None and idle(lab, "reconcile", BotOptions()) is None


def test_a_half_done_rebase_or_a_link_takes_the_full_run(tmp_path: Path) -> None:
    lab, _ids = _finished_lab(tmp_path)
    git_dir = Path(git(lab, "rev-parse", "--absolute-git-dir"))
    (git_dir / "rebase-merge").mkdir()
    assert idle(lab, "reconcile", BotOptions()) is None
    (git_dir / "rebase-merge").rmdir()
    os.symlink("/tmp", lab / "runs" / "linked")
    _commit(lab, "a committed link under runs/")
    assert idle(lab, "reconcile", BotOptions()) is None and idle(lab, "sync", BotOptions()) is None


@pytest.mark.parametrize("ahead", [False, True])
def test_with_push_idle_needs_the_remote_at_this_very_commit(tmp_path: Path, ahead: bool) -> None:
    lab, _ids = _finished_lab(tmp_path)
    remote = tmp_path / "remote.git"
    git(lab, "push", "-q", "origin", f"HEAD:{BRANCH}")
    git(lab, "branch", "-q", "--set-upstream-to", f"origin/{BRANCH}")
    if ahead:  # another writer pushed a commit this clone does not have
        other = clone(remote, tmp_path / "other")
        (other / "README.md").write_text("changed elsewhere\n", encoding="utf-8")
        _commit(other, "elsewhere")
        git(other, "push", "-q", "origin", f"HEAD:{BRANCH}")
    found = idle(lab, "reconcile", BotOptions(push=True))
    assert (found is None) is ahead
    report = reconcile(lab, BotOptions(push=True), echo=lambda _line: None)
    assert git(lab, "rev-parse", "HEAD") == git(remote, "rev-parse", BRANCH)
    assert report.commit is None


def test_a_ledger_learned_without_writing_a_file_is_committed(tmp_path: Path) -> None:
    """A dashboard rendered before the bot ever ran (its ledger knows no request): the first reconcile
    lists the requests, finds them all with a status and commits only the ledger; then it is idle."""
    from tuneplane.lab.gitrepo import GitRepo
    from tuneplane.record.batch import refresh_dashboard

    lab, _ids = _finished_lab(tmp_path)
    ledger = json.loads((lab / "status" / "index.json").read_text(encoding="utf-8"))
    ledger["requests"] = {}
    (lab / "status" / "index.json").write_text(json.dumps(ledger) + "\n", encoding="utf-8")
    _commit(lab, "a ledger that knows no request")
    refresh_dashboard(GitRepo(lab))
    assert idle(lab, "reconcile", BotOptions()) is None
    report = reconcile(lab, echo=lambda _line: None)
    assert report.commit is not None and not report.changed
    assert git(lab, "show", "--name-only", "--format=", "HEAD").split() == ["status/index.json"]
    assert idle(lab, "reconcile", BotOptions()) is not None
