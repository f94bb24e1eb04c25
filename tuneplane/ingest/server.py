"""The ingest receiver: the upstream `tuneplane.report` wire protocol over HTTP, into the SQLite store.

POST `<base>/metrics | /hparams | /lifecycle` (also under `/api/ingest/`), authenticated by the
per-run `X-TunePlane-Token`; bodies may be gzip-compressed; a batch id (`X-TunePlane-Batch` header or
`batch_id` field) makes retries idempotent. Upstream side channels (`/hardware`, `/observations`,
`/environment/nodes`) are accepted and kept as events so an upstream client never retries them
forever. GET `/api/runs/<run_id>/summary | /metrics[?key=K] | /hparams` reads back (same token).
Everything refused gets a 4xx with a JSON `{"error": ...}` that says why.
"""

from __future__ import annotations

import json
import math
import socket
import sys
import threading
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

from tuneplane.ingest import store as store_mod
from tuneplane.ingest.store import MetricStore, Point, StoreClosed
from tuneplane.ingest.tokens import verify_token

LIFECYCLE_EVENTS = frozenset({"starting", "running", "succeeded", "failed"})
READ_KINDS = ("summary", "metrics", "hparams")
EVENT_KINDS = frozenset({"hardware", "observations", "environment/nodes"})
POST_KINDS = frozenset({"metrics", "hparams", "lifecycle"}) | EVENT_KINDS
MAX_KEY = 512
MAX_RUN_ID = 256
MAX_BATCH_ID = 128


@dataclass(frozen=True)
class Limits:
    """What one request may carry; generous for real batches, small enough to refuse abuse."""

    max_body: int = 16 * 1024 * 1024  # bytes on the wire
    max_decoded: int = 64 * 1024 * 1024  # bytes after gunzip (refuses gzip bombs early)
    max_points: int = 200_000
    max_hparams: int = 10_000


class Refused(Exception):
    """A request we answer with a 4xx; `problems` lists what was wrong, point by point."""

    def __init__(self, status: int, message: str, problems: list[str] | None = None,
                 close: bool = False) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.problems = problems or []
        self.close = close


