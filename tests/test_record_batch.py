"""The bot's writer keeps the lab's history small: a batch of new runs rewrites one page per experiment."""

from __future__ import annotations

from pathlib import Path

from support.repos import git, make_remote, seed_lab

from tuneplane.lab.gitrepo import GitRepo
from tuneplane.models.run import RunStatus, Transition
from tuneplane.record.batch import Batch
from tuneplane.views import dashboard


def _status(exp: str, run_id: str, phase: str = "Submitted") -> RunStatus:
    day = f"{run_id[:4]}-{run_id[4:6]}-{run_id[6:8]}T00:00:00Z"
    return RunStatus(
        experiment=exp,
        run_id=run_id,
        phase=phase,
        profile="local",  # type: ignore[arg-type]
        history=[Transition(phase=phase, at=day)],
    )  # type: ignore[arg-type]


def _commit(repo: GitRepo, statuses: list[RunStatus]) -> list[str]:
    """Write `statuses` in one batch; the paths its commit changed."""
    batch = Batch(repo)
    for status in statuses:
        batch.status(status)
    batch.render([], [])
    commit = batch.commit("tp bot: test")
    assert commit is not None
    return sorted(git(repo.root, "diff", "--name-only", "HEAD~1", "HEAD").splitlines())


def _lab(tmp_path: Path) -> GitRepo:
    remote = make_remote(tmp_path)
    return GitRepo(seed_lab(remote, tmp_path / "lab", {"a": "echo hi\n", "b": "echo hi\n"}))


def test_a_batch_of_new_runs_writes_one_page_per_experiment(tmp_path: Path) -> None:
    repo = _lab(tmp_path)
    _commit(repo, [_status("a", "20250101-000000-0000000001"), _status("b", "20250101-000000-0000000002")])
    pages = ["status/README.md", "status/a/README.md", "status/b/README.md", "status/index.json"]

    changed = _commit(
        repo,
        [
            _status("a", "20250102-000000-0000000003"),
            _status("b", "20250102-000000-0000000004"),
            _status("a", "20250101-000000-0000000001", "Succeeded"),
        ],
    )

    # no month page: the experiment page is the page of its newest month, so the batch writes it alone
    assert changed == sorted(
        pages
        + [
            "status/a/20250101-000000-0000000001.json",
            "status/a/20250102-000000-0000000003.json",
            "status/b/20250102-000000-0000000004.json",
        ]
    )
    page = (repo.root / "status/a/README.md").read_text(encoding="utf-8")
    assert "## Runs of 2025-01" in page and "`20250102-000000-0000000003`" in page and "Earlier months" not in page


def test_a_month_page_is_written_once_its_month_is_over(tmp_path: Path) -> None:
    repo = _lab(tmp_path)
    old = "20250131-230000-0000000001"
    _commit(repo, [_status("a", old)])
    assert not (repo.root / "status/a/2025-01.md").exists()

    changed = _commit(repo, [_status("a", "20250201-000000-0000000002")])  # February begins

    assert "status/a/2025-01.md" in changed and "status/a/2025-02.md" not in changed
    january = (repo.root / "status/a/2025-01.md").read_text(encoding="utf-8")
    assert f"`{old}`" in january and "📨 Submitted" in january
    page = (repo.root / "status/a/README.md").read_text(encoding="utf-8")
    assert "## Runs of 2025-02" in page and f"`{old}`" not in page and "[2025-01](2025-01.md)" in page

    assert "status/a/2025-01.md" not in _commit(repo, [_status("a", "20250202-000000-0000000003")])
    changed = _commit(repo, [_status("a", old, "Succeeded")])  # a run of a month that is over changes
    assert "status/a/2025-01.md" in changed and "✅ Succeeded" in (repo.root / "status/a/2025-01.md").read_text()


def test_a_stale_page_of_the_newest_month_is_removed(tmp_path: Path) -> None:
    """A lab written when every month had a page: the newest month's page would never change again."""
    repo = _lab(tmp_path)
    _commit(repo, [_status("a", "20250101-000000-0000000001")])
    (repo.root / "status/a/2025-01.md").write_text(f"# a: runs of 2025-01\n\n{dashboard.NOTE}\n", encoding="utf-8")
    git(repo.root, "add", "status/a/2025-01.md")
    git(repo.root, "commit", "-q", "-m", "an older tp wrote the newest month's page")

    changed = _commit(repo, [_status("a", "20250102-000000-0000000002")])

    assert "status/a/2025-01.md" in changed and not (repo.root / "status/a/2025-01.md").exists()
    assert "status/a/2025-01.md" not in git(repo.root, "ls-files", "status/a").splitlines()


def test_a_persons_page_named_like_the_newest_month_stays(tmp_path: Path) -> None:
    """The same name without the bot's note is a person's file: neither removed nor overwritten."""
    repo = _lab(tmp_path)
    _commit(repo, [_status("a", "20250101-000000-0000000001")])
    (repo.root / "status/a/2025-01.md").write_text("# plans for January\n", encoding="utf-8")
    git(repo.root, "add", "status/a/2025-01.md")
    git(repo.root, "commit", "-q", "-m", "plans")

    changed = _commit(repo, [_status("a", "20250102-000000-0000000002")])

    assert "status/a/2025-01.md" not in changed
    assert (repo.root / "status/a/2025-01.md").read_text(encoding="utf-8") == "# plans for January\n"
    assert git(repo.root, "status", "--porcelain") == ""
