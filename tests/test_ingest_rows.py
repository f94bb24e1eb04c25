"""The receiver's compact `rows/1` metrics body: advertised, decoded exactly, refused precisely.

Bodies are built by hand with `struct` and `base64` (not by the SDK), so a change on either side that
breaks the other shows here; tests/test_report_wire.py checks the SDK end to end.
"""

from __future__ import annotations

import base64
import http.client
import json
import struct
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

from tuneplane.ingest import mint_token, series, summary
from tuneplane.ingest.server import IngestServer, Limits

SECRET = b"r" * 32
RUN = "run-rows"
NAN, INF = float("nan"), float("inf")


@pytest.fixture()
def receiver(tmp_path: Path) -> Any:
    server = IngestServer(tmp_path / "ingest.sqlite", SECRET, limits=Limits(max_points=100)).start()
    yield server
    server.stop()


def rows(keys: list[str], records: list[tuple[int, float, list[float]]]) -> str:
    layout = struct.Struct(f"<qd{len(keys)}d")
    return base64.b64encode(b"".join(layout.pack(step, unix, *values) for step, unix, values in records)).decode()


def post(server: IngestServer, body: dict[str, Any] | bytes) -> tuple[int, dict[str, Any], str]:
    parts = urlsplit(server.url)
    conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=10)
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    conn.request(
        "POST",
        "/metrics",
        body=data,
        headers={"X-TunePlane-Token": mint_token(SECRET, RUN), "Content-Type": "application/json"},
    )
    response = conn.getresponse()
    payload = json.loads(response.read() or b"{}")
    formats = response.getheader("X-TunePlane-Formats") or ""
    conn.close()
    return response.status, payload, formats


