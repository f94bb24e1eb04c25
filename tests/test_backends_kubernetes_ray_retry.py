"""A RayJob's lost heads count against the run's retry policy, and its attempts hold the workers' GPUs.

KubeRay replaces a lost Ray head without limit, and the submitter starts the driver again on the new one:
nothing in the cluster bounds that. So the backend does what a Job's `backoffLimit` and
`podFailurePolicy` do for a Job: a lost head past the budget (or lost for a reason the policy does not
retry) ends the run and deletes the RayJob with its Ray cluster. Rendered runs of a real lab, submitted
by the backend to the cluster twin; each sync of the bot is the backend's observation folded into the
status, which travels between syncs as its committed JSON (a new backend stands for a restarted bot).
"""

from __future__ import annotations

import random
from typing import TYPE_CHECKING, Any

import pytest
from support.render import CLUSTER_SETTINGS, make_lab, request, resolve_run
from twin_rbac import bot_client

from tuneplane.backends.base import BackendRef, Observation, SubmitRequest
from tuneplane.backends.kubernetes import ApiRetry, KubernetesBackend
from tuneplane.backends.kubernetes.payload import KubernetesObjects
from tuneplane.constants import ATTEMPT_ENV
from tuneplane.models.run import BackendObject, RunStatus, Transition
from tuneplane.plan.adapters import compile_plan
from tuneplane.render.manifests import render_manifests
from tuneplane.runs.observe import apply_observation

if TYPE_CHECKING:
    from fakekube import FakeKube
    from twin_controllers import Cluster

pytest_plugins = ("fakekube",)

NS = "ml-team"
EXP = "verl-grpo-exp"
FAST = ApiRetry(attempts=2, backoff_base=0.001, backoff_cap=0.005, timeout=5.0)


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Any:
    return make_lab(tmp_path_factory.mktemp("rayretry") / "lab", {EXP: "verl/grpo"}, settings=CLUSTER_SETTINGS)


