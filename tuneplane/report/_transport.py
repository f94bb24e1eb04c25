"""One kept-alive HTTP connection to the ingest receiver, and the wire encoding of a batch.

Only the sender thread uses a Transport, so it needs no lock. Connection-level failures surface as
`OSError`/`http.client.HTTPException` for the caller to classify; HTTP statuses come back as numbers.

Two encodings of a metrics batch: the upstream one every receiver understands (`{"run_id", "points":
[{"key", "step", "value", "ts"}]}`, gzipped), which is the default, and `rows/1` (see `_rows`), which
costs a join and a base64 pass per block instead of text per point and is sent uncompressed (packed
doubles do not shrink). The sender switches to `rows/1` only after the receiver lists it in an
`X-TunePlane-Formats` answer header, and back for good if a `rows/1` body is refused as malformed by
a receiver that no longer lists it.
"""

from __future__ import annotations

import http.client
import json
import os
import time
import zlib
from collections.abc import Mapping
from urllib.parse import urlsplit

from tuneplane.constants import JOB_ENDPOINT, JOB_RUN_ID, JOB_TOKEN, wire_second, wire_stamp
from tuneplane.report._rows import ROWS_FORMAT, Record, b64_bytes, blocks, checked, keys_json, rows_of

TransportError = (OSError, http.client.HTTPException)


class Transport:
    """POST JSON bodies to `<endpoint>/<name>` over a reused connection."""

    def __init__(self, endpoint: str, token: str, timeout: float, run_id: str = "") -> None:
        parts = urlsplit(endpoint)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"TUNEPLANE_JOB_ENDPOINT must be an http(s) URL, got {endpoint!r}")
        self.scheme = parts.scheme
        self.host = parts.hostname
        self.port = parts.port
        self.prefix = parts.path.rstrip("/")
        self.token = token
        self.timeout = timeout
        # Our receiver checks the token against this header before reading a body, so a job is never
        # queued behind the budget it keeps for bodies whose token is not verified yet (upstream
        # receivers ignore it). Only a plain ASCII run id fits a header as it is.
        self.run_header = run_id if run_id.isascii() and run_id.isprintable() else ""
        self._conn: http.client.HTTPConnection | None = None

    def _connection(self) -> http.client.HTTPConnection:
        if self._conn is None:
            cls = http.client.HTTPSConnection if self.scheme == "https" else http.client.HTTPConnection
            self._conn = cls(self.host, self.port, timeout=self.timeout)
        return self._conn

    def post(self, name: str, body: bytes, batch_id: str, gzip: bool = True) -> tuple[int, bytes, str, str]:
        """Send one request; returns (status, response body, Retry-After, X-TunePlane-Formats)."""
        headers = {"Content-Type": "application/json", "X-TunePlane-Token": self.token, "X-TunePlane-Batch": batch_id}
        if gzip:
            headers["Content-Encoding"] = "gzip"
        if self.run_header:
            headers["X-TunePlane-Run"] = self.run_header
        conn = self._connection()
        try:
            conn.request("POST", f"{self.prefix}/{name}", body=body, headers=headers)
            response = conn.getresponse()
            data = response.read()
        except BaseException:
            self.close()
            raise
        if response.will_close:
            self.close()
        return (
            response.status,
            data,
            response.getheader("Retry-After") or "",
            response.getheader("X-TunePlane-Formats") or "",
        )

    def close(self) -> None:
        if self._conn is not None:
            try:
                self._conn.close()
            except OSError:
                pass
            self._conn = None


def post_lifecycle(env: Mapping[str, str], event: str, timeout: float) -> bool:
    """One `/lifecycle` POST on a fresh connection, uncompressed (any receiver understands it)."""
    run_id = env.get(JOB_RUN_ID, "").strip()
    transport = Transport(env.get(JOB_ENDPOINT, "").strip(), env[JOB_TOKEN].strip(), timeout, run_id)
    stamp = wire_stamp(time.time())
    body = json.dumps({"run_id": run_id, "event": event, "ts": stamp}).encode()
    try:
        status, _, _, _ = transport.post("lifecycle", body, f"lifecycle-{event}-{os.getpid()}", gzip=False)
    finally:
        transport.close()
    return 200 <= status < 300


