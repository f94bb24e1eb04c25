"""Reading a remote receiver over HTTP: the same answers as the local read API, for `tp job metrics`."""

from __future__ import annotations

import http.client
import json
import urllib.error
import urllib.request
from types import TracebackType
from typing import Any
from urllib.parse import quote, urlencode, urlsplit

from tuneplane.errors import UsageError

MAX_PAGES = 1000  # summary pages read at most (a run has at most the receiver's max_series names)


class ReceiverError(UsageError):
    """The receiver could not be read. `answered`: it answered, and refused (a 4xx: the token, the run
    id) or is no TunePlane receiver (the answer's shape); asking again will not help. Otherwise it gave
    no answer (down, a timeout) or failed itself (a 5xx), which may pass."""

    def __init__(self, message: str, hint: str = "", *, answered: bool) -> None:
        super().__init__(message, hint)
        self.answered = answered


def _get(endpoint: str, path: str, token: str, timeout: float) -> dict[str, Any]:
    if urlsplit(endpoint).scheme not in ("http", "https") or not urlsplit(endpoint).netloc:
        raise UsageError(
            f"--endpoint {endpoint!r} is not an http:// or https:// URL",
            "pass the receiver's base URL, e.g. http://127.0.0.1:8765",
        )
    url = endpoint.rstrip("/") + path
    try:
        request = urllib.request.Request(url, headers={"X-TunePlane-Token": token, "Accept": "application/json"})
        with urllib.request.urlopen(request, timeout=timeout) as response:
            answer = json.loads(response.read())
    except urllib.error.HTTPError as exc:
        detail = _error_of(exc.read())
        hint = "check the run id and the token (or --secret-file)" if exc.code in (401, 403) else ""
        message = f"the ingest receiver at {endpoint} answered HTTP {exc.code}: {detail}"
        # 408 and 429 (the receiver's own answer under load) are no answer yet, as a 5xx is
        raise ReceiverError(message, hint, answered=exc.code < 500 and exc.code not in (408, 429)) from None
    except (urllib.error.URLError, OSError, http.client.HTTPException) as exc:  # no (whole) answer
        reason = getattr(exc, "reason", exc)
        raise ReceiverError(
            f"cannot read from the ingest receiver at {endpoint}: {reason}",
            "check --endpoint and that the receiver is running",
            answered=False,
        ) from None
    except ValueError as exc:
        raise ReceiverError(
            f"the ingest receiver at {endpoint} sent no JSON ({exc})",
            "check that --endpoint is a TunePlane ingest receiver",
            answered=True,
        ) from None
    if not isinstance(answer, dict):
        raise ReceiverError(
            f"the ingest receiver at {endpoint} sent an answer of the wrong shape (not a JSON object)",
            "check that --endpoint is a TunePlane ingest receiver",
            answered=True,
        )
    return answer


def _error_of(data: bytes) -> str:
    try:
        return str(json.loads(data).get("error", ""))[:300]
    except (ValueError, AttributeError):
        return data.decode("utf-8", "replace")[:300]


class _Shape:
    """Turns an answer of the wrong shape (not a TunePlane receiver, a proxy's page) into a clear error."""

    def __init__(self, endpoint: str) -> None:
        self.endpoint = endpoint

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, _tb: TracebackType | None) -> None:
        if kind is not None and issubclass(kind, (TypeError, ValueError, AttributeError, KeyError)):
            raise ReceiverError(
                f"the ingest receiver at {self.endpoint} sent an answer of the wrong shape ({exc})",
                "check that --endpoint is a TunePlane ingest receiver",
                answered=True,
            ) from None


def fetch_summary(endpoint: str, run_id: str, token: str, timeout: float = 10.0) -> dict[str, dict[str, Any]]:
    """`GET /api/runs/<run_id>/summary`: per key last, min, max, count, last_step. The receiver answers
    a page of names at a time (its answer's `next` is where the next page starts); all pages are read."""
    summary: dict[str, dict[str, Any]] = {}
    after = ""
    for _ in range(MAX_PAGES):
        query = f"?{urlencode({'after': after})}" if after else ""
        payload = _get(endpoint, f"/api/runs/{quote(run_id, safe='')}/summary{query}", token, timeout)
        with _Shape(endpoint):
            page = dict(payload.get("summary") or {})
            if not all(isinstance(v, dict) for v in page.values()):
                raise ValueError("a summary entry is not an object")
            summary.update(page)
            after = payload.get("next") or ""
            if not isinstance(after, str):
                raise ValueError("next is not a metric name")
        if not after or not page:
            break
    return summary


def fetch_series(endpoint: str, run_id: str, key: str, token: str, timeout: float = 10.0) -> list[tuple[int, float]]:
    """`GET /api/runs/<run_id>/metrics?key=K`: the (step, value) points of one key."""
    path = f"/api/runs/{quote(run_id, safe='')}/metrics?{urlencode({'key': key})}"
    payload = _get(endpoint, path, token, timeout)
    with _Shape(endpoint):
        return [(int(s), float(v)) for s, v in (payload.get("series") or {}).get(key, [])]


def fetch_timed_series(
    endpoint: str, run_id: str, key: str, token: str, timeout: float = 10.0
) -> list[tuple[int, float, float | None]]:
    """`GET /api/runs/<run_id>/metrics?key=K&times=1`: (step, value, time) points of one key."""
    path = f"/api/runs/{quote(run_id, safe='')}/metrics?{urlencode({'key': key, 'times': '1'})}"
    payload = _get(endpoint, path, token, timeout)
    with _Shape(endpoint):
        points = (payload.get("series") or {}).get(key, [])
        times = list((payload.get("times") or {}).get(key) or [])
        times += [None] * (len(points) - len(times))  # a receiver that sends no times: steps only
        return [(int(s), float(v), None if t is None else float(t)) for (s, v), t in zip(points, times, strict=False)]
