"""A run that ends while the metrics receiver cannot be reached keeps its metrics coming.

The bot used to record the end with no metrics and stop watching the run, so its summary and chart were
lost for good although the receiver held them. Real git, the fake API server for the cluster, and a
real receiver (`IngestServer`) that is down at the first sync and up at the second.
"""

from __future__ import annotations

import http.client
import json
import socket
from pathlib import Path

import pytest
from fakekube import FakeKube
from support.repos import backend_factory, git, kube_lab, quiet

from tuneplane.bot.entry import reconcile, sync
from tuneplane.constants import utc_now
from tuneplane.ingest import mint_token
from tuneplane.ingest.server import IngestServer
from tuneplane.lab.runs import RunKey, mark_cancel, read_status
from tuneplane.plan.names import object_name

pytest_plugins = ("fakekube",)
SECRET = b"k" * 32


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _post(url: str, run_id: str, points: list[tuple[str, int, float]]) -> None:
    host, port = url.removeprefix("http://").split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=10)
    body = {
        "run_id": run_id,
        "points": [{"key": k, "step": s, "value": v, "ts": "2025-01-01T00:00:00+00:00"} for k, s, v in points],
    }
    conn.request(
        "POST",
        "/metrics",
        body=json.dumps(body).encode(),
        headers={"X-TunePlane-Token": mint_token(SECRET, run_id, "demo")},
    )
    assert conn.getresponse().status < 300
    conn.close()


def _ended_run(tmp_path: Path, fake_kube: FakeKube, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, str, int]:
    """A lab whose receiver is at the returned port (nothing listens there yet), its run submitted by
    the bot and just ended on the cluster."""
    bot, (run_id,) = kube_lab(tmp_path)
    port = _free_port()
    config = bot / "tuneplane.yaml"
    config.write_text(config.read_text().replace('    endpoint: ""', f'    endpoint: "http://127.0.0.1:{port}"', 1))
    git(bot, "commit", "-qam", "the lab's receiver")
    monkeypatch.setenv("TUNEPLANE_INGEST_SECRET", SECRET.decode())
    reconcile(bot, backends=backend_factory(fake_kube), echo=quiet)
    fake_kube.set_status(
        "Job",
        "tuneplane",
        object_name("demo", run_id),
        {
            "startTime": "2025-01-01T00:00:00Z",
            "completionTime": utc_now(),  # it ended just now
            "conditions": [{"type": "Complete", "status": "True"}],
        },
    )
    return bot, run_id, port


def test_metrics_the_receiver_could_not_give_at_the_end_are_read_on_a_later_sync(
    tmp_path: Path, fake_kube: FakeKube, monkeypatch: pytest.MonkeyPatch
) -> None:
    bot, run_id, port = _ended_run(tmp_path, fake_kube, monkeypatch)  # the receiver is down
    lines: list[str] = []

    sync(bot, backends=backend_factory(fake_kube), echo=lines.append)

    status = read_status(bot, RunKey("demo", run_id))
    assert status.phase == "Succeeded" and not status.metrics
    assert any("next sync asks again" in line for line in lines), lines
    assert json.loads((bot / "status/index.json").read_text())["active"] == {f"demo/{run_id}": "Succeeded+metrics"}

    mark_cancel(bot, RunKey("demo", run_id))  # a cancel merged after the end changes nothing
    git(bot, "commit", "-qam", "cancel it, too late")
    assert not reconcile(bot, backends=backend_factory(fake_kube), echo=quiet).cancelled
    assert read_status(bot, RunKey("demo", run_id)).phase == "Succeeded"

    server = IngestServer(tmp_path / "ingest.sqlite", SECRET, port=port).start()
    try:
        _post(server.url, run_id, [("train/loss", 1, 2.0), ("train/loss", 2, 1.0)])
        report = sync(bot, backends=backend_factory(fake_kube), echo=quiet)
    finally:
        server.stop()

    status = read_status(bot, RunKey("demo", run_id))
    assert report.updated == [f"demo/{run_id}"] and status.metrics == {"train/loss": 1.0}
    assert (bot / f"status/demo/{run_id}.svg").is_file()
    assert json.loads((bot / "status/index.json").read_text())["active"] == {}
    assert sync(bot, backends=backend_factory(fake_kube), echo=quiet).commit is None  # nothing left to ask


