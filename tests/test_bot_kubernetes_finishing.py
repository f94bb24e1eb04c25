"""`tp bot sync` against the cluster twin between a run's pods' success and its Job's.

The Job controller marks a Job `Complete` a sync or more after its pods succeeded (first
`SuccessCriteriaMet` with the pods not yet counted, then `Complete` once their tracking finalizers are
gone; a JobSet follows its child Jobs). A bot that looks in between sees every pod `Succeeded` under an
object with no end yet: the run still runs, its one attempt is no engine requeue, and the next look
records the end.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from support.repos import BRANCH, backend_factory, clone, git, make_remote, quiet, request, run_ids, seed_lab

from tuneplane.bot.entry import reconcile, sync
from tuneplane.lab.runs import RunKey, read_status, write_request
from tuneplane.models.base import RetryPolicy

if TYPE_CHECKING:
    from collections.abc import Callable

    from twin_controllers import Cluster

    from tuneplane.backends.base import Backend

pytest_plugins = ("fakekube",)  # the fake_kube and cluster fixtures

NS = "tuneplane"
(RUN,) = run_ids(1)
KEY = RunKey("demo", RUN)


def committed_phases(bot: Path) -> list[tuple[str, str]]:
    """(phase, reason) of every committed version of the run's status, oldest first."""
    revs = git(bot, "log", "--reverse", "--format=%H", "--", KEY.status_rel).split()
    shown = [json.loads(git(bot, "show", f"{r}:{KEY.status_rel}")) for r in revs]
    return [(s["phase"], s.get("reason") or "") for s in shown]


def running_run(
    tmp_path: Path, cluster: Cluster, profile: str, kind: str, retry: RetryPolicy | None = None
) -> tuple[Path, Callable[[str], Backend]]:
    """A lab whose one run (under `retry`) the bot submitted and recorded Running as a `kind`; its clone and
    backends."""
    remote = make_remote(tmp_path)
    seed = seed_lab(remote, tmp_path / "seed", {"demo": "echo hi\n"}, backend="kubernetes")
    write_request(seed, request("demo", RUN, profile, retry=retry))
    git(seed, "add", "-A")
    git(seed, "commit", "-q", "-m", "request the run")
    git(seed, "push", "-q", "origin", f"HEAD:{BRANCH}")
    bot = clone(remote, tmp_path / "bot")
    backends = backend_factory(cluster.kube)
    reconcile(bot, backends=backends, echo=quiet)
    sync(bot, backends=backends, echo=quiet)
    status = read_status(bot, KEY)
    assert status.phase == "Running" and status.backend and status.backend.kind == kind
    return bot, backends


def running_pods(cluster: Cluster) -> list[str]:
    names = [p["metadata"]["name"] for p in cluster.pods(NS) if p["status"].get("phase") == "Running"]
    assert names
    return names


@pytest.mark.parametrize("profile, kind", [("h200:8", "Job"), ("h200:16", "JobSet")])
def test_a_run_whose_pods_succeeded_before_its_job_completes_runs_on_then_succeeds_with_one_attempt(
    tmp_path: Path, cluster: Cluster, profile: str, kind: str
) -> None:
    bot, backends = running_run(tmp_path, cluster, profile, kind)
    cluster.hold_jobs()
    pods = [p for p in cluster.pods(NS) if p["status"].get("phase") == "Running"]
    assert pods
    for pod in pods:
        cluster.exit_pod(NS, pod["metadata"]["name"], 0)
    for step in ("not yet synced", "SuccessCriteriaMet"):  # the Job's status still counts the pods, then none
        assert not any(
            c["type"] == "Complete" for j in cluster.kube.list("Job", NS) for c in j["status"].get("conditions") or []
        )
        sync(bot, backends=backends, echo=quiet)
        status = read_status(bot, KEY)
        assert (status.phase, status.reason) == ("Running", ""), (step, status)
        assert [a.number for a in status.attempts] == [1]
        assert status.exit_code is None and status.finished_at is None  # no end yet, so no exit code either
        cluster.step_jobs()

    cluster.release_jobs()
    sync(bot, backends=backends, echo=quiet)
    status = read_status(bot, KEY)
    assert status.phase == "Succeeded", status
    assert [(a.number, a.reason, a.exit_code) for a in status.attempts] == [(1, "Completed", 0)]
    assert status.exit_code == 0
    phases = [h.phase for h in status.history]
    assert phases[phases.index("Running") :] == ["Running", "Succeeded"]
    assert ("Pending", "Requeued") not in committed_phases(bot)


