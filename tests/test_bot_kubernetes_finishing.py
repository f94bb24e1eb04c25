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
from support.repos import backend_factory, clone, git, make_remote, quiet, run_ids, seed_lab

from tuneplane.bot.entry import reconcile, sync
from tuneplane.lab.runs import RunKey, read_status

if TYPE_CHECKING:
    from twin_controllers import Cluster

pytest_plugins = ("fakekube",)  # the fake_kube and cluster fixtures

NS = "tuneplane"
(RUN,) = run_ids(1)
KEY = RunKey("demo", RUN)


def committed_phases(bot: Path) -> list[tuple[str, str]]:
    """(phase, reason) of every committed version of the run's status, oldest first."""
    revs = git(bot, "log", "--reverse", "--format=%H", "--", KEY.status_rel).split()
    shown = [json.loads(git(bot, "show", f"{r}:{KEY.status_rel}")) for r in revs]
    return [(s["phase"], s.get("reason") or "") for s in shown]


@pytest.mark.parametrize("profile, kind", [("h200:8", "Job"), ("h200:16", "JobSet")])
def test_a_run_whose_pods_succeeded_before_its_job_completes_runs_on_then_succeeds_with_one_attempt(
    tmp_path: Path, cluster: Cluster, profile: str, kind: str
) -> None:
    remote = make_remote(tmp_path)
    seed_lab(
        remote, tmp_path / "seed", {"demo": "echo hi\n"}, backend="kubernetes", runs=[("demo", RUN)], profile=profile
    )
    bot = clone(remote, tmp_path / "bot")
    backends = backend_factory(cluster.kube)
    reconcile(bot, backends=backends, echo=quiet)
    sync(bot, backends=backends, echo=quiet)
    status = read_status(bot, KEY)
    assert status.phase == "Running" and status.backend and status.backend.kind == kind

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
