"""The compact form of queued records, shared by the memory queue, the overflow file and the wire.

A record is `(entry, row)`: what the memory queue's id rows (see `_queued`) become, and what overflow
lines read back as. The entry `(keys, cost, points)` stands for one key set and is shared by every
record with those keys; the row is `struct`-packed little-endian bytes: `int64 step, float64 unix
time, float64 value per key`, in the entry's key order. Entries hold only strings and ints, so the
garbage collector untracks a record the first time it sees it.
The sender turns a run of records with one key set into one block by joining bytes.

The `rows/1` wire format (what our receiver advertises, see `tuneplane.ingest.rows`) carries such
blocks as `{"keys": [...], "rows": "<base64 of the joined rows>"}`; a NaN value means "no value for
this key in this record" (the SDK turns non-finite values into NaN and counts them as dropped).
"""

from __future__ import annotations

import binascii
import struct
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from itertools import groupby, repeat
from operator import itemgetter
from typing import TypeVar

from tuneplane.report._config import TUPLE_COST, record_cost

ROWS_FORMAT = "rows/1"
NAN = float("nan")
# Every byte but the two that can open a NaN or an infinity as a little-endian double's last byte.
_NOT_HIGH = bytes(b for b in range(256) if b not in (0x7F, 0xFF))

# (keys, cost, points): `cost` is the memory-budget estimate of the record, `points` its values. A
# record read back from the overflow file holds several rows (a whole line) under an entry of its own
# with their summed cost and points; everything that walks rows takes the layout from len(keys).
Entry = tuple[tuple[str, ...], int, int]
Record = tuple[Entry, bytes]
Cached = tuple[Entry, Callable[..., bytes]]  # an entry and `pack(step, unix_time, *values)` for it

_structs: dict[int, struct.Struct] = {}

LINE_ROWS = 256  # rows in one packed record (and one overflow-file line) at most
LINE_BYTES = 96 * 1024  # and packed bytes (at least one row), so a reader's chunk holds a line
PACKED_COST = 256  # memory-budget bytes of a packed record besides its rows: two tuples, two ints, header, slot


def row_struct(points: int) -> struct.Struct:
    layout = _structs.get(points)
    if layout is None:
        layout = struct.Struct(f"<qd{points}d")
        if len(_structs) < 1024:
            _structs[points] = layout
    return layout


def make_entry(keys: tuple[str, ...], shared: bool = True) -> Cached:
    """An entry for `keys` and its packer. Shared entries live in a cache; a private one (the cache is
    full) also charges the budget for its own key strings and tuples, which then exist once per record."""
    cost = record_cost(len(keys))
    if not shared:  # queued as a record, with its tuple
        cost += TUPLE_COST + 120 + sum(56 + len(key) for key in keys) + 8 * len(keys)
    return (keys, cost, len(keys)), row_struct(len(keys)).pack


_entry_of, _cost_of, _points_of, _row_of = itemgetter(0), itemgetter(1), itemgetter(2), itemgetter(1)


_T = TypeVar("_T")


def take(queue: deque[_T], count: int) -> list[_T]:
    """The first `count` records off `queue` (which holds at least that many), in C: no Python frame
    per record. Only the sender pops, so callers appending meanwhile do not disturb it."""
    return list(map(deque.popleft, repeat(queue, count)))


def points_of(records: Iterable[Record]) -> int:
    """Points in `records` (C-level maps: no Python frame per record)."""
    return sum(map(_points_of, map(_entry_of, records)))


def cost_of(records: Iterable[Record]) -> int:
    """Memory-budget bytes of `records`."""
    return sum(map(_cost_of, map(_entry_of, records)))


def rows_of(record: Record) -> Iterator[tuple[int, float, dict[str, float]]]:
    """A record's rows as `(step, unix_time, {key: value})`."""
    keys, blob = record[0][0], record[1]
    for step, unix, *values in row_struct(len(keys)).iter_unpack(blob):
        yield step, unix, dict(zip(keys, values, strict=True))


