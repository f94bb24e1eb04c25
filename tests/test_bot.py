"""`tp bot reconcile` and `tp bot sync` against real git and the fake API server.

In-process tests cover what the bot decides (submit, adopt, cancel, refuse, pin a commit, sync a job to
its end); the crash tests run the bot as a real process, kill it at each named step through
`TUNEPLANE_BOT_CRASH_AT`, and show that running it again converges with nothing submitted twice.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from fakekube import FakeKube
from support.repos import (
    BRANCH,
    backend_factory,
    clone,
    git,
    kubeconfig,
    make_remote,
    quiet,
    remote_files,
    remote_show,
    request,
    run_ids,
    seed_lab,
    tp_run,
)
from support.wait import wait_until

from tuneplane.bot.entry import CRASH_ENV, CRASH_EXIT, STEPS, BotOptions, reconcile, sync
from tuneplane.errors import UsageError
from tuneplane.lab.runs import RunKey, mark_cancel, read_status, write_request
from tuneplane.plan.names import object_name

NS = "tuneplane"

pytest_plugins = ("fakekube",)  # the fake_kube fixture


def cluster_lab(
    tmp_path: Path, count: int = 3, experiments: dict[str, str] | None = None
) -> tuple[Path, Path, list[str]]:
    remote = make_remote(tmp_path)
    ids = run_ids(count)
    seed_lab(
        remote,
        tmp_path / "seed",
        experiments or {"demo": "echo hi\n"},
        backend="kubernetes",
        runs=[("demo", r) for r in ids],
        profile="h200:8",
    )
    return remote, clone(remote, tmp_path / "bot"), ids


def jobs_created(fake: FakeKube) -> dict[str, int]:
    return {name: n for (kind, _, name), n in fake.creations.items() if kind == "Job"}


def status_of(root: Path, run_id: str, exp: str = "demo"):
    return read_status(root, RunKey(exp, run_id))


# ── reconcile ────────────────────────────────────────────────────────────────────────────────────


def test_reconcile_submits_each_request_and_commits_only_status(tmp_path: Path, fake_kube: FakeKube) -> None:
    _, bot, ids = cluster_lab(tmp_path)
    before = git(bot, "rev-parse", "HEAD")

    report = reconcile(bot, backends=backend_factory(fake_kube), echo=quiet)

    assert sorted(report.submitted) == [f"demo/{r}" for r in ids]
    assert jobs_created(fake_kube) == {object_name("demo", r): 1 for r in ids}
    changed = git(bot, "diff", "--name-only", before, "HEAD").splitlines()
    pages = ["status/README.md", "status/demo/README.md", "status/index.json"]  # 2025-01 is the newest month
    assert sorted(changed) == sorted([f"status/demo/{r}.json" for r in ids] + pages)
    status = status_of(bot, ids[0])
    job = fake_kube.get("Job", NS, object_name("demo", ids[0]))
    assert status.phase == "Submitted" and status.backend.uid == job["metadata"]["uid"]
    assert status.provenance.commit == before and status.provenance.jobspec_digest.startswith("sha256:")
    assert git(bot, "status", "--porcelain") == ""

    again = reconcile(bot, backends=backend_factory(fake_kube), echo=quiet)
    assert not again.changed and again.commit is None
    assert sum(jobs_created(fake_kube).values()) == len(ids)


def test_reconcile_adopts_a_job_submitted_before_a_crash(tmp_path: Path, fake_kube: FakeKube) -> None:
    _, bot, ids = cluster_lab(tmp_path, count=1)
    reconcile(bot, backends=backend_factory(fake_kube), echo=quiet)
    git(bot, "reset", "-q", "--hard", "HEAD~1")  # as if the status had never been written

    reconcile(bot, backends=backend_factory(fake_kube), echo=quiet)

    assert jobs_created(fake_kube) == {object_name("demo", ids[0]): 1}
    assert status_of(bot, ids[0]).phase == "Submitted"


def test_cancel_deletes_the_job_and_records_it(tmp_path: Path, fake_kube: FakeKube) -> None:
    _, bot, ids = cluster_lab(tmp_path, count=2)
    reconcile(bot, backends=backend_factory(fake_kube), echo=quiet)
    mark_cancel(bot, RunKey("demo", ids[0]))
    late = write_request(bot, request("demo", "20250109-000000-abcdef", "h200:8", cancel=True))
    git(bot, "add", "-A")
    git(bot, "commit", "-q", "-m", "cancel one, request one already cancelled")

    report = reconcile(bot, backends=backend_factory(fake_kube), echo=quiet)

    assert sorted(report.cancelled) == sorted([f"demo/{ids[0]}", "demo/20250109-000000-abcdef"])
    assert fake_kube.get("Job", NS, object_name("demo", ids[0])) is None
    cancelled = status_of(bot, ids[0])
    assert cancelled.phase == "Cancelled" and cancelled.reason == "CancelRequested" and cancelled.finished_at
    assert [t.phase for t in cancelled.history] == ["Submitted", "Cancelled"]
    assert status_of(bot, ids[1]).phase == "Submitted"
    never = status_of(bot, late.stem)
    assert never.phase == "Cancelled" and never.backend is None
    assert object_name("demo", late.stem) not in jobs_created(fake_kube)


def test_refusals_become_failed_status_with_the_reason(tmp_path: Path, fake_kube: FakeKube) -> None:
    _, bot, _ = cluster_lab(tmp_path, count=0)
    write_request(bot, request("demo", "20250105-000000-000001", "gpu9:8"))
    write_request(bot, request("demo", "20250105-000000-000002", "h200:12"))
    (bot / "runs/demo/20250105-000000-000003.yaml").write_text("profile: [unclosed\n")
    misnamed = request("demo", "20250105-000000-000009", "h200:8").model_copy(
        update={"run_id": "20250105-000000-000004"}
    )
    write_request(bot, misnamed)
    (bot / "runs/demo/20250105-000000-000004.yaml").rename(bot / "runs/demo/20250105-000000-000005.yaml")
    git(bot, "add", "-A")
    git(bot, "commit", "-q", "-m", "bad requests")

    report = reconcile(bot, backends=backend_factory(fake_kube), echo=quiet)

    assert len(report.refused) == 4 and not jobs_created(fake_kube)
    unknown = status_of(bot, "20250105-000000-000001")
    assert unknown.phase == "Failed" and unknown.reason == "Refused" and "unknown profile 'gpu9'" in unknown.message
    assert "whole h200 nodes" in status_of(bot, "20250105-000000-000002").message
    broken = status_of(bot, "20250105-000000-000003")
    assert (
        broken.reason == "InvalidRequest"
        and "runs/demo/20250105-000000-000003.yaml:2:1: not valid YAML" in broken.message
    )
    assert "does not match its path" in status_of(bot, "20250105-000000-000005").message


def test_a_pinned_request_runs_its_commit(tmp_path: Path, fake_kube: FakeKube) -> None:
    _, bot, _ = cluster_lab(tmp_path, count=0)
    old = git(bot, "rev-parse", "HEAD")
    (bot / "experiments/demo/train.sh").write_text("echo changed\n")
    git(bot, "commit", "-q", "-am", "change the trainer")
    write_request(bot, request("demo", "20250106-000000-000001", "h200:8", commit=old, rerun_of="x"))
    write_request(bot, request("demo", "20250106-000000-000002", "h200:8"))
    git(bot, "add", "-A")
    git(bot, "commit", "-q", "-m", "two requests")
    head = git(bot, "rev-parse", "HEAD")

    reconcile(bot, backends=backend_factory(fake_kube), echo=quiet)

    def init_commit(run_id: str) -> str:
        job = fake_kube.get("Job", NS, object_name("demo", run_id))
        init = job["spec"]["template"]["spec"]["initContainers"][0]
        return next(e["value"] for e in init["env"] if e["name"] == "TUNEPLANE_COMMIT")

    assert status_of(bot, "20250106-000000-000001").provenance.commit == old == init_commit("20250106-000000-000001")
    assert status_of(bot, "20250106-000000-000002").provenance.commit == head == init_commit("20250106-000000-000002")


def test_push_needs_a_remote(tmp_path: Path, fake_kube: FakeKube) -> None:
    _, bot, _ = cluster_lab(tmp_path, count=1)
    with pytest.raises(UsageError, match="no remote 'upstream'"):
        reconcile(bot, BotOptions(push=True, remote="upstream"), backends=backend_factory(fake_kube), echo=quiet)


# ── sync ─────────────────────────────────────────────────────────────────────────────────────────


def test_sync_follows_jobs_to_success_and_failure(tmp_path: Path, fake_kube: FakeKube) -> None:
    _, bot, ids = cluster_lab(tmp_path, count=3)
    reconcile(bot, backends=backend_factory(fake_kube), echo=quiet)
    ok, bad, running = (object_name("demo", r) for r in ids)
    fake_kube.set_status(
        "Job",
        NS,
        ok,
        {
            "startTime": "2025-01-01T00:00:00Z",
            "completionTime": "2025-01-01T00:05:00Z",
            "conditions": [{"type": "Complete", "status": "True"}],
        },
    )
    job = fake_kube.get("Job", NS, bad)
    labels = job["spec"]["template"]["metadata"]["labels"]
    failed = {
        "name": "trainer",
        "state": {"terminated": {"exitCode": 3, "reason": "Error", "finishedAt": "2025-01-01T00:02:00Z"}},
    }
    fake_kube.add_pod(NS, f"{bad}-x", labels, "Failed", [failed], "epoch 1\nloss exploded: nan\n")
    fake_kube.set_status(
        "Job",
        NS,
        bad,
        {
            "startTime": "2025-01-01T00:00:00Z",
            "conditions": [
                {
                    "type": "Failed",
                    "status": "True",
                    "reason": "BackoffLimitExceeded",
                    "message": "Job has reached the specified backoff limit",
                    "lastTransitionTime": "2025-01-01T00:02:00Z",
                }
            ],
        },
    )
    run_labels = fake_kube.get("Job", NS, running)["spec"]["template"]["metadata"]["labels"]
    fake_kube.add_pod(NS, f"{running}-x", run_labels, "Running", start_time="2025-01-01T00:01:00Z")

    report = sync(bot, backends=backend_factory(fake_kube), echo=quiet)

    assert len(report.updated) == 3 and report.commit
    done = status_of(bot, ids[0])
    assert done.phase == "Succeeded" and done.exit_code == 0 and done.finished_at == "2025-01-01T00:05:00Z"
    assert [t.phase for t in done.history] == ["Submitted", "Running", "Succeeded"]
    lost = status_of(bot, ids[1])
    assert lost.phase == "Failed" and lost.exit_code == 3
    assert "loss exploded: nan" in lost.message and "BackoffLimitExceeded" in lost.message
    assert status_of(bot, ids[2]).phase == "Running"
    dashboard = (bot / "status/README.md").read_text()
    assert "✅ Succeeded" in dashboard and "❌ Failed" in dashboard and "🏃 Running" in dashboard

    assert sync(bot, backends=backend_factory(fake_kube), echo=quiet).commit is None  # nothing new


def test_sync_runs_local_jobs_to_the_end_with_metrics(tmp_path: Path) -> None:
    train = """#!/usr/bin/env bash
