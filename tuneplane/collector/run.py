"""The collector loop: tail the declared files, hand their points to the SDK, remember offsets.

Exactly once across restarts: a file's offset is written to `<out>/.tuneplane/collector-state.json`
only after the SDK reports the points before it delivered (`flush`), so a restart re-reads at most
what was not confirmed, and the receiver's upsert on (run, key, step) stores it once. A remembered
offset is trusted only for the same file: same inode, the same first bytes (a CRC of up to `HEAD`
bytes), and a record or line boundary at the offset; otherwise the file is read from the top, which
re-sends and so never loses a point. Bad lines and damaged records are named by file and line (or
byte) on stderr, at most `PROBLEMS` of them. Memory stays
within the SDK's budget: at most `CHUNK` bytes of a file are read per step, and the loop waits for
delivery every `FLUSH_POINTS` points. One collector per out dir: a second one waits for the lock.
"""

from __future__ import annotations

import binascii
import fcntl
import os
import stat
import time
from collections.abc import Callable
from typing import Protocol

from tuneplane.collector import sources, state, tfevents
from tuneplane.collector.order import Order
from tuneplane.collector.sources import Point, Source
from tuneplane.runtime.records import Record, field

STATE_DIR = ".tuneplane"
STATE_FILE = "collector-state.json"
LOCK_FILE = "collector.lock"
CHUNK = 256 * 1024
FLUSH_POINTS = 20_000
HEAD = 4096  # bytes of a file's start whose CRC tells it apart from another file with the same inode
PROBLEMS = 20
UNSAVED = "state file cannot be written"
SPILL_PREFIX = "report-spill-"  # tuneplane.report's overflow file while its process lives


class Sink(Protocol):
    def send(self, points: list[Point]) -> None: ...

    def flush(self, timeout: float) -> bool: ...


class Tracked(Record):
    """Where reading one file got to. One per file read (100,000 files): `__slots__` and its own `__init__`."""

    __slots__ = ("offset", "ino", "dev", "line", "head", "head_len", "tail", "told")
    _fields = __slots__

    def __init__(
        self,
        offset: int = 0,
        ino: int = 0,
        dev: int = 0,
        line: int = 0,  # lines before `offset` (line formats), for file:line messages
        head: int = 0,  # CRC-32 of the file's first `head_len` bytes
        head_len: int = 0,
        tail: bool = False,  # a last line without its newline was taken (final pass): skip that newline
        told: bool = False,  # read under a later purge_step's cut, or told that it came after the points went
    ) -> None:
        self.offset = offset
        self.ino = ino
        self.dev = dev
        self.line = line
        self.head = head
        self.head_len = head_len
        self.tail = tail
        self.told = told

    def to_json(self) -> dict[str, object]:
        flags = {name: True for name in ("tail", "told") if getattr(self, name)}
        return {
            "offset": self.offset,
            "ino": self.ino,
            "dev": self.dev,
            "line": self.line,
            "head": self.head,
            "head_len": self.head_len,
            **flags,
        }


def _tracked_of(entry: object) -> Tracked | None:
    """A state entry, or None when any field is not what `save` writes (then: from the top)."""
    if not isinstance(entry, dict) or "offset" not in entry or "ino" not in entry:
        return None
    values = [entry.get(name, 0) for name in ("offset", "ino", "dev", "line", "head", "head_len")]
    if not all(type(v) is int and v >= 0 for v in values) or values[5] > HEAD:
        return None
    offset, ino, dev, line, head, head_len = values
    return Tracked(offset, ino, dev, line, head, head_len, entry.get("tail") is True, entry.get("told") is True)