def compress(payload: bytes) -> bytes:
    """gzip at the fastest level: metric JSON shrinks ~10x even so, and CPU belongs to training."""
    packer = zlib.compressobj(1, zlib.DEFLATED, 31)
    return packer.compress(payload) + packer.flush()


class Encoder:
    """Builds metrics bodies: `rows/1` once negotiated (`rows`), else the upstream `{"run_id", "points":
    [...]}` by string assembly (several times faster than building dicts for `json.dumps`), caching
    each key's JSON form and each second's timestamp."""

    def __init__(self, run_id: str, rank: int | None) -> None:
        self.head = '{"run_id":' + json.dumps(run_id)
        self.rank_field = "" if rank is None else f',"rank":{int(rank)}'
        self.rows = False  # the receiver said it reads rows/1
        self._keys: dict[str, str] = {}
        self._key_lists: dict[tuple[str, ...], str] = {}
        self._second = -1
        self._stamp = ""

    def _ts(self, unix: float) -> str:
        second = int(unix)
        if second != self._second:
            self._second = second
            self._stamp = wire_second(second)
        micros = min(int((unix - second) * 1_000_000), 999_999)
        return f"{self._stamp}.{micros:06d}+00:00"

    def _key(self, key: str) -> str:
        encoded = self._keys.get(key)
        if encoded is None:
            encoded = '{"key":' + json.dumps(key)
            if len(self._keys) < 100_000:
                self._keys[key] = encoded
        return encoded

    def record(self, step: int, unix: float, values: dict[str, float]) -> tuple[str, int, int]:
        """JSON text of one record's finite points (comma-joined), how many, and how many were skipped."""
        ts = self._ts(unix)
        tail = f',"step":{step},"value":'
        end = f',"ts":"{ts}"{self.rank_field}}}'
        parts = []
        skipped = 0
        for key, value in values.items():
            if value - value != 0.0:  # NaN or infinity: not representable in JSON
                skipped += 1
                continue
            parts.append(self._key(key) + tail + repr(value) + end)
        return ",".join(parts), len(parts), skipped

    def batch(self, batch_id: str, records: list[Record]) -> tuple[bytes, int, int, bool]:
        """(body, points in it, non-finite values left out, whether the body is gzipped)."""
        if self.rows:
            body, points, skipped = self.rows_batch(batch_id, records)
            return body, points, skipped, False
        return (*self.points_batch(batch_id, records), True)

    def rows_batch(self, batch_id: str, records: list[Record]) -> tuple[bytes, int, int]:
        """The `rows/1` body: one block per run of records with the same keys."""
        head = f'{self.head},"batch_id":"{batch_id}","format":"{ROWS_FORMAT}"{self.rank_field},"blocks":['
        parts = [head.encode()]
        points = skipped = 0
        for entry, rows in blocks(records):
            blob, bad = checked(entry, rows)
            skipped += bad
            points += entry[2] * len(rows) - bad
            keys = keys_json(entry[0], self._key_lists)
            parts.append(f'{"," if len(parts) > 1 else ""}{{"keys":{keys},"rows":"'.encode())
            parts.append(b64_bytes(blob))
            parts.append(b'"}')
        parts.append(b"]}")
        return b"".join(parts), points, skipped

    def points_batch(self, batch_id: str, records: list[Record]) -> tuple[bytes, int, int]:
        """The gzipped upstream body, streamed record by record so no uncompressed copy is ever whole."""
        packer = zlib.compressobj(1, zlib.DEFLATED, 31)
        out = [packer.compress(f'{self.head},"batch_id":"{batch_id}","points":['.encode())]
        points = skipped = 0
        for record in records:
            for row in rows_of(record):
                text, count, dropped = self.record(*row)
                skipped += dropped
                if count:
                    out.append(packer.compress(("," + text if points else text).encode()))
                    points += count
        out.append(packer.compress(b"]}"))
        out.append(packer.flush())
        return b"".join(out), points, skipped

    def hparams_body(self, batch_id: str, params: dict[str, object]) -> bytes:
        return (
            f'{self.head},"batch_id":"{batch_id}","params":{json.dumps(params, ensure_ascii=False, allow_nan=False)}}}'
        ).encode()