class IngestHandler(BaseHTTPRequestHandler):
    """One HTTP/1.1 connection (kept alive). Tests subclass it to inject faults."""

    protocol_version = "HTTP/1.1"
    server_version = "tuneplane-ingest"
    timeout = 60  # an idle kept-alive connection is closed after this many seconds
    disable_nagle_algorithm = True  # small JSON answers must not wait for a delayed ACK
    server: _Server

    # ── routing ─────────────────────────────────────────────────────────────────────────────
    def do_POST(self) -> None:  # http.server's naming
        self._answer(self._post)

    def do_GET(self) -> None:
        self._answer(self._get)

    def do_PUT(self) -> None:
        self._answer(self._not_allowed)

    do_DELETE = do_PATCH = do_PUT

    def _not_allowed(self) -> tuple[int, dict[str, Any]]:
        raise Refused(405, f"{self.command} is not supported here", close=True)

    def _answer(self, handler: Callable[[], tuple[int, dict[str, Any]]]) -> None:
        try:
            status, payload = handler()
        except Refused as exc:
            body: dict[str, Any] = {"error": exc.message}
            if exc.problems:
                body["problems"] = exc.problems[:20]
                body["problem_count"] = len(exc.problems)
            self._send(exc.status, body, close=exc.close)
            return
        except StoreClosed:
            self._send(503, {"error": "the receiver is shutting down; retry"}, close=True)
            return
        self._send(status, payload)

    def _send(self, status: int, payload: dict[str, Any], close: bool = False) -> None:
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        if close:
            self.send_header("Connection", "close")
            self.close_connection = True
        # Headers and body in one write: two small writes cost a delayed-ACK round trip each request.
        self._headers_buffer.append(b"\r\n" + data)  # type: ignore[attr-defined]
        self.flush_headers()

    def log_message(self, format: str, *args: Any) -> None:  # http.server's signature
        if self.server.verbose:
            sys.stderr.write(f"ingest: {self.address_string()} {format % args}\n")

    # ── POST ────────────────────────────────────────────────────────────────────────────────
    def _post(self) -> tuple[int, dict[str, Any]]:
        kind = _kind(urlsplit(self.path).path)
        if kind not in POST_KINDS:
            raise Refused(404, f"no ingest endpoint at {self.path!r}; use /metrics, /hparams or /lifecycle",
                          close=True)
        payload = self._json_body()
        run_id = _run_id(payload.get("run_id"))
        self._authenticate(run_id)
        batch_id = _batch_id(self.headers.get("X-TunePlane-Batch") or payload.get("batch_id"))
        store = self.server.store
        if kind == "metrics":
            points = _points(payload, self.server.limits)
            stored, duplicate = store.add_points(run_id, points, batch_id)
            return 200, {"ok": True, "stored": stored, "duplicate": duplicate}
        if kind == "hparams":
            params = _params(payload, self.server.limits)
            stored, duplicate = store.set_hparams(run_id, params, batch_id)
            return 200, {"ok": True, "stored": stored, "duplicate": duplicate}
        if kind == "lifecycle":
            event, ts = _lifecycle(payload)
            store.add_lifecycle(run_id, event, ts)
            return 200, {"ok": True}
        store.add_event(run_id, kind, payload)
        return 202, {"ok": True, "kept": "event"}

    def _authenticate(self, run_id: str) -> None:
        token = self.headers.get("X-TunePlane-Token")
        if not token:
            raise Refused(401, "missing X-TunePlane-Token header")
        if not verify_token(self.server.secret, run_id, token):
            raise Refused(403, f"the token is not valid for run {run_id!r}")

    def _content_length(self, required: bool = True) -> int | None:
        raw = self.headers.get("Content-Length")
        if raw is None:
            if required:
                raise Refused(411, "a Content-Length header is required (chunked bodies are not accepted)",
                              close=True)
            return None
        try:
            length = int(raw)
        except ValueError:
            raise Refused(400, f"bad Content-Length {raw!r}", close=True) from None
        if length < 0:
            raise Refused(400, f"bad Content-Length {raw!r}", close=True)
        return length

    def _json_body(self) -> dict[str, Any]:
        limits = self.server.limits
        length = self._content_length()
        assert length is not None
        if length > limits.max_body:
            raise Refused(413, f"body of {length} bytes is over the {limits.max_body}-byte limit", close=True)
        raw = self.rfile.read(length)
        if len(raw) != length:
            raise Refused(400, "body ended before Content-Length bytes", close=True)
        encoding = (self.headers.get("Content-Encoding") or "identity").strip().lower()
        if encoding == "gzip":
            raw = _gunzip(raw, limits.max_decoded)
        elif encoding != "identity":
            raise Refused(415, f"Content-Encoding {encoding!r} is not supported; use gzip or none")
        if len(raw) > limits.max_decoded:
            raise Refused(413, f"body is over the {limits.max_decoded}-byte limit")
        try:
            payload = json.loads(raw)
        except (ValueError, UnicodeDecodeError) as exc:
            raise Refused(400, f"body is not valid JSON: {exc}") from None
        if not isinstance(payload, dict):
            raise Refused(400, "body must be a JSON object")
        return payload

    # ── GET ─────────────────────────────────────────────────────────────────────────────────
    def _get(self) -> tuple[int, dict[str, Any]]:
        url = urlsplit(self.path)
        parts = [unquote(p) for p in url.path.strip("/").split("/")]
        if parts == ["healthz"]:
            return 200, {"ok": True}
        if len(parts) != 4 or parts[:2] != ["api", "runs"] or parts[3] not in READ_KINDS:
            raise Refused(404, f"no resource at {url.path!r}; try /api/runs/<run_id>/summary")
        run_id = _run_id(parts[2])
        self._authenticate(run_id)
        db = self.server.store.path
        if parts[3] == "summary":
            return 200, {"run_id": run_id, "summary": store_mod.summary(db, run_id)}
        if parts[3] == "hparams":
            return 200, {"run_id": run_id, "hparams": store_mod.hparams(db, run_id)}
        keys = parse_qs(url.query).get("key") or list(store_mod.summary(db, run_id))
        return 200, {"run_id": run_id, "series": {k: store_mod.series(db, run_id, k) for k in keys}}


# ── validation (pure) ─────────────────────────────────────────────────────────────────────────
def _kind(path: str) -> str:
    path = path.rstrip("/")
    for prefix in ("/api/ingest/", "/"):
        if path.startswith(prefix):
            return path[len(prefix):]
    return path


def _gunzip(raw: bytes, limit: int) -> bytes:
    unpacker = zlib.decompressobj(wbits=31)
    try:
        data = unpacker.decompress(raw, limit + 1)
    except zlib.error as exc:
        raise Refused(400, f"body is not valid gzip: {exc}") from None
    if len(data) > limit or unpacker.unconsumed_tail:
        raise Refused(413, f"decompressed body is over the {limit}-byte limit")
    if not unpacker.eof:
        raise Refused(400, "gzip body is truncated")
    return data


def _run_id(value: Any) -> str:
    if not isinstance(value, str) or not value.strip():
        raise Refused(422, "run_id must be a non-empty string")
    if len(value) > MAX_RUN_ID or any(ord(c) < 32 for c in value):
        raise Refused(422, "run_id is too long or contains control characters")
    return value


def _batch_id(value: Any) -> str | None:
    if value is None or value == "":
        return None
    if not isinstance(value, str) or len(value) > MAX_BATCH_ID:
        raise Refused(422, f"batch id must be a string of at most {MAX_BATCH_ID} characters")
    return value


