"""The order in which a TensorBoard source's event files are read, and what a restart's `purge_step`
drops from the files before it.

The receiver keeps one value per key and step, the last one it is sent, so a restarted writer's file
must be read after the earlier attempt's whatever the folders are named (`version_10/` sorts before
`version_9/`, transformers' `Dec01_…/` before `Nov30_…/`, a pid 1000 before 999): files go in the
order their writers opened them (the wall time of each file's first event; without one yet, the
unix time in its name). `SummaryWriter(purge_step=N)` starts its file with a `SessionLog` START at
step N, and TensorBoard then discards what the earlier files of that run logged at steps >= N: the
points of an earlier file of the same series from that step on are dropped, and counted. A series
spans a job's attempt folders (`version_9/`, `version_10/`), so this purges further than TensorBoard,
which purges within one run folder: on purpose, since the attempts are one series here.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Mapping
from typing import Protocol

from tuneplane.collector import sources, tfevents
from tuneplane.collector.sources import Source
from tuneplane.runtime.records import Record, field


class _Read(Protocol):
    offset: int
    told: bool  # read under its cut, or the late purge_step told (in the state: a restart tells nothing)


OPENING_BYTES = 4096  # a writer's first events (file version, session start) lie well within this
PURGED = "purged by a later purge_step"
PURGED_LATE = "purge_step after its points were sent"
_NAME_TIME = re.compile(r"tfevents\.(\d{1,12})")
SCAN_CHUNK = 256 * 1024  # a read of an earlier file's sent records, looking for a purged step
MAX_KNOWN = 200_000  # openings remembered; past that they are read again


class Order(Record):
    known: dict[tuple[str, int, int], tuple[float | None, int | None]] = field(default_factory=dict)
    cutoffs: dict[str, int] = field(default_factory=dict)  # relname → first step purged
    uncut: set[str] = field(default_factory=set)  # arranged by this process without a cutoff

    def arrange(
        self,
        source: Source,
        files: list[tuple[str, str]],
        read: Mapping[str, _Read] | None = None,
        tell: Callable[[str, str, str], None] | None = None,
    ) -> list[tuple[str, str]]:
        """`files` in the order their writers opened them; sets the purge cutoff of each. A file this
        process had read from (`read`, by `tensorboard:<relname>`) without a cutoff, when a later
        purge_step appears, is told once to `tell`: what it sent from that step on stays."""
        timed = []
        groups: dict[str, str] = {}  # folder → series folder (`tb_key` of no tag), once per folder
        for relname, path in files:
            opened, purge = self._opening(path)
            found = _NAME_TIME.search(os.path.basename(relname))
            when = opened if opened is not None else float(found.group(1)) if found else 0.0
            folder = os.path.dirname(relname)
            group = groups.get(folder)
            if group is None:
                group = groups[folder] = sources.tb_key(source, relname, "")
            timed.append((when, relname, path, purge, group))
        timed.sort(key=lambda item: (item[0], item[1]))
        later: dict[str, int] = {}  # series folder → lowest purge step of the files after
        for _, relname, path, purge, group in reversed(timed):
            cut = later.get(group)
            if cut is None:
                self.cutoffs.pop(relname, None)
                self.uncut.add(relname)
            else:
                done = read.get(f"tensorboard:{relname}") if read is not None else None
                newly = relname not in self.cutoffs  # a restart's first arrange: read what was sent
                if (
                    tell is not None
                    and done is not None
                    and done.offset > 0
                    and not done.told
                    and newly
                    and (relname in self.uncut or _sent_from(path, cut, done.offset))
                ):
                    tell(
                        PURGED_LATE,
                        relname,
                        f"a later file's purge_step {cut} came after this file's points were "
                        f"sent; those at steps >= {cut} stay on the chart until logged again",
                    )
                    done.told = True
                self.uncut.discard(relname)
                self.cutoffs[relname] = cut
            if purge is not None:
                later[group] = purge if cut is None else min(cut, purge)
        return [(relname, path) for _, relname, path, _, _ in timed]

    def _opening(self, path: str) -> tuple[float | None, int | None]:
        try:
            info = os.stat(path, follow_symlinks=False)
        except OSError:
            return None, None
        key = (path, info.st_ino, info.st_dev)  # an event file's name is never reused (time, pid, count)
        known = self.known.get(key)
        if known is not None:
            return known
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
        except OSError:
            return None, None
        try:
            head = os.pread(fd, OPENING_BYTES, 0)
        except OSError:
            return None, None
        finally:
            os.close(fd)
        opened, purge, settled = tfevents.opening(head)
        if (settled or len(head) == OPENING_BYTES) and len(self.known) < MAX_KNOWN:
            self.known[key] = (opened, purge)
        return opened, purge

    def keep(self, relname: str, points: list[sources.Point], counts: dict[str, int]) -> list[sources.Point]:
        """`points` of `relname` without those a later file's `purge_step` drops (counted)."""
        cut = self.cutoffs.get(relname)
        if cut is None:
            return points
        kept = [p for p in points if p[0] < cut]
        dropped = sum(len(p[2]) for p in points if p[0] >= cut)
        if dropped:
            counts[PURGED] = counts.get(PURGED, 0) + dropped
        return kept


def _sent_from(path: str, cut: int, offset: int) -> bool:
    """Whether the records of `path` before `offset` (what a collector before this one sent) hold a
    step >= `cut`: read once, when the file first gets that cutoff in this process."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return False
    try:
        position = 0
        while position < offset:
            records = tfevents.read_records(os.pread(fd, min(SCAN_CHUNK, offset - position), position))
            if records.offset == 0:
                return False  # a record larger than a read, or damage: cannot tell, say nothing
            for payload in records.payloads:
                if any(
                    n == 2 and w == 0 and isinstance(v, int) and tfevents.signed(v) >= cut
                    for n, w, v in tfevents.fields(payload)
                ):
                    return True
            position += records.offset
    except (OSError, tfevents.ProtoError):
        return False
    finally:
        os.close(fd)
    return False
