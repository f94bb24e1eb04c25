"""Reading a remote receiver over HTTP: the same answers as the local read API, for `tp job metrics`."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from typing import Any
from urllib.parse import quote, urlencode

from tuneplane.errors import UsageError


def _get(endpoint: str, path: str, token: str, timeout: float) -> dict[str, Any]:
    url = endpoint.rstrip("/") + path
    request = urllib.request.Request(url, headers={"X-TunePlane-Token": token, "Accept": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return dict(json.loads(response.read()))
    except urllib.error.HTTPError as exc:
        detail = _error_of(exc.read())
        hint = "check the run id and the token (or --secret-file)" if exc.code in (401, 403) else ""
        message = f"the ingest receiver at {endpoint} answered HTTP {exc.code}: {detail}"
        raise UsageError(message, hint) from None
    except (urllib.error.URLError, OSError, ValueError) as exc:
        reason = getattr(exc, "reason", exc)
        raise UsageError(f"cannot read from the ingest receiver at {endpoint}: {reason}",
                         "check --endpoint and that the receiver is running") from None


def _error_of(data: bytes) -> str:
    try:
        return str(json.loads(data).get("error", ""))[:300]
    except (ValueError, AttributeError):
        return data.decode("utf-8", "replace")[:300]


def fetch_summary(endpoint: str, run_id: str, token: str, timeout: float = 10.0) -> dict[str, dict[str, Any]]:
    """`GET /api/runs/<run_id>/summary`: per key last, min, max, count, last_step."""
    payload = _get(endpoint, f"/api/runs/{quote(run_id, safe='')}/summary", token, timeout)
    return dict(payload.get("summary") or {})


def fetch_series(endpoint: str, run_id: str, key: str, token: str,
                 timeout: float = 10.0) -> list[tuple[int, float]]:
    """`GET /api/runs/<run_id>/metrics?key=K`: the (step, value) points of one key."""
    path = f"/api/runs/{quote(run_id, safe='')}/metrics?{urlencode({'key': key})}"
    payload = _get(endpoint, path, token, timeout)
    return [(int(s), float(v)) for s, v in (payload.get("series") or {}).get(key, [])]


def fetch_timed_series(endpoint: str, run_id: str, key: str, token: str,
                       timeout: float = 10.0) -> list[tuple[int, float, float | None]]:
    """`GET /api/runs/<run_id>/metrics?key=K&times=1`: (step, value, time) points of one key."""
    path = f"/api/runs/{quote(run_id, safe='')}/metrics?{urlencode({'key': key, 'times': '1'})}"
    payload = _get(endpoint, path, token, timeout)
    points = (payload.get("series") or {}).get(key, [])
    times = list((payload.get("times") or {}).get(key) or [])
    times += [None] * (len(points) - len(times))  # a receiver that sends no times: steps only
    return [(int(s), float(v), None if t is None else float(t)) for (s, v), t in zip(points, times, strict=False)]
