"""tuneplane.report's compact records and the rows/1 wire format, against real local receivers.

What log() leaves on the caller's thread (a packed row, no encoding), how small a queued record is,
that the garbage collector stops walking the queue, and that the compact body is sent only to a
receiver that advertised it, while an upstream receiver keeps getting the upstream body.
"""

from __future__ import annotations

import gc
import json
import math
import socket
import struct
import sys
import threading
import time
import tracemalloc
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from support.wait import wait_until

import tuneplane.report as report
from tuneplane.ingest import mint_token, series, summary
from tuneplane.ingest.bodies import points as body_points
from tuneplane.ingest.gate import Refused, read_body
from tuneplane.ingest.server import IngestHandler, IngestServer
from tuneplane.report._rows import cost_of, points_of

SECRET = b"w" * 32
RUN = "run-rows"
FAST = {
    "TUNEPLANE_REPORT_FLUSH_INTERVAL": "0.02",
    "TUNEPLANE_REPORT_RETRY_BASE": "0.02",
    "TUNEPLANE_REPORT_RETRY_CAP": "0.2",
    "TUNEPLANE_REPORT_FINISH_TIMEOUT": "20",
}


class Seen:
    def __init__(self) -> None:
        self.bodies: list[str] = []  # "points" or "rows", one per metrics request
        self.advertise = True
        self.lock = threading.Lock()


class Recording(IngestHandler):
    """Our receiver, noting the form of each metrics body; with `advertise` off it behaves as an
    upstream receiver: no formats header, and a body without `points` is refused."""

    def send_header(self, keyword: str, value: str) -> None:
        if keyword == "X-TunePlane-Formats" and not self.server.seen.advertise:  # type: ignore[attr-defined]
            return
        super().send_header(keyword, value)

    def _post(self) -> tuple[int, dict[str, Any]]:
        seen: Seen = self.server.seen  # type: ignore[attr-defined]
        if not self.path.rstrip("/").endswith("/metrics"):
            return super()._post()
        body = read_body(self.rfile, self.headers, self.server.secret, self.server.limits)
        form = "rows" if "blocks" in body.payload else "points"
        with seen.lock:
            seen.bodies.append(form)
        if form == "rows" and not seen.advertise:
            raise Refused(422, "points must be a list")
        points = body_points(body.payload, self.server.limits)
        stored, duplicate = self.server.store.add_points(body.run_id, points, body.payload.get("batch_id"))
        return 200, {"ok": True, "stored": stored, "duplicate": duplicate}


@pytest.fixture()
def env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    for name in list(__import__("os").environ):
        if name.startswith("TUNEPLANE_") or name in ("RANK", "LOCAL_RANK"):
            monkeypatch.delenv(name, raising=False)
    for name, value in FAST.items():
        monkeypatch.setenv(name, value)
    (tmp_path / "out").mkdir()
    monkeypatch.setenv("TUNEPLANE_JOB_ENABLED", "1")
    monkeypatch.setenv("TUNEPLANE_JOB_RUN_ID", RUN)
    monkeypatch.setenv("TUNEPLANE_JOB_TOKEN", mint_token(SECRET, RUN))
    monkeypatch.setenv("TUNEPLANE_OUT_DIR", str(tmp_path / "out"))
    report._reset()
    yield tmp_path
    report._reset()


