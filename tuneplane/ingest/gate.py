"""The receiver's gate: every byte a client sends passes here, in an order that bounds the work an
unauthenticated or hostile request can cause.

1. Framing: exactly one `Content-Length` of ASCII digits, no `Transfer-Encoding` (two lengths, or a
   length with a transfer coding, is how request smuggling starts), a known `Content-Encoding`.
2. The token's shape (64 hex characters) before any body byte is read; with `X-TunePlane-Run` (our
   SDK sends it) the token is verified before the body too.
3. The body is read in chunks up to the wire limit. Without the header, the run id is peeked from the
   first 4 KiB of the decoded body (upstream clients put it first), and the token verified before
   the rest is read. A body whose run id is not up front is refused unread past its first chunk
   unless it is small (then it is parsed and its run id checked before anything is stored).
   What is held before a token is verified comes out of one budget for the whole receiver
   (`PreAuth`): past it a request gets a 503 with Retry-After and its connection is closed, so
   many connections with a wrong token cost a bounded amount of memory, not one body each.
4. Decoding (gzip) stops at the decoded-size limit; before parsing, the number of JSON containers and
   items is counted (C-speed byte counts), so a body of a million empty lists never becomes objects.
5. Parsing runs with a depth limit; a `RecursionError` cannot escape.
At most `Limits.parallel_bodies` bodies are decoded and parsed at once, so memory stays flat however
many clients send at the same time.
"""

from __future__ import annotations

import json
import re
import threading
import zlib
from email.message import Message
from typing import Protocol

from tuneplane.ingest.tokens import token_scope
from tuneplane.runtime.jsonvalue import JSONObject
from tuneplane.runtime.records import FrozenRecord, Record

READ_CHUNK = 64 * 1024
PEEK_BYTES = 4096
SMALL_BODY = 64 * 1024  # a body this small may carry its run id anywhere
TOKEN_RE = re.compile(r"[0-9a-fA-F]{64}\Z")
RUN_ID_RE = re.compile(rb'^\s*\{\s*"run_id"\s*:\s*("(?:[^"\\]|\\.){0,512}")')
MAX_RUN_ID = 256


class Limits(FrozenRecord):
    """What one request may carry; generous for real batches, small enough to refuse abuse."""

    max_body: int = 8 * 1024 * 1024  # bytes on the wire
    max_decoded: int = 16 * 1024 * 1024  # bytes after gunzip (refuses gzip bombs early)
    max_points: int = 50_000
    max_hparams: int = 10_000
    max_depth: int = 32  # JSON nesting
    max_items: int = 500_000  # commas in a body: values in its arrays and objects, before parsing
    parallel_bodies: int = 3  # bodies decoded and parsed at the same time
    header_timeout: float = 10.0  # request line and headers must arrive within this
    body_timeout: float = 60.0  # and the body within this after the headers
    idle_timeout: float = 60.0  # a kept-alive connection with no request is closed after this
    max_per_client: int = 256  # open connections from one address
    max_connections: int = 2048  # open connections in all
    preauth_bytes: int = 8 * 1024 * 1024  # body bytes held before a token is verified, all connections
    max_series: int = 50_000  # distinct metric names one run may have; points past it are left out
    summary_page: int = 1_000  # metric names in a summary answer by default
    max_summary_page: int = 10_000  # and at most, whatever the client asks


class Readable(Protocol):
    def read(self, size: int = ..., /) -> bytes: ...