set -eu
mkdir -p "$TUNEPLANE_OUT_DIR/checkpoints"
python -c '
from tuneplane import report
for step in range(4):
    report.log({"loss": 1.0 / (step + 1)}, step=step)
report.finish()
'
echo weights > "$TUNEPLANE_OUT_DIR/checkpoints/step-4.bin"
"""
    remote = make_remote(tmp_path)
    ids = run_ids(2)
    seed_lab(remote, tmp_path / "seed", {"demo": train}, runs=[("demo", r) for r in ids])
    bot = clone(remote, tmp_path / "bot")
    reconcile(bot, BotOptions(push=True), echo=quiet)
    for run_id in ids:
        _wait_local(bot, run_id)

    report = sync(bot, BotOptions(push=True), echo=quiet)

    assert report.pushed and sorted(report.updated) == [f"demo/{r}" for r in ids]
    status = json.loads(remote_show(remote, f"status/demo/{ids[0]}.json"))
    # the raw key `loss` is shown under its canonical name (HF convention: a bare key is a training metric)
    assert status["phase"] == "Succeeded" and status["metrics"] == {"train/loss": 0.25}
    assert status["metric_history"]["train/loss"] == [1.0, 0.5, 0.3333, 0.25]  # 4 digits: a sparkline
    chart = remote_show(remote, f"status/demo/{ids[0]}.svg")
    assert chart.startswith("<svg") and "train/loss" in chart
    assert f"![metrics of {ids[0]}]({ids[0]}.svg)" in remote_show(remote, "status/demo/README.md")
    assert status["artifacts"] == [
        {"kind": "checkpoint", "path": "checkpoints/step-4.bin", "format": "bin", "size_bytes": 8, "step": 4}
    ]


def _wait_local(root: Path, run_id: str) -> None:
    from tuneplane.backends.local import read_state

    status = status_of(root, run_id)
    run_dir = Path(status.out_dir).parent
    wait_until(
        lambda: (read_state(run_dir) or {}).get("phase") in ("Succeeded", "Failed", "Cancelled"),
        60,
        0.1,
        f"local run {run_id} did not finish",
    )


# ── crash injection ──────────────────────────────────────────────────────────────────────────────


def _crash_lab(tmp_path: Path, fake_kube: FakeKube, step: str) -> tuple[Path, Path, list[Path], list[str], Path]:
    remote, bot, ids = cluster_lab(tmp_path, count=3)
    config = kubeconfig(tmp_path / "kubeconfig", fake_kube.url)
    other = clone(remote, tmp_path / "other")
    if step == "cancelled":  # something to cancel: one run submitted, then marked `cancel: true`
        assert tp_run(bot, "bot", "reconcile", "--push", "--kubeconfig", str(config))[0] == 0
        git(other, "pull", "-q", "origin", BRANCH)
        mark_cancel(other, RunKey("demo", ids[0]))
        git(other, "commit", "-q", "-am", "cancel")
        git(other, "push", "-q", "origin", f"HEAD:{BRANCH}")
    if step == "rebasing":  # the crashing bot's local commit will conflict with another bot's push
        assert tp_run(bot, "bot", "reconcile", "--kubeconfig", str(config))[0] == 0
        assert tp_run(other, "bot", "reconcile", "--push", "--kubeconfig", str(config))[0] == 0
    return remote, bot, [bot, other], ids, config


@pytest.mark.parametrize("step", STEPS)
def test_killed_at_any_step_the_bot_converges_when_run_again(tmp_path: Path, fake_kube: FakeKube, step: str) -> None:
    remote, bot, clones, ids, config = _crash_lab(tmp_path, fake_kube, step)

    code, out = tp_run(bot, "bot", "reconcile", "--push", "--kubeconfig", str(config), env={CRASH_ENV: step})
    assert code == CRASH_EXIT, out
    code, out = tp_run(bot, "bot", "reconcile", "--push", "--kubeconfig", str(config))
    assert code == 0, out

    assert jobs_created(fake_kube) == {object_name("demo", r): 1 for r in ids}
    files = remote_files(remote, "status")
    assert all(f"status/demo/{r}.json" in files for r in ids)
    phases = {r: json.loads(remote_show(remote, f"status/demo/{r}.json"))["phase"] for r in ids}
    expected = "Cancelled" if step == "cancelled" else "Submitted"
    assert phases[ids[0]] == expected and {phases[r] for r in ids[1:]} == {"Submitted"}
    if step == "cancelled":
        assert fake_kube.get("Job", NS, object_name("demo", ids[0])) is None
    git(bot, "fetch", "-q", "origin")
    assert git(bot, "rev-parse", "HEAD") == git(bot, "rev-parse", f"origin/{BRANCH}")
    assert git(bot, "status", "--porcelain") == ""
    assert not (bot / ".git" / "rebase-merge").exists()
    assert tp_run(bot, "bot", "reconcile", "--push", "--kubeconfig", str(config))[1].count("nothing to do") == 1
