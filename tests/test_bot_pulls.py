"""Pull requests as the bot knows them (`bot.pulls`): whom a merged run is submitted for, from the
workflow's answer about the merge commit, and the section of the plan comment the workflow keeps up to
date after each bot run. Real repositories, the real local backend, the bot in process."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from support.repos import BRANCH, configure, git, make_remote, quiet, request, run_ids, seed_lab

from tuneplane.bot.entry import BotOptions, reconcile
from tuneplane.bot.pulls import SECTION_MARK, sections
from tuneplane.lab.gitrepo import GitRepo
from tuneplane.lab.runs import RunKey, read_status, write_request, write_status
from tuneplane.models.run import Attempt, BackendObject, RunStatus, SubmittedFor


def _merge_pull_request(seed: Path, run_id: str) -> str:
    """A pull request adding one run request, merged with a merge commit; the merge commit's id."""
    git(seed, "checkout", "-q", "-b", "feature")
    write_request(seed, request("demo", run_id))
    git(seed, "add", "-A")
    git(seed, "commit", "-qm", "one more run")
    git(seed, "checkout", "-q", BRANCH)
    git(seed, "merge", "-q", "--no-ff", "-m", "Merge pull request #12 from alice/feature", "feature")
    return git(seed, "rev-parse", "HEAD").strip()


def test_a_merged_run_is_submitted_for_the_pull_request_that_merged_it(tmp_path: Path) -> None:
    """The bot's clone is shallow, as in CI: the commit that added the request is looked up in the
    branch's own history (the merge, not the pull request's commit), fetched as far as needed."""
    remote = make_remote(tmp_path)
    seed = seed_lab(remote, tmp_path / "seed", {"demo": "echo hi\n"})
    merged, pushed = run_ids(2)
    merge = _merge_pull_request(seed, merged)
    write_request(seed, request("demo", pushed, requested_by="alice"))  # pushed without a pull request
    git(seed, "add", "-A")
    git(seed, "commit", "-qm", "a run pushed straight to the branch")
    git(seed, "push", "-q", "origin", f"HEAD:{BRANCH}")
    git(tmp_path, "clone", "-q", "--depth", "1", "-b", BRANCH, f"file://{remote}", "bot")
    bot = tmp_path / "bot"
    configure(bot)
    answers = tmp_path / "pulls.json"
    answers.write_text(json.dumps({merge: {"number": 12, "login": "alice"}, "f" * 40: {"number": 3, "login": "x"}}))

    report = reconcile(bot, BotOptions(pull_requests=str(answers)), echo=quiet)

    assert sorted(report.submitted) == [f"demo/{merged}", f"demo/{pushed}"], report
    assert read_status(bot, RunKey("demo", merged)).submitted_for == SubmittedFor(
        commit=merge, pull_request=12, login="alice"
    )
    assert read_status(bot, RunKey("demo", pushed)).submitted_for is None  # its request's word is not enough


def test_without_the_workflows_answers_no_run_is_attributed(tmp_path: Path) -> None:
    remote = make_remote(tmp_path)
    seed = seed_lab(remote, tmp_path / "seed", {"demo": "echo hi\n"})
    (run_id,) = run_ids(1)
    _merge_pull_request(seed, run_id)
    git(seed, "push", "-q", "origin", f"HEAD:{BRANCH}")
    answers = tmp_path / "pulls.json"
    answers.write_text("not json")
    lines: list[str] = []

    report = reconcile(seed, BotOptions(pull_requests=str(answers)), echo=lines.append)

    assert report.submitted == [f"demo/{run_id}"], report
    assert read_status(seed, RunKey("demo", run_id)).submitted_for is None
    assert any("pulls.json: not read" in line for line in lines), lines


# ── the section of the plan comment ─────────────────────────────────────────────────────────────────


def _run(run_id: str, phase: str, pull: int | None, hours: float = 0.0, metrics: float = 0.0) -> RunStatus:
    attempts = [Attempt(number=1, started_at="2025-01-02T10:00:00Z", gpus=8, gpu_seconds=hours * 3600)] if hours else []
    return RunStatus(
        experiment="demo",
        run_id=run_id,
        profile="h200:8",
        phase=phase,  # type: ignore[arg-type]
        reason="Preempted" if phase == "Pending" else "",
        backend=BackendObject(backend="kubernetes", kind="Job", name=f"demo-{run_id}"),
        attempts=attempts,
        metrics={"loss": metrics} if metrics else {},
        submitted_for=SubmittedFor(commit="c" * 40, pull_request=pull, login="alice") if pull else None,
    )


