"""What the memory queue holds, and how the sender turns it into records (see `_rows`).

The queue holds two kinds of item, in the order they were logged:

* an id row, what a putter appends: bytes of `int64 id, int64 step, float64 unix time, float64 value
  per key`, little-endian, where `id` names the key set's entry in the session's `by_id` list. It is
  one object, not a tuple around one: nothing for the garbage collector to track, about 104 budget
  bytes for four values instead of 160 (`_config.record_cost`);
* a record `(entry, row)`: a key set past the cache's cap (see `_core.MAX_CACHED_KEYS`).

Every cached key set has an id (`Known`), so the lookup and slow paths queue id rows too.

A putter is `put(metrics, step) -> bool | None`, made for one key set: it checks the dict's size,
reads each value by key, packs the id row, queues it and charges its cost to the budget, all with
plain positional arguments (a star call over `dict.values()` costs more than the packing itself). It
returns None for "not this key set", else whether the budget's limit is passed; a missing key or a
value that is not a number raises before anything is queued. It is generated once per hot key set
with the keys bound as default arguments, so no user text ever becomes source code.

`unqueue` turns items into packed records (`_rows.packed`) with no Python frame per row in the common
case: a run of id rows of one width is joined, read as 64-bit words, and its id column is checked and
cut out by extended-slice operations on an `array`.
"""

from __future__ import annotations

import struct
import sys
from array import array
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, cast

from tuneplane.report._config import record_cost
from tuneplane.report._rows import LINE_BYTES, LINE_ROWS, PACKED_COST, Entry, Record, packed

if TYPE_CHECKING:
    from tuneplane.report._core import Session

Putter = Callable[[dict[str, object], int], "bool | None"]
# A cached key set: its entry, `pack(id, step, unix_time, *values)` for its id rows, its id (-1: a key
# set past the cache's cap, queued as records with `pack(step, unix_time, *values)`), and the budget
# bytes of one queued item.
Known = tuple[Entry, Callable[..., bytes], int, int]
PUTTER_KEYS = 64  # wider key sets keep the generic path
_BIG = sys.byteorder == "big"
_id_structs: dict[int, struct.Struct] = {}


def id_struct(points: int) -> struct.Struct:
    layout = _id_structs.get(points)
    if layout is None:
        layout = struct.Struct(f"<qqd{points}d")
        if len(_id_structs) < 1024:
            _id_structs[points] = layout
    return layout


def make_putter(
    entry: Entry, ident: int, append: Callable[[bytes], None], now: Callable[[], float], session: Session
) -> Putter:
    """The putter of `entry`'s key set, queueing id rows with `ident`. `session` has `added` and
    `limit` (see `tuneplane.report._core.Session`)."""
    keys = entry[0]
    names = [f"_k{i}" for i in range(len(keys))]
    source = (
        f"def put(m, step, _len=len, _pack=_pack, _now=_now, _append=_append, _s=_s, "
        f"{', '.join(f'{n}=_keys[{i}]' for i, n in enumerate(names))}):\n"
        f"    if _len(m) != {len(keys)}:\n        return None\n"
        f"    _append(_pack({int(ident)}, step, _now(), {', '.join(f'm[{n}]' for n in names)}))\n"
        f"    _s.added += {record_cost(len(keys))}\n"
        f"    return _s.added > _s.limit\n"
    )
    # `__name__`: warnings raised while packing (torch's about a tensor that requires grad) name this
    # module, which the session's warning filter covers
    scope: dict[str, object] = {
        "_pack": id_struct(len(keys)).pack,
        "_now": now,
        "_append": append,
        "_keys": keys,
        "_s": session,
        "__name__": __name__,
    }
    exec(source, scope)  # generated from identifiers and ints only: the keys are bound as values
    put = cast(Putter, scope["put"])  # the function `source` defines
    return put


def no_putter(metrics: dict[str, object], step: int) -> bool | None:
    return None


Item = Record | bytes  # what the memory queue holds