class Collector(Record):
    out_dir: str
    sink: Sink
    declared: list[Source]
    flush_timeout: float = 30.0
    files: dict[str, Tracked] = field(default_factory=dict)
    counts: dict[str, int] = field(default_factory=dict)
    collected: int = 0
    _unsaved: int = 0
    problems: list[str] = field(default_factory=list)
    final: bool = False  # the job is over: a last line without a newline is complete
    _lock_fd: int | None = None
    _delete: set[str] = field(default_factory=set)
    order: Order = field(default_factory=Order)  # event files by when opened, and purge_step cutoffs
    _scanned: dict[tuple[str, int, int, int], int] = field(default_factory=dict)  # a line's end searched up to
    _refused: set[str] = field(default_factory=set)  # told once
    _damaged: dict[str, list[int]] = field(default_factory=dict)  # this read: [records, from byte, to byte]

    # ── state ─────────────────────────────────────────────────────────────────────────────────
    @property
    def state_path(self) -> str:
        return os.path.join(self.out_dir, STATE_DIR, STATE_FILE)

    def lock(self, timeout: float, should_stop: Callable[[], bool] | None = None) -> bool:
        """Take the out dir's collector lock, waiting up to `timeout` seconds, or until `should_stop()`
        (asked to stop while another collector holds it: that one makes the last pass)."""
        os.makedirs(os.path.join(self.out_dir, STATE_DIR), exist_ok=True)
        fd = os.open(os.path.join(self.out_dir, STATE_DIR, LOCK_FILE), os.O_RDWR | os.O_CREAT, 0o600)
        deadline = time.monotonic() + timeout
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                self._lock_fd = fd
                return True
            except OSError:
                if time.monotonic() >= deadline or (should_stop is not None and should_stop()):
                    os.close(fd)
                    return False
                time.sleep(0.05)

    def unlock(self) -> None:
        if self._lock_fd is not None:
            os.close(self._lock_fd)
            self._lock_fd = None

    def load(self) -> None:
        try:
            entries = state.read(self.state_path)
        except state.Unreadable as exc:
            self.count(
                "unreadable state file (starting over)",
                f"{STATE_DIR}/{STATE_FILE}",
                f"not used ({exc}); every file is read from the top, and stored once",
            )
            return
        for name, entry in (entries or {}).items():
            tracked = _tracked_of(entry)
            if tracked is None:
                self.count("bad state entry (file read from the top)")
            elif not state.gone(os.path.join(self.out_dir, str(name).partition(":")[2])):
                self.files[str(name)] = tracked
        if len(self.files) < len(entries or {}):
            self.save()  # gone files' entries leave first: a state of rotated-away files is not saved whole

    def save(self) -> None:
        why = state.write(self.state_path, {name: t.to_json() for name, t in sorted(self.files.items())})
        if why and not self.counts.get(UNSAVED):
            self.count(
                UNSAVED,
                f"{STATE_DIR}/{STATE_FILE}",
                f"cannot be written ({why}); remove what is "
                "there: without it a restarted collector reads every file again",
            )

    def count(self, why: str, where: str = "", detail: str = "") -> None:
        self.counts[why] = self.counts.get(why, 0) + 1
        if where and len(self.problems) < PROBLEMS:
            self.problems.append(f"{where}: {detail or why}")

    # ── one pass ──────────────────────────────────────────────────────────────────────────────
    def all_sources(self) -> list[Source]:
        return [*self.declared, Source("unsent", STATE_DIR)]

    def pass_once(self) -> int:
        """Read everything new in every file; returns the points handed to the SDK."""
        sent = 0
        pending: dict[str, Tracked] = {}
        listed: set[str] = set()
        for source in self.all_sources():
            for relname, path in self._files(source):
                listed.add(f"{source.format}:{relname}")
                sent += self._drain_file(source, relname, path, pending)
        self._commit(pending)
        self._forget_gone(listed)
        return sent

    def _forget_gone(self, listed: set[str]) -> None:
        """Offsets of files that are gone (rotated away, removed) leave the state: it is rewritten
        at every commit, and a long job's rotated files would make that ever slower. A file that comes
        back is read from the top, which the receiver's upsert stores once. Only a file that is really
        gone is forgotten: a listing that failed for a moment (a network file system) leaves out files
        that are still there, and forgetting them would read them all again from the top."""
        gone = [
            key
            for key in self.files
            if key not in listed and state.gone(os.path.join(self.out_dir, key.partition(":")[2]))
        ]
        if gone:
            for key in gone:
                del self.files[key]
            self.save()

    def _files(self, source: Source) -> list[tuple[str, str]]:
        if source.format == "tensorboard":
            return self.order.arrange(
                source, list(sources.files_of(self.out_dir, source, self.refused)), self.files, self.count
            )
        if source.format != "unsent":
            return list(sources.files_of(self.out_dir, source))
        folder = os.path.join(self.out_dir, STATE_DIR)
        adopt_orphans(folder)
        try:
            names = sorted(n for n in os.listdir(folder) if n.startswith(sources.UNSENT_GLOB) and n.endswith(".jsonl"))
        except OSError:
            return []
        return [(f"{STATE_DIR}/{n}", os.path.join(folder, n)) for n in names]

    def _drain_file(self, source: Source, relname: str, path: str, pending: dict[str, Tracked]) -> int:
        key = f"{source.format}:{relname}"
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
        except FileNotFoundError:
            return 0  # gone since it was listed (rotated away)
        except OSError as exc:
            self.refused(exc, relname)
            return 0
        sent = 0
        try:
            info = os.fstat(fd)
            if not stat.S_ISREG(info.st_mode):
                return 0
            tracked = self._resume(source, relname, fd, info, self.files.get(key))
            while tracked.offset < info.st_size:
                data = os.pread(fd, CHUNK, tracked.offset)
                if not data:
                    break
                if len(data) == CHUNK and tfevents.zeros_end(data, 0) == CHUNK:  # a hole's start?
                    tracked, data = self._over_hole(fd, relname, tracked, info.st_size, data)
                    pending[key] = tracked
                points, moved = self._decode(source, relname, data, tracked, fd, info.st_size)
                if moved == tracked:
                    break  # only an incomplete record or line: wait for the writer
                tracked = _with_head(fd, moved)
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
            self._tell_damage()
        self.collected += sent
        if source.format == "unsent" and key in pending and pending[key].offset >= info.st_size:
            self._delete.add(key)  # delivered whole: removed once the SDK confirms
        return sent

    def _over_hole(self, fd: int, relname: str, tracked: Tracked, size: int, data: bytes) -> tuple[Tracked, bytes]:
        """A read of zeros: where the file system tells a hole (a sparse file) after it, go on one read
        before the data past it (one damaged stretch, as read through), not through it a read at a time."""
        after = sources.next_data(fd, tracked.offset + CHUNK, size)
        if after - CHUNK <= tracked.offset:
            return tracked, data
        self._damaged.setdefault(relname, [0, tracked.offset, 0])[2] = after - CHUNK
        tracked = _with_head(fd, tracked.replace(offset=after - CHUNK))
        return tracked, os.pread(fd, CHUNK, tracked.offset)

    def refused(self, exc: OSError, relname: str = "") -> None:
        """A file or folder the collector may not read: named once, with the reason."""
        where = relname or os.path.relpath(str(exc.filename), os.path.realpath(self.out_dir))
        if where not in self._refused and len(self._refused) < PROBLEMS:
            self._refused.add(where)
            self.count(
                "unreadable file or folder",
                where,
                f"cannot be read ({exc.strerror or type(exc).__name__}); let the job's user read it",
            )

    def _tell_damage(self) -> None:
        """One line per file and read for its damaged records, however many (a zeroed or sparse
        stretch is one damaged stretch, not a line per read)."""
        for relname, (_, start, end) in self._damaged.items():
            if len(self.problems) < PROBLEMS:
                self.problems.append(
                    f"{relname}: damaged records, framing or zero bytes between byte {start} "
                    f"and {end} skipped (what follows is read)"
                )
        self._damaged.clear()

    def _resume(self, source: Source, relname: str, fd: int, info: os.stat_result, tracked: Tracked | None) -> Tracked:
        """Where to go on reading: the remembered offset when it is this file's, else the top."""
        fresh = Tracked(0, info.st_ino, info.st_dev)
        if tracked is None or (tracked.ino, tracked.dev) != (info.st_ino, info.st_dev) or info.st_size < tracked.offset:
            return fresh  # new, replaced or truncated
        if tracked.offset == 0:
            return tracked
        if tracked.head_len and binascii.crc32(os.pread(fd, tracked.head_len, 0)) != tracked.head:
            self.count("remembered offset of another file (read from the top)", relname)
            return fresh
        if source.format == "tensorboard":
            near = os.pread(fd, tfevents.HEADER_BYTES, tracked.offset)
            good = len(near) < tfevents.HEADER_BYTES or tfevents.header_ok(near, 0)
        else:
            good = os.pread(fd, 1, tracked.offset - 1) in (b"\n", b"\0") or tracked.tail  # after a line or zeros
        if not good:
            self.count("remembered offset is not a record boundary (read from the top)", relname)
            return fresh
        return tracked

    def _decode(
        self, source: Source, relname: str, data: bytes, tracked: Tracked, fd: int, size: int
    ) -> tuple[list[Point], Tracked]:
        """The points of `data` (read at `tracked.offset`) and where reading stands after them; an
        unchanged `tracked` means only an incomplete record or line is left."""
        if source.format == "tensorboard":
            records = tfevents.read_records(data)
            if records.offset == 0 and len(data) == CHUNK:
                records = self._big_record(fd, tracked.offset)
            if records.corrupt:
                self.counts["corrupt tensorboard record"] = (
                    self.counts.get("corrupt tensorboard record", 0) + records.corrupt
                )
                seen = self._damaged.setdefault(relname, [0, tracked.offset, 0])
                seen[0] += records.corrupt
                seen[2] = tracked.offset + max(records.offset, 1)
            if records.offset == 0:
                return [], tracked
            moved = tracked.replace(
                offset=tracked.offset + records.offset, told=tracked.told or relname in self.order.cutoffs
            )
            points = sources.tb_points(source, relname, records.payloads, self.counts)
            return self.order.keep(relname, points, self.counts), moved
        return self._lines(source, relname, data, tracked, fd, size)

    def _lines(
        self, source: Source, relname: str, data: bytes, tracked: Tracked, fd: int, size: int
    ) -> tuple[list[Point], Tracked]:
        if tracked.tail and data.startswith(b"\n"):  # the newline of a last line already taken whole
            tracked = tracked.replace(offset=tracked.offset + 1, tail=False)
            data = data[1:]
            if not data:
                return [], tracked
        if data[:1] == b"\0":  # a hole (copytruncate under a writer not appending) or a crash's zero fill
            zeros = tfevents.zeros_end(data, 0)
            if zeros == len(data) and (tracked.offset + zeros == size and not self.final):
                return [], tracked  # zeros up to the end: wait for what is written after them
            seen = self._damaged.setdefault(relname, [0, tracked.offset, 0])
            seen[2] = tracked.offset + zeros
            return [], tracked.replace(offset=tracked.offset + zeros)
        end = data.rfind(b"\n")
        if end < 0:
            return self._long_line(source, relname, tracked, fd, size, len(data))
        points: list[Point] = []
        number = tracked.line
        for line in data[:end].split(b"\n"):
            number += 1
            self._line(source, line, f"{relname}:{number}", points)
        used = end + 1
        if self.final and tracked.offset + len(data) == size and data[used:].strip():
            number += 1  # the job is over: its last line is complete without a newline
            self._line(source, data[used:], f"{relname}:{number}", points)
            return points, tracked.replace(offset=size, line=number, tail=True)
        return points, tracked.replace(offset=tracked.offset + used, line=number)

    def _line(self, source: Source, line: bytes, where: str, points: list[Point]) -> None:
        line = line.strip()
        if not line:
            return
        if len(line) > sources.MAX_LINE:
            self.count("line too long", where, f"a line over {sources.MAX_LINE // 1024} KiB, skipped")
        elif source.format == "unsent":
            suffix = sources.unsent_suffix(where.rsplit(":", 1)[0])
            points.extend(sources.unsent_points(line, self.counts, self._noter(where), suffix))
        else:
            points.extend(sources.jsonl_points(source, line, self.counts, self._noter(where)))

    def _noter(self, where: str) -> Callable[[str], None]:
        def note(detail: str) -> None:
            if len(self.problems) < PROBLEMS:
                self.problems.append(f"{where}: {detail}")

        return note

    def _long_line(
        self, source: Source, relname: str, tracked: Tracked, fd: int, size: int, have: int
    ) -> tuple[list[Point], Tracked]:
        """A line longer than one read: find its end a chunk at a time (memory stays one chunk), then
        read it whole when it is within `MAX_LINE`, or step over it."""
        start = tracked.offset
        where = (relname, tracked.ino, tracked.dev, start)
        searched = self._scanned.pop(where, 0)  # how far an earlier pass searched this line
        position = max(start + have, searched if searched <= size else 0)
        while position < size:
            found = os.pread(fd, CHUNK, position).find(b"\n")
            if found >= 0:
                end = position + found
                break
            position = min(position + CHUNK, size)
        else:
            if not self.final or size == start:
                if len(self._scanned) < PROBLEMS:
                    self._scanned[where] = position  # the next pass searches only what is new
                return [], tracked  # still being written
            end = size
        number = tracked.line + 1
        points: list[Point] = []
        if end - start <= sources.MAX_LINE:
            self._line(source, os.pread(fd, end - start, start), f"{relname}:{number}", points)
        else:
            self.count(
                "line too long",
                f"{relname}:{number}",
                f"a line of {end - start} bytes (over {sources.MAX_LINE // 1024} KiB), skipped",
            )
        return points, tracked.replace(offset=min(end + 1, size), line=number, tail=end == size)

    def _big_record(self, fd: int, offset: int) -> tfevents.Records:
        """A single record larger than CHUNK (an image summary, say): read exactly it, within MAX_RECORD."""
        head = os.pread(fd, tfevents.HEADER_BYTES, offset)
        if not tfevents.header_ok(head, 0):
            return tfevents.read_records(os.pread(fd, CHUNK, offset))
        length = int.from_bytes(head[:8], "little")
        return tfevents.read_records(os.pread(fd, tfevents.HEADER_BYTES + length + 4, offset))

    def _commit(self, pending: dict[str, Tracked]) -> None:
        """Once the SDK confirms delivery, the offsets read so far are final."""
        if not pending and not self._unsaved:
            return
        if self._unsaved and not self.sink.flush(self.flush_timeout):
            self.counts["flush timed out (offsets kept for a retry)"] = (
                self.counts.get("flush timed out (offsets kept for a retry)", 0) + 1
            )
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


