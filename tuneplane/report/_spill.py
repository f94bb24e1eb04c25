"""The overflow file: records that do not fit the memory budget wait on disk, in order.

The sender appends (oldest records first) and reads from a committed offset, under the one lock. A
record is a JSON line `[step, unix_time, {key: value}]`. Once everything is delivered the file is
truncated so a long outage does not leave a large file behind. A write the disk refuses (full, over a
quota or a file-size limit) is cut back to the last whole line and the file stops taking records until
it empties; what it holds is still replayed. At close, undelivered records are renamed to
`report-unsent-*.jsonl`, which the native collector (or the backend after the job) uploads.
"""

from __future__ import annotations

import errno
import json
import os
import threading
from typing import Any

from tuneplane.report._config import record_cost

Record = tuple[int, float, dict[str, float]]


class Spill:
    """An append-only JSON-lines queue on disk with a read cursor."""

    def __init__(self, path: str, limit_bytes: int) -> None:
        self.path = path
        self.limit = limit_bytes
        self.lock = threading.RLock()  # the session holds it around append during overflow
        self._size = 0
        self._offset = 0
        self._records = 0
        self.points = 0  # points written and not yet committed
        self.closed = False
        self.full = False  # the disk refused a write; no appends until the file empties
        self.refusal = ""  # the drop reason while full: "disk full", or why the file cannot be written
        self.error = ""
        self._file: Any = None
        self._keys: dict[str, str] = {}

    def _open(self) -> Any:
        if self._file is None:
            os.makedirs(os.path.dirname(self.path), exist_ok=True)
            self._file = open(self.path, "w+b")  # kept open for the session
        return self._file

    @property
    def pending(self) -> int:
        """Records written but not yet handed to the sender."""
        return self._records

    def append(self, records: list[Record]) -> int:
        """Write records in order; returns how many fit under the size limit (the rest are the caller's
        to drop). Written in chunks so the overflow path never holds a second copy of the budget."""
        with self.lock:
            if self.closed or self.full:
                return 0
            written = 0
            for start in range(0, len(records), 256):
                count = self._write(records[start:start + 256])
                written += count
                if count < len(records[start:start + 256]):
                    break
            return written

    def _write(self, records: list[Record]) -> int:
        lines: list[bytes] = []
        size = self._size
        points = 0
        for record in records:
            line = (json.dumps(record, separators=(",", ":")) + "\n").encode()
            if size + len(line) > self.limit:
                break
            lines.append(line)
            size += len(line)
            points += len(record[2])
        if lines:
            try:
                handle = self._open()
                handle.seek(self._size)
                handle.write(b"".join(lines))
                handle.flush()
            except OSError as exc:
                self._refused(exc)
                return 0
            self._size = size
            self._records += len(lines)
            self.points += points
        return len(lines)

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
                step, ts, values = json.loads(line)
                keys = self._keys  # one string per key, as in the memory queue, not one per record
                out.append((step, ts, {keys.setdefault(k, k): v for k, v in values.items()}))
                points += len(values)
                cost += record_cost(len(values))
            return out, offset

    def commit(self, offset: int, count: int, points: int) -> None:
        """The records before `offset` are delivered (or given up); reclaim space once all are."""
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
            if self._file is not None:
                try:
                    if remaining and self._offset:
                        self._compact()
                    self._file.close()
                except OSError:
                    pass
                self._file = None
            if not remaining:
                try:
                    os.unlink(self.path)
                except OSError:
                    pass
                return False
            unsent = os.path.join(os.path.dirname(self.path),
                                  os.path.basename(self.path).replace("report-spill-", "report-unsent-", 1))
            try:
                os.replace(self.path, unsent)
                self.path = unsent
            except OSError:
                pass
            return True

    def _compact(self) -> None:
        # Keep only the undelivered tail, so what is left on disk is exactly what was lost.
        self._file.seek(self._offset)
        tail = self._file.read(self._size - self._offset)
        self._file.seek(0)
        self._file.write(tail)
        self._file.truncate()
        self._file.flush()
        self._size, self._offset = len(tail), 0