def _runs(lens: list[int]) -> list[tuple[int, int]]:
    """(start, end) of the runs of items of one length (a record's is 2; an id row's is its width)."""
    if lens.count(lens[0]) == len(lens):
        return [(0, len(lens))]
    runs, start = [], 0
    for i in range(1, len(lens)):  # a Python step per item only when kinds or widths mix
        if lens[i] != lens[start]:
            runs.append((start, i))
            start = i
    runs.append((start, len(lens)))
    return runs


def unqueue(items: list[Item], by_id: list[Entry], max_points: int) -> tuple[list[Record], int]:
    """Queue items as records, in order: runs of id rows of one key set packed into records of at most
    a line's rows and `max_points` points at C speed; anything else (records, key sets alternating
    call by call) made records one by one and packed as `_rows.packed` does. Returns the records and
    the budget bytes freed (what the items were charged, less what the records cost)."""
    out: list[Record] = []
    freed = 0
    if not items:
        return out, 0
    lens = list(map(len, items))
    runs = _runs(lens)
    if len(runs) * _FAST_ROWS > len(items):  # mostly short runs (key sets alternating): item by item
        return packed([_record(item, by_id) for item in items], max_points)
    loose: list[Record] = []  # records in order, waiting to be packed before the next fast run
    for start, end in runs:
        width = lens[start]
        if width == 2:  # (entry, row) records
            loose += items[start:end]  # type: ignore[arg-type]
            continue
        keys_n = width // 8 - 3
        per = max(1, min(LINE_ROWS, LINE_BYTES // (width - 8), max_points // max(1, keys_n)))
        for first in range(start, end, per):  # a line's rows at a time: small transient copies
            part: list[bytes] = items[first : min(end, first + per)]  # type: ignore[assignment]
            got = _id_rows(part, width, by_id) if len(part) >= _FAST_ROWS else None
            if got is None:
                loose += [(by_id[_ident(row)[0]], row[8:]) for row in part]
                continue
            if loose:
                records, gain = packed(loose, max_points)
                out += records
                freed += gain
                loose = []
            out.append(got[0])
            freed += got[1]
    if loose:
        records, gain = packed(loose, max_points)
        out += records
        freed += gain
    return out, freed


_FAST_ROWS = 8  # fewer id rows than this in a run are cheaper made records one by one
_ident = struct.Struct("<q").unpack_from


def _record(item: Item, by_id: list[Entry]) -> Record:
    return (by_id[_ident(item)[0]], item[8:]) if isinstance(item, bytes) else item


def _id_rows(items: list[bytes], width: int, by_id: list[Entry]) -> tuple[Record, int] | None:
    """Id rows of one width (at most a line's) as one record, and the budget it frees: joined, read as
    64-bit words, the id column checked and cut out with extended slices. None when the rows name
    more than one key set."""
    words = array("q")
    words.frombytes(b"".join(items))
    stride = width // 8
    ids = words[0::stride]
    if ids.count(ids[0]) != len(ids):
        return None
    if _BIG:
        ids.byteswap()
    keys = by_id[ids[0]][0]
    del words[0::stride]  # the id column
    rows = words.tobytes()
    return (
        ((keys, PACKED_COST + len(rows), len(items) * len(keys)), rows),
        len(items) * record_cost(len(keys)) - PACKED_COST - len(rows),
    )


def queued_points(items: Iterable[Item]) -> int:
    """Points in queue items: 64-bit words less three a row for an id row, the entry's for a record."""
    items = list(items)
    if not items:
        return 0
    lens = list(map(len, items))
    records = lens.count(2)
    if not records:
        return sum(lens) // 8 - 3 * len(lens)
    points = 0
    for item in items:  # a Python step per item only when records are queued too
        points += len(item) // 8 - 3 if type(item) is bytes else item[0][2]  # type: ignore[index]
    return points


def item_of(item: Item, by_id: list[Entry]) -> tuple[Entry, int]:
    """The entry of one queue item and what it was charged."""
    if isinstance(item, bytes):
        entry = by_id[int.from_bytes(item[:8], "little", signed=True)]
        return entry, record_cost(len(entry[0]))
    return item[0], item[0][1]
