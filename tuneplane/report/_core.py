"""One reporting session in one process: the memory queue, its byte budget, overflow, counters, shutdown.

The hot path of `log()` (in `tuneplane.report`) appends a compact record `(entry, row)` (see `_rows`)
to `queue` and adds the entry's memory estimate to `added`; when `added` passes `limit` it calls
`overflow()`, which has the sender pack the queue into records of many rows (`packed`, about a third
of the memory) and only when that is not enough move it to disk. The sender releases budget as batches
settle. Counters are each written by one thread so no lock is needed on the hot path; points are
counted as "logged" when the sender takes them off the queue (and while they are in it or packed), so
`log()` keeps no counter of its own.
"""

from __future__ import annotations

import os
import struct
import sys
import threading
import time
from collections import deque
from typing import TYPE_CHECKING, TypedDict

from tuneplane.report._config import MAX_RECORD_KEYS, SPILL_DIR, Config
from tuneplane.report._queued import (
    PUTTER_KEYS,
    Item,
    Known,
    Putter,
    id_struct,
    item_of,
    make_putter,
    no_putter,
    queued_points,
    unqueue,
)
from tuneplane.report._rows import Entry, Record, cost_of, make_entry, points_of, take
from tuneplane.report._spill import Spill, spill_name
from tuneplane.report._values import hparams_payload, to_record

if TYPE_CHECKING:  # both load with a session that sends, or monitors: not on import
    from tuneplane.report._hardware import Monitor
    from tuneplane.report._sender import Sender

MAX_CACHED_KEYS = 10_000  # key sets with a shared entry (the fast path); more get private entries
MAX_PUTTERS = 256  # key sets with a generated putter (see `_queued`): the hot ones, found by `promote`


class Ledger(TypedDict):
    """Where every logged point went; `balanced` when they add up."""

    logged: int
    delivered: int
    dropped: int
    refused: int
    pending: int
    balanced: bool


class Stats(TypedDict, total=False):  # empty before any session ran (`tuneplane.report.stats()`)
    """A session's counters, as `tuneplane.report.stats()` returns them."""

    run_id: str
    rank: int
    logged_points: int
    ledger: Ledger
    hparams_sent: int
    hparams_pending: int
    hparams_dropped: dict[str, int]
    delivered_points: int
    pending_points: int
    spilled_points: int
    dropped_points: int
    dropped: dict[str, int]
    refused_points: int
    refused_batches: dict[int, int]
    batches_sent: int
    retries: int
    buffered_bytes: int
    from_disk_bytes: int
    buffer_budget_bytes: int
    spill_path: str | None
    internal_errors: int


