"""The bot's next attempt of a preempted run, made by real `tp bot reconcile --push` processes against
the fake API server: four racing at once, or one killed between creating the attempt's Job and
committing its status. Either way the attempt's Job is created once and the remote's status records
it once."""

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
    remote_show,
    request,
    seed_lab,
    tp_process,
    tp_run,
)

from tuneplane.backends.base import AttemptReport, BackendRef, Observation
from tuneplane.bot.entry import CRASH_ENV, CRASH_EXIT, BotOptions, reconcile, sync
from tuneplane.lab.runs import RunKey, write_request
from tuneplane.models.base import RetryPolicy
from tuneplane.plan.names import attempt_name, object_name

pytest_plugins = ("fakekube",)  # the fake_kube fixture

RUN = "20250102-100000-00000b"
KEY = RunKey("demo", RUN)
FIRST = object_name("demo", RUN)
SECOND = attempt_name(FIRST, 2)


class Preempted:
    """The Kubernetes backend, except that it says the first Job was preempted (the twin does not
    preempt): sync only needs it to observe."""

    def __init__(self, real: object) -> None:
        self.real, self.name = real, "kubernetes"

    def observe(self, ref: BackendRef) -> Observation:
        ended = AttemptReport(
            number=1,
            started_at="2025-01-02T10:00:00Z",
            finished_at="2025-01-02T10:20:00Z",
            reason="Preempted",
            message="preempted by a higher-priority workload",
            gpus=8,
        )
        return Observation("Failed", reason="Preempted", attempts=(ended,))

    def __getattr__(self, name: str) -> object:
        return getattr(self.real, name)


def preempted_lab(tmp_path: Path, fake_kube: FakeKube) -> tuple[Path, Path]:
    """A run submitted, its Job preempted, the bot's decision to retry it pushed: attempt 2 is due."""
    remote = make_remote(tmp_path)
    seed = seed_lab(remote, tmp_path / "seed", {"demo": "echo hi\n"}, backend="kubernetes")
    write_request(seed, request("demo", RUN, "h200:8", retry=RetryPolicy(backoff_seconds=0)))
    git(seed, "add", "-A")
    git(seed, "commit", "-q", "-m", "request a run")
    git(seed, "push", "-q", "origin", f"HEAD:{BRANCH}")
    bot = clone(remote, tmp_path / "bot")
    make = backend_factory(fake_kube)
    reconcile(bot, BotOptions(push=True), backends=make, echo=quiet)
    sync(bot, BotOptions(push=True), backends=lambda n: Preempted(make(n)), echo=quiet)
    status = json.loads(remote_show(remote, KEY.status_rel))
    assert (status["phase"], status["reason"]) == ("Pending", "RetryBackoff")
    return remote, kubeconfig(tmp_path / "kubeconfig", fake_kube.url)


def jobs(fake: FakeKube) -> dict[str, int]:
    return {name: n for (kind, _, name), n in fake.creations.items() if kind == "Job"}


def assert_second_attempt_once(remote: Path, fake_kube: FakeKube) -> None:
    assert jobs(fake_kube) == {FIRST: 1, SECOND: 1}
    status = json.loads(remote_show(remote, KEY.status_rel))
    assert [(a["number"], a["object"]) for a in status["attempts"]] == [(1, FIRST), (2, SECOND)]
    assert status["backend"]["name"] == SECOND
    assert status["backend"]["uid"] == fake_kube.get("Job", "tuneplane", SECOND)["metadata"]["uid"]
    env = {
        e["name"]: e.get("value")
        for c in fake_kube.get("Job", "tuneplane", SECOND)["spec"]["template"]["spec"]["containers"]
        for e in c.get("env", [])
    }
    assert env["TUNEPLANE_ATTEMPT"] == "2"


def test_racing_bots_create_the_next_attempt_once(tmp_path: Path, fake_kube: FakeKube) -> None:
    remote, config = preempted_lab(tmp_path, fake_kube)
    clones = [clone(remote, tmp_path / f"racer{i}") for i in range(4)]

    procs = [tp_process(root, "bot", "reconcile", "--push", "--kubeconfig", str(config)) for root in clones]
    results = [(p.wait(timeout=180), p.communicate()) for p in procs]

    assert [code for code, _ in results] == [0] * 4, results
    assert_second_attempt_once(remote, fake_kube)


@pytest.mark.parametrize("step", ["submitted", "status-written", "committed"])
def test_a_bot_killed_after_creating_the_attempt_is_adopted_by_the_next(
    tmp_path: Path, fake_kube: FakeKube, step: str
) -> None:
    remote, config = preempted_lab(tmp_path, fake_kube)
    bot = clone(remote, tmp_path / "crashing")

    code, out = tp_run(bot, "bot", "reconcile", "--push", "--kubeconfig", str(config), env={CRASH_ENV: step})
    assert code == CRASH_EXIT, out
    other = clone(remote, tmp_path / "next")  # another runner: the killed bot's clone is gone with it
    code, out = tp_run(other, "bot", "reconcile", "--push", "--kubeconfig", str(config))
    assert code == 0, out

    assert_second_attempt_once(remote, fake_kube)