class Refused(Exception):
    """A request we answer with a 4xx; `problems` lists what was wrong, point by point."""

    def __init__(
        self, status: int, message: str, problems: list[str] | None = None, close: bool = False, retry_after: int = 0
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.problems = problems or []
        self.close = close
        self.retry_after = retry_after


class PreAuth:
    """The receiver's one budget for body bytes held before a token is verified, all connections
    together. A per-request limit alone lets N connections with a wrong token hold N bodies."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.held = 0
        self.peak = 0
        self._lock = threading.Lock()

    def take(self, size: int) -> None:
        """Reserve `size` bytes, or refuse the request (503, close: its body is not read)."""
        with self._lock:
            if self.held + size > self.limit:
                raise Refused(
                    503,
                    f"the receiver holds {self.held} bytes of requests whose token is not "
                    "verified yet; retry shortly (send X-TunePlane-Run to be verified before "
                    "the body)",
                    close=True,
                    retry_after=1,
                )
            self.held += size
            self.peak = max(self.peak, self.held)

    def give(self, size: int) -> None:
        with self._lock:
            self.held -= size


def content_length(headers: Message) -> int:
    """The one unambiguous body length, or a refusal that closes the connection."""
    codings = headers.get_all("Transfer-Encoding") or []
    lengths = headers.get_all("Content-Length") or []
    if codings and lengths:
        raise Refused(400, "both Transfer-Encoding and Content-Length are set; send Content-Length only", close=True)
    if codings:
        raise Refused(411, "a Content-Length header is required (chunked bodies are not accepted)", close=True)
    if not lengths:
        raise Refused(411, "a Content-Length header is required", close=True)
    if len(lengths) > 1:
        raise Refused(400, f"{len(lengths)} Content-Length headers; send exactly one", close=True)
    raw = lengths[0].strip()
    if not raw.isascii() or not raw.isdigit() or len(raw) > 15:
        raise Refused(400, f"bad Content-Length {raw[:40]!r}", close=True)
    return int(raw)


def token_of(headers: Message) -> str:
    """The token header, checked for shape only: a token that cannot match is refused before the body."""
    values = headers.get_all("X-TunePlane-Token") or []
    if not values or not values[0].strip():
        raise Refused(401, "missing X-TunePlane-Token header", close=True)
    if len(values) > 1:
        raise Refused(400, "more than one X-TunePlane-Token header", close=True)
    token = values[0].strip()
    if not TOKEN_RE.match(token):
        raise Refused(403, "the X-TunePlane-Token is not a valid token (64 hex characters)", close=True)
    return str(token)


def run_id(value: object) -> str:
    if not isinstance(value, str) or not value.strip():
        raise Refused(422, "run_id must be a non-empty string")
    if len(value) > MAX_RUN_ID or any(ord(c) < 32 or 0xD800 <= ord(c) <= 0xDFFF for c in value):
        raise Refused(422, "run_id is too long or contains control characters")
    return value


def authenticate(secret: bytes, run: str, token: str, close: bool = False) -> str:
    """The store's name of the run the token opens (its experiment's and its own), or a 403."""
    key = token_scope(secret, run, token)
    if key is None:
        raise Refused(403, f"the token is not valid for run {run[:80]!r}", close=close)
    return key


def encoding_of(headers: Message) -> str:
    encoding = (headers.get("Content-Encoding") or "identity").strip().lower()
    if encoding not in ("gzip", "identity"):
        raise Refused(415, f"Content-Encoding {encoding[:40]!r} is not supported; use gzip or none", close=True)
    return encoding


class _Slots:
    """A semaphore per server; created lazily so Limits stays a plain frozen value."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._by_size: dict[int, threading.BoundedSemaphore] = {}

    def get(self, size: int) -> threading.BoundedSemaphore:
        with self._lock:
            if size not in self._by_size:
                self._by_size[size] = threading.BoundedSemaphore(max(1, size))
            return self._by_size[size]


SLOTS = _Slots()


class Body(Record):
    payload: JSONObject
    run_id: str
    key: str  # the store's name of the run: the token's experiment scope and the run id


_NO_BUDGET = PreAuth(2**62)  # callers that drive read_body directly (tests) and hold no receiver


def read_body(
    rfile: Readable,
    headers: Message,
    secret: bytes,
    limits: Limits,
    slots: threading.BoundedSemaphore | None = None,
    preauth: PreAuth | None = None,
) -> Body:
    """Framing, token shape, bounded read, early authentication, bounded decode and parse."""
    length = content_length(headers)
    token = token_of(headers)
    encoding = encoding_of(headers)
    if length > limits.max_body:
        raise Refused(413, f"body of {length} bytes is over the {limits.max_body}-byte limit", close=True)
    claimed = headers.get("X-TunePlane-Run")
    authed: tuple[str, str] | None = None
    if claimed is not None:
        claimed_run = run_id(claimed.strip())
        authed = claimed_run, authenticate(secret, claimed_run, token, close=True)
    budget = preauth or _NO_BUDGET
    held = 0 if authed else min(length, SMALL_BODY)
    budget.take(held)
    try:
        first = _read(rfile, min(length, READ_CHUNK))
        if authed is None:
            peeked = _peek_run_id(first, encoding)
            if peeked is not None:
                peeked_run = run_id(peeked)
                authed = peeked_run, authenticate(secret, peeked_run, token, close=len(first) < length)
                budget.give(held)  # verified: the rest is an authenticated job's, bounded per request
                held = 0
            elif length > SMALL_BODY:  # no run id up front: the rest would be read before any token check
                raise Refused(
                    422,
                    f"run_id must be the first field of a body over {SMALL_BODY // 1024} KiB "
                    "(or send the X-TunePlane-Run header)",
                    close=True,
                )
        raw = first + _read(rfile, length - len(first)) if length > len(first) else first
        return _finish(raw, encoding, authed, token, secret, limits, slots)
    finally:
        budget.give(held)


