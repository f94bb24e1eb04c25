"""The overflow file: records that do not fit the memory budget wait on disk, in order.

The sender appends (oldest records first) and reads from a committed offset, under the one lock. Each
line is one block of records with the same keys, `{"keys": [...], "rows": "<base64>"}` (the rows are
`_rows`' packed rows, up to 256 a line), so spilling and reading back cost a join and a base64 pass
per block rather than JSON per record. Once everything is delivered the file is
truncated so a long outage does not leave a large file behind. A write the disk refuses (full, over a
quota or a file-size limit) is cut back to the last whole line and the file stops taking records until
it empties; what it holds is still replayed. At close, undelivered records are renamed to
`report-unsent-*.jsonl`, which the native collector (or the backend after the job) uploads.
"""

from __future__ import annotations

import errno
import json
import os
import re
import socket
import threading
from bisect import bisect_right
from collections.abc import Callable
from itertools import accumulate
from operator import itemgetter
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from io import BufferedRandom

from tuneplane.report._rows import LINE_BYTES, LINE_ROWS, Entry, Record, b64, blocks, from_b64, keys_json, row_struct

try:
    import fcntl
except ImportError:  # not POSIX: no lock, and the collector then leaves overflow files to finish()
    fcntl = None  # type: ignore[assignment]

WRITE_BYTES = 128 * 1024  # records are written in groups of about this much of their memory budget

_entry_of, _cost_of = itemgetter(0), itemgetter(1)


SPILL_NAME = re.compile(
    r"report-spill-(?:r|rank)\d{1,9}-(?P<pid>\d{1,10})-[0-9a-f]{1,32}"
    r"(?:-h(?P<host>[A-Za-z0-9._-]{1,64}))?\.jsonl"
)


def host_tag() -> str:
    """This machine's name as a spill file carries it: letters, digits, `.`, `_`, `-` (others `_`), 64 at most."""
    return re.sub(r"[^A-Za-z0-9._-]", "_", socket.gethostname() or "unknown")[:64] or "unknown"


def spill_name(rank: str, pid: int, session_id: str) -> str:
    """`report-spill-<rank>-<pid>-<session>-h<host>.jsonl`: the collector adopts a killed process's
    file only on the host it ran on (a lock taken on NFS or Lustre can be node-local) and only once
    that pid is gone (`owner_of`)."""
    return f"report-spill-{rank}-{pid}-{session_id}-h{host_tag()}.jsonl"


def owner_of(name: str) -> tuple[int, str] | None:
    """(pid, host) of a spill file's writer from its name; host '' for a name from before the host
    part; None for a name that is not a spill file's."""
    found = SPILL_NAME.fullmatch(name)
    return (int(found.group("pid")), found.group("host") or "") if found else None


def hold(fd: int) -> None:
    """Lock an overflow file for as long as this process (or a child it forks) keeps it open. Where
    the file system has no locks, the collector cannot take the lock either and leaves the file be."""
    if fcntl is not None:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            pass


