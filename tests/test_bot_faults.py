"""The bot against a misbehaving API server: each injected fault ends in a status a person can act on.

A submission the cluster refuses or cannot take leaves the run `Pending` with reason `SubmitFailed`,
no backend object, and the backend's words (which object, which API path, what the server said, what
to check); the next reconcile retries it. Nothing is ever created twice.
"""

from __future__ import annotations

import base64
from pathlib import Path

import pytest
from fakekube import FakeKube
from support.repos import (
    backend_factory,
    git,
    kube_lab,
    kubeconfig,
    quiet,
    tp_run,
)

from tuneplane.bot.entry import MAX_BACKEND_FAILURES, reconcile, sync
from tuneplane.lab.runs import RunKey, mark_cancel, read_status
from tuneplane.plan.names import object_name

NS = "tuneplane"
JOBS = r"/apis/batch/v1/namespaces/tuneplane/jobs"  # the collection (create) and every Job in it

pytest_plugins = ("fakekube",)  # the fake_kube fixture


def lab(tmp_path: Path, count: int = 1) -> tuple[Path, list[str]]:
    return kube_lab(tmp_path, count)


def status(root: Path, run_id: str):
    return read_status(root, RunKey("demo", run_id))


def creations(fake: FakeKube) -> int:
    return sum(n for (kind, _, _), n in fake.creations.items() if kind == "Job")


@pytest.mark.parametrize(
    "fault, words",
    [
        ("500", ["answered 500", "Check the API server's health"]),
        ("503", ["answered 503"]),
        ("403", ["answered 403", "kubectl auth can-i create jobs.batch -n tuneplane"]),
        ("401", ["answered 401", "credentials in your kubeconfig"]),
        ("drop", ["connection failed", "cluster is reachable"]),
        ("latency", ["no answer within the 0.5 s timeout", "network access to the API server"]),
    ],
)
def test_a_failed_submission_says_why_and_is_retried(
    tmp_path: Path, fake_kube: FakeKube, fault: str, words: list[str]
) -> None:
    bot, (run_id,) = lab(tmp_path)
    fake_kube.inject(fault, JOBS, times=1000, seconds=1.5)

    report = reconcile(bot, backends=backend_factory(fake_kube, timeout=0.5), echo=quiet)

    first = status(bot, run_id)
    assert report.waiting == [f"demo/{run_id}"] and report.commit
    assert first.phase == "Pending" and first.reason == "SubmitFailed" and first.backend is None
    for word in [
        *words,
        f"could not create Job tuneplane/{object_name('demo', run_id)}",
        f"POST {JOBS} on",
        "the bot retries on its next run",
    ]:
        assert word in first.message
    assert creations(fake_kube) == 0

    fake_kube.faults.clear()
    retried = reconcile(bot, backends=backend_factory(fake_kube), echo=quiet)

    second = status(bot, run_id)
    assert retried.submitted == [f"demo/{run_id}"]
    assert second.phase == "Pending" and second.reason == "" and second.backend is not None
    assert second.backend.uid == fake_kube.get("Job", NS, object_name("demo", run_id))["metadata"]["uid"]
    assert creations(fake_kube) == 1


def test_rate_limiting_is_waited_out(tmp_path: Path, fake_kube: FakeKube) -> None:
    bot, (run_id,) = lab(tmp_path)
    fake_kube.inject("429", JOBS, times=1, retry_after=0)

    report = reconcile(bot, backends=backend_factory(fake_kube, attempts=3), echo=quiet)

    assert report.submitted == [f"demo/{run_id}"] and status(bot, run_id).phase == "Submitted"
    assert creations(fake_kube) == 1


def test_a_foreign_object_with_the_run_name_is_not_adopted(tmp_path: Path, fake_kube: FakeKube) -> None:
    bot, (run_id,) = lab(tmp_path)
    name = object_name("demo", run_id)
    fake_kube.put(
        {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": {"name": name, "namespace": NS, "labels": {"tuneplane.dev/run": "someone-else"}},
            "spec": {},
        }
    )

    reconcile(bot, backends=backend_factory(fake_kube), echo=quiet)

    message = status(bot, run_id).message
    assert f"Job {NS}/{name} already exists and belongs to run someone-else" in message
    assert "delete it or render this run under another name" in message


def test_a_cluster_that_keeps_failing_stops_the_round(tmp_path: Path, fake_kube: FakeKube) -> None:
    bot, ids = lab(tmp_path, count=MAX_BACKEND_FAILURES + 2)
    fake_kube.inject("drop", JOBS, times=1000)

    report = reconcile(bot, backends=backend_factory(fake_kube), echo=quiet)

    assert len(report.waiting) == MAX_BACKEND_FAILURES
    assert [status(bot, r) is None for r in ids] == [False] * MAX_BACKEND_FAILURES + [True, True]
    assert "2 run(s) left for the next run" in report.errors[0]


