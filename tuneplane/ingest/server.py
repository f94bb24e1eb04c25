"""The ingest receiver: the upstream `tuneplane.report` wire protocol over HTTP, into the SQLite store.

POST `<base>/metrics | /hparams | /lifecycle` (also under `/api/ingest/`), authenticated by the
per-run `X-TunePlane-Token`; bodies may be gzip-compressed; a batch id (`X-TunePlane-Batch` header or
`batch_id` field) makes retries idempotent. Upstream side channels (`/hardware`, `/observations`,
`/environment/nodes`) are accepted and kept as events so an upstream client never retries them
forever. GET `/api/runs/<run_id>/summary | /metrics[?key=K][&times=1] | /hparams` reads back (same token);
`times=1` adds each point's time (seconds since the epoch) in a list parallel to the series. The
summary (and `/metrics` without a key) is paged by metric name: `limit` names (1,000 by default, at
most 10,000) after `after`; a full page carries `next`, the `after` of the next page. A token opens
the run of its experiment and run id (`tuneplane.ingest.tokens`); a run may have at most
`Limits.max_series` metric names, and points of names past that are left out and named in a 200
answer, as non-finite values are (a 4xx would poison an upstream client's queue).
Everything refused gets a 4xx with a JSON `{"error": ...}` that says why, an internal failure a 500:
a request is always answered, never dropped. The order of checks that bounds the work of a hostile
request is in `tuneplane.ingest.gate`; this module adds the connection deadlines (headers, body,
idle) and the per-client and total connection caps (`tuneplane.ingest.watch`), a listen backlog
sized for hundreds of jobs, and connection threads that are reused (`tuneplane.ingest.workers`), so
accepting never waits on a start.
"""

from __future__ import annotations

import json
import sys
import threading
import time
from collections.abc import Callable, Mapping
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

from tuneplane.ingest import bodies, reads
from tuneplane.ingest.gate import (
    SURROGATE,
    Limits,
    PreAuth,
    Refused,
    authenticate,
    read_body,
    storable,
    token_of,
)
from tuneplane.ingest.gate import run_id as _run_id
from tuneplane.ingest.rows import FORMATS_HEADER
from tuneplane.ingest.store import MetricStore, StoreBusy, StoreClosed, StoreFull
from tuneplane.ingest.watch import Watch, refuse_raw, shutdown
from tuneplane.ingest.workers import Workers
from tuneplane.runtime.reporter import plain