def job_conditions(cluster: Cluster) -> list[list[str]]:
    return [[c["type"] for c in j["status"].get("conditions") or []] for j in cluster.kube.list("Job", NS)]


@pytest.mark.parametrize("profile, kind", [("h200:8", "Job"), ("h200:16", "JobSet")])
def test_a_run_whose_job_fails_while_its_pods_stop_runs_on_then_fails_with_one_attempt(
    tmp_path: Path, cluster: Cluster, profile: str, kind: str
) -> None:
    """The Job controller's `FailureTarget` (here a podFailurePolicy FailJob rule: the trainer exited 1,
    which the run's retry policy does not retry) comes first, its `Failed` only once the other ranks,
    saving on SIGTERM, have stopped; a JobSet fails after its Job. A bot that looks in between sees the
    newest attempt ended under an object with no end yet: no requeue, no second attempt; the run is
    `Running` while its pods hold the nodes, and the next look records the end once."""
    bot, backends = running_run(tmp_path, cluster, profile, kind)
    cluster.hold_jobs()
    cluster.slow_stops = True
    first, *others = running_pods(cluster)
    cluster.exit_pod(NS, first, 1, "boom\n")
    cluster.step_jobs()  # FailureTarget: the other ranks got SIGTERM and save
    assert ["FailureTarget"] in job_conditions(cluster)
    assert not any("Failed" in c for c in job_conditions(cluster))
    sync(bot, backends=backends, echo=quiet)
    status = read_status(bot, KEY)
    assert status.phase == "Running", status
    assert status.reason == "PodFailurePolicy" and "pods are stopping" in status.message, status
    assert [(a.number, a.reason, a.exit_code) for a in status.attempts] == [(1, "Error", 1)]
    assert status.exit_code is None and status.finished_at is None

    for name in others:
        cluster.exit_pod(NS, name, 143)  # saved
    cluster.release_jobs()
    sync(bot, backends=backends, echo=quiet)
    status = read_status(bot, KEY)
    assert status.phase == "Failed", status
    assert status.reason == ("PodFailurePolicy" if kind == "Job" else "FailedJobs")
    assert [(a.number, a.reason, a.exit_code) for a in status.attempts] == [(1, "Error", 1)]
    assert status.exit_code == 1
    phases = [h.phase for h in status.history]
    assert phases[phases.index("Running") :] == ["Running", "Failed"]
    seen = committed_phases(bot)
    after = seen[[phase for phase, _ in seen].index("Running") :]
    assert [phase for phase, _ in after] == ["Running"] * (len(after) - 1) + ["Failed"], seen


def test_a_job_past_its_backoff_limit_is_no_requeue_and_is_not_stopped_by_the_bot_while_its_pods_stop(
    tmp_path: Path, cluster: Cluster
) -> None:
    """Two attempts, each failing for a reason the policy retries: the Job controller replaces the first
    pod (attempt 2, the engine's retry) and, past `backoffLimit` (1), decides the Job fails. Between its
    `FailureTarget` and its `Failed` the newest attempt ended under a Job still active in name: read as a
    requeue past the budget, the bot would delete the Job as an overrun (what the engine never did) while
    its pod still saves; it waits instead, and records the end once."""
    retry = RetryPolicy(attempts=2, on=["Error"], backoff_seconds=0)
    bot, backends = running_run(tmp_path, cluster, "h200:8", "Job", retry)
    (first,) = running_pods(cluster)
    cluster.exit_pod(NS, first, 1, "boom\n")  # counted: the controller replaces it
    sync(bot, backends=backends, echo=quiet)
    status = read_status(bot, KEY)
    assert [(a.number, a.reason) for a in status.attempts] == [(1, "Error"), (2, "")], status

    cluster.hold_jobs()
    cluster.slow_stops = True
    (second,) = running_pods(cluster)
    cluster.exit_pod(NS, second, 1, "boom again\n")
    cluster.step_jobs()  # FailureTarget: BackoffLimitExceeded
    assert job_conditions(cluster) == [["FailureTarget"]]
    for _ in range(2):  # the bot looks twice in the window: nothing is counted again, nothing stopped
        sync(bot, backends=backends, echo=quiet)
        status = read_status(bot, KEY)
        assert (status.phase, status.reason) == ("Running", "BackoffLimitExceeded"), status
        assert [(a.number, a.reason) for a in status.attempts] == [(1, "Error"), (2, "Error")]
        (job,) = cluster.kube.list("Job", NS)
        assert not job["metadata"].get("deletionTimestamp") and "tuneplane.dev/stopped" not in (
            job["metadata"].get("annotations") or {}
        )

    cluster.release_jobs()
    sync(bot, backends=backends, echo=quiet)
    status = read_status(bot, KEY)
    assert (status.phase, status.reason) == ("Failed", "RetriesExhausted"), status
    assert "attempt 2 of 2: no retry left" in status.message and "requeued" not in status.message
    assert [(a.number, a.reason, a.exit_code) for a in status.attempts] == [(1, "Error", 1), (2, "Error", 1)]
    assert len(cluster.kube.list("Job", NS)) == 1  # no retry submitted
    seen = committed_phases(bot)
    assert ("Pending", "Requeued") not in seen and ("Pending", "RetryBackoff") not in seen, seen