def _finish(
    raw: bytes,
    encoding: str,
    authed: tuple[str, str] | None,
    token: str,
    secret: bytes,
    limits: Limits,
    slots: threading.BoundedSemaphore | None,
) -> Body:
    """Decode and parse under the parallel-bodies bound, then check the body's run id."""
    with slots or SLOTS.get(limits.parallel_bodies):
        decoded = _gunzip(raw, limits.max_decoded) if encoding == "gzip" else raw
        del raw
        if len(decoded) > limits.max_decoded:
            raise Refused(413, f"body is over the {limits.max_decoded}-byte limit")
        if authed is None and len(decoded) > SMALL_BODY:
            raise Refused(
                422, "run_id must be the first field of a body over 64 KiB (or send the X-TunePlane-Run header)"
            )
        _check_shape(decoded, limits)
        payload = _parse(decoded, limits)
    body_run = run_id(payload.get("run_id"))
    if authed is None:
        return Body(payload, body_run, authenticate(secret, body_run, token))
    if body_run != authed[0]:
        raise Refused(422, "run_id in the body differs from the authenticated run")
    return Body(payload, body_run, authed[1])


def _read(rfile: Readable, length: int) -> bytes:
    chunks: list[bytes] = []
    left = length
    while left > 0:
        chunk = rfile.read(min(left, READ_CHUNK))
        if not chunk:
            raise Refused(400, "body ended before Content-Length bytes", close=True)
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def _peek_run_id(first: bytes, encoding: str) -> str | None:
    """The run id at the start of the body, from its first few decoded KiB only."""
    if encoding == "gzip":
        try:
            head = zlib.decompressobj(wbits=31).decompress(first, PEEK_BYTES)
        except zlib.error:
            return None
    else:
        head = first[:PEEK_BYTES]
    match = RUN_ID_RE.match(head)
    if not match:
        return None
    try:
        value = json.loads(match.group(1))
    except ValueError:
        return None
    return value if isinstance(value, str) else None


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


def _check_shape(data: bytes, limits: Limits) -> None:
    """Bound what parsing could build, by counting bytes (strings may overcount: that is on the safe side)."""
    containers = data.count(b"{") + data.count(b"[")
    allowed = limits.max_points + limits.max_hparams + 64
    if containers > allowed:
        raise Refused(413, f"body holds {containers} JSON objects/arrays; the limit is {allowed}")
    items = data.count(b",")
    if items > limits.max_items:
        raise Refused(413, f"body holds {items} JSON values; the limit is {limits.max_items}")


def _parse(data: bytes, limits: Limits) -> JSONObject:
    try:
        payload = json.loads(data)
    except RecursionError:
        raise Refused(422, f"body is nested deeper than {limits.max_depth} levels") from None
    except (ValueError, UnicodeDecodeError) as exc:
        raise Refused(400, f"body is not valid JSON: {str(exc)[:200]}") from None
    if not isinstance(payload, dict):
        raise Refused(400, "body must be a JSON object")
    if _depth_over(payload, limits.max_depth):
        raise Refused(422, f"body is nested deeper than {limits.max_depth} levels")
    return payload


def storable(value: object) -> bool:
    """Whether text (or a JSON value holding text) can be stored: JSON may spell half a UTF-16
    surrogate pair (`"\\ud800"`), which no UTF-8 text column holds."""
    try:
        if isinstance(value, str):
            return value.isascii() or bool(value.encode("utf-8"))
        if isinstance(value, dict | list):
            json.dumps(value, ensure_ascii=False).encode("utf-8")
    except (UnicodeEncodeError, TypeError, ValueError, RecursionError):
        return False
    return True


SURROGATE = "holds half a UTF-16 surrogate pair (a lone \\udXXX escape); send valid Unicode text"


def _depth_over(value: object, limit: int) -> bool:
    stack: list[tuple[object, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if depth > limit:
            return True
        if isinstance(item, dict):
            stack.extend((v, depth + 1) for v in item.values() if isinstance(v, (dict, list)))
        elif isinstance(item, list):
            stack.extend((v, depth + 1) for v in item if isinstance(v, (dict, list)))
    return False
