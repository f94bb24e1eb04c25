"""The compact `rows/1` metrics body that our SDK sends once this receiver has advertised it.

    {"run_id": "...", "batch_id": "...", "format": "rows/1", "rank": 0?,
     "blocks": [{"keys": ["train/loss", "lr"], "rows": "<base64>"}, ...]}

Each block's rows are packed little-endian records of `int64 step, float64 unix time, float64 value per
key` (the keys in the block's order). A NaN value means "no value for this key in this record"; an
infinite value is left out and named, as a non-finite value is in the upstream `points` body
(`tuneplane.ingest.bodies`); a time that is not finite, a partial row or a bad key refuses the whole
request (422), as a malformed point does in the upstream body, which stays accepted unchanged. Every answer of
the receiver carries `X-TunePlane-Formats: rows/1`, so a client knows it may send this.
"""

from __future__ import annotations

import binascii
import math
import struct
from itertools import repeat

from tuneplane.ingest.gate import SURROGATE, Limits, Refused, storable
from tuneplane.ingest.store import Point
from tuneplane.runtime.jsonvalue import JSONObject, JSONValue

FORMATS = ["rows/1"]
FORMATS_HEADER = ", ".join(FORMATS)  # the X-TunePlane-Formats header on every answer
MAX_KEY = 512


def rows_points(payload: JSONObject, limits: Limits, skipped: list[str] | None = None) -> list[Point]:
    """The points of a `rows/1` body, or a refusal that names the block and what is wrong with it.
    Each infinite value left out is described in `skipped`."""
    if skipped is None:
        skipped = []
    if "points" in payload:
        raise Refused(422, "a body carries points or blocks, not both")
    if payload.get("format", "rows/1") not in FORMATS:
        raise Refused(422, f"format {str(payload.get('format'))[:40]!r} is not one of {', '.join(FORMATS)}")
    blocks = payload.get("blocks")
    if not isinstance(blocks, list):
        raise Refused(422, "blocks must be a list")
    rank = payload.get("rank")
    suffix = f"@rank{rank}" if isinstance(rank, int) and not isinstance(rank, bool) else ""
    problems: list[str] = []
    decoded: list[tuple[tuple[str, ...], struct.Struct, bytes]] = []
    total = 0
    for index, block in enumerate(blocks):
        found = _block(block, f"blocks[{index}]", problems)
        if found is None:
            continue
        keys, layout, raw = found
        total += len(raw) // layout.size * len(keys)
        if total > limits.max_points:
            raise Refused(413, f"over {limits.max_points} points in one request; the limit is {limits.max_points}")
        decoded.append(found)
    points: list[Point] = []
    for index, (keys, layout, raw) in enumerate(decoded):
        named = tuple(key + suffix for key in keys) if suffix else keys
        if _all_finite(raw):  # the common case: no NaN, nothing infinite
            for step, unix, *values in layout.iter_unpack(raw):
                points.extend(zip(named, repeat(step), values, repeat(unix)))
        else:
            _careful(named, layout, raw, f"blocks[{index}]", points, problems, skipped)
    if problems:
        raise Refused(
            422, f"{len(problems)} invalid block(s) or row(s); nothing from this request was stored", problems
        )
    return points


def _block(block: JSONValue, where: str, problems: list[str]) -> tuple[tuple[str, ...], struct.Struct, bytes] | None:
    if not isinstance(block, dict):
        problems.append(f"{where}: not an object")
        return None
    keys, rows = block.get("keys"), block.get("rows")
    if not isinstance(keys, list) or not keys:
        problems.append(f"{where}.keys: must be a non-empty list of metric names")
        return None
    if len(keys) > 10_000:
        problems.append(f"{where}.keys: {len(keys)} keys; at most 10000 in one block")
        return None
    if not all(isinstance(k, str) and k and len(k) <= MAX_KEY for k in keys):
        problems.append(f"{where}.keys: each must be a non-empty string of at most {MAX_KEY} characters")
        return None
    if not all(storable(k) for k in keys):
        problems.append(f"{where}.keys: a key {SURROGATE}")
        return None
    if len(set(keys)) != len(keys):
        problems.append(f"{where}.keys: a key is listed twice")
        return None
    if not isinstance(rows, str):
        problems.append(f"{where}.rows: must be a base64 string")
        return None
    try:
        raw = binascii.a2b_base64(rows, strict_mode=True)
    except (binascii.Error, ValueError) as exc:
        problems.append(f"{where}.rows: not base64 ({exc})")
        return None
    layout = struct.Struct(f"<qd{len(keys)}d")
    if len(raw) % layout.size:
        problems.append(
            f"{where}.rows: {len(raw)} bytes are not whole rows of {layout.size} "
            f"(int64 step, float64 time, {len(keys)} float64 values)"
        )
        return None
    return tuple(k for k in keys if isinstance(k, str)), layout, raw  # every key is text (checked above)


# Every byte but the two that can open a NaN or an infinity as a little-endian double's last byte.
_NOT_HIGH = bytes(b for b in range(256) if b not in (0x7F, 0xFF))


def _all_finite(raw: bytes) -> bool:
    """No 8-byte word can be a NaN or an infinity (whose last byte is 0x7F or 0xFF): two C-speed passes.
    Negative or huge steps and doubles beyond 2**1021 look suspect too and take the careful path."""
    return not raw[7::8].translate(None, _NOT_HIGH)


def _careful(
    keys: tuple[str, ...],
    layout: struct.Struct,
    raw: bytes,
    where: str,
    points: list[Point],
    problems: list[str],
    skipped: list[str],
) -> None:
    for row_index, (step, unix, *values) in enumerate(layout.iter_unpack(raw)):
        if not math.isfinite(unix):
            problems.append(f"{where}.rows[{row_index}]: the time is not finite")
            continue
        for key, value in zip(keys, values, strict=True):
            if value != value:
                continue  # NaN: no value for this key in this record
            if math.isinf(value):
                skipped.append(
                    f"{where}.rows[{row_index}] {key[:80]!r} step {step}: {'Infinity' if value > 0 else '-Infinity'}"
                )
                continue
            points.append((key, step, value, unix))