READ_KINDS = ("summary", "metrics", "hparams")
EVENT_KINDS = frozenset({"hardware", "observations", "environment/nodes"})
POST_KINDS = frozenset({"metrics", "hparams", "lifecycle"}) | EVENT_KINDS
SWITCH_INTERVAL = 0.001  # seconds; see IngestServer.serve_forever
FULL_RETRY_AFTER = 30  # seconds a client waits before it retries a write refused for a full disk
FULL_NOTICE_EVERY = 60.0  # seconds between two "the store's disk is full" lines on stderr
DROPPED_WHY = (
    "a value that is not a finite number (NaN, Infinity, null) is not stored: the series has no "
    "point at that step; the request's other points are stored"
)
DROPPED_RUNS_SAID = 4096  # runs whose dropped points are said on stderr (once each)
__all__ = ["IngestHandler", "IngestServer", "Limits", "Refused", "start_server"]


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

    def _not_allowed(self) -> tuple[int, dict[str, object]]:
        raise Refused(405, f"{self.command} is not supported here", close=True)

    def parse_request(self) -> bool:
        ok = super().parse_request()
        if ok:
            self.server.watch.phase(self.connection, "body", self.server.limits.body_timeout)
        return ok

    def send_error(self, code: int, message: str | None = None, explain: str | None = None) -> None:
        """http.server's own refusals (bad request line, headers too long or too many) in JSON too."""
        if self.request_version == "HTTP/0.9":
            self.request_version = "HTTP/1.1"  # an unparsable request line still gets a full response
        try:
            phrase = HTTPStatus(code).phrase
        except ValueError:
            phrase = "error"
        self._send(code, {"error": message or phrase}, close=True)

    def _answer(self, handler: Callable[[], tuple[int, dict[str, object]]]) -> None:
        try:
            status, payload = handler()
        except Refused as exc:
            body: dict[str, object] = {"error": exc.message}
            if exc.problems:
                body["problems"] = exc.problems[:20]
                body["problem_count"] = len(exc.problems)
            self._send(exc.status, body, close=exc.close, retry_after=exc.retry_after)
            return
        except StoreClosed:
            self._send(503, {"error": "the receiver is shutting down; retry"}, close=True)
            return
        except StoreBusy as exc:
            self._send(503, {"error": f"the receiver is busy ({exc}); retry shortly"}, close=True)
            return
        except StoreFull as exc:  # the client keeps its points and retries; the operator is told once a minute
            self.server.say_full(f"{exc}: the store {self.server.store.path} cannot grow")
            self._send(
                507,
                {"error": f"{exc}: nothing of this request was stored; retry once space is freed"},
                close=True,
                retry_after=FULL_RETRY_AFTER,
            )
            return
        except ConnectionError:  # the sender went away mid-request: nobody to answer, and not our fault
            self.close_connection = True
            return
        except Exception as exc:  # an answer, never a dropped connection
            self.server.internal_errors += 1
            plain.note(f"ingest: internal error on {self.command} {self.path[:200]!r}: {type(exc).__name__}: {exc}")
            self._send(500, {"error": f"internal error ({type(exc).__name__}); the request was not stored"}, close=True)
            return
        self._send(status, payload)

    def _send(self, status: int, payload: dict[str, object], close: bool = False, retry_after: int = 0) -> None:
        if not self.server.watch.phase(self.connection, "responding", None):
            self.close_connection = True
            return  # the watchdog already answered (deadline passed) and closed the connection
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.send_header("X-TunePlane-Formats", FORMATS_HEADER)  # what a client may send besides upstream's
        if retry_after:
            self.send_header("Retry-After", str(retry_after))
        if close:
            self.send_header("Connection", "close")
            self.close_connection = True
        # Headers and body in one write: two small writes cost a delayed-ACK round trip each request.
        self._headers_buffer.append(b"\r\n" + data)  # type: ignore[attr-defined]
        try:
            self.flush_headers()
        finally:
            limits = self.server.limits
            self.server.watch.phase(self.connection, "idle", limits.idle_timeout + limits.header_timeout)

    def log_message(self, format: str, *args: Any) -> None:  # http.server's signature
        if self.server.verbose:
            plain.note(f"ingest: {self.address_string()} {format % args}")

    # ── POST ────────────────────────────────────────────────────────────────────────────────
    def _post(self) -> tuple[int, dict[str, object]]:
        kind = _kind(urlsplit(self.path).path)
        if kind not in POST_KINDS:
            raise Refused(404, f"no ingest endpoint at {self.path!r}; use /metrics, /hparams or /lifecycle", close=True)
        body = read_body(self.rfile, self.headers, self.server.secret, self.server.limits, preauth=self.server.preauth)
        payload, run_id, key = body.payload, body.run_id, body.key
        batch_id = bodies.batch_id(self.headers.get("X-TunePlane-Batch") or payload.get("batch_id"))
        store = self.server.store
        if kind == "metrics":
            skipped: list[str] = []
            points = bodies.points(payload, self.server.limits, skipped)
            written = store.add_points(key, points, batch_id)
            answer: dict[str, object] = {"ok": True, "stored": written.stored, "duplicate": written.duplicate}
            if skipped:  # a 2xx all the same: a 4xx would make an upstream client resend this batch forever
                answer.update(dropped=len(skipped), dropped_points=skipped[:20], dropped_why=DROPPED_WHY)
                self.server.say_dropped(run_id, skipped)
            if written.over:  # a 2xx too, for the same reason: the answer names what was left out
                answer.update(
                    over_limit=written.over_points,
                    over_limit_keys=written.over[:20],
                    over_limit_why=f"a run may have at most {store.max_series} metric names; points of "
                    "names past that are not stored (the names already known still are)",
                )
                self.server.say_over(run_id, store.max_series)
            return 200, answer
        if kind == "hparams":
            params = bodies.params(payload, self.server.limits)
            stored, duplicate = store.set_hparams(key, params, batch_id)
            return 200, {"ok": True, "stored": stored, "duplicate": duplicate}
        if kind == "lifecycle":
            event, ts = bodies.lifecycle(payload)
            store.add_lifecycle(key, event, ts)
            return 200, {"ok": True}
        if not storable(payload):
            raise Refused(422, f"the body {SURROGATE}")
        store.add_event(key, kind, payload)
        return 202, {"ok": True, "kept": "event"}

    def _authenticate(self, run_id: str) -> str:
        return authenticate(self.server.secret, run_id, token_of(self.headers))

    # ── GET ─────────────────────────────────────────────────────────────────────────────────
    def _get(self) -> tuple[int, dict[str, object]]:
        url = urlsplit(self.path)
        parts = [unquote(p) for p in url.path.strip("/").split("/")]
        if parts == ["healthz"]:
            return 200, {"ok": True}
        if len(parts) != 4 or parts[:2] != ["api", "runs"] or parts[3] not in READ_KINDS:
            raise Refused(404, f"no resource at {url.path!r}; try /api/runs/<run_id>/summary")
        run_id = _run_id(parts[2])
        key = self._authenticate(run_id)
        db = self.server.store.path
        query = parse_qs(url.query)
        if parts[3] == "hparams":
            return 200, {"run_id": run_id, "hparams": reads.hparams(db, key)}
        if parts[3] == "summary" or not query.get("key"):
            # Paged by name: a run of many names never makes one answer of unbounded size.
            after, size = self._page(query)
            page = reads.summary_page(db, key, after, size)
            if parts[3] == "summary":
                answer: dict[str, object] = {"run_id": run_id, "summary": page}
                return 200, self._paged(answer, page, size)
            keys = list(page)
        else:
            keys = query["key"][: self.server.limits.summary_page]
            page = {}
        if query.get("times", [""])[-1] not in ("1", "true"):
            answer = {"run_id": run_id, "series": {k: reads.series(db, key, k) for k in keys}}
            return 200, self._paged(answer, page, len(page) if page else -1)
        # `times=1`: each point's time beside it, in a parallel list, so `series` keeps its shape
        timed = {k: reads.timed_series(db, key, k) for k in keys}
        answer = {
            "run_id": run_id,
            "series": {k: [(s, v) for s, v, _ in p] for k, p in timed.items()},
            "times": {k: [t for _, _, t in p] for k, p in timed.items()},
        }
        return 200, self._paged(answer, page, len(page) if page else -1)

    def _page(self, query: dict[str, list[str]]) -> tuple[str, int]:
        """`after` (the last name of the previous page) and `limit` (names in this one, capped)."""
        limits = self.server.limits
        raw = query.get("limit", [""])[-1]
        if raw and not (raw.isascii() and raw.isdigit() and 0 < len(raw) < 10):
            raise Refused(400, f"limit {raw[:20]!r} is not a positive integer")
        size = min(int(raw), limits.max_summary_page) if raw else limits.summary_page
        if size < 1:
            raise Refused(400, "limit must be at least 1")
        return query.get("after", [""])[-1], size

    @staticmethod
    def _paged(answer: dict[str, object], page: Mapping[str, object], size: int) -> dict[str, object]:
        """A full page says where the next one starts (`next`: pass it as `after`)."""
        if page and len(page) >= size:
            answer["next"] = list(page)[-1]  # the page is in name order: its last name
        return answer


