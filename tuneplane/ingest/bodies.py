"""What a POST body to the receiver may hold: points, hyperparameters, a lifecycle event, a batch id.

Each reader takes the decoded JSON object and returns what the store takes, or raises `Refused` with
the status and a message naming the field (every point's problem, when points are refused), so a
client is told what to fix and nothing of a refused request is stored.

A point whose value is not a finite number (`NaN`, `Infinity`, `-Infinity`, an explicit `null`, a number
beyond the float range) is not a malformed request: it is what Python's `json` writes for a loss that
overflowed, and an upstream client never sends a batch again once it is refused (a 4xx poisons its queue).
Such a point is left out and named in `skipped`; the request's other points are stored. A series has
no entry at that step: nothing is stored as NULL or as a stand-in number.
"""

from __future__ import annotations

import math

from tuneplane.ingest.gate import SURROGATE, Limits, Refused, storable
from tuneplane.ingest.rows import rows_points
from tuneplane.ingest.store import Point
from tuneplane.runtime.jsonvalue import JSONObject, JSONValue

LIFECYCLE_EVENTS = frozenset({"starting", "running", "succeeded", "failed"})
MAX_KEY = 512
MAX_BATCH_ID = 128


def batch_id(value: object) -> str | None:
    if value is None or value == "":
        return None
    if not isinstance(value, str) or len(value) > MAX_BATCH_ID:
        raise Refused(422, f"batch id must be a string of at most {MAX_BATCH_ID} characters")
    if not storable(value):
        raise Refused(422, f"batch id {SURROGATE}")
    return value


def points(payload: JSONObject, limits: Limits, skipped: list[str] | None = None) -> list[Point]:
    """The request's storable points; each point left out for a non-finite value is described in `skipped`."""
    if skipped is None:
        skipped = []
    if "blocks" in payload:  # our SDK's compact body (tuneplane.ingest.rows), once we advertised it
        return rows_points(payload, limits, skipped)
    raw = payload.get("points")
    if not isinstance(raw, list):
        raise Refused(422, "points must be a list")
    if len(raw) > limits.max_points:
        raise Refused(413, f"{len(raw)} points in one request; the limit is {limits.max_points}")
    out: list[Point] = []
    problems: list[str] = []
    for index, item in enumerate(raw):
        point = _point(item, index, problems, skipped)
        if point is not None:
            out.append(point)
    if problems:
        message = f"{len(problems)} invalid point(s); nothing from this request was stored"
        raise Refused(422, message, problems)
    return out


def _point(item: JSONValue, index: int, problems: list[str], skipped: list[str]) -> Point | None:
    if not isinstance(item, dict):
        problems.append(f"points[{index}]: not an object")
        return None
    key, step, value, ts = item.get("key"), item.get("step"), item.get("value"), item.get("ts")
    if not isinstance(key, str) or not key or len(key) > MAX_KEY:
        problems.append(f"points[{index}].key: must be a non-empty string of at most {MAX_KEY} characters")
        return None
    if isinstance(step, float) and step.is_integer():
        step = int(step)
    if isinstance(step, bool) or not isinstance(step, int) or not -(2**63) <= step < 2**63:
        problems.append(f"points[{index}].step: must be an integer")
        return None
    if "value" not in item:
        problems.append(f"points[{index}].value: missing; every point needs a number")
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float, type(None))):
        problems.append(f"points[{index}].value: must be a number")
        return None
    if ts is not None and not isinstance(ts, str):
        problems.append(f"points[{index}].ts: must be an ISO-8601 string")
        return None
    for name, text in (("key", key), ("ts", ts)):
        if text is not None and not storable(text):
            problems.append(f"points[{index}].{name}: {SURROGATE}")
            return None
    rank = item.get("rank")
    if isinstance(rank, int) and not isinstance(rank, bool):
        key = f"{key}@rank{rank}"  # all-ranks reporting: one series per rank
    unfit = "null" if value is None else not_finite(value)
    if unfit or value is None:  # the point is well formed; its value has no place in a series
        skipped.append(f"points[{index}] {key[:80]!r} step {step}: {unfit}")
        return None
    return key, step, float(value), ts or ""


def not_finite(value: float) -> str:
    """How a number that no series can hold is spelled ("NaN", "Infinity", ...); "" for a finite one."""
    try:
        number = float(value)
    except OverflowError:  # a JSON integer too large for a float
        return "a number beyond the float range"
    if math.isnan(number):
        return "NaN"
    if math.isinf(number):
        return "Infinity" if number > 0 else "-Infinity"
    return ""


def params(payload: JSONObject, limits: Limits) -> JSONObject:
    given = payload.get("params")
    if not isinstance(given, dict):
        raise Refused(422, "params must be an object")
    if len(given) > limits.max_hparams:
        raise Refused(413, f"{len(given)} hyperparameters in one request; the limit is {limits.max_hparams}")
    bad = [k for k in given if not k or len(k) > MAX_KEY]
    if bad:
        raise Refused(422, "hyperparameter names must be non-empty and short", [repr(k)[:80] for k in bad])
    unstorable = [k for k, v in given.items() if not storable(k) or not storable(v)]
    if unstorable:
        raise Refused(422, f"hyperparameter {SURROGATE}", [ascii(k)[:80] for k in unstorable])
    return given


def lifecycle(payload: JSONObject) -> tuple[str, str | None]:
    event, ts = payload.get("event"), payload.get("ts")
    if event not in LIFECYCLE_EVENTS:
        raise Refused(422, f"event must be one of {', '.join(sorted(LIFECYCLE_EVENTS))}, got {event!r}")
    if ts is not None and not isinstance(ts, str):
        raise Refused(422, "ts must be an ISO-8601 string")
    if not storable(ts):
        raise Refused(422, f"ts {SURROGATE}")
    return event, ts
