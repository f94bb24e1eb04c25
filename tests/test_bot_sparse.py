"""The bot works from its CI checkout: a sparse one without the run files (`lab.runs.SPARSE_CHECKOUT`).

A big lab's files are mostly its runs' (a request, a status and a chart each), which a pass with nothing
to do never reads: the bot reads the commit. The CI checkout leaves them out; a pass that writes checks
them out first, so its pages are exactly what a full checkout renders (a full re-render in a fresh
clone commits nothing). Real git, a bare remote, the kube twin.
"""

from __future__ import annotations

from pathlib import Path

from fakekube import FakeKube
from support.repos import (
    BRANCH,
    add_requests,
    backend_factory,
    clone,
    configure,
    git,
    make_remote,
    quiet,
    run_ids,
    seed_lab,
)

from tuneplane.bot.entry import BotOptions, reconcile, sync
from tuneplane.lab.gitrepo import GitRepo
from tuneplane.lab.runs import SPARSE_CHECKOUT
from tuneplane.plan.names import object_name
from tuneplane.record.batch import refresh_dashboard

pytest_plugins = ("fakekube",)
PUSH = BotOptions(push=True)


def ci_checkout(remote: Path, dest: Path) -> Path:
    """The bot's checkout as the lab's workflow makes it: the tip commit, sparse, without the run files."""
    git(dest.parent, "clone", "-q", "--depth", "1", "--no-checkout", "-b", BRANCH, f"file://{remote}", dest.name)
    git(dest, "sparse-checkout", "set", "--no-cone", *SPARSE_CHECKOUT)
    git(dest, "checkout", "-q", BRANCH)
    configure(dest)
    return dest


def run_files(root: Path) -> list[Path]:
    return [*root.glob("runs/*/*"), *root.glob("status/*/*.json"), *root.glob("status/*/*.svg")]


def full_render_changes_nothing(remote: Path, dest: Path) -> bool:
    """Whether the pages on the remote are what a full checkout renders from its files."""
    return refresh_dashboard(GitRepo(clone(remote, dest)), "full re-render") is None


def test_the_sparse_checkout_leaves_the_run_files_out(tmp_path: Path, fake_kube: FakeKube) -> None:
    remote = make_remote(tmp_path)
    seed_lab(remote, tmp_path / "seed", backend="kubernetes", runs=[("demo", r) for r in run_ids(3)], profile="h200:8")
    reconcile(clone(remote, tmp_path / "first"), PUSH, backend_factory(fake_kube), quiet)

    bot = ci_checkout(remote, tmp_path / "ci")

    assert not run_files(bot) and len(git(bot, "ls-files", "status/demo/").splitlines()) == 4  # 3 statuses, a page
    assert (bot / "status/README.md").is_file() and (bot / "status/index.json").is_file()
    assert (bot / "status/demo/README.md").is_file() and (bot / "experiments/demo/train.sh").is_file()


def test_a_pass_with_nothing_to_do_keeps_the_checkout_sparse(tmp_path: Path, fake_kube: FakeKube) -> None:
    remote = make_remote(tmp_path)
    seed_lab(remote, tmp_path / "seed", backend="kubernetes", runs=[("demo", r) for r in run_ids(3)], profile="h200:8")
    reconcile(clone(remote, tmp_path / "first"), PUSH, backend_factory(fake_kube), quiet)
    bot = ci_checkout(remote, tmp_path / "ci")

    report = reconcile(bot, PUSH, backend_factory(fake_kube), quiet)

    assert report.commit is None and not report.submitted and not run_files(bot)
    assert not git(bot, "status", "--porcelain")


def test_passes_from_sparse_checkouts_render_the_pages_a_full_checkout_renders(
    tmp_path: Path, fake_kube: FakeKube
) -> None:
    remote = make_remote(tmp_path)
    first, *ids = run_ids(5)
    person = seed_lab(
        remote, tmp_path / "seed", backend="kubernetes", runs=[("demo", r) for r in (first, *ids[:2])], profile="h200:8"
    )
    reconcile(clone(remote, tmp_path / "first"), PUSH, backend_factory(fake_kube), quiet)
    git(person, "pull", "-q", "--rebase", "origin", BRANCH)
    add_requests(person, [("demo", r) for r in ids[2:]])
    git(person, "push", "-q", "origin", f"HEAD:{BRANCH}")

    submitted = reconcile(ci_checkout(remote, tmp_path / "ci-1"), PUSH, backend_factory(fake_kube), quiet)
    assert submitted.pushed and sorted(submitted.submitted) == [f"demo/{r}" for r in ids[2:]]
    assert full_render_changes_nothing(remote, tmp_path / "check-1")

    fake_kube.set_status(
        "Job",
        "tuneplane",
        object_name("demo", first),
        {
            "startTime": "2025-01-01T00:00:00Z",
            "completionTime": "2025-01-01T00:05:00Z",
            "conditions": [{"type": "Complete", "status": "True"}],
        },
    )
    synced = sync(ci_checkout(remote, tmp_path / "ci-2"), PUSH, backend_factory(fake_kube), quiet)
    assert synced.pushed and f"demo/{first}" in synced.updated
    assert full_render_changes_nothing(remote, tmp_path / "check-2")
    index = git(remote, "show", f"{BRANCH}:status/README.md")
    assert "**5 runs**" in index and f"| [`{first}`](demo/README.md) | demo | ✅ Succeeded | 5m 00s |" in index