# ── validation (pure) ─────────────────────────────────────────────────────────────────────────
def _kind(path: str) -> str:
    path = path.rstrip("/")
    for prefix in ("/api/ingest/", "/"):
        if path.startswith(prefix):
            return path[len(prefix) :]
    return path


# ── the server ────────────────────────────────────────────────────────────────────────────────
class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 1024  # listen backlog: hundreds of jobs connecting at once never wait on SYN retries
    store: MetricStore
    secret: bytes
    limits: Limits
    verbose: bool

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.watch = Watch()
        self.internal_errors = 0
        self.full_said = -FULL_NOTICE_EVERY
        self.dropped_said: set[str] = set()  # runs told about on stderr (DROPPED_RUNS_SAID at most)
        self.dropped_lock = threading.Lock()
        self.limits = Limits()
        self.preauth = PreAuth(self.limits.preauth_bytes)
        self.over_said: set[str] = set()  # runs told about on stderr for passing the names limit
        # a thread per open connection, reused when idle: accepting never waits for a thread to start
        self.workers = Workers(self.process_request_thread, Limits().max_connections)
        super().__init__(*args, **kwargs)

    def process_request(self, request: Any, client_address: Any) -> None:
        client = str(client_address[0]) if client_address else "?"
        refusal = self.watch.add(request, client, self.limits.header_timeout, self.limits)
        if refusal:
            refuse_raw(request, 503, refusal)
            self.shutdown_request(request)
            return
        if not self.workers.submit(request, client_address):  # answer rather than drop
            refuse_raw(request, 503, "the receiver is out of threads; retry shortly")
            self.shutdown_request(request)

    def say_dropped(self, run_id: str, skipped: list[str]) -> None:
        """Tell the operator once per run that points were left out; each answer says it every time."""
        with self.dropped_lock:
            if run_id in self.dropped_said or len(self.dropped_said) > DROPPED_RUNS_SAID:
                return
            self.dropped_said.add(run_id)
            last = len(self.dropped_said) > DROPPED_RUNS_SAID
        if last:  # the bound is said once, so the silence after it is not taken for no drops
            plain.note(
                f"ingest: points were left out for more than {DROPPED_RUNS_SAID} runs; later runs "
                "are not named here (each answer still counts and names its own)"
            )
            return
        plain.note(
            f"ingest: run {run_id[:80]!r}: {len(skipped)} point(s) not stored, the first "
            f"{skipped[0]}; a value that is not a finite number has no place in a series "
            "(later ones are counted in each answer, not said here again)"
        )

    def say_over(self, run_id: str, limit: int) -> None:
        """Tell the operator once per run that it passed the metric-names limit."""
        with self.dropped_lock:
            if run_id in self.over_said or len(self.over_said) > DROPPED_RUNS_SAID:
                return
            self.over_said.add(run_id)
        plain.note(
            f"ingest: run {run_id[:80]!r} has {limit} metric names, the limit: points of further "
            "names are not stored (each answer names them)"
        )

    def say_full(self, message: str) -> None:
        """Tell the operator the store's disk is full: once, then at most once a minute."""
        now = time.monotonic()
        if now - self.full_said >= FULL_NOTICE_EVERY:
            self.full_said = now
            plain.note(f"ingest: {message}; writes are answered 507 until space is freed")

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A client that vanished mid-answer is routine: one line, not a traceback."""
        exc = sys.exc_info()[1]
        if self.verbose or not isinstance(exc, OSError):
            plain.note(
                f"ingest: connection from {client_address[0] if client_address else '?'} "
                f"ended: {type(exc).__name__}: {exc}"
            )

    def shutdown_request(self, request: Any) -> None:
        self.watch.remove(request)
        super().shutdown_request(request)

    def drop_connections(self) -> None:
        """Close kept-alive connections too, so a stopped receiver really is gone for its clients."""
        with self.watch.lock:
            sockets = list(self.watch.conns)
        for sock in sockets:
            shutdown(sock)


class IngestServer:
    """An embeddable receiver: `with IngestServer(db, secret) as srv: ... srv.url ...`."""

    def __init__(
        self,
        db_path: Path | str,
        secret: bytes,
        host: str = "127.0.0.1",
        port: int = 0,
        *,
        limits: Limits | None = None,
        handler: type[IngestHandler] = IngestHandler,
        verbose: bool = False,
    ) -> None:
        if not secret:
            raise ValueError("the ingest secret is empty")
        self.store = MetricStore(db_path)
        self.httpd = _Server((host, port), handler)
        self.httpd.store = self.store
        self.httpd.secret = secret
        self.httpd.limits = limits or Limits()
        self.httpd.preauth = PreAuth(self.httpd.limits.preauth_bytes)
        self.store.max_series = self.httpd.limits.max_series
        self.httpd.workers.limit = self.httpd.limits.max_connections
        self.httpd.verbose = verbose
        self._thread: threading.Thread | None = None
        self._watchdog = threading.Thread(target=self.httpd.watch.run, name="tuneplane-ingest-watch", daemon=True)
        self._watchdog.start()
        self._closed = False

    @property
    def url(self) -> str:
        host, port = self.httpd.server_address[:2]
        host = host.decode() if isinstance(host, bytes) else str(host)
        shown = host if ":" not in host else f"[{host}]"
        return f"http://{shown}:{port}"

    def start(self) -> IngestServer:
        """Serve in a daemon thread and return at once."""
        # A short poll interval makes stop() quick; an idle loop costs ~nothing either way.
        self._thread = threading.Thread(
            target=self.httpd.serve_forever, args=(0.05,), name="tuneplane-ingest", daemon=True
        )
        self._thread.start()
        return self

    def serve_forever(self) -> None:
        """Serve in this thread until interrupted (the CLI path: the process is the receiver's).

        The GIL's switch interval is shortened to `SWITCH_INTERVAL` meanwhile, so the accept loop and a
        waiting connection get the interpreter soon after another thread starts parsing a body, rather
        than after Python's default interval (bench/ingest_load.py measures the round trips)."""
        previous = sys.getswitchinterval()
        sys.setswitchinterval(min(previous, SWITCH_INTERVAL))
        try:
            self.httpd.serve_forever()
        finally:
            sys.setswitchinterval(previous)
            self._close()

    def stop(self) -> None:
        """Stop accepting, cut open connections, close the store. Idempotent."""
        if self._thread is not None:
            self.httpd.shutdown()
            self._thread.join(5)
            self._thread = None
        self._close()

    def _close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self.httpd.watch.stopped.set()
        self.httpd.workers.close()
        self.httpd.drop_connections()
        self.httpd.server_close()
        self.store.close()
        if self.store.wal_left():
            plain.note(
                f"ingest: {self.store.path}-wal could not be merged into the store (its disk is full, "
                "or a reader holds it); keep it beside the store: the next start applies it"
            )

    def __enter__(self) -> IngestServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def start_server(
    db_path: Path | str, secret: bytes, host: str = "127.0.0.1", port: int = 0
) -> tuple[str, Callable[[], None]]:
    """Start a receiver in a background thread; returns (base URL, stop)."""
    server = IngestServer(db_path, secret, host, port).start()
    return server.url, server.stop