def test_the_section_lists_the_runs_of_each_pull_request_whose_runs_changed(tmp_path: Path) -> None:
    """Pull request 7's run ended in the pass: its section lists both its runs. Pull request 8's run only
    got new metrics (nothing its row shows), and a run of no known pull request changed: no section."""
    repo = GitRepo.init(tmp_path / "lab")
    configure(repo.root)
    a, b, c, d = run_ids(4)
    for status in (
        _run(a, "Running", 7, 1.0),
        _run(b, "Pending", 7),
        _run(c, "Running", 8, 2.0),
        _run(d, "Running", None),
    ):
        write_status(repo.root, status)
    git(repo.root, "add", "-A")
    git(repo.root, "commit", "-qm", "before the pass")
    since = repo.head()
    write_status(repo.root, _run(a, "Succeeded", 7, 2.5))
    write_status(repo.root, _run(c, "Running", 8, 2.0, metrics=0.5))
    write_status(repo.root, _run(d, "Succeeded", None, 4.0))
    git(repo.root, "add", "-A")
    git(repo.root, "commit", "-qm", "tp bot: update 3 runs")

    found = sections(repo, since)

    assert [s.pull_request for s in found] == [7]
    body = found[0].body
    assert body.startswith(SECTION_MARK + "\n") and "(2)" in body
    assert f"| `demo/{a}` | Succeeded |  | 1 | 2.50 |" in body, body
    assert f"| `demo/{b}` | Pending | Preempted | 0 | 0.00 |" in body, body
    assert c not in body and d not in body
    assert f"at commit {repo.head()[:12]}" in body, body
    assert sections(repo, repo.head()) == []  # a pass that changed nothing edits no comment


def test_a_status_the_bot_did_not_write_cannot_say_whom_it_was_submitted_for(tmp_path: Path) -> None:
    """A local run's status merged with `submitted_for` (which would move its GPU-hours onto someone's
    budget) is a forgery: reported, never watched."""
    from tuneplane.bot.entry import sync

    remote = make_remote(tmp_path)
    seed = seed_lab(remote, tmp_path / "seed", {"demo": "echo hi\n"})
    (run_id,) = run_ids(1)
    key = RunKey("demo", run_id)
    write_request(seed, request("demo", run_id))
    forged = RunStatus(
        experiment="demo",
        run_id=run_id,
        profile="local",
        phase="Running",
        backend=BackendObject(backend="local", kind="process", name=run_id),
        submitted_for=SubmittedFor(commit="c" * 40, pull_request=3, login="bob"),
    )
    write_status(seed, forged)
    git(seed, "add", "-A")
    git(seed, "commit", "-qm", "Merge pull request #3: a run of bob's, says the status")
    lines: list[str] = []

    sync(seed, echo=lines.append)

    assert any(key.status_rel in line and "submitted it for 'bob'" in line for line in lines), lines
    assert not any(key.status_rel in line and "a local run of another machine" in line for line in lines), lines


def test_a_section_row_shows_a_forged_status_in_the_shape_it_should() -> None:
    """A run's row reads its status unchecked: a valid one whole, a forged one's fields of another type
    empty (its phase `?`), counting only the attempts that are objects."""
    from tuneplane.bot.pulls import section
    from tuneplane.lab.runs import status_text, unchecked_status

    valid = RunStatus(
        experiment="demo",
        run_id="20250101-000000-000001",
        phase="Failed",
        reason="Error|Injected",
        attempts=[Attempt(number=1, gpus=2, gpu_seconds=5400.0), Attempt(number=2, gpus=2, gpu_seconds=1800.0)],
    )
    forged = {"reason": ["x"], "attempts": [{"gpu_seconds": "9e9"}, 4], "submitted_for": {"pull_request": 5}}
    runs = [
        ("status/demo/20250101-000000-000001.json", unchecked_status(status_text(valid))),
        ("status/demo/20250101-000000-000002.json", unchecked_status(json.dumps(forged))),
    ]

    body = section(5, [(rel, status) for rel, status in runs if status is not None], "f" * 40)

    assert "| `demo/20250101-000000-000001` | Failed | Error\\|Injected | 2 | 2.00 |" in body, body
    assert "| `demo/20250101-000000-000002` | ? |  | 1 | 0.00 |" in body, body


@pytest.mark.parametrize(
    ("claim", "said"),
    [
        ({"submitted_for": "bob"}, "says whom the bot submitted it for"),
        ({"submitted_for": {"login": "bob", "pull_request": "3"}}, "says the bot submitted it for 'bob'"),
        ({"experiment": ["demo"]}, "names experiment '', run"),
    ],
)
def test_a_status_claiming_what_only_the_bot_writes_in_any_shape_is_a_forgery(
    tmp_path: Path, claim: dict[str, object], said: str
) -> None:
    """A status the bot did not write that says whom it was submitted for, or names another run, in any
    shape (a bare login, a list for a name): reported, never watched, and the pass goes on."""
    from tuneplane.bot.entry import sync

    remote = make_remote(tmp_path)
    seed = seed_lab(remote, tmp_path / "seed", {"demo": "echo hi\n"})
    (run_id,) = run_ids(1)
    key = RunKey("demo", run_id)
    write_request(seed, request("demo", run_id))
    backend = {"backend": "local", "kind": "process", "name": run_id}  # another machine's: never adopted
    forged = {"experiment": "demo", "run_id": run_id, "phase": "Running", "backend": backend, **claim}
    path = seed / key.status_rel
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps(forged), encoding="utf-8")
    git(seed, "add", "-A")
    git(seed, "commit", "-qm", "Merge pull request #3: a run, says the status")
    lines: list[str] = []

    sync(seed, echo=lines.append)

    assert any(key.status_rel in line and said in line for line in lines), lines
    assert not any(key.status_rel in line and "a local run of another machine" in line for line in lines), lines