@pytest.mark.parametrize("profile, kind", [("h200:8", "Job"), ("h200:16", "JobSet")])
def test_a_rank_that_fails_the_job_before_its_controller_synced_is_no_requeue(
    tmp_path: Path, cluster: Cluster, profile: str, kind: str
) -> None:
    """A rank exits 1, which the run's retry policy does not retry (the Job's podFailurePolicy FailJob
    rule), and the bot looks before the Job controller synced: the Job still counts its pods active and
    ready, with no condition. No replacement comes (its next sync writes `FailureTarget`): the run is
    `Running` with its one attempt ended, never `Pending (Requeued)`, and the look after `Failed` ends it."""
    bot, backends = running_run(tmp_path, cluster, profile, kind)
    cluster.hold_jobs()
    first, *_ = running_pods(cluster)
    cluster.exit_pod(NS, first, 1, "boom\n")
    assert not any(job_conditions(cluster))  # not synced
    sync(bot, backends=backends, echo=quiet)
    status = read_status(bot, KEY)
    assert (status.phase, status.reason) == ("Running", "PodFailurePolicy"), status
    assert [(a.number, a.reason, a.exit_code) for a in status.attempts] == [(1, "Error", 1)]

    cluster.release_jobs()
    sync(bot, backends=backends, echo=quiet)
    status = read_status(bot, KEY)
    assert status.phase == "Failed", status
    assert [(a.number, a.reason, a.exit_code) for a in status.attempts] == [(1, "Error", 1)]
    seen = committed_phases(bot)
    after = seen[[phase for phase, _ in seen].index("Running") :]
    assert [phase for phase, _ in after] == ["Running"] * (len(after) - 1) + ["Failed"], seen


def test_a_failed_pod_before_its_controller_synced_is_a_requeue_with_backoff_left_and_none_once_spent(
    tmp_path: Path, cluster: Cluster
) -> None:
    """The retry policy retries `Error` twice (`backoffLimit` 1). The first failure, read before the Job
    controller synced, is the engine's requeue (a replacement comes); the second, read as early, spends
    the backoff limit: no replacement comes, so the run stays `Running` until the Job is `Failed`."""
    retry = RetryPolicy(attempts=2, on=["Error"], backoff_seconds=0)
    bot, backends = running_run(tmp_path, cluster, "h200:8", "Job", retry)
    cluster.hold_jobs()
    (first,) = running_pods(cluster)
    cluster.exit_pod(NS, first, 1, "boom\n")
    sync(bot, backends=backends, echo=quiet)
    status = read_status(bot, KEY)
    assert (status.phase, status.reason) == ("Pending", "Requeued"), status
    assert [(a.number, a.reason) for a in status.attempts] == [(1, "Error")]

    cluster.step_jobs()  # counted, replaced
    (second,) = running_pods(cluster)
    sync(bot, backends=backends, echo=quiet)
    status = read_status(bot, KEY)
    assert status.phase == "Running", (status.reason, status.message, status.attempts)
    cluster.exit_pod(NS, second, 1, "boom again\n")
    assert job_conditions(cluster) == [[]]  # not synced
    sync(bot, backends=backends, echo=quiet)
    status = read_status(bot, KEY)
    assert (status.phase, status.reason) == ("Running", "BackoffLimitExceeded"), status
    assert [(a.number, a.reason) for a in status.attempts] == [(1, "Error"), (2, "Error")]
    (job,) = cluster.kube.list("Job", NS)
    assert not job["metadata"].get("deletionTimestamp")  # no overrun stopped it

    cluster.release_jobs()
    sync(bot, backends=backends, echo=quiet)
    status = read_status(bot, KEY)
    assert (status.phase, status.reason) == ("Failed", "RetriesExhausted"), status
    assert len(cluster.kube.list("Job", NS)) == 1  # no retry submitted
    seen = committed_phases(bot)
    requeues = [i for i, s in enumerate(seen) if s == ("Pending", "Requeued")]
    assert len(requeues) == 1 and ("Pending", "RetryBackoff") not in seen, seen
