"""Tokens scoped to an experiment and a run; a run's metric names bounded; the summary paged. Real
HTTP against a real receiver on 127.0.0.1."""

from __future__ import annotations

import http.client
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

from tuneplane.ingest import client, mint_token, summary
from tuneplane.ingest.server import IngestServer, Limits

SECRET = b"s" * 32


@pytest.fixture()
def receiver(tmp_path: Path) -> Iterator[IngestServer]:
    with IngestServer(tmp_path / "ingest.sqlite", SECRET, limits=Limits(max_series=100)) as server:
        yield server


def call(server: IngestServer, method: str, path: str, token: str, body: Any = None) -> tuple[int, dict[str, Any]]:
    parts = urlsplit(server.url)
    conn = http.client.HTTPConnection(str(parts.hostname), parts.port, timeout=30)
    data = None if body is None else json.dumps(body)
    conn.request(method, path, data, {"X-TunePlane-Token": token})
    response = conn.getresponse()
    answer = json.loads(response.read())
    conn.close()
    return response.status, answer


def points(run: str, keys: list[str], step: int = 1, value: float = 1.0) -> dict[str, Any]:
    return {"run_id": run, "points": [{"key": k, "step": step, "value": value} for k in keys]}


def test_two_experiments_with_one_run_id_have_two_tokens_and_two_runs(receiver: IngestServer) -> None:
    a, b = mint_token(SECRET, "run-1", "exp-a"), mint_token(SECRET, "run-1", "exp-b")
    assert a != b and len(a) == len(b) == 64 and int(a, 16) >= 0
    assert call(receiver, "POST", "/metrics", a, points("run-1", ["loss"], value=1.0))[0] == 200
    assert call(receiver, "POST", "/metrics", b, points("run-1", ["loss"], value=2.0))[0] == 200
    assert call(receiver, "POST", "/hparams", a, {"run_id": "run-1", "params": {"lr": 0.1}})[0] == 200
    # each token reads its own experiment's run, never the other's
    assert call(receiver, "GET", "/api/runs/run-1/summary", a)[1]["summary"]["loss"]["last"] == 1.0
    assert call(receiver, "GET", "/api/runs/run-1/summary", b)[1]["summary"]["loss"]["last"] == 2.0
    assert call(receiver, "GET", "/api/runs/run-1/hparams", b)[1]["hparams"] == {}
    assert call(receiver, "GET", "/api/runs/run-1/metrics", b)[1]["series"] == {"loss": [[1, 2.0]]}
    # the store keeps them apart too, read by experiment
    db = receiver.store.path
    assert summary(db, "run-1", experiment="exp-a")["loss"]["count"] == 1
    assert summary(db, "run-1", experiment="exp-b")["loss"]["last"] == 2.0
    # an unscoped token of the same run id opens neither
    legacy = mint_token(SECRET, "run-1")
    assert call(receiver, "GET", "/api/runs/run-1/summary", legacy)[1]["summary"] == {}


def test_a_scoped_token_opens_only_its_own_run(receiver: IngestServer) -> None:
    a = mint_token(SECRET, "run-1", "exp-a")
    status, answer = call(receiver, "POST", "/metrics", a, points("run-2", ["loss"]))
    assert status == 403 and "not valid for run 'run-2'" in answer["error"]
    assert call(receiver, "GET", "/api/runs/run-2/summary", a)[0] == 403
    forged = a[:24] + mint_token(SECRET, "run-1", "exp-b")[24:]  # another experiment's MAC under this tag
    assert call(receiver, "POST", "/metrics", forged, points("run-1", ["loss"]))[0] == 403


def test_metric_names_past_the_run_limit_are_left_out_and_named(receiver: IngestServer) -> None:
    token = mint_token(SECRET, "wide", "exp")
    status, answer = call(receiver, "POST", "/metrics", token, points("wide", [f"m{i:04d}" for i in range(150)]))
    assert status == 200, answer  # a 2xx: an upstream client's queue is not poisoned
    assert answer["stored"] == 100 and answer["over_limit"] == 50
    assert answer["over_limit_keys"][:2] == ["m0100", "m0101"]
    assert "at most 100 metric names" in answer["over_limit_why"]
    # the names already known keep being stored; a new one is still left out
    status, answer = call(receiver, "POST", "/metrics", token, points("wide", ["m0000", "new"], step=2))
    assert status == 200 and answer["stored"] == 1 and answer["over_limit_keys"] == ["new"]
    db = receiver.store.path
    assert len(summary(db, "wide", experiment="exp")) == 100
    assert summary(db, "wide", experiment="exp")["m0000"]["count"] == 2
    # another run has its own allowance
    other = mint_token(SECRET, "other", "exp")
    assert call(receiver, "POST", "/metrics", other, points("other", ["a", "b"]))[1]["stored"] == 2


def test_the_summary_is_paged_and_the_client_reads_every_page(tmp_path: Path) -> None:
    limits = Limits(max_series=5000, summary_page=1000, max_summary_page=1500)
    with IngestServer(tmp_path / "ingest.sqlite", SECRET, limits=limits) as server:
        token = mint_token(SECRET, "many", "exp")
        keys = [f"k{i:05d}" for i in range(2500)]
        assert call(server, "POST", "/metrics", token, points("many", keys))[1]["stored"] == 2500
        status, first = call(server, "GET", "/api/runs/many/summary", token)
        assert status == 200 and len(first["summary"]) == 1000 and first["next"] == "k00999"
        _, second = call(server, "GET", "/api/runs/many/summary?after=k00999&limit=99999", token)
        assert len(second["summary"]) == 1500 and min(second["summary"]) == "k01000"  # capped at the max
        _, last = call(server, "GET", f"/api/runs/many/summary?after={second['next']}", token)
        assert len(last["summary"]) == 0 and "next" not in last
        assert call(server, "GET", "/api/runs/many/summary?limit=abc", token)[0] == 400
        # /metrics without a key lists a page of names too, never every series at once
        _, series = call(server, "GET", "/api/runs/many/metrics", token)
        assert len(series["series"]) == 1000 and series["next"] == "k00999"
        assert sorted(client.fetch_summary(server.url, "many", token)) == keys


def test_a_run_posting_very_many_names_gets_a_bounded_summary(tmp_path: Path) -> None:
    """The default limits: past 50,000 names points are left out, and the default summary answer is a
    page of 1,000 names, not every name the run ever sent."""
    with IngestServer(tmp_path / "ingest.sqlite", SECRET) as server:
        token = mint_token(SECRET, "flood", "exp")
        over = 0
        for start in range(0, 60_000, 20_000):
            status, answer = call(
                server, "POST", "/metrics", token, points("flood", [f"name-{i}" for i in range(start, start + 20_000)])
            )
            assert status == 200
            over += answer.get("over_limit", 0)
        assert over == 10_000
        parts = urlsplit(server.url)
        conn = http.client.HTTPConnection(str(parts.hostname), parts.port, timeout=30)
        conn.request("GET", "/api/runs/flood/summary", headers={"X-TunePlane-Token": token})
        data = conn.getresponse().read()
        conn.close()
        assert len(json.loads(data)["summary"]) == 1000 and len(data) < 256 * 1024