def singles(records: list[Record]) -> list[Record]:
    """Records with one row each (what was read back from disk as a line becomes its rows)."""
    out: list[Record] = []
    for entry, blob in records:
        width = row_struct(len(entry[0])).size
        if len(blob) == width:
            out.append((entry, blob))
        else:
            count = len(blob) // width
            out += split((entry[0], entry[1] // count, len(entry[0])), blob)
    return out


def packed(records: list[Record], max_points: int) -> tuple[list[Record], int]:
    """Records of one row each as records of up to LINE_ROWS rows (and `max_points` points, so a batch
    of whole records keeps to its size): about 48 bytes a row of four values instead of 160, with a
    `b"".join` per packed record and no Python frame per row. Each packed record's entry carries its
    own cost (rows plus PACKED_COST) and points. A lone record (key sets alternating call by call)
    stays as it is: packing it would cost more than it saves. Returns the records and the budget
    bytes they free."""
    out: list[Record] = []
    freed = 0
    for entry, rows in _runs_of(records):
        keys = entry[0]
        if len(rows) == 1:  # kept alone, charged as the tuple and row it now is
            lone = lone_entry(keys)
            out.append((lone, rows[0]))
            freed += entry[1] - lone[1]
            continue
        width = row_struct(len(keys)).size
        per = max(1, min(LINE_ROWS, LINE_BYTES // width, max_points // len(keys)))
        freed += entry[1] * len(rows)
        for start in range(0, len(rows), per):
            blob = b"".join(rows[start : start + per])
            out.append(((keys, PACKED_COST + len(blob), len(blob) // width * len(keys)), blob))
            freed -= PACKED_COST + len(blob)
    return out, freed


_lone: dict[tuple[str, ...], Entry] = {}


def lone_entry(keys: tuple[str, ...]) -> Entry:
    """The entry of a one-row record made from an id row: it costs its tuple, row and slot (the entry
    is shared, so the key strings are not charged again)."""
    entry = _lone.get(keys)
    if entry is None:
        entry = (keys, TUPLE_COST + 33 + row_struct(len(keys)).size + 16, len(keys))
        if len(_lone) < 10_000:
            _lone[keys] = entry
    return entry


def _runs_of(records: list[Record]) -> Iterator[tuple[Entry, list[bytes]]]:
    """As `blocks`, with one Python step per record and none per run when key sets alternate."""
    if not records:
        return
    entries = list(map(_entry_of, records))
    first = entries[0]
    if entries.count(first) == len(entries):
        yield first, list(map(_row_of, records))
        return
    start = 0
    for i in range(1, len(entries)):
        if entries[i] != entries[start]:
            yield entries[start], [records[j][1] for j in range(start, i)] if i - start > 1 else [records[start][1]]
            start = i
    yield entries[start], [records[j][1] for j in range(start, len(entries))]


def multi(record: Record) -> bool:
    return len(record[1]) > row_struct(len(record[0][0])).size


def blocks(records: list[Record]) -> Iterator[tuple[Entry, list[bytes]]]:
    """Runs of consecutive records with the same entry, in order: (entry, rows)."""
    if not records:
        return
    first = records[0][0]
    entries = list(map(_entry_of, records))
    if entries.count(first) == len(entries):
        yield first, list(map(_row_of, records))
        return
    for entry, group in groupby(records, key=itemgetter(0)):
        yield entry, [row for _, row in group]


def checked(entry: Entry, rows: list[bytes]) -> tuple[bytes, int]:
    """The joined rows with every non-finite value made NaN ("no value"), and how many there were
    (each is a dropped point). The common case costs two C-speed passes over the block's bytes."""
    blob = b"".join(rows)
    if maybe_finite(blob):
        return blob, 0
    layout = row_struct(len(entry[0]))
    skipped = 0
    out = []
    for step, unix, *values in layout.iter_unpack(blob):
        bad = [i for i, v in enumerate(values) if v - v != 0.0]
        if bad or unix - unix != 0.0:
            skipped += len(bad)
            for i in bad:
                values[i] = NAN
        out.append(layout.pack(step, unix if unix - unix == 0.0 else 0.0, *values))
    return b"".join(out), skipped


def maybe_finite(blob: bytes) -> bool:
    """True when no 8-byte word of `blob` can be a NaN or an infinity: a non-finite double's last byte
    is 0x7F or 0xFF. (Negative or huge steps, and doubles beyond 2**1021, look suspect too; callers
    then check value by value.)"""
    return not blob[7::8].translate(None, _NOT_HIGH)


def b64(blob: bytes) -> str:
    return binascii.b2a_base64(blob, newline=False).decode("ascii")


def b64_bytes(blob: bytes) -> bytes:
    return binascii.b2a_base64(blob, newline=False)


def from_b64(text: str | bytes, strict: bool = True) -> bytes:
    """Base64 back to bytes; `strict=False` (twice as fast) only for text this package wrote itself."""
    return binascii.a2b_base64(text, strict_mode=strict)


def split(entry: Entry, blob: bytes) -> list[Record]:
    """Joined rows back into one-row records under `entry`."""
    width = row_struct(len(entry[0])).size
    if len(blob) % width:
        raise ValueError(f"rows of {len(blob)} bytes are not whole rows of {width}")
    cuts = map(slice, range(0, len(blob), width), range(width, len(blob) + width, width))
    return list(zip(repeat(entry), map(blob.__getitem__, cuts)))  # C-level: no Python frame per record


def keys_json(keys: tuple[str, ...], cache: dict[tuple[str, ...], str]) -> str:
    encoded = cache.get(keys)
    if encoded is None:
        # lazy: json only when a new key set is first encoded
        import json

        encoded = json.dumps(list(keys), ensure_ascii=False)
        if len(cache) < 10_000:
            cache[keys] = encoded
    return encoded


def as_keys(value: object) -> tuple[str, ...] | None:
    """A decoded key list, or None when it is not a list of strings."""
    if not isinstance(value, list) or not all(isinstance(k, str) for k in value):
        return None
    return tuple(value)