@pytest.fixture()
def receiver(env: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[IngestServer]:
    server = late_receiver(env, 0).start()
    monkeypatch.setenv("TUNEPLANE_JOB_ENDPOINT", server.url)
    yield server
    server.stop()


def seen(server: IngestServer) -> Seen:
    return server.httpd.seen  # type: ignore[attr-defined, no-any-return]


def down_endpoint(monkeypatch: pytest.MonkeyPatch) -> int:
    """A free port as the job's endpoint, nothing listening there (yet): its number, for `late_receiver`."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    monkeypatch.setenv("TUNEPLANE_JOB_ENDPOINT", f"http://127.0.0.1:{port}")
    return port


def late_receiver(env: Path, port: int, **kwargs: Any) -> IngestServer:
    """A recording receiver on `port` (0: any), not started: one the job's sender finds when it comes."""
    server = IngestServer(env / "ingest.sqlite", SECRET, port=port, handler=Recording, **kwargs)
    server.httpd.seen = Seen()  # type: ignore[attr-defined]
    return server


# ── the caller's side ─────────────────────────────────────────────────────────────────────────
def test_a_queued_record_is_compact_and_untracked_by_the_gc(env: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    down_endpoint(monkeypatch)  # nothing leaves: every record stays queued
    report.init(
        monitor_hardware=False,
        finish_timeout=0,
        spill_bytes=0,
        buffer_bytes=64 * 1024 * 1024,
        retry_base=60,
        retry_cap=60,
    )  # the sender waits out its backoff: only the queue grows
    report.log({"loss": 0.0, "acc": 0.0, "lr": 0.0, "grad_norm": 0.0}, step=0)
    # its first (failed) attempt is over before the measurement starts
    wait_until(lambda: report.stats()["retries"] >= 1, 30, 0.01, "the sender never tried the absent receiver")
    tracemalloc.start()
    start = tracemalloc.get_traced_memory()[0]
    for step in range(1, 20_001):
        report.log({"loss": 1.0 / step, "acc": step * 0.5, "lr": 3e-4, "grad_norm": step + 1.5}, step=step)
    per_record = (tracemalloc.get_traced_memory()[0] - start) / 20_000
    tracemalloc.stop()
    # Four floats: 48 bytes of row, its header and the record's tuple; the dict copy it replaced
    # held ~620 bytes.
    assert per_record <= 160, f"{per_record:.0f} bytes per queued record"
    session = report._session
    assert session is not None
    gc.collect()
    assert not any(gc.is_tracked(record) for record in list(session.queue)[:1000])


def test_the_callers_thread_encodes_nothing_even_when_memory_overflows(
    env: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    down_endpoint(monkeypatch)  # the queue overflows to disk all the time
    report.init(monitor_hardware=False, finish_timeout=0, buffer_bytes=16 * 1024)
    report.log({"loss": 0.0, "acc": 0.0}, step=0)
    called: set[str] = set()

    def profile(frame: Any, event: str, arg: Any) -> None:
        if event == "c_call":
            called.add(
                f"{getattr(arg, '__module__', None) or type(getattr(arg, '__self__', None)).__name__}."
                f"{getattr(arg, '__name__', '?')}"
            )
        elif event == "call":
            called.add(f"{Path(frame.f_code.co_filename).name}:{frame.f_code.co_name}")

    sys.setprofile(profile)  # this thread only
    try:
        for step in range(1, 3001):
            report.log({"loss": 1.0 / step, "acc": 0.5}, step=step)
    finally:
        sys.setprofile(None)
    stats = report.stats()
    assert stats["spilled_points"] > 0 and stats["dropped_points"] == 0  # it did overflow, losslessly
    encoders = {"zlib", "binascii", "_json", "json"}
    assert not [
        c
        for c in called
        if c.split(".")[0] in encoders
        or "dumps" in c
        or "compress" in c
        or c.startswith(("_spill.py", "_transport.py", "encoder.py"))
        or c.endswith((".write", ".flush"))
    ], sorted(called)


def test_the_hot_path_reads_values_by_key_in_one_generated_frame(env: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # No key tuple, no dict lookup, no star call over dict.values(): the putter of the key set takes
    # the values by key as plain arguments of one pack.
    down_endpoint(monkeypatch)
    report.init(monitor_hardware=False, finish_timeout=0, spill_bytes=0, retry_base=60, retry_cap=60)
    for step in range(3):  # first: validated (slow path); second: looked up, then its putter is made
        report.log({"loss": 0.5, "acc": 0.25, "lr": 3e-4, "grad_norm": 1.5}, step=step)
    calls: list[str] = []

    def profile(frame: Any, event: str, arg: Any) -> None:
        if event == "c_call":
            calls.append(getattr(arg, "__name__", "?"))
        elif event == "call":
            calls.append(f"{frame.f_code.co_name}()")

    metrics = {"loss": 0.4, "acc": 0.3, "lr": 3e-4, "grad_norm": 1.4}
    sys.setprofile(profile)  # this thread only
    try:
        report.log(metrics, step=3)
    finally:
        sys.setprofile(None)
    assert calls[:2] == ["log()", "put()"] and "put()" not in calls[2:], calls
    assert not {"get", "values", "items", "keys"} & set(calls), calls
    assert calls.count("pack") == 1 and calls.count("append") == 1, calls
    session = report._session
    assert session is not None
    row = session.queue[-1]  # one bytes object: the key set's id, step, time, values
    assert type(row) is bytes and not gc.is_tracked(row)
    ident, step, _, *values = struct.unpack("<qqd4d", row)
    assert session.by_id[ident][0] == ("loss", "acc", "lr", "grad_norm")
    assert step == 3 and values == [0.4, 0.3, 3e-4, 1.4]


def test_the_hot_path_matches_the_key_set_not_its_order(receiver: IngestServer) -> None:
    np = pytest.importorskip("numpy")
    report.init(monitor_hardware=False)
    for step in range(3):  # the putter of {a, b} is the one tried first from here
        report.log({"a": float(step), "b": -float(step)}, step=step)
    report.log({"b": 30.0, "a": 3.0}, step=3)  # same keys, other order
    report.log({"a": 4.0, "c": 40.0}, step=4)  # same size, other keys
    report.log({"a": "text", "b": 5.0}, step=5)  # not a number: the slow path drops just that value
    report.log({"a": np.float32(6.0), "b": np.array(60.0)}, step=6)  # converted as float() does
    report.log({"a": 7.0}, step=7)  # other size
    report.log({"a": 8.0, "b": 80.0, "c": 800.0}, step=8)
    for step in range(9, 40):  # key sets alternating call by call
        other = {"a": float(step), "b": float(-step)} if step % 2 else {"a": float(step), "c": float(step)}
        report.log(other, step=step)
    report.finish()
    db = receiver.store.path
    assert series(db, RUN, "a") == [(s, float(s)) for s in range(40) if s != 5]
    assert series(db, RUN, "b") == [(s, -float(s)) for s in range(3)] + [(3, 30.0), (5, 5.0), (6, 60.0), (8, 80.0)] + [
        (s, -float(s)) for s in range(9, 40, 2)
    ]
    assert series(db, RUN, "c") == [(4, 40.0), (8, 800.0)] + [(s, float(s)) for s in range(10, 40, 2)]
    stats = report.stats()
    assert stats["dropped"] == {"text value": 1} and stats["ledger"]["balanced"]


def test_threads_logging_different_key_sets_keep_their_own_keys(receiver: IngestServer) -> None:
    report.init(monitor_hardware=False)
    widths = {"t0": 1, "t1": 2, "t2": 3, "t3": 2}
    start = threading.Barrier(len(widths))

    def worker(name: str) -> None:
        keys = [f"{name}/k{i}" for i in range(widths[name])]
        start.wait()
        for step in range(3000):
            report.log({key: step + i / 10 for i, key in enumerate(keys)}, step=step)
            if step % 7 == 0:  # and now and then another key set, so the putter tried first changes
                report.log({f"{name}/other": float(step)}, step=step)

    threads = [threading.Thread(target=worker, args=(name,)) for name in widths]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    report.finish()
    got = summary(receiver.store.path, RUN)
    for name, width in widths.items():
        for i in range(width):
            assert series(receiver.store.path, RUN, f"{name}/k{i}") == [(s, s + i / 10) for s in range(3000)]
        assert got[f"{name}/other"]["count"] == len(range(0, 3000, 7))
    assert len(got) == sum(widths.values()) + len(widths)
    assert report.stats()["ledger"]["balanced"] and report.stats()["dropped_points"] == 0


def test_queued_records_are_packed_before_anything_is_spilled(env: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # 6,000 one-row records (160 budget bytes each) pass half of a 1 MiB budget, where the queue used
    # to go to disk; packed (about 49 bytes a row) they fit in memory, and nothing is written.
    port = down_endpoint(monkeypatch)
    session = _log_past_half_the_budget()
    stats = report.stats()
    assert stats["spilled_points"] == 0 and stats["dropped_points"] == 0
    # As one-row records the 6,000 rows cost 960,000 budget bytes, past the half (524,288) where spilling
    # starts; packed they stay under it. Not all of them need be packed: rows logged after the sender's
    # last pack wait as one-row records until the next crossing (how many depends on when the sender
    # ran, which on a loaded machine is late), so the bound on everything is the half budget, and the
    # rows that were packed cost at most 64 budget bytes each.
    assert 6000 * 160 > 1024 * 1024 // 2 >= stats["buffered_bytes"], stats["buffered_bytes"]
    assert session.packed and all(len(row) % 48 == 0 for _, row in session.packed)
    packed_rows = points_of(session.packed) // 4  # four keys a row
    assert packed_rows >= 1000 and cost_of(session.packed) <= 64 * packed_rows, (packed_rows, cost_of(session.packed))
    server = late_receiver(env, port)
    try:
        server.start()
        report.finish()
        db = server.store.path
        assert series(db, RUN, "grad_norm") == [(s, float(s)) for s in range(6000)]
        assert summary(db, RUN)["loss"]["count"] == 6000
        stats = report.stats()
        assert stats["delivered_points"] == 24_000 and stats["ledger"]["balanced"] and stats["spilled_points"] == 0
    finally:
        server.stop()
    assert not list((env / "out").rglob("report-*"))


def test_packed_records_left_at_finish_are_kept_for_the_collector(env: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    down_endpoint(monkeypatch)  # never comes back: everything packed in memory is left over at finish()
    session = _log_past_half_the_budget()
    assert session.packed and report.stats()["spilled_points"] == 0
    report.finish(timeout=0.2)
    from tuneplane.collector.sources import unsent_points  # the reader that uploads what is left

    spill = next((env / "out" / ".tuneplane").glob("report-unsent-*.jsonl"))
    problems: dict[str, int] = {}
    got = {
        (step, key): value
        for line in spill.read_bytes().splitlines()
        for step, _, values in unsent_points(line, problems)
        for key, value in values.items()
    }
    assert problems == {} and len(got) == 24_000
    assert [got[(step, "grad_norm")] for step in range(6000)] == [float(step) for step in range(6000)]
    assert report.stats()["pending_points"] == 24_000 and report.stats()["ledger"]["balanced"]


def test_key_sets_past_the_cache_queue_as_records_among_id_rows(env: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Past the cap a key set is queued as (entry, row) records; packing, spilling and sending take
    # both kinds of item in their order.
    import tuneplane.report._core as core

    monkeypatch.setattr(core, "MAX_CACHED_KEYS", 3)
    port = down_endpoint(monkeypatch)
    report.init(monitor_hardware=False, buffer_bytes=64 * 1024, retry_base=60, retry_cap=60)
    for step in range(3000):
        report.log({"loss": float(step), "lr": 1e-3}, step=step)  # cached: id rows from the putter
        if step % 3 == 0:
            report.log({f"rare/{step % 7}": float(-step)}, step=step)  # past the cap: records
    session = report._session
    assert session is not None
    _packed(session)
    assert report.stats()["spilled_points"] > 0  # 64 KiB: packed, then spilled, records and rows alike
    assert len(session.entries) == 3  # the other five rare key sets were queued as records
    server = late_receiver(env, port)
    try:
        server.start()
        report.finish()
        db = server.store.path
        assert series(db, RUN, "loss") == [(s, float(s)) for s in range(3000)]
        for rest in range(7):
            assert series(db, RUN, f"rare/{rest}") == [(s, float(-s)) for s in range(0, 3000, 3) if s % 7 == rest]
        stats = report.stats()
        assert stats["delivered_points"] == 6000 + 1000 and stats["ledger"]["balanced"]
        assert stats["dropped_points"] == 0
    finally:
        server.stop()


def test_non_finite_values_on_the_fast_path_are_dropped_and_counted(receiver: IngestServer) -> None:
    report.init(monitor_hardware=False)
    report.log({"a": 1.0, "b": 2.0}, step=0)  # validates the keys: the rest take the fast path
    report.log({"a": math.nan, "b": 3.0}, step=1)
    report.log({"a": math.inf, "b": 4.0}, step=2)
    report.log({"a": 5.0, "b": -math.inf}, step=-7)  # a negative step reads as NaN in the C-speed check
    report.log({"a": 6.0, "b": 7.0}, step=-8)
    report.finish()
    db = receiver.store.path
    assert series(db, RUN, "a") == [(-8, 6.0), (-7, 5.0), (0, 1.0)]
    assert series(db, RUN, "b") == [(-8, 7.0), (0, 2.0), (1, 3.0), (2, 4.0)]
    stats = report.stats()
    assert stats["dropped"] == {"non-finite value": 3} and stats["ledger"]["balanced"]
    assert stats["delivered_points"] == 7


def test_a_step_beyond_64_bits_is_dropped_with_its_reason(receiver: IngestServer) -> None:
    report.init(monitor_hardware=False)
    report.log({"a": 1.0}, step=1)
    report.log({"a": 2.0}, step=2**63)
    report.log({"a": 3.0}, step=3)
    report.finish()
    assert series(receiver.store.path, RUN, "a") == [(1, 1.0), (3, 3.0)]
    assert report.stats()["dropped"] == {"step out of range": 1}


# ── the wire ──────────────────────────────────────────────────────────────────────────────────
def log_steps(start: int, stop: int) -> None:
    for step in range(start, stop):
        report.log({"loss": 1.0 / (step + 1), "lr": step * 1e-5}, step=step)


def test_our_receiver_gets_rows_after_it_advertised_them(receiver: IngestServer) -> None:
    report.init(monitor_hardware=False, batch_points=100)
    log_steps(0, 50)
    assert report.flush(10)
    log_steps(50, 1000)
    report.finish()
    bodies = seen(receiver).bodies
    assert bodies[0] == "points" and set(bodies[1:]) == {"rows"} and len(bodies) >= 10
    db = receiver.store.path
    assert series(db, RUN, "loss") == [(s, 1.0 / (s + 1)) for s in range(1000)]
    assert summary(db, RUN)["lr"]["count"] == 1000
    assert report.stats()["delivered_points"] == 2000


def test_an_upstream_receiver_only_ever_gets_points(receiver: IngestServer) -> None:
    seen(receiver).advertise = False
    report.init(hparams={"lr": 0.1}, monitor_hardware=False, batch_points=100)
    log_steps(0, 500)
    report.finish()
    assert set(seen(receiver).bodies) == {"points"}
    assert summary(receiver.store.path, RUN)["loss"]["count"] == 500


def test_a_receiver_that_stops_reading_rows_gets_points_again(
    receiver: IngestServer, capfd: pytest.CaptureFixture[str]
) -> None:
    report.init(monitor_hardware=False, batch_points=100)
    log_steps(0, 10)
    assert report.flush(10)
    seen(receiver).advertise = False  # replaced by an older receiver, say
    log_steps(10, 20)
    assert report.flush(10) is True
    log_steps(20, 500)
    report.finish()
    bodies = seen(receiver).bodies
    assert bodies[:3] == ["points", "rows", "points"] and set(bodies[2:]) == {"points"}
    # The refused batch is dropped as any 4xx drops a batch, and said so; all after it arrive.
    stats = report.stats()
    assert stats["refused_points"] == 20 and stats["refused_batches"] == {422: 1}
    assert summary(receiver.store.path, RUN)["loss"]["count"] == 490
    assert "no longer reads rows/1" in capfd.readouterr().err


def test_rows_bodies_are_smaller_and_cheaper_than_points_for_the_same_records() -> None:
    from tuneplane.report._rows import make_entry
    from tuneplane.report._transport import Encoder

    entry, pack = make_entry(("train/loss", "train/lr", "train/grad_norm", "train/acc"))
    records = [(entry, pack(step, 1_700_000_000.0 + step, 1.0 / (step + 1), 3e-4, 1.5, 0.5)) for step in range(1250)]
    encoder = Encoder(RUN, None)
    points, count, _, gzipped = encoder.batch("b", records)
    encoder.rows = True
    rows, rows_count, _, rows_gzipped = encoder.batch("b", records)
    assert gzipped and not rows_gzipped and count == rows_count == 5000
    upstream = json.loads(zlib.decompress(points, 31))
    compact = json.loads(rows)
    assert compact["format"] == "rows/1" and len(compact["blocks"]) == 1
    assert [p["value"] for p in upstream["points"][:4]] == [1.0, 3e-4, 1.5, 0.5]
    assert len(rows) < len(zlib.decompress(points, 31)) / 5  # 64 bytes a record instead of ~340


@pytest.mark.parametrize("advertise", [True, False])
def test_records_back_from_disk_split_on_413_and_reach_either_receiver(
    env: Path, monkeypatch: pytest.MonkeyPatch, advertise: bool
) -> None:
    from tuneplane.ingest.server import Limits

    port = down_endpoint(monkeypatch)
    report.init(monitor_hardware=False, buffer_bytes=16 * 1024, batch_points=400)
    log_steps(0, 600)  # the receiver is away: most of this waits on disk, a line of rows a record
    time.sleep(0.2)
    assert report.stats()["spilled_points"] > 0
    # It comes back with a point cap below one line of the overflow file.
    server = late_receiver(env, port, limits=Limits(max_points=60))
    seen(server).advertise = advertise
    try:
        server.start()
        report.finish()
        db = server.store.path
        assert series(db, RUN, "loss") == [(s, 1.0 / (s + 1)) for s in range(600)]
        assert summary(db, RUN)["lr"]["count"] == 600
        stats = report.stats()
        assert stats["delivered_points"] == 1200 and stats["pending_points"] == 0 and stats["ledger"]["balanced"]
        assert ("rows" in seen(server).bodies) is advertise
    finally:
        server.stop()


def _packed(session: Any) -> None:
    """Wait for the sender to pack (or spill) what is queued: it clears `spill_wanted` as it starts, and
    packs under the order lock, so the wait is also for something packed, or spilled."""
    wait_until(
        lambda: not session.spill_wanted and (session.packed or report.stats()["spilled_points"]),
        10,
        0.01,
        lambda: f"the sender never packed what was queued: {report.stats()}",
    )


def _log_past_half_the_budget() -> Any:
    """6,000 steps of 4 floats into a 1 MiB budget (past its half as one-row records), then the wait
    for the sender to pack what is queued; the session."""
    report.init(monitor_hardware=False, buffer_bytes=1024 * 1024, retry_base=60, retry_cap=60)
    for step in range(6000):
        report.log({"loss": 1.0 / (step + 1), "acc": 0.5, "lr": 3e-4, "grad_norm": float(step)}, step=step)
    session = report._session
    assert session is not None
    _packed(session)
    return session


def test_an_out_dir_gone_out_of_sight_is_not_made_again_for_the_overflow(
    env: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The out dir's storage gone mid-run (a mount missing) when the queue overflows: the points that
    do not fit are counted dropped, and no new out dir is laid on the disk beneath the mount point."""
    down_endpoint(monkeypatch)
    report.init(monitor_hardware=False, buffer_bytes=64 * 1024, retry_base=60, retry_cap=60)
    (env / "out").rename(env / "hidden")
    for step in range(3000):
        report.log({"loss": float(step), "lr": 1e-3, f"k/{step % 5}": 1.0}, step=step)
    stats = report.stats()
    assert stats["spilled_points"] == 0 and stats["dropped_points"] > 0, stats
    assert not (env / "out").exists()
    report.finish(0.1)
    assert not (env / "out").exists()
