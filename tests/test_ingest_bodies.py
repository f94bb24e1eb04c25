"""What a POST body to the receiver may hold (tuneplane/ingest/bodies.py), read without a server: every
refusal names the field and the status a client acts on, and nothing of a refused request is kept."""

from __future__ import annotations

from typing import Any

import pytest

from tuneplane.ingest import bodies
from tuneplane.ingest.gate import Limits, Refused

LIMITS = Limits()


def refused(call: Any, *args: Any) -> Refused:
    with pytest.raises(Refused) as caught:
        call(*args)
    return caught.value


def test_points_are_read_as_the_store_takes_them() -> None:
    payload = {
        "points": [
            {"key": "train/loss", "step": 3, "value": 1.5, "ts": "2026-01-01T00:00:00Z"},
            {"key": "train/loss", "step": 4.0, "value": 2},
            {"key": "hw/gpu", "step": 4, "value": 0.5, "rank": 3},
        ]
    }
    assert bodies.points(payload, LIMITS) == [
        ("train/loss", 3, 1.5, "2026-01-01T00:00:00Z"),
        ("train/loss", 4, 2.0, ""),  # a whole float step is a step; an int value a float
        ("hw/gpu@rank3", 4, 0.5, ""),  # all-ranks reporting: one series per rank
    ]


def test_every_bad_point_is_named_and_none_is_kept() -> None:
    payload = {
        "points": [
            {"key": "ok", "step": 1, "value": 1.0},
            "text",
            {"key": "", "step": 1, "value": 1.0},
            {"key": "a", "step": True, "value": 1.0},
            {"key": "a", "step": 1.5, "value": 1.0},
            {"key": "a", "step": 2**63, "value": 1.0},
            {"key": "a", "step": 1, "value": "NaN"},
            {"key": "a", "step": 1},
            {"key": "a", "step": 1, "value": False},
            {"key": "a", "step": 1, "value": 1.0, "ts": 5},
            {"key": "a\udc80", "step": 1, "value": 1.0},
            {"key": "a", "step": 1, "value": float("nan")},
        ]
    }  # not a problem: left out
    error = refused(bodies.points, payload, LIMITS)
    assert error.status == 422
    assert "10 invalid point(s); nothing from this request was stored" in error.message
    assert [p.split(":")[0] for p in error.problems] == [
        "points[1]",
        "points[2].key",
        "points[3].step",
        "points[4].step",
        "points[5].step",
        "points[6].value",
        "points[7].value",
        "points[8].value",
        "points[9].ts",
        "points[10].key",
    ]


def test_a_value_that_is_not_a_finite_number_is_left_out_and_named_and_the_rest_kept() -> None:
    """What Python's json writes for a loss that overflowed (NaN, Infinity), an explicit null, and a
    number past the float range: the point is left out, named, and the other points are read."""
    payload = {
        "points": [
            {"key": "train/loss", "step": 1, "value": 2.0},
            {"key": "train/loss", "step": 2, "value": float("nan")},
            {"key": "train/loss", "step": 3, "value": float("inf")},
            {"key": "grad_norm", "step": 3, "value": -float("inf"), "rank": 1},
            {"key": "lr", "step": 3, "value": None},
            {"key": "lr", "step": 4, "value": 10**400},
            {"key": "train/loss", "step": 4, "value": 1.5},
        ]
    }
    skipped: list[str] = []
    assert bodies.points(payload, LIMITS, skipped) == [("train/loss", 1, 2.0, ""), ("train/loss", 4, 1.5, "")]
    assert skipped == [
        "points[1] 'train/loss' step 2: NaN",
        "points[2] 'train/loss' step 3: Infinity",
        "points[3] 'grad_norm@rank1' step 3: -Infinity",
        "points[4] 'lr' step 3: null",
        "points[5] 'lr' step 4: a number beyond the float range",
    ]
    assert bodies.points({"points": [{"key": "a", "step": 1, "value": float("nan")}]}, LIMITS) == []


def test_points_past_the_limit_are_refused_as_too_large() -> None:
    payload = {"points": [{"key": "a", "step": i, "value": 0.0} for i in range(4)]}
    error = refused(bodies.points, payload, LIMITS.replace(max_points=3))
    assert (error.status, error.message) == (413, "4 points in one request; the limit is 3")
    assert refused(bodies.points, {"points": {"a": 1}}, LIMITS).message == "points must be a list"


def test_hyperparameters() -> None:
    assert bodies.params({"params": {"lr": 1e-4, "name": "x"}}, LIMITS) == {"lr": 1e-4, "name": "x"}
    assert refused(bodies.params, {"params": [1]}, LIMITS).message == "params must be an object"
    too_many = refused(bodies.params, {"params": {"a": 1, "b": 2}}, LIMITS.replace(max_hparams=1))
    assert (too_many.status, too_many.message) == (413, "2 hyperparameters in one request; the limit is 1")
    bad = refused(bodies.params, {"params": {"": 1, "k" * 600: 2, "fine": 3}}, LIMITS)
    assert bad.status == 422 and len(bad.problems) == 2
    surrogate = refused(bodies.params, {"params": {"fine": "half \ud800"}}, LIMITS)
    assert surrogate.status == 422 and surrogate.problems == ["'fine'"]


def test_lifecycle_events_and_batch_ids() -> None:
    assert bodies.lifecycle({"event": "running", "ts": "2026-01-01T00:00:00Z"}) == ("running", "2026-01-01T00:00:00Z")
    assert bodies.lifecycle({"event": "failed"}) == ("failed", None)
    assert refused(bodies.lifecycle, {"event": "paused"}).message == (
        "event must be one of failed, running, starting, succeeded, got 'paused'"
    )
    assert refused(bodies.lifecycle, {"event": "running", "ts": 1}).message == "ts must be an ISO-8601 string"
    assert bodies.batch_id(None) is None and bodies.batch_id("") is None
    assert bodies.batch_id("b-1") == "b-1"
    for bad in (7, "x" * (bodies.MAX_BATCH_ID + 1), "half \ud800"):
        assert refused(bodies.batch_id, bad).status == 422