def body(*blocks: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {
        "run_id": RUN,
        "batch_id": extra.pop("batch_id", "b-1"),
        "format": "rows/1",
        "blocks": list(blocks),
        **extra,
    }


def test_every_answer_advertises_the_format(receiver: IngestServer) -> None:
    upstream = {"run_id": RUN, "points": [{"key": "a", "step": 1, "value": 1.0, "ts": "2025-01-01T00:00:00Z"}]}
    assert post(receiver, upstream) == (200, {"ok": True, "stored": 1, "duplicate": False}, "rows/1")
    status, _, formats = post(receiver, b"{not json")
    assert status == 400 and formats == "rows/1"  # refusals too: a client can tell format from content


def test_blocks_are_stored_with_their_times_and_nan_means_no_value(receiver: IngestServer) -> None:
    first = {
        "keys": ["train/loss", "lr"],
        "rows": rows(
            ["train/loss", "lr"],
            [
                (1, 1_700_000_000.25, [0.5, 3e-4]),
                (2, 1_700_000_001.5, [0.25, NAN]),
                (-3, 1_700_000_002.0, [0.125, 1e-4]),
            ],
        ),
    }
    second = {"keys": ["validation/loss"], "rows": rows(["validation/loss"], [(2, 1_700_000_001.75, [0.75])])}
    status, answer, _ = post(receiver, body(first, second))
    assert (status, answer) == (200, {"ok": True, "stored": 6, "duplicate": False})
    db = receiver.store.path
    assert series(db, RUN, "train/loss") == [(-3, 0.125), (1, 0.5), (2, 0.25)]
    assert series(db, RUN, "lr") == [(-3, 1e-4), (1, 3e-4)]  # step 2 had no lr
    assert summary(db, RUN)["validation/loss"]["last"] == 0.75
    # The per-point time arrives at millisecond precision, relative to the series' first point.
    import sqlite3

    with sqlite3.connect(db) as conn:
        got = conn.execute(
            "SELECT s.t0_ms + p.dt_ms FROM samples p JOIN series s ON s.id = p.series "
            "WHERE s.key = 'train/loss' ORDER BY p.step"
        ).fetchall()
    assert [ms for (ms,) in got] == [1_700_000_002_000, 1_700_000_000_250, 1_700_000_001_500]
    assert post(receiver, body(first, second))[1] == {"ok": True, "stored": 0, "duplicate": True}


def test_an_infinite_value_is_left_out_and_named_and_the_rest_stored(receiver: IngestServer) -> None:
    """As in the upstream body: a value that is not finite has no place in a series, and refusing the
    request would cost its finite points (a NaN is this format's "no value" and is not counted)."""
    block = {
        "keys": ["a", "b"],
        "rows": rows(["a", "b"], [(1, 1.0, [INF, 2.0]), (2, 2.0, [1.0, -INF]), (3, 3.0, [NAN, 4.0])]),
    }
    status, answer, _ = post(receiver, body(block))
    assert status == 200 and (answer["stored"], answer["dropped"]) == (3, 2), answer
    assert answer["dropped_points"] == [
        "blocks[0].rows[0] 'a' step 1: Infinity",
        "blocks[0].rows[1] 'b' step 2: -Infinity",
    ]
    db = receiver.store.path
    assert series(db, RUN, "a") == [(2, 1.0)] and series(db, RUN, "b") == [(1, 2.0), (3, 4.0)]


def test_rank_labels_every_block(receiver: IngestServer) -> None:
    block = {"keys": ["loss"], "rows": rows(["loss"], [(1, 1.0, [2.0])])}
    assert post(receiver, body(block, rank=3))[0] == 200
    assert set(summary(receiver.store.path, RUN)) == {"loss@rank3"}


@pytest.mark.parametrize(
    ("block", "words"),
    [
        ({"keys": ["a"], "rows": rows(["a"], [(1, NAN, [1.0])])}, "time is not finite"),
        ({"keys": ["a", "b"], "rows": rows(["a"], [(1, 1.0, [1.0])])}, "not whole rows of 32"),
        ({"keys": ["a"], "rows": "***"}, "not base64"),
        ({"keys": ["a"], "rows": 7}, "must be a base64 string"),
        ({"keys": [], "rows": ""}, "non-empty list"),
        ({"keys": ["a", "a"], "rows": rows(["a", "a"], [(1, 1.0, [1.0, 2.0])])}, "listed twice"),
        ({"keys": ["", "b"], "rows": rows(["a", "b"], [(1, 1.0, [1.0, 2.0])])}, "non-empty string"),
        ({"keys": ["x" * 600], "rows": rows(["a"], [(1, 1.0, [1.0])])}, "at most 512"),
        ("not an object", "not an object"),
    ],
)
def test_a_bad_block_refuses_the_request_and_says_where(receiver: IngestServer, block: Any, words: str) -> None:
    good = {"keys": ["ok"], "rows": rows(["ok"], [(1, 1.0, [1.0])])}
    status, answer, _ = post(receiver, body(good, block))
    assert status == 422, answer
    assert "nothing from this request was stored" in answer["error"]
    assert any(problem.startswith("blocks[1]") and words in problem for problem in answer["problems"]), answer
    assert summary(receiver.store.path, RUN) == {}


@pytest.mark.parametrize(
    ("payload", "status", "words"),
    [
        ({"run_id": RUN, "blocks": "x"}, 422, "blocks must be a list"),
        ({"run_id": RUN, "blocks": [], "points": []}, 422, "not both"),
        ({"run_id": RUN, "blocks": [], "format": "rows/9"}, 422, "not one of rows/1"),
    ],
)
def test_malformed_bodies(receiver: IngestServer, payload: dict[str, Any], status: int, words: str) -> None:
    got, answer, _ = post(receiver, payload)
    assert got == status and words in answer["error"]


def test_the_point_cap_counts_every_value(receiver: IngestServer) -> None:
    keys = [f"k{i}" for i in range(10)]
    block = {"keys": keys, "rows": rows(keys, [(s, 1.0, [1.0] * 10) for s in range(11)])}  # 110 points
    status, answer, _ = post(receiver, body(block))
    assert status == 413 and "limit is 100" in answer["error"]
    half = {"keys": keys, "rows": rows(keys, [(s, 1.0, [1.0] * 10) for s in range(10)])}
    assert post(receiver, body(half))[0] == 200