def adopt_orphans(folder: str) -> None:
    """The overflow files (`report-spill-*`) of processes that were killed, which never renamed them
    `report-unsent-*`, become unsent files: a file is a killed process's when it was written on this
    host, its pid is gone, and its lock can be taken (`tuneplane.report._spill.hold`; a live writer,
    or a child it forked, holds it). A lock alone is not enough: on NFS (`nolock`, `local_lock`) and
    Lustre (`localflock`) it is node-local, so another node's live file looks free. A file named
    before the host part (an older SDK) is adopted by its lock alone, as that SDK's collector did.
    Lines it had delivered are sent again, which the receiver's upsert on (run, key, step) stores once."""
    # lazy: the report package's naming rule, loaded only when there are spill files to look at
    from tuneplane.report._spill import host_tag, owner_of

    try:
        names = sorted(n for n in os.listdir(folder) if n.startswith(SPILL_PREFIX) and n.endswith(".jsonl"))
    except OSError:
        return
    here = host_tag() if names else ""
    for name in names:
        owner = owner_of(name)
        if owner is not None and owner[1] and (owner[1] != here or _alive(owner[0])):
            continue  # another host's (its lock here proves nothing), or its writer's pid lives
        path = os.path.join(folder, name)
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
        except OSError:
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            if stat.S_ISREG(os.fstat(fd).st_mode):
                os.replace(path, os.path.join(folder, sources.UNSENT_GLOB + name[len(SPILL_PREFIX) :]))
        except OSError:
            pass  # held: its writer lives
        finally:
            os.close(fd)