@pytest.fixture
def twin(cluster: Cluster) -> Cluster:
    cluster.add_queue(NS, "team-a", "h200-pool", gpu=64, cpu="1000", memory="16Ti")
    for name, data in (("registry-creds", {".dockerconfigjson": "e30="}), ("lab-git", {"password": "cGFzcw=="})):
        cluster.kube.put(
            {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": name, "namespace": NS}, "data": data}
        )
    return cluster


def bot(fake_kube: FakeKube) -> KubernetesBackend:
    """The backend of one bot process: a new one stands for a restarted bot (it remembers nothing)."""
    return KubernetesBackend(NS, api_client=bot_client(fake_kube, NS), retry=FAST, rng=random.Random(7))


def submit(
    fake_kube: FakeKube, lab: Any, profile: str = "h200", attempt: int = 1, **fields: Any
) -> tuple[BackendRef, RunStatus]:
    """The run submitted as its attempt `attempt` (the bot's retry renders TUNEPLANE_ATTEMPT), and its
    status as the bot commits it."""
    req = request(EXP, profile=profile, **fields)
    spec = resolve_run(lab, req)
    plan = compile_plan(spec)
    if attempt > 1:
        plan = plan.replace(env={**plan.env, ATTEMPT_ENV: str(attempt)})
    docs = render_manifests(spec, plan, lab.config)
    ref = bot(fake_kube).submit(
        SubmitRequest(
            run_id=spec.metadata.run_id,
            experiment=EXP,
            namespace=NS,
            object_name=spec.metadata.name,
            payload=KubernetesObjects(docs),
            secret_data={"job-token": "tp-token-1234"},
            attempt=attempt,
        )
    )
    earlier = [{"number": n, "reason": "Preempted", "object": "earlier", "gpus": 8} for n in range(1, attempt)]
    status = RunStatus.model_validate(
        {
            "experiment": EXP,
            "run_id": spec.metadata.run_id,
            "profile": profile,
            "phase": "Submitted",
            "history": [Transition(phase="Submitted", at="2026-01-01T00:00:00Z")],
            "backend": BackendObject(backend="kubernetes", kind="RayJob", name=ref.name, namespace=NS, uid=ref.uid),
            "retry": spec.spec.retry,
            "attempts": [*earlier, {"number": attempt, "object": ref.name}] if attempt > 1 else [],
        }
    )
    return ref, status


def synced(fake_kube: FakeKube, ref: BackendRef, status: RunStatus) -> tuple[Observation, RunStatus]:
    """One `tp bot sync` of the run by a freshly started bot: observe, fold, commit (as JSON)."""
    seen = bot(fake_kube).observe(ref)
    new = apply_observation(status, seen, "2026-01-01T12:00:00Z", retry=True)
    return seen, RunStatus.model_validate_json(new.model_dump_json())


def heads(twin: Cluster) -> list[dict[str, Any]]:
    return [
        p
        for p in twin.pods(NS)
        if p["metadata"]["labels"].get("ray.io/node-type") == "head" and not p["metadata"].get("deletionTimestamp")
    ]


def lose_head(twin: Cluster, how: str = "evict") -> str:
    (head,) = heads(twin)
    name = str(head["metadata"]["name"])
    if how == "evict":
        twin.evict(NS, name)
    else:  # the head's own process died (`ray start` exited 1): no disruption, an Error
        twin.exit_pod(NS, name, 1, "raylet: fatal error\n")
    return name


def ray_left(twin: Cluster, ref: BackendRef) -> list[str]:
    """What is left of the RayJob and its Ray cluster: the objects and the pods."""
    left = [f"RayJob/{ref.name}"] if twin.kube.get("RayJob", NS, ref.name) is not None else []
    left += [f"RayCluster/{c['metadata']['name']}" for c in twin.kube.list("RayCluster", NS)]
    return left + [
        f"Pod/{p['metadata']['name']}" for p in twin.pods(NS) if "ray.io/node-type" in p["metadata"]["labels"]
    ]


def numbered(seen: Observation | RunStatus) -> list[tuple[int, str | None]]:
    return [(a.number, a.reason or None) for a in seen.attempts]


# ── the budget ────────────────────────────────────────────────────────────────────────────────────
def test_a_budget_of_two_ends_the_run_at_its_second_lost_head_across_bot_restarts(
    twin: Cluster, fake_kube: FakeKube, lab: Any
) -> None:
    ref, status = submit(fake_kube, lab, retry={"attempts": 2, "backoff_seconds": 0})
    seen, status = synced(fake_kube, ref, status)
    assert status.phase == "Running", seen

    lose_head(twin)
    seen, status = synced(fake_kube, ref, status)
    assert (status.phase, numbered(status)) == ("Running", [(1, "Evicted"), (2, None)]), seen
    assert ray_left(twin, ref), "attempt 2 of 2 is allowed: the run goes on on the new head"

    lose_head(twin)
    seen, status = synced(fake_kube, ref, status)  # another bot: the count is the ledger's, never reset
    assert (seen.phase, seen.reason) == ("Failed", "Evicted"), seen
    assert numbered(seen) == [(1, "Evicted"), (2, "Evicted")]  # the new head's driver is no attempt
    assert "attempt 2 of 2 ended Evicted; the retry budget is spent" in seen.message
    assert ray_left(twin, ref) == [], "the Ray cluster of a run that ended still holds its nodes"

    assert (status.phase, status.reason) == ("Failed", "RetriesExhausted")
    assert numbered(status) == [(1, "Evicted"), (2, "Evicted")]
    assert "the retry budget is spent" in status.message and "attempt 2 of 2: no retry left" in status.message
    assert status.finished_at == status.attempts[-1].finished_at


def test_a_bot_retry_s_rayjob_counts_from_its_attempt_number(twin: Cluster, fake_kube: FakeKube, lab: Any) -> None:
    """The bot's attempt 2 of 2 (attempt 1 ended on an earlier object): its first lost head spends the budget."""
    ref, status = submit(fake_kube, lab, attempt=2, retry={"attempts": 2, "backoff_seconds": 0})
    lose_head(twin)
    seen, status = synced(fake_kube, ref, status)
    assert (seen.phase, numbered(seen)) == ("Failed", [(1, "Evicted")]), seen
    assert "attempt 2 of 2 ended Evicted; the retry budget is spent" in seen.message
    assert (status.phase, status.reason, numbered(status)) == (
        "Failed",
        "RetriesExhausted",
        [(1, "Preempted"), (2, "Evicted")],
    )
    assert ray_left(twin, ref) == []


@pytest.mark.parametrize(
    "how, retry, reason",
    [("evict", {"on": ["Preempted"]}, "Evicted"), ("exit", {}, "Error")],
    ids=["evicted-under-a-policy-of-preemptions", "a-head-that-died-under-the-default-policy"],
)
def test_a_head_lost_for_a_reason_the_policy_does_not_retry_ends_the_run_at_once(
    twin: Cluster, fake_kube: FakeKube, lab: Any, how: str, retry: dict[str, Any], reason: str
) -> None:
    ref, status = submit(fake_kube, lab, retry=retry or None)
    lose_head(twin, how)
    seen, status = synced(fake_kube, ref, status)
    assert (seen.phase, seen.reason, numbered(seen)) == ("Failed", reason, [(1, reason)]), seen
    assert f"attempt 1 of 3 ended {reason}, which the retry policy does not retry" in seen.message
    assert (status.phase, status.reason, numbered(status)) == ("Failed", reason, [(1, reason)])
    assert ray_left(twin, ref) == []


def test_the_default_policy_lets_a_first_eviction_go_on(twin: Cluster, fake_kube: FakeKube, lab: Any) -> None:
    ref, status = submit(fake_kube, lab)
    lose_head(twin)
    seen, status = synced(fake_kube, ref, status)
    assert (status.phase, numbered(status)) == ("Running", [(1, "Evicted"), (2, None)]), seen
    twin.driver_exit(NS, ref.name, 0, "driver: resumed, done\n")
    seen, status = synced(fake_kube, ref, status)
    assert (status.phase, numbered(status)) == ("Succeeded", [(1, "Evicted"), (2, "Completed")]), seen


def test_while_the_stopped_rayjob_is_deleted_it_tells_the_same_story(
    twin: Cluster, fake_kube: FakeKube, lab: Any
) -> None:
    """Its pods take a while to stop (foreground deletion): a bot that looks then (one restarted before
    it committed the end) reads the same end, not a deletion by someone else."""
    fake_kube.linger_deletes = True
    ref, status = submit(fake_kube, lab, retry={"attempts": 1})
    lose_head(twin)
    first, _ = synced(fake_kube, ref, status)
    assert first.phase == "Failed" and twin.kube.get("RayJob", NS, ref.name)["metadata"].get("deletionTimestamp")
    again, status = synced(fake_kube, ref, status)
    assert (again.phase, again.reason, again.message) == (first.phase, first.reason, first.message)
    assert numbered(again) == numbered(first) == [(1, "Evicted")]
    assert (status.phase, status.reason) == ("Failed", "RetriesExhausted")


# ── GPU-hours ─────────────────────────────────────────────────────────────────────────────────────
def test_ray_attempts_hold_the_workers_gpus_and_the_run_sums_its_gpu_hours(
    twin: Cluster, fake_kube: FakeKube, lab: Any
) -> None:
    """Two GPU workers of 8 (the head holds none): each attempt held 16 GPUs for its own wall time."""
    ref, status = submit(fake_kube, lab, profile="h200:16")
    _, status = synced(fake_kube, ref, status)
    twin.advance(600)
    lose_head(twin)
    _, status = synced(fake_kube, ref, status)  # the bot saw the head lost (the ledger keeps it)
    twin.advance(1200)
    twin.driver_exit(NS, ref.name, 0, "driver: resumed, done\n")
    seen, status = synced(fake_kube, ref, status)
    assert [a.gpus for a in seen.attempts] == [16, 16], seen.attempts
    assert status.phase == "Succeeded" and [a.gpus for a in status.attempts] == [16, 16]
    assert all(a.gpu_seconds > 0 for a in status.attempts), status.attempts
    assert [a.gpu_seconds for a in status.attempts] == [
        16 * (_epoch(a.finished_at) - _epoch(a.started_at)) for a in status.attempts
    ]


def _epoch(stamp: str | None) -> float:
    from tuneplane.constants import epoch_of

    value = epoch_of(stamp)
    assert value is not None, stamp
    return value
