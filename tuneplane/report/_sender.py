"""The background sender: the only code that touches the network.

Order of work on each pass: hyperparameters, then a batch that is being retried, then records that
overflowed to disk (they are older), then the memory queue. A batch keeps its id across retries, so
the receiver stores it once even when a response was lost after the write. Retryable failures (no
connection, timeouts, 408/425/429/5xx) back off exponentially up to a cap; any other 4xx drops that
one batch with a diagnostic instead of blocking everything behind it.
"""

from __future__ import annotations

import json
import random
import signal
import threading
import time
from typing import TYPE_CHECKING

from tuneplane.report._rows import ROWS_FORMAT, Record, cost_of, multi, points_of, singles, take
from tuneplane.report._transport import Encoder, Transport, TransportError, compress
from tuneplane.runtime.records import Record as MutableRecord

if TYPE_CHECKING:
    from tuneplane.report._core import Session

RETRYABLE = frozenset({408, 425, 429}) | frozenset(range(500, 600))
PROBE_POINTS = 100  # the first metrics batch, before the receiver has said what it reads
MALFORMED = frozenset({400, 415, 422})  # a rows/1 body refused with these: perhaps no longer read
OVER_LIMIT = "over the receiver's limit of metric names per run"  # the drop reason of points it left out


class Batch(MutableRecord):
    """Records travelling together under one id."""

    batch_id: str
    records: list[Record]
    cost: int = 0  # memory-budget bytes to release once settled (0 for records read from disk)
    spill_offset: int | None = None
    attempts: int = 0
    body: bytes = b""
    points: int = 0
    settled: bool = False  # delivered, refused or split: no longer pending
    skipped: int = 0  # non-finite values left out of the body (already counted as dropped)
    disk_cost: int = 0  # budget bytes of records read back from the overflow file
    gzip: bool = True  # the body is gzipped (the upstream encoding)
    rows: bool = False  # the body is rows/1


def block_sigterm() -> None:
    """Called first in each of the package's threads: SIGTERM is then delivered to a thread that
    has not blocked it, the main one, whose handler runs at once even while it waits in a lock or a
    queue; delivered to this thread instead, a waiting main thread would never run it."""
    try:
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})
    except (AttributeError, OSError, ValueError):  # no POSIX signal masks here
        pass