def _points(payload: dict[str, Any], limits: Limits) -> list[Point]:
    raw = payload.get("points")
    if not isinstance(raw, list):
        raise Refused(422, "points must be a list")
    if len(raw) > limits.max_points:
        raise Refused(413, f"{len(raw)} points in one request; the limit is {limits.max_points}")
    points: list[Point] = []
    problems: list[str] = []
    for index, item in enumerate(raw):
        point = _point(item, index, problems)
        if point is not None:
            points.append(point)
    if problems:
        message = f"{len(problems)} invalid point(s); nothing from this request was stored"
        raise Refused(422, message, problems)
    return points


def _point(item: Any, index: int, problems: list[str]) -> Point | None:
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
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not _finite(value):
        problems.append(f"points[{index}].value: must be a finite number")
        return None
    if ts is not None and not isinstance(ts, str):
        problems.append(f"points[{index}].ts: must be an ISO-8601 string")
        return None
    rank = item.get("rank")
    if isinstance(rank, int) and not isinstance(rank, bool):
        key = f"{key}@rank{rank}"  # all-ranks reporting: one series per rank
    return key, step, float(value), ts or ""


def _finite(value: float) -> bool:
    try:
        return math.isfinite(value)
    except OverflowError:  # a JSON integer too large for a float
        return False


def _params(payload: dict[str, Any], limits: Limits) -> dict[str, Any]:
    params = payload.get("params")
    if not isinstance(params, dict):
        raise Refused(422, "params must be an object")
    if len(params) > limits.max_hparams:
        raise Refused(413, f"{len(params)} hyperparameters in one request; the limit is {limits.max_hparams}")
    bad = [k for k in params if not k or len(k) > MAX_KEY]
    if bad:
        raise Refused(422, "hyperparameter names must be non-empty and short", [repr(k)[:80] for k in bad])
    return params


def _lifecycle(payload: dict[str, Any]) -> tuple[str, str | None]:
    event, ts = payload.get("event"), payload.get("ts")
    if event not in LIFECYCLE_EVENTS:
        raise Refused(422, f"event must be one of {', '.join(sorted(LIFECYCLE_EVENTS))}, got {event!r}")
    if ts is not None and not isinstance(ts, str):
        raise Refused(422, "ts must be an ISO-8601 string")
    return event, ts


# ── the server ────────────────────────────────────────────────────────────────────────────────
class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    store: MetricStore
    secret: bytes
    limits: Limits
    verbose: bool

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self._open: set[socket.socket] = set()
        self._open_lock = threading.Lock()
        super().__init__(*args, **kwargs)

    def process_request(self, request: Any, client_address: Any) -> None:
        with self._open_lock:
            self._open.add(request)
        super().process_request(request, client_address)

    def shutdown_request(self, request: Any) -> None:
        with self._open_lock:
            self._open.discard(request)
        super().shutdown_request(request)

    def drop_connections(self) -> None:
        """Close kept-alive connections too, so a stopped receiver really is gone for its clients."""
        with self._open_lock:
            sockets = list(self._open)
            self._open.clear()
        for sock in sockets:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass


class IngestServer:
    """An embeddable receiver: `with IngestServer(db, secret) as srv: ... srv.url ...`."""

    def __init__(self, db_path: Path | str, secret: bytes, host: str = "127.0.0.1", port: int = 0, *,
                 limits: Limits | None = None, handler: type[IngestHandler] = IngestHandler,
                 verbose: bool = False) -> None:
        if not secret:
            raise ValueError("the ingest secret is empty")
        self.store = MetricStore(db_path)
        self.httpd = _Server((host, port), handler)
        self.httpd.store = self.store
        self.httpd.secret = secret
        self.httpd.limits = limits or Limits()
        self.httpd.verbose = verbose
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        host, port = self.httpd.server_address[:2]
        host = host.decode() if isinstance(host, bytes) else str(host)
        shown = host if ":" not in host else f"[{host}]"
        return f"http://{shown}:{port}"

    def start(self) -> IngestServer:
        """Serve in a daemon thread and return at once."""
        # A short poll interval makes stop() quick; an idle loop costs ~nothing either way.
        self._thread = threading.Thread(target=self.httpd.serve_forever, args=(0.05,),
                                        name="tuneplane-ingest", daemon=True)
        self._thread.start()
        return self

    def serve_forever(self) -> None:
        """Serve in this thread until interrupted (the CLI path)."""
        try:
            self.httpd.serve_forever()
        finally:
            self._close()

    def stop(self) -> None:
        """Stop accepting, cut open connections, close the store. Idempotent."""
        if self._thread is not None:
            self.httpd.shutdown()
            self._thread.join(5)
            self._thread = None
        self._close()

    def _close(self) -> None:
        self.httpd.drop_connections()
        self.httpd.server_close()
        self.store.close()

    def __enter__(self) -> IngestServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def start_server(db_path: Path | str, secret: bytes, host: str = "127.0.0.1",
                 port: int = 0) -> tuple[str, Callable[[], None]]:
    """Start a receiver in a background thread; returns (base URL, stop)."""
    server = IngestServer(db_path, secret, host, port).start()
    return server.url, server.stop

