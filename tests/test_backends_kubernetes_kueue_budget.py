"""Kueue's evictions against the run's retry policy, through the bot and the cluster twin: Kueue
re-admits an evicted Workload by itself and the pods a suspension deleted do not count against the
Job's `backoffLimit`, so only the bot can hold them to `retry: {attempts: 2}`. Past it, `tp bot sync`
deletes the Job (as `cancel: true` does) and only then records the run ended."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from support.repos import clone, git, make_remote, quiet, request, seed_lab

from tuneplane.backends.base import Backend
from tuneplane.backends.kubernetes import ApiRetry as Patience
from tuneplane.backends.kubernetes import KubernetesBackend
from tuneplane.bot.entry import reconcile, sync
from tuneplane.lab.runs import RunKey, read_status, write_request
from tuneplane.models.base import RetryPolicy
from tuneplane.plan.names import object_name

if TYPE_CHECKING:
    from twin_controllers import Cluster

pytest_plugins = ("fakekube",)

NS = "tuneplane"  # the namespace of the bot's backends (`backend_factory`)
RUN = "20250102-100000-00000c"
KEY = RunKey("demo", RUN)
JOB = object_name("demo", RUN)


def bot_backends(cluster: Cluster) -> Any:
    """The bot's backend on the twin, patient with an API server on a loaded machine."""
    backend = KubernetesBackend(
        NS,
        api_client=cluster.kube.api_client(),
        retry=Patience(attempts=3, backoff_base=0.001, backoff_cap=0.005, timeout=30.0),
        sleep=lambda _s: None,
    )

    def make(_name: str) -> Backend:
        return backend

    return make


def queued_lab(tmp_path: Path) -> Path:
    """A Kubernetes lab whose jobs Kueue queues (`cluster.queue`), with one run of a budget of two."""
    remote = make_remote(tmp_path)
    seed = seed_lab(remote, tmp_path / "seed", {"demo": "sleep 600\n"}, backend="kubernetes")
    path = seed / "tuneplane.yaml"
    path.write_text(path.read_text().replace('  queue: ""  ', '  queue: "team-a"  ', 1), encoding="utf-8")
    write_request(seed, request("demo", RUN, "h200:8", retry=RetryPolicy(attempts=2, backoff_seconds=0)))
    git(seed, "add", "-A")
    git(seed, "commit", "-q", "-m", "queue the jobs; request a run")
    git(seed, "push", "-q", "origin", "HEAD:main")
    return clone(remote, tmp_path / "bot")


def test_kueue_evictions_past_the_budget_have_the_bot_delete_the_job(tmp_path: Path, cluster: Cluster) -> None:
    cluster.add_queue(NS, "team-a", "h200-pool", gpu=64, cpu="1000", memory="16Ti")
    bot, backends = queued_lab(tmp_path), bot_backends(cluster)
    reconcile(bot, backends=backends, echo=quiet)
    assert cluster.kube.objects[("Job", NS, JOB)]["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "team-a"

    cluster.kueue_evict(NS, "Job", JOB, "PodsReadyTimeout", "Exceeded the PodsReady timeout")  # re-admitted
    sync(bot, backends=backends, echo=quiet)
    status = read_status(bot, KEY)
    assert status is not None
    assert [a.reason for a in status.attempts] == ["Evicted", ""], status.attempts
    assert status.phase == "Running" and ("Job", NS, JOB) in cluster.kube.objects  # within the budget

    cluster.kueue_evict(NS, "Job", JOB, "PodsReadyTimeout", "Exceeded the PodsReady timeout")
    sync(bot, backends=backends, echo=quiet)

    status = read_status(bot, KEY)
    assert status is not None and (status.phase, status.reason) == ("Failed", "RetriesExhausted")
    assert "attempt 2 of 2 ended Evicted; the engine started attempt 3 itself" in status.message
    assert "the job was stopped" in status.message
    # attempt 3, which Kueue re-admitted and started before the bot looked, ran until the bot stopped it
    assert [(a.number, a.reason) for a in status.attempts] == [(1, "Evicted"), (2, "Evicted"), (3, "Cancelled")]
    cluster.kube.settle()
    assert ("Job", NS, JOB) not in cluster.kube.objects
    assert not [p for p in cluster.pods(NS) if p["status"].get("phase") == "Running"]