class Sender(threading.Thread):
    """Drains a Session to the receiver until stopped, then drains until a deadline."""

    def __init__(self, session: Session) -> None:
        super().__init__(name="tuneplane-report-sender", daemon=True)
        self.s = session
        cfg = session.config
        self.cfg = cfg
        self.transport = Transport(cfg.endpoint, cfg.token, cfg.request_timeout, cfg.run_id)
        self.encoder = Encoder(cfg.run_id, cfg.rank_label)
        self.wake = threading.Event()
        self.stop_at: float | None = None
        self.inflight: Batch | None = None
        self.backlog: list[Batch] = []
        self.max_points = cfg.batch_points
        self._seq = 0
        self._announced: set[int] = set()
        self.last_error = ""
        self.busy = False

    # ── loop ──────────────────────────────────────────────────────────────────────────────────
    def run(self) -> None:
        block_sigterm()
        try:
            while True:
                self.busy = True
                progressed = self._pass()
                self.busy = False
                if self.stop_at is not None and (not progressed or self._late()):
                    return
                if not progressed:
                    self.wake.wait(self.cfg.flush_interval)
                    self.wake.clear()
        except Exception as exc:  # a sender bug must not surface in training
            self.s.internal_error(f"sender stopped: {type(exc).__name__}: {exc}")
        finally:
            self.busy = False
            self.transport.close()

    def _late(self) -> bool:
        return self.stop_at is not None and time.monotonic() >= self.stop_at

    def _pass(self) -> bool:
        """One unit of work; False when there was nothing to do (or only a backoff to wait out)."""
        if self.s.spill_wanted:
            self.s.spill_queue()
        sent_hparams = False
        if self.s.hparams_pending:
            if not self._send_hparams():
                return self._backoff(self._hparams_attempts)
            sent_hparams = True
        if self._late():
            return False
        batch = self.inflight or self._next_batch()
        if batch is None:
            return sent_hparams
        outcome = self._deliver(batch)
        if outcome == "retry":
            return self._backoff(batch.attempts)
        with self.s.order_lock:
            if self.inflight is batch:
                self.inflight = None
        return True

    # ── batches ───────────────────────────────────────────────────────────────────────────────
    def _new_id(self) -> str:
        self._seq += 1
        return f"{self.s.session_id}-{self._seq}"

    def _next_batch(self) -> Batch | None:
        """The next batch, made `inflight` under the lock so its points are never out of the ledger."""
        s = self.s
        if self.backlog:
            with s.order_lock:
                self.inflight = self.backlog.pop(0)
            return self.inflight
        # Taking records is atomic with overflow (same lock), which keeps disk-then-memory order;
        # encoding happens outside it so a spilling caller never waits on gzip.
        offset: int | None = None
        with s.order_lock:
            records: list[Record] = []
            if s.spill is not None and s.spill.pending:
                records, offset = s.spill.read(self.max_points, self._batch_cost_cap())
            if records:
                cost = 0
                disk_cost = cost_of(records)
                s.held_from_disk += disk_cost  # in memory again while it travels: inside the budget
                s._refresh_limit()
            else:
                disk_cost = 0
                records, cost = self._take_from_memory()
                offset = None
            if not records:
                return None
            batch = self.inflight = Batch(self._new_id(), records, cost=cost, spill_offset=offset, disk_cost=disk_cost)
        return self._encoded(batch)

    def _take_from_memory(self) -> tuple[list[Record], int]:
        """Up to a batch of records out of memory (under order_lock): the queue is packed first (its id
        rows become records, see `_queued`), and the points leave `packed` and enter the batch in one
        step, so the ledger never misses them."""
        records: list[Record] = []
        points = cost = 0
        max_points, cap_cost = self.max_points, self._batch_cost_cap()
        if not self._answered:  # a small first batch in the upstream encoding learns what the receiver reads
            max_points = min(max_points, PROBE_POINTS)
        self.s._pack(max_points)
        packed = self.s.packed
        # In runs sized by the next record's entry (records of one key set are the common case), so
        # the per-record work is a C-level pop and sum; only the sender pops, so they are all there.
        while packed and points < max_points and cost < cap_cost:
            entry = packed[0][0]
            count = min(len(packed), max(1, (max_points - points) // entry[2]), max(1, (cap_cost - cost) // entry[1]))
            run = take(packed, count)
            records += run
            points += points_of(run)
            cost += cost_of(run)
        self.s.taken += points
        return records, cost

    def _batch_cost_cap(self) -> int:
        # A batch holds at most a quarter of the memory budget, so sending never dominates memory.
        return max(self.s.config.buffer_bytes // 4, 1)

    def _encoded(self, batch: Batch) -> Batch:
        body, points, skipped, gzip = self.encoder.batch(batch.batch_id, batch.records)
        with self.s.order_lock:
            batch.body, batch.points, batch.gzip, batch.rows = body, points, gzip, self.encoder.rows
            batch.skipped = skipped
            if skipped:
                self.s.sender_drop("non-finite value", skipped)
                if batch.spill_offset is not None and self.s.spill is not None:
                    self.s.spill.points -= skipped  # dropped now, so no longer pending on disk
        return batch

    # ── delivery ──────────────────────────────────────────────────────────────────────────────
    def _deliver(self, batch: Batch) -> str:
        if not batch.points:
            self._settle(batch, delivered=True)
            return "done"
        batch.attempts += 1
        try:
            status, data, retry_after, formats = self.transport.post("metrics", batch.body, batch.batch_id, batch.gzip)
        except TransportError as exc:
            self.last_error = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
            self.s.retries += 1
            self._retry_after = 0.0
            return "retry"
        self._retry_after = _seconds(retry_after)
        self._negotiate(formats)
        if 200 <= status < 300:
            self._settle(batch, delivered=True, left_out=self._left_out(data, batch.points))
            return "done"
        self.last_error = f"HTTP {status}"
        if batch.rows and status in MALFORMED and ROWS_FORMAT not in formats:
            self._fall_back()
        if status in RETRYABLE:
            self.s.retries += 1
            return "retry"
        if status == 413 and (len(batch.records) > 1 or multi(batch.records[0])):
            self._split(batch)
            return "done"
        self._refuse(batch, status, data)
        return "done"

    _answered = False  # the receiver has answered a request

    def _negotiate(self, formats: str) -> None:
        """Our receiver lists the formats it reads in an `X-TunePlane-Formats` header on every answer;
        upstream receivers send none, so they only ever get the upstream encoding."""
        self._answered = True
        if not self.encoder.rows and not self._rows_refused and ROWS_FORMAT in formats:
            self.encoder.rows = True

    _rows_refused = False

    def _fall_back(self) -> None:
        """A `rows/1` body refused as malformed by a receiver that no longer lists the format (replaced
        by an older one, say): that batch is refused like any other (a 4xx drops it), and the rest of
        the session uses the upstream encoding, which every receiver reads."""
        self._rows_refused = True
        self.encoder.rows = False
        self.s.say(f"the receiver no longer reads {ROWS_FORMAT} bodies; sending the upstream encoding from now on")

    def _left_out(self, data: bytes, points: int) -> int:
        """Points a 2xx answer says were not stored (our receiver's metric-name limit per run): they
        are dropped, not delivered, so the ledger tells the truth. Said once on stderr."""
        if b'"over_limit"' not in data:
            return 0
        try:
            answer = json.loads(data)
            count = answer.get("over_limit")
        except (ValueError, AttributeError):
            return 0
        if not isinstance(count, int) or isinstance(count, bool) or not 0 < count <= points:
            return 0
        self.s.say(
            f"the receiver left out points of metric names past its limit per run "
            f"({' '.join(str(answer.get('over_limit_why', '')).split())[:200]}); they are counted as dropped"
        )
        return count

    def _settle(self, batch: Batch, delivered: bool, left_out: int = 0) -> None:
        with self.s.order_lock:  # counters and pending change together: the ledger always balances
            batch.settled = True
            if delivered:
                self.s.delivered_points += batch.points - left_out
                self.s.batches_sent += 1
                if left_out:
                    self.s.sender_drop(OVER_LIMIT, left_out)
            if batch.spill_offset is not None and self.s.spill is not None:
                self.s.spill.commit(batch.spill_offset, len(batch.records), _raw_points(batch.records) - batch.skipped)
            if batch.cost:
                self.s.release(batch.cost)
            if batch.disk_cost:
                self.s.held_from_disk -= batch.disk_cost
                batch.disk_cost = 0
                self.s._refresh_limit()

    def _split(self, batch: Batch) -> None:
        """A 413 means our batch is over the receiver's limit: halve it and send smaller ones from now on."""
        self.max_points = max(1, self.max_points // 2)
        single = singles(batch.records)
        half = len(single) // 2
        parts = []
        for records in (single[:half], single[half:]):
            share = batch.cost * len(records) // len(single)
            parts.append(self._encoded(Batch(self._new_id(), records, cost=share)))
        parts[-1].cost += batch.cost - sum(p.cost for p in parts)
        with self.s.order_lock:
            batch.settled = True
            if batch.spill_offset is not None and self.s.spill is not None:
                self.s.spill.commit(batch.spill_offset, len(batch.records), _raw_points(batch.records) - batch.skipped)
            if batch.disk_cost:  # the halves are memory batches with their own cost now
                self.s.held_from_disk -= batch.disk_cost
                batch.disk_cost = 0
            if batch.skipped:  # the halves counted their own non-finite values again
                self.s.sender_drops["non-finite value"] -= batch.skipped
            self.backlog[:0] = parts

    def _refuse(self, batch: Batch, status: int, data: bytes) -> None:
        with self.s.order_lock:
            self.s.refused_points += batch.points
            self.s.refused_batches[status] = self.s.refused_batches.get(status, 0) + 1
        if status not in self._announced:
            self._announced.add(status)
            self.s.say(
                f"the receiver refused a batch of {batch.points} point(s) with HTTP {status}"
                f"{_reason(data)}; dropped that batch and carrying on"
            )
        self._settle(batch, delivered=False)

    def _backoff(self, attempts: int) -> bool:
        """Wait before the next try, never past the finish deadline; True means 'keep looping'."""
        delay = min(self.cfg.retry_cap, self.cfg.retry_base * (2 ** min(max(0, attempts - 1), 30)))
        if self._retry_after:
            delay = min(self.cfg.retry_cap, max(delay, self._retry_after))
        delay *= random.uniform(0.8, 1.0)
        if self.stop_at is not None:
            delay = min(delay, max(0.0, self.stop_at - time.monotonic()))
        self.busy = False
        deadline = time.monotonic() + delay
        while True:
            woken = self.wake.wait(max(0.0, deadline - time.monotonic()))
            self.wake.clear()
            if not (woken and self.s.spill_wanted):
                break
            # A caller filling memory during an outage: move the queue to disk and keep waiting, so
            # the outage is not hammered with a connection attempt per wake-up.
            self.busy = True
            self.s.spill_queue()
            self.busy = False
            if time.monotonic() >= deadline:
                break
        return not self._late()

    # ── hyperparameters ───────────────────────────────────────────────────────────────────────
    _hparams_attempts = 0
    _retry_after = 0.0

    hparams_max = 1000  # per request; halved on 413 like metric batches

    def _send_hparams(self) -> bool:
        """Send one batch of pending hyperparameters; False when it must be retried."""
        with self.s.order_lock:
            keys = list(self.s.hparams_pending)[: self.hparams_max]
            params = {key: self.s.hparams_pending[key] for key in keys}
        try:
            body = compress(self.encoder.hparams_body(self._hparams_id(), params))
        except (TypeError, ValueError):  # not JSON after all: send each value alone to find the bad one
            return (
                self._hparams_refused(params, 0, b"", "not serialisable")
                if len(params) == 1
                else self._hparams_shrink()
            )
        try:
            status, data, retry_after, formats = self.transport.post("hparams", body, self._hparams_id())
        except TransportError as exc:
            self.last_error = f"{type(exc).__name__}: {exc}"
            self._hparams_attempts += 1
            self.s.retries += 1
            self._retry_after = 0.0
            return False
        self._retry_after = _seconds(retry_after)
        if status in RETRYABLE:
            self.last_error = f"HTTP {status}"
            self._hparams_attempts += 1
            self.s.retries += 1
            return False
        if status == 413 and len(params) > 1:
            return self._hparams_shrink()
        if not 200 <= status < 300:
            return self._hparams_refused(params, status, data, f"refused (HTTP {status})")
        self._negotiate(formats)
        with self.s.order_lock:
            self.s.hparams_sent += self._forget(params)
        self._hparams_attempts = 0
        self._hparams_batch = ""
        return True

    def _hparams_shrink(self) -> bool:
        self.hparams_max = max(1, self.hparams_max // 2)
        self._hparams_batch = ""
        return True

    def _hparams_refused(self, params: dict[str, object], status: int, data: bytes, reason: str) -> bool:
        if status:
            self.s.say(f"the receiver refused {len(params)} hyperparameter(s) with HTTP {status}{_reason(data)}")
        with self.s.order_lock:
            self.s.hparams_drop(reason, self._forget(params))
        self._hparams_attempts = 0
        self._hparams_batch = ""
        return True

    def _forget(self, params: dict[str, object]) -> int:
        """Remove settled hyperparameters unless the caller changed them meanwhile; returns how many."""
        count = 0
        for key, value in params.items():
            if self.s.hparams_pending.get(key, _MISSING) == value:
                del self.s.hparams_pending[key]
                count += 1
        return count

    _hparams_batch = ""

    def _hparams_id(self) -> str:
        if not self._hparams_batch:
            self._hparams_batch = f"{self._new_id()}-hparams"
        return self._hparams_batch

    # ── shutdown ──────────────────────────────────────────────────────────────────────────────
    def _held(self) -> list[Batch]:
        batches = ([self.inflight] if self.inflight else []) + self.backlog
        return [b for b in batches if b.spill_offset is None and not b.settled]

    def memory_records(self) -> list[Record]:
        """Records held by the sender that exist nowhere else (not on disk)."""
        return [record for batch in self._held() for record in batch.records]

    def forget_memory_records(self) -> None:
        """finish(): those records now live in the overflow file; a late answer must not count them."""
        for batch in self._held():
            batch.settled = True
            batch.points = 0
        self.backlog = []

    def pending_points(self) -> int:
        # A batch's non-finite values are dropped already; the rest of its points are pending.
        return sum(_raw_points(b.records) - b.skipped for b in self._held())


_MISSING = object()


def _raw_points(records: list[Record]) -> int:
    return points_of(records)


def _seconds(header: str) -> float:
    try:
        return max(0.0, float(header)) if header else 0.0
    except ValueError:
        return 0.0


def _reason(data: bytes) -> str:
    """The receiver's own error message, briefly, when it sent one."""
    try:
        message = json.loads(data.decode("utf-8", "replace")).get("error", "")
    except (ValueError, AttributeError):
        message = data.decode("utf-8", "replace").strip()
    message = " ".join(str(message).split())[:200]
    return f" ({message})" if message else ""