class Session:
    """State shared by the caller's threads, the sender and the hardware monitor."""

    def __init__(self, config: Config) -> None:
        self.config = config
        self.pid = os.getpid()
        self.session_id = os.urandom(8).hex()
        self.queue: deque[Item] = deque()  # id rows and records (see `_queued`); callers append
        self.packed: deque[Record] = deque()  # sender, under order_lock: queued records, packed; older
        self.step = 0
        self.entries: dict[tuple[str, ...], Known] = {}  # validated key sets, in order
        # The putter (see `_queued`) of the key set log() tries first: `promote` makes it that of a key
        # set that took the lookup path twice in a row. `by_id` holds the entries the id rows name.
        self.put: Putter = no_putter
        self.last_found: Known | None = None  # the key set the lookup path took last
        self.putters: dict[tuple[str, ...], Putter] = {}
        self.by_id: list[Entry] = []
        self.budget = config.buffer_bytes
        self.added = 0
        self.released = 0  # written by the sender
        self.evicted = 0  # written under order_lock by the sender's spill and overflow()
        self.held_from_disk = 0  # sender: budget bytes of records read back from disk, in flight
        self.limit = self.budget // 2
        self.notes_later: list[str] = []
        self.spill_root = ""  # the private temp dir that stands in for a missing out dir
        self.spill = self._make_spill()
        self.order_lock = self.spill.lock if self.spill else threading.RLock()
        self.hparams_pending: dict[str, object] = {}
        self.hparams_sent = 0
        self.hparams_dropped: dict[str, int] = {}  # caller threads (bad values) and sender (refusals)
        self.logged = 0  # caller threads: points dropped before queueing (see `logged_points`)
        self.taken = 0  # sender, under order_lock: points taken off the queue (sent, spilled or dropped)
        self.spill_wanted = False
        self.delivered_points = 0
        self.batches_sent = 0
        self.retries = 0
        self.refused_points = 0
        self.refused_batches: dict[int, int] = {}
        self.spilled_points = 0
        self.drops: dict[str, int] = {}  # caller threads
        self.sender_drops: dict[str, int] = {}  # sender thread
        self.internal_errors = 0
        self._said: set[str] = set()
        self.sender: Sender | None = None
        self.monitor: Monitor | None = None
        self.final_stats: Stats | None = None

    def _make_spill(self) -> Spill | None:
        """The overflow file: under the out dir, or a private temp dir when there is none."""
        if self.config.spill_bytes <= 0:
            return None
        out_dir = self.config.out_dir
        linked = bool(out_dir) and os.path.islink(os.path.join(out_dir, SPILL_DIR))
        if out_dir and os.path.isdir(out_dir) and not linked:
            folder = os.path.join(out_dir, SPILL_DIR)
        else:
            import tempfile  # lazy: only jobs without an out dir need it

            # laid out like an out dir, so the collector can upload what finish() leaves there
            self.spill_root = tempfile.mkdtemp(prefix="tuneplane-report-")
            folder = os.path.join(self.spill_root, SPILL_DIR)
            # a `.tuneplane` that is a link would put the overflow file outside the out dir
            why = f"{os.path.join(out_dir, SPILL_DIR)} is a link" if linked else "no TUNEPLANE_OUT_DIR"
            self.notes_later.append(f"{why}: what does not fit in memory waits in {folder}")
        # `rank<N>` when every rank reports: the collector then keeps the rank in the keys it uploads
        rank = f"rank{self.config.rank}" if self.config.all_ranks else f"r{self.config.rank}"
        return Spill(
            os.path.join(folder, spill_name(rank, self.pid, self.session_id)), self.config.spill_bytes, self.entry
        )

    def start(self) -> None:
        # lazy: keeps import tuneplane.report to a few ms in every training process
        from tuneplane.report._sender import Sender

        for note in (*self.config.notes, *self.notes_later):
            self.say(note)
        self.sender = Sender(self)
        self.sender.start()

    # ── the caller's side ─────────────────────────────────────────────────────────────────────
    def log_slow(self, metrics: object, step: int, prefix: str, unix: float | None = None) -> None:
        """Everything the hot path does not handle: nesting, prefixes, non-numbers, unseen keys.

        The entry of the record's (validated, final) keys is what the hot path looks up next time: a
        plain dict with exactly those keys, in that order, turns into exactly those keys again."""
        record = to_record(metrics, prefix, self.drop)
        if record:
            self.append(step, record, unix)

    def cached(self, keys: tuple[str, ...]) -> Known:
        """The shared entry of a validated key set with its id (made on first use), or a private one
        past the cap (see `_queued.Known`)."""
        found = self.entries.get(keys)
        if found is None:
            if len(self.entries) >= MAX_CACHED_KEYS:
                entry, pack = make_entry(keys, shared=False)
                return entry, pack, -1, entry[1]
            entry = make_entry(keys)[0]
            self.by_id.append(entry)  # before any id row names it
            found = self.entries[keys] = (entry, id_struct(len(keys)).pack, len(self.by_id) - 1, entry[1])
        return found

    def promote(self, found: Known) -> None:
        """Caller: `found` (a cached key set) took the lookup path; try its putter first from now on."""
        entry, _, ident, _ = found
        keys = entry[0]
        put = self.putters.get(keys)
        if put is None:
            if len(self.putters) >= MAX_PUTTERS or len(keys) > PUTTER_KEYS or ident < 0:
                return
            put = self.putters[keys] = make_putter(entry, ident, self.queue.append, time.time, self)
        self.put = put

    def demote(self) -> None:
        """Caller: the putter tried first raised (another key set of the same size, or a value that is
        not a number); try none until a key set is promoted again."""
        self.put = no_putter
        self.last_found = None

    def entry(self, keys: tuple[str, ...]) -> Entry:
        return self.cached(keys)[0]

    def append(self, step: int, record: dict[str, float], unix: float | None = None) -> None:
        if len(record) > MAX_RECORD_KEYS:  # too wide for one block of the receiver: records of one step
            at = time.time() if unix is None else unix
            items = list(record.items())
            for start in range(0, len(items), MAX_RECORD_KEYS):
                self._append(step, dict(items[start : start + MAX_RECORD_KEYS]), at)
            return
        self._append(step, record, unix)

    def _append(self, step: int, record: dict[str, float], unix: float | None) -> None:
        entry, pack, ident, cost = self.cached(tuple(record))
        at = time.time() if unix is None else unix
        try:
            item: Item = (
                pack(ident, step, at, *record.values()) if ident >= 0 else (entry, pack(step, at, *record.values()))
            )
        except (OverflowError, ValueError, TypeError, struct.error):  # a step beyond 64 bits, a bad time
            self.drop("step out of range" if not -(2**63) <= step < 2**63 else "bad timestamp", len(record))
            return
        self.queue.append(item)
        self.added += cost
        if self.added > self.limit:
            self.overflow()

    def overflow(self) -> None:
        """Half the memory budget is spent: the sender packs the queue, and moves it to disk when even
        packed it fills most of that half, so no encoding happens on the caller's thread. Only at the
        full budget does the caller wait (bounded) for it, and drop the newest record when neither
        packing nor the disk makes room."""
        self._refresh_limit()
        if self.added <= self.limit:
            return
        if not self.spill_wanted:
            self.spill_wanted = True
            self.kick()
        if self.added <= self.limit + self.budget // 2:
            return
        spill = self.spill
        deadline = time.monotonic() + 2.0
        sender = self.sender
        # Until there is room, not merely until the sender has spilled once: other threads logging
        # meanwhile refill what it freed, and each would then drop its newest record.
        while (
            spill is not None
            and not spill.full
            and sender is not None
            and sender.is_alive()
            and time.monotonic() < deadline
        ):
            if not self.spill_wanted:
                if self.added - self.released - self.evicted <= self.budget * 3 // 8:
                    break  # the sender found too little in memory to spill: waiting makes no room
                self.spill_wanted = True
                self.kick()
            time.sleep(0.0005)
            self._refresh_limit()
            if self.added <= self.limit + self.budget // 2:
                return
        with self.order_lock:
            self._refresh_limit()
            if self.added > self.limit + self.budget // 2:
                self._drop_newest()
                self._refresh_limit()

    def spill_queue(self) -> None:
        """Sender: pack the memory queue (see `_rows.packed`); when packed records still fill three
        quarters of half the budget, move everything in memory to the overflow file, oldest first.
        What the disk refuses is dropped as "disk full" and what was written is still replayed."""
        self.spill_wanted = False
        spill = self.spill
        with self.order_lock:
            self._pack()
            in_memory = self.added - self.released - self.evicted
            if spill is None or spill.full or in_memory <= self.budget * 3 // 8:
                self._refresh_limit()
                return
            records: list[Record] = list(self.packed)  # all that was queued; newer items wait in memory
            self.packed.clear()
            written = spill.append(records)
            self.evicted += cost_of(records)
            self.taken += points_of(records)
            self.spilled_points += points_of(records[:written])
            if written < len(records):
                self.sender_drop(spill.refusal or "overflow file full", points_of(records[written:]))
            self._refresh_limit()
        if spill.refusal:
            self.say(
                f"cannot write the overflow file {spill.path} ({spill.error}); points that do not fit "
                f"in memory are dropped as '{spill.refusal}', those already written are still sent"
            )

    def _pack(self, max_points: int | None = None) -> None:
        """Sender (or finish()), under order_lock: what is queued moves to `packed` as records of at
        most `max_points` points (a batch's); the budget it no longer needs is released."""
        items = take(self.queue, len(self.queue))
        if items:
            out, freed = unqueue(items, self.by_id, max_points or self.config.batch_points)
            self.packed.extend(out)
            self.released += freed

    def _drop_newest(self) -> None:
        try:
            item = self.queue.pop()
        except IndexError:
            return
        entry, cost = item_of(item, self.by_id)
        self.evicted += cost
        why = (
            "memory budget full (no overflow file)"
            if self.spill is None
            else ("disk full" if self.spill.full else "memory budget full (overflow file behind)")
        )
        self.drop(why, entry[2])

    def _refresh_limit(self) -> None:
        # `limit` (half the budget: where spilling starts) only ever grows, so a stale write from
        # another thread is merely conservative.
        self.limit = self.budget // 2 + self.released + self.evicted - self.held_from_disk

    def release(self, cost: int) -> None:
        """Sender: a batch from memory settled, its budget is free again."""
        self.released += cost
        self._refresh_limit()

    def drop(self, reason: str, count: int = 1) -> None:
        """Caller threads: points refused before they reach the queue (or evicted from it) are logged
        and dropped at once."""
        self.drops[reason] = self.drops.get(reason, 0) + count
        self.logged += count

    def sender_drop(self, reason: str, count: int = 1) -> None:
        self.sender_drops[reason] = self.sender_drops.get(reason, 0) + count

    def add_hparams(self, params: object) -> None:
        payload = hparams_payload(params, self.hparams_drop)
        if payload:
            with self.order_lock:
                self.hparams_pending.update(payload)
            self.kick()

    def hparams_drop(self, reason: str, count: int = 1) -> None:
        self.hparams_dropped[reason] = self.hparams_dropped.get(reason, 0) + count

    def internal_error(self, detail: str = "") -> None:
        self.internal_errors += 1
        if self.internal_errors == 1:
            self.say(f"internal error, reporting continues: {detail}" if detail else "internal error")

    def say(self, message: str) -> None:
        """One stderr line per distinct message: diagnostics, never a flood."""
        if message in self._said:
            return
        self._said.add(message)
        try:
            print(f"tuneplane.report: {message}", file=sys.stderr, flush=True)
        except (OSError, ValueError):
            pass

    def kick(self) -> None:
        if self.sender is not None:
            self.sender.wake.set()

    # ── flushing and shutdown ─────────────────────────────────────────────────────────────────
    def idle(self) -> bool:
        sender = self.sender
        spill_pending = self.spill.pending if self.spill else 0
        return (
            not self.queue
            and not self.packed
            and not spill_pending
            and not self.hparams_pending
            and sender is not None
            and sender.inflight is None
            and not sender.backlog
            and not sender.busy
        )

    def flush(self, timeout: float) -> bool:
        """Wait until everything logged so far is settled, or `timeout` passes."""
        deadline = time.monotonic() + timeout
        while True:
            if self.idle():
                return True
            if time.monotonic() >= deadline or self.sender is None or not self.sender.is_alive():
                return self.idle()
            self.kick()
            time.sleep(0.005)

    def close(self, timeout: float | None) -> None:
        """Stop the monitor (without waiting for it), drain the sender until the deadline, report losses."""
        if self.monitor is not None:
            self.monitor.stop()
        budget = self.config.finish_timeout if timeout is None else max(0.0, timeout)
        sender = self.sender
        if sender is not None:
            sender.stop_at = time.monotonic() + budget
            sender.wake.set()
            sender.join(budget + 0.25)
        self._report_losses()

    def pending_points(self) -> int:
        """Points logged and not yet settled: in memory, held by the sender, or waiting on disk."""
        return self._counts()[1]

    def _counts(self) -> tuple[int, int]:
        """(logged, pending) at one moment. Logged: dropped by the caller, taken by the sender, or still
        queued; the queue is read once because callers append to it without the lock."""
        with self.order_lock:
            queued = queued_points(list(self.queue)) + points_of(self.packed)
            held = self.sender.pending_points() if self.sender else 0
            return (self.logged + self.taken + queued, queued + held + (self.spill.points if self.spill else 0))

    def _report_losses(self) -> None:
        kept = self._leftover_to_disk()
        stats = self.stats()
        self.final_stats = stats
        parts = []
        if stats["pending_points"]:
            why = f" (last error: {self.sender.last_error})" if self.sender and self.sender.last_error else ""
            where = f"; they are kept in {self.spill.path}" if kept and self.spill else ""
            if where and self.spill_root:
                where += (
                    f" (send them with this job's TUNEPLANE_JOB_* variables set: "
                    f"python -m tuneplane.collector --out-dir {self.spill_root} --once)"
                )
            parts.append(f"{stats['pending_points']} point(s) not delivered before finish(){why}{where}")
        if stats["refused_points"]:
            codes = ", ".join(f"HTTP {c} x{n}" for c, n in sorted(self.refused_batches.items()))
            parts.append(f"{stats['refused_points']} point(s) refused by the receiver ({codes})")
        if stats["dropped_points"]:
            reasons = ", ".join(f"{r}: {n}" for r, n in sorted(stats["dropped"].items()))
            parts.append(f"{stats['dropped_points']} value(s) dropped ({reasons})")
        if parts:
            self.say(f"run {self.config.run_id}: " + "; ".join(parts))

    def _leftover_to_disk(self) -> bool:
        """After the deadline, what is still only in memory goes to the overflow file, if there is one.

        Returns True when the file keeps undelivered records. The sender may still finish a request
        that was in flight; a record then sits both on disk and in the store, which the receiver's
        upsert makes harmless.
        """
        if self.spill is None:
            return False
        with self.order_lock:
            self._pack()
            queued = list(self.packed)
            self.packed.clear()
            self.taken += points_of(queued)
            records = (self.sender.memory_records() if self.sender else []) + queued
            if self.sender is not None:
                self.sender.forget_memory_records()
            written = self.spill.append(records)
            if written < len(records):
                self.sender_drop(self.spill.refusal or "overflow file full", points_of(records[written:]))
            kept = self.spill.close()
        if not kept and self.spill_root:
            # The private folder that stood in for the out dir: empty now, so it goes (one per
            # process would otherwise pile up on a node).
            for folder in (os.path.dirname(self.spill.path), self.spill_root):
                try:
                    os.rmdir(folder)
                except OSError:
                    pass
        return kept

    def stats(self) -> Stats:
        if self.final_stats is not None:
            return self.final_stats
        with self.order_lock:  # one consistent moment: the sender moves points only under this lock
            dropped = dict(self.drops)
            for reason, count in self.sender_drops.items():
                dropped[reason] = dropped.get(reason, 0) + count
            logged, pending = self._counts()
            delivered, refused = self.delivered_points, self.refused_points
        lost = sum(dropped.values())
        ledger: Ledger = {
            "logged": logged,
            "delivered": delivered,
            "dropped": lost,
            "refused": refused,
            "pending": pending,
            "balanced": delivered + lost + refused + pending == logged,
        }
        return {
            "run_id": self.config.run_id,
            "rank": self.config.rank,
            "logged_points": logged,
            "ledger": ledger,
            "hparams_sent": self.hparams_sent,
            "hparams_pending": len(self.hparams_pending),
            "hparams_dropped": dict(self.hparams_dropped),
            "delivered_points": self.delivered_points,
            "pending_points": pending,
            "spilled_points": self.spilled_points,
            "dropped_points": sum(dropped.values()),
            "dropped": dropped,
            "refused_points": self.refused_points,
            "refused_batches": dict(self.refused_batches),
            "batches_sent": self.batches_sent,
            "retries": self.retries,
            "buffered_bytes": max(0, self.added - self.released - self.evicted),
            "from_disk_bytes": self.held_from_disk,
            "buffer_budget_bytes": self.budget,
            "spill_path": self.spill.path if self.spill else None,
            "internal_errors": self.internal_errors,
        }