def lines_of(records: list[Record], keys_cache: dict[tuple[str, ...], str]) -> list[tuple[bytes, int, int]]:
    """The overflow-file lines for `records`, in order: (line, records, points). Records written here
    come from memory: one row each, or packed by `_rows.packed` to at most a line's rows, which
    become a line each (what was read back from disk is never rewritten; a batch split on a 413 is
    split into one-row records first)."""
    out = []
    for entry, rows in blocks(records):
        per_line = max(1, min(LINE_ROWS, LINE_BYTES // row_struct(len(entry[0])).size))
        head = '{"keys":' + keys_json(entry[0], keys_cache) + ',"rows":"'
        if entry[2] != len(entry[0]):  # packed records: one line each, `entry[2]` points apiece
            out += [((head + b64(blob) + '"}\n').encode(), 1, entry[2]) for blob in rows]
            continue
        for start in range(0, len(rows), per_line):
            chunk = rows[start : start + per_line]
            out.append(((head + b64(b"".join(chunk)) + '"}\n').encode(), len(chunk), len(chunk) * entry[2]))
    return out


ROWS_MARK = b',"rows":"'


def parse_line(
    line: bytes, entry_of: Callable[[tuple[str, ...]], Entry], keys_cache: dict[bytes, tuple[str, ...]] | None = None
) -> Record:
    """One line back as one record of all its rows; ValueError when it is not a line this module
    wrote. The lines are ours, so the key list is cut out and parsed (once per key set) and the rows
    decoded directly, rather than running the JSON decoder over the long base64 text."""
    cut = line.find(ROWS_MARK)
    if line.startswith(b'{"keys":[') and cut > 0 and line.rstrip().endswith(b'"}') and keys_cache is not None:
        head = line[8:cut]
        keys = keys_cache.get(head)
        if keys is None:
            found = json.loads(head)
            if not isinstance(found, list) or not all(isinstance(k, str) for k in found):
                raise ValueError("not an overflow-file line")
            keys = tuple(found)
            if len(keys_cache) < 10_000:
                keys_cache[head] = keys
        return _record(entry_of(keys), from_b64(line[cut + len(ROWS_MARK) : line.rstrip().rfind(b'"')], strict=False))
    block = json.loads(line)
    keys = block["keys"] if isinstance(block, dict) else None
    if (
        not isinstance(keys, list)
        or not all(isinstance(k, str) for k in keys)
        or not isinstance(block.get("rows"), str)
    ):
        raise ValueError("not an overflow-file line")
    return _record(entry_of(tuple(keys)), from_b64(block["rows"]))


def _record(entry: Entry, blob: bytes) -> Record:
    """A line's rows as one record: its own entry carries their summed cost and points."""
    width = row_struct(len(entry[0])).size
    if len(blob) % width or not blob:
        raise ValueError(f"rows of {len(blob)} bytes are not whole rows of {width}")
    count = len(blob) // width
    return (entry if count == 1 else (entry[0], entry[1] * count, entry[2] * count)), blob


class Spill:
    """An append-only JSON-lines queue on disk with a read cursor."""

    def __init__(self, path: str, limit_bytes: int, entry_of: Callable[[tuple[str, ...]], Entry]) -> None:
        self.path = path
        self.entry_of = entry_of
        self.limit = limit_bytes
        self.lock = threading.RLock()  # the session holds it around append during overflow
        self._size = 0
        self._offset = 0
        self._records = 0  # lines written and not yet committed (each reads back as one record)
        self.points = 0  # points written and not yet committed
        self.closed = False
        self.full = False  # the disk refused a write; no appends until the file empties
        self.refusal = ""  # the drop reason while full: "disk full", or why the file cannot be written
        self.error = ""
        self._file: BufferedRandom | None = None
        self._keys: dict[tuple[str, ...], str] = {}
        self._read_keys: dict[bytes, tuple[str, ...]] = {}

    def _open(self) -> BufferedRandom:
        if self._file is None:
            try:  # its parent was there when the session began: one gone since is storage out of sight
                os.mkdir(os.path.dirname(self.path))  # (a mount missing), not a tree to lay beneath it
            except FileExistsError:
                pass
            # Locked before it takes its name: the collector uploads a `report-spill-*` file (what a
            # killed process left) only once it can lock it, so never one a live process writes.
            temp = self.path + ".new"
            handle = open(temp, "w+b")  # kept open (and locked) for the session
            try:
                hold(handle.fileno())
                os.replace(temp, self.path)
            except OSError:
                handle.close()
                raise
            self._file = handle
            return handle
        return self._file

    @property
    def pending(self) -> int:
        """Records written but not yet handed to the sender."""
        return self._records

    def append(self, records: list[Record]) -> int:
        """Write records in order; returns how many fit under the size limit (the rest are the caller's
        to drop). Written in groups so the overflow path never holds a second copy of the budget."""
        with self.lock:
            if self.closed or self.full:
                return 0
            written = 0
            # Groups of about WRITE_BYTES of budget (one-row or packed records alike), cut at C speed.
            ends = list(accumulate(map(_cost_of, map(_entry_of, records))))
            start = 0
            while start < len(records):
                base = ends[start - 1] if start else 0
                stop = max(start + 1, bisect_right(ends, base + WRITE_BYTES, start))
                part = records[start:stop]
                count = self._write(lines_of(part, self._keys))
                written += count
                if count < len(part):
                    break
                start = stop
            return written

    def _write(self, lines: list[tuple[bytes, int, int]]) -> int:
        """Write whole lines while they fit under the limit; returns the records written."""
        group: list[bytes] = []
        size = self._size
        records = points = 0
        for line, count, line_points in lines:
            if size + len(line) > self.limit:
                break
            group.append(line)
            size += len(line)
            records += count
            points += line_points
        if group:
            try:
                handle = self._open()
                handle.seek(self._size)
                handle.write(b"".join(group))
                handle.flush()
            except OSError as exc:
                self._refused(exc)
                return 0
            self._size = size
            self._records += len(group)  # read back as one record a line
            self.points += points
        return records

    def _refused(self, exc: OSError) -> None:
        """Cut a partial write back to the last whole line; stop appending until the file empties."""
        self.full = True
        self.error = exc.strerror or str(exc)
        full = exc.errno in (errno.ENOSPC, errno.EFBIG, getattr(errno, "EDQUOT", errno.ENOSPC))
        self.refusal = "disk full" if full else "overflow file not writable"
        if self._file is not None:
            try:
                self._file.seek(0, os.SEEK_END)  # drop what the buffered writer still holds
            except (OSError, ValueError):
                pass
            try:
                os.ftruncate(self._file.fileno(), self._size)
            except (OSError, ValueError):
                pass

    def read(self, max_points: int, max_cost: int) -> tuple[list[Record], int]:
        """The next records (at least one; up to about `max_points` points or `max_cost` estimated
        bytes, the memory queue's measure) and the offset after them."""
        with self.lock:
            if not self._records or self.closed:
                return [], self._offset
            handle = self._open()
            handle.seek(self._offset)
            out: list[Record] = []
            points = cost = 0
            offset = self._offset
            while points < max_points and cost < max_cost and offset < self._size:
                line = handle.readline()
                if not line:
                    break
                offset += len(line)
                record = parse_line(line, self.entry_of, self._read_keys)
                out.append(record)
                points += record[0][2]
                cost += record[0][1]
            return out, offset

    def commit(self, offset: int, count: int, points: int) -> None:
        """The records (lines) before `offset` are delivered (or given up); reclaim space once all are."""
        with self.lock:
            if self.closed:
                return
            self._offset = offset
            self._records = max(0, self._records - count)
            self.points = max(0, self.points - points)
            if self._records == 0 and self._file is not None:
                try:
                    self._file.seek(0)
                    self._file.truncate()
                except OSError:
                    pass
                self._size = self._offset = 0
                self.full = False  # room again: try the disk once more

    def close(self) -> bool:
        """Close; remove the file when nothing is left in it. Returns True when records remain."""
        with self.lock:
            self.closed = True
            remaining = self._records > 0
            # Renamed or removed while still open and locked, so no collector takes it meanwhile.
            if not remaining:
                try:
                    os.unlink(self.path)
                except OSError:
                    pass
            else:
                if self._file is not None and self._offset:
                    try:
                        self._compact()
                    except OSError:
                        pass
                unsent = os.path.join(
                    os.path.dirname(self.path),
                    os.path.basename(self.path).replace("report-spill-", "report-unsent-", 1),
                )
                try:
                    os.replace(self.path, unsent)
                    self.path = unsent
                except OSError:
                    pass
            if self._file is not None:
                try:
                    self._file.close()
                except OSError:
                    pass
                self._file = None
            return remaining

    def _compact(self) -> None:
        # Keep only the undelivered tail, so what is left on disk is exactly what was lost.
        file = self._file
        if file is None:  # the caller checked: nothing was ever written
            return
        file.seek(self._offset)
        tail = file.read(self._size - self._offset)
        file.seek(0)
        file.write(tail)
        file.truncate()
        file.flush()
        self._size, self._offset = len(tail), 0
