"""The collector loop: tail the declared files, hand their points to the SDK, remember offsets.

Exactly once across restarts: a file's offset is written to `<out>/.tuneplane/collector-state.json`
only after the SDK reports the points before it delivered (`flush`), so a restart re-reads at most
what was not confirmed, and the receiver's upsert on (run, key, step) stores it once. Memory stays
within the SDK's budget: at most `CHUNK` bytes of a file are read per step, and the loop waits for
delivery every `FLUSH_POINTS` points. One collector per out dir: a second one waits for the lock.
"""

from __future__ import annotations

import fcntl
import json
import os
import stat
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from tuneplane.collector import sources, tfevents
from tuneplane.collector.sources import Point, Source

STATE_DIR = ".tuneplane"
STATE_FILE = "collector-state.json"
LOCK_FILE = "collector.lock"
CHUNK = 256 * 1024
FLUSH_POINTS = 20_000


class Sink(Protocol):
    def send(self, points: list[Point]) -> None: ...

    def flush(self, timeout: float) -> bool: ...


@dataclass
class Tracked:
    offset: int = 0
    ino: int = 0
    dev: int = 0


@dataclass
class Collector:
    out_dir: str
    sink: Sink
    declared: list[Source]
    flush_timeout: float = 30.0
    files: dict[str, Tracked] = field(default_factory=dict)
    counts: dict[str, int] = field(default_factory=dict)
    collected: int = 0
    _unsaved: int = 0
    _lock_fd: int | None = None
    _delete: set[str] = field(default_factory=set)

    # ── state ─────────────────────────────────────────────────────────────────────────────────
    @property
    def state_path(self) -> str:
        return os.path.join(self.out_dir, STATE_DIR, STATE_FILE)

    def lock(self, timeout: float) -> bool:
        """Take the out dir's collector lock, waiting up to `timeout` seconds."""
        os.makedirs(os.path.join(self.out_dir, STATE_DIR), exist_ok=True)
        fd = os.open(os.path.join(self.out_dir, STATE_DIR, LOCK_FILE), os.O_RDWR | os.O_CREAT, 0o600)
        deadline = time.monotonic() + timeout
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                self._lock_fd = fd
                return True
            except OSError:
                if time.monotonic() >= deadline:
                    os.close(fd)
                    return False
                time.sleep(0.05)

    def unlock(self) -> None:
        if self._lock_fd is not None:
            os.close(self._lock_fd)
            self._lock_fd = None

    def load(self) -> None:
        try:
            with open(self.state_path, "rb") as handle:
                raw = json.loads(handle.read(4 * 1024 * 1024))
            for name, entry in dict(raw.get("files", {})).items():
                self.files[str(name)] = Tracked(int(entry["offset"]), int(entry.get("ino", 0)),
                                                int(entry.get("dev", 0)))
        except FileNotFoundError:
            return
        except (OSError, ValueError, TypeError, KeyError, AttributeError, RecursionError):
            self.counts["unreadable state file (starting over)"] = 1
            self.files.clear()

    def save(self) -> None:
        data = {"version": 1, "files": {name: {"offset": t.offset, "ino": t.ino, "dev": t.dev}
                                        for name, t in sorted(self.files.items())}}
        tmp = f"{self.state_path}.{os.getpid()}.tmp"
        with open(tmp, "w", encoding="utf-8") as handle:
            json.dump(data, handle, indent=0)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, self.state_path)

    # ── one pass ──────────────────────────────────────────────────────────────────────────────
    def all_sources(self) -> list[Source]:
        return [*self.declared, Source("unsent", STATE_DIR)]

    def pass_once(self) -> int:
        """Read everything new in every file; returns the points handed to the SDK."""
        sent = 0
        pending: dict[str, Tracked] = {}
        for source in self.all_sources():
            for relname, path in self._files(source):
                sent += self._drain_file(source, relname, path, pending)
        self._commit(pending)
        return sent

    def _files(self, source: Source) -> list[tuple[str, str]]:
        if source.format != "unsent":
            return list(sources.files_of(self.out_dir, source))
        folder = os.path.join(self.out_dir, STATE_DIR)
        try:
            names = sorted(n for n in os.listdir(folder)
                           if n.startswith(sources.UNSENT_GLOB) and n.endswith(".jsonl"))
        except OSError:
            return []
        return [(f"{STATE_DIR}/{n}", os.path.join(folder, n)) for n in names]

    def _drain_file(self, source: Source, relname: str, path: str, pending: dict[str, Tracked]) -> int:
        key = f"{source.format}:{relname}"
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
        except OSError:
            return 0
        sent = 0
        try:
            info = os.fstat(fd)
            tracked = self.files.get(key)
            if tracked is None or (tracked.ino, tracked.dev) != (info.st_ino, info.st_dev) \
                    or info.st_size < tracked.offset:
                tracked = Tracked(0, info.st_ino, info.st_dev)  # new, replaced or truncated: from the top
            if not stat.S_ISREG(info.st_mode):
                return 0
            while tracked.offset < info.st_size:
                os.lseek(fd, tracked.offset, os.SEEK_SET)
                data = os.read(fd, CHUNK)
                if not data:
                    break
                points, used = self._decode(source, relname, data, tracked.offset, fd)
                if used == 0:
                    break  # only an incomplete record or line: wait for the writer
                tracked = Tracked(tracked.offset + used, tracked.ino, tracked.dev)
                if points:
                    self.sink.send(points)
                    count = sum(len(values) for _, _, values in points)
                    sent += count
                    self._unsaved += count
                pending[key] = tracked
                if self._unsaved >= FLUSH_POINTS:
                    self._commit(pending)
        finally:
            os.close(fd)
        self.collected += sent
        if source.format == "unsent" and key in pending and pending[key].offset >= info.st_size:
            self._delete.add(key)  # delivered whole: removed once the SDK confirms
        return sent

    def _decode(self, source: Source, relname: str, data: bytes, offset: int, fd: int) -> tuple[list[Point], int]:
        if source.format == "tensorboard":
            records = tfevents.read_records(data)
            if records.offset == 0 and len(data) == CHUNK:
                records = self._big_record(fd, offset)
            if records.corrupt:
                self.counts["corrupt tensorboard record"] = self.counts.get("corrupt tensorboard record", 0) \
                    + records.corrupt
            return sources.tb_points(source, relname, records.payloads, self.counts), records.offset
        end = data.rfind(b"\n")
        if end < 0:
            if len(data) >= sources.MAX_LINE:  # a line longer than any metrics line: skip it whole
                self.counts["line too long"] = self.counts.get("line too long", 0) + 1
                return [], len(data)
            return [], 0
        points: list[Point] = []
        for line in data[:end].split(b"\n"):
            line = line.strip()
            if not line:
                continue
            if len(line) > sources.MAX_LINE:
                self.counts["line too long"] = self.counts.get("line too long", 0) + 1
            elif source.format == "unsent":
                points.extend(sources.unsent_points(line, self.counts))
            else:
                points.extend(sources.jsonl_points(source, line, self.counts))
        return points, end + 1

    def _big_record(self, fd: int, offset: int) -> tfevents.Records:
        """A single record larger than CHUNK (an image summary, say): read exactly it, within MAX_RECORD."""
        os.lseek(fd, offset, os.SEEK_SET)
        head = os.read(fd, 8)
        if len(head) < 8:
            return tfevents.Records([], 0, 0)
        length = int.from_bytes(head, "little")
        if length > tfevents.MAX_RECORD:
            return tfevents.read_records(head + os.read(fd, 4))
        os.lseek(fd, offset, os.SEEK_SET)
        return tfevents.read_records(os.read(fd, 12 + length + 4))

    def _commit(self, pending: dict[str, Tracked]) -> None:
        """Once the SDK confirms delivery, the offsets read so far are final."""
        if not pending and not self._unsaved:
            return
        if self._unsaved and not self.sink.flush(self.flush_timeout):
            self.counts["flush timed out (offsets kept for a retry)"] = \
                self.counts.get("flush timed out (offsets kept for a retry)", 0) + 1
            self.files.update(pending)  # do not read twice in this process; a restart re-reads
            pending.clear()
            return
        self.files.update(pending)
        for key in sorted(self._delete):
            self._remove_unsent(key)
            self.files.pop(key, None)
        self._delete.clear()
        pending.clear()
        self._unsaved = 0
        self.save()

    def _remove_unsent(self, key: str) -> None:
        relname = key.split(":", 1)[1]
        try:
            os.unlink(os.path.join(self.out_dir, relname))
        except OSError:
            pass


def follow(collector: Collector, interval: float, should_stop: Callable[[], bool],
           max_seconds: float | None = None) -> None:
    """Pass after pass until `should_stop()`, then one final pass (what the job wrote last)."""
    started = time.monotonic()
    while not should_stop():
        collector.pass_once()
        if max_seconds is not None and time.monotonic() - started > max_seconds:
            break
        end = time.monotonic() + interval
        while time.monotonic() < end and not should_stop():
            time.sleep(min(0.1, interval))
    collector.pass_once()


def describe(collector: Collector) -> dict[str, Any]:
    return {"collected_points": collector.collected, "files": len(collector.files), "skipped": collector.counts}