def _alive(pid: int) -> bool:
    """Whether a process `pid` exists on this host (one of another user's included)."""
    if pid <= 0:
        return True  # not a pid a writer had: take no chance
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # EPERM: it exists
        return True
    return True


def follow(
    collector: Collector, interval: float, should_stop: Callable[[], bool], max_seconds: float | None = None
) -> None:
    """Pass after pass until `should_stop()`, then one final pass (what the job wrote last, a last
    line without its newline included)."""
    started = time.monotonic()
    while not should_stop():
        collector.pass_once()
        if max_seconds is not None and time.monotonic() - started > max_seconds:
            break
        end = time.monotonic() + interval
        while time.monotonic() < end and not should_stop():
            time.sleep(min(0.1, interval))
    collector.final = True  # the job is gone: what it wrote last is all there will be
    collector.pass_once()


def describe(collector: Collector) -> dict[str, object]:
    return {
        "collected_points": collector.collected,
        "files": len(collector.files),
        "skipped": collector.counts,
        "problems": collector.problems,
    }


def _with_head(fd: int, tracked: Tracked) -> Tracked:
    """`tracked` with the CRC of the file's first bytes, up to `HEAD` and never past its offset."""
    length = min(tracked.offset, HEAD)
    if length <= tracked.head_len:
        return tracked
    head = os.pread(fd, length, 0)
    return tracked.replace(head=binascii.crc32(head), head_len=len(head))