def test_a_run_long_ended_is_not_asked_about_forever(
    tmp_path: Path, fake_kube: FakeKube, monkeypatch: pytest.MonkeyPatch
) -> None:
    bot, (run_id,) = kube_lab(tmp_path)
    config = bot / "tuneplane.yaml"
    gone = f'    endpoint: "http://127.0.0.1:{_free_port()}"'
    config.write_text(config.read_text().replace('    endpoint: ""', gone, 1))
    git(bot, "commit", "-qam", "a receiver that is gone for good")
    monkeypatch.setenv("TUNEPLANE_INGEST_SECRET", SECRET.decode())
    reconcile(bot, backends=backend_factory(fake_kube), echo=quiet)
    fake_kube.set_status(
        "Job",
        "tuneplane",
        object_name("demo", run_id),
        {
            "startTime": "2025-01-01T00:00:00Z",
            "completionTime": "2025-01-01T00:05:00Z",  # ended long ago
            "conditions": [{"type": "Complete", "status": "True"}],
        },
    )

    sync(bot, backends=backend_factory(fake_kube), echo=quiet)

    assert read_status(bot, RunKey("demo", run_id)).phase == "Succeeded"
    assert json.loads((bot / "status/index.json").read_text())["active"] == {}


def test_a_receiver_that_refuses_the_bots_secret_is_reported_and_the_metrics_still_come_once_it_is_fixed(
    tmp_path: Path, fake_kube: FakeKube, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A refusal (a rotated secret, the CI variable updated an hour later) is an error of the sync, said
    once; the run still waits for its metrics, which arrive once the bot's secret is the receiver's."""
    bot, run_id, port = _ended_run(tmp_path, fake_kube, monkeypatch)
    server = IngestServer(tmp_path / "ingest.sqlite", b"z" * 32, port=port).start()  # another secret
    lines: list[str] = []
    try:
        report = sync(bot, backends=backend_factory(fake_kube), echo=lines.append)
    finally:
        server.stop()

    assert read_status(bot, RunKey("demo", run_id)).phase == "Succeeded"
    assert len(report.errors) == 1 and "HTTP 403" in report.errors[0], report.errors
    assert "TUNEPLANE_INGEST_SECRET" in report.errors[0]
    assert json.loads((bot / "status/index.json").read_text())["active"] == {f"demo/{run_id}": "Succeeded+metrics"}

    server = IngestServer(tmp_path / "ingest.sqlite", SECRET, port=port).start()  # the secret fixed
    try:
        _post(server.url, run_id, [("train/loss", 1, 2.0)])
        report = sync(bot, backends=backend_factory(fake_kube), echo=quiet)
    finally:
        server.stop()
    assert report.errors == [] and read_status(bot, RunKey("demo", run_id)).metrics == {"train/loss": 2.0}
    assert json.loads((bot / "status/index.json").read_text())["active"] == {}


def test_a_receiver_that_never_answers_costs_one_timeout_per_sync_not_one_per_run() -> None:
    import threading

    from tuneplane.bot.sync import IngestReader
    from tuneplane.models.run import RunStatus

    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(16)
    accepted: list[socket.socket] = []
    done = threading.Event()

    def accept() -> None:  # takes every connection and never answers
        listener.settimeout(0.1)
        while not done.is_set():
            try:
                accepted.append(listener.accept()[0])
            except OSError:
                continue

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    reader = IngestReader(f"http://127.0.0.1:{listener.getsockname()[1]}", SECRET, timeout=0.5)
    try:
        for n in range(3):
            status = RunStatus(experiment="demo", run_id=f"20250101-000000-00000{n}", phase="Succeeded")
            assert reader.read(status) == ({}, {}) and reader.unreachable
    finally:
        done.set()
        thread.join(5)
        for conn in accepted:
            conn.close()
        listener.close()
    assert len(accepted) == 1, accepted  # the first run's read timed out; the others did not ask