def test_the_cli_exits_1_when_runs_could_not_be_submitted(tmp_path: Path, fake_kube: FakeKube) -> None:
    bot, (run_id,) = lab(tmp_path)
    fake_kube.inject("403", JOBS, times=1000)  # not retried: the CLI's own retry policy stays fast
    config = kubeconfig(tmp_path / "kubeconfig", fake_kube.url)

    code, out = tp_run(bot, "bot", "reconcile", "--kubeconfig", str(config))

    assert code == 1, out
    assert "not submitted: could not create Job" in out
    assert "1 run(s) need attention (each is named above, with why)" in out
    assert "Traceback" not in out
    assert status(bot, run_id).reason == "SubmitFailed"


def test_a_failed_observation_keeps_the_phase_and_says_so(tmp_path: Path, fake_kube: FakeKube) -> None:
    bot, (run_id,) = lab(tmp_path)
    reconcile(bot, backends=backend_factory(fake_kube), echo=quiet)
    fake_kube.inject("500", JOBS, times=1000, method="GET")

    sync(bot, backends=backend_factory(fake_kube), echo=quiet)

    seen = status(bot, run_id)
    assert seen.phase == "Submitted" and seen.message.startswith("could not observe the run: could not read Job")
    fake_kube.faults.clear()
    fake_kube.set_status(
        "Job", NS, object_name("demo", run_id), {"conditions": [{"type": "Complete", "status": "True"}]}
    )
    sync(bot, backends=backend_factory(fake_kube), echo=quiet)
    assert status(bot, run_id).phase == "Succeeded"


def test_a_failed_cancellation_is_retried(tmp_path: Path, fake_kube: FakeKube) -> None:
    bot, (run_id,) = lab(tmp_path)
    reconcile(bot, backends=backend_factory(fake_kube), echo=quiet)
    mark_cancel(bot, RunKey("demo", run_id))
    git(bot, "commit", "-q", "-am", "cancel")
    fake_kube.inject("500", JOBS, times=1000, method="DELETE")

    report = reconcile(bot, backends=backend_factory(fake_kube), echo=quiet)

    assert status(bot, run_id).phase == "Submitted" and "could not cancel" in report.errors[0]
    fake_kube.faults.clear()
    reconcile(bot, backends=backend_factory(fake_kube), echo=quiet)
    assert status(bot, run_id).phase == "Cancelled"
    assert fake_kube.get("Job", NS, object_name("demo", run_id)) is None


def test_the_job_token_reaches_the_secret_and_nothing_else(
    tmp_path: Path, fake_kube: FakeKube, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tuneplane.ingest import mint_token

    bot, (run_id,) = lab(tmp_path)
    monkeypatch.setenv("TUNEPLANE_INGEST_SECRET", "s3cret-for-the-ingest-receiver")
    token = mint_token(b"s3cret-for-the-ingest-receiver", run_id, "demo")

    reconcile(bot, backends=backend_factory(fake_kube), echo=quiet)

    secret = fake_kube.get("Secret", NS, f"{object_name('demo', run_id)}-tokens")
    assert base64.b64decode(secret["data"]["job-token"]).decode() == token
    assert token not in git(bot, "log", "-p", "--all")
    assert all(token not in p.read_text() for p in (bot / "status").rglob("*") if p.is_file())


def test_a_run_that_never_got_in_can_still_be_cancelled(tmp_path: Path, fake_kube: FakeKube) -> None:
    bot, (run_id,) = lab(tmp_path)
    fake_kube.inject("503", JOBS, times=1000)
    reconcile(bot, backends=backend_factory(fake_kube), echo=quiet)
    mark_cancel(bot, RunKey("demo", run_id))
    git(bot, "commit", "-q", "-am", "give up")
    fake_kube.faults.clear()

    report = reconcile(bot, backends=backend_factory(fake_kube), echo=quiet)

    assert report.cancelled == [f"demo/{run_id}"] and not report.submitted
    assert [t.phase for t in status(bot, run_id).history] == ["Pending", "Cancelled"]
    assert creations(fake_kube) == 0


def test_a_missing_kubeconfig_is_a_message_not_a_crash(tmp_path: Path) -> None:
    from tuneplane.bot.entry import BotOptions

    bot, (run_id,) = lab(tmp_path)

    report = reconcile(bot, BotOptions(kubeconfig=str(tmp_path / "nope.yaml")), echo=quiet)

    assert report.waiting == [f"demo/{run_id}"]
    assert f"could not load {tmp_path / 'nope.yaml'}" in status(bot, run_id).message
