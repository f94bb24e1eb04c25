"""The collector's loop against what no writer should leave but file systems do: a 10 GiB sparse
event file and JSON-lines file, FIFOs, link loops, a line that never ends while the job runs. A pass
ends, memory stays bounded, a damaged stretch is told in one line, and what is good still arrives."""

from __future__ import annotations

import errno
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import support.collector

from tuneplane.collector import run, tfevents
from tuneplane.collector.sources import Point, Source
from tuneplane.ingest import series
from tuneplane.ingest.server import IngestServer

SECRET = b"r" * 32
RUN = "run-loop-hostile"
TIMEOUT = 90  # a hang guard: on a sparse file's zeros the pass took minutes
SPARSE = 10 * 2**30
LONG = 16 * 2**20  # a line without its end yet, 64 reads long


@pytest.fixture()
def receiver(tmp_path: Path) -> Iterator[IngestServer]:
    server = IngestServer(tmp_path / "ingest.sqlite", SECRET).start()
    yield server
    server.stop()


def counted_reads(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The sizes of the collector's reads from now on, one entry per `os.pread`."""
    read: list[int] = []
    real_pread = os.pread

    def pread(fd: int, size: int, offset: int) -> bytes:
        data = real_pread(fd, size, offset)
        read.append(len(data))
        return data

    monkeypatch.setattr(run.os, "pread", pread)
    return read


def job_env(receiver: IngestServer, out: Path, native: list[dict[str, Any]]) -> dict[str, str]:
    return support.collector.job_env(receiver, out, native, run=RUN, secret=SECRET)


def collect(env: dict[str, str], *args: str) -> dict[str, Any]:
    return support.collector.collect(env, *args, timeout=TIMEOUT)


def _sparse(path: Path, size: int) -> None:
    with path.open("wb") as handle:
        handle.truncate(size)


def test_a_sparse_event_file_fifos_and_link_loops_end_the_pass_with_one_line(
    receiver: IngestServer, tmp_path: Path
) -> None:
    out = tmp_path / "out"
    tb = out / "tb"
    tb.mkdir(parents=True)
    _sparse(tb / "events.out.tfevents.1.sparse", SPARSE)
    os.mkfifo(tb / "events.out.tfevents.2.fifo")
    (tb / "loop").symlink_to("loop")
    (tb / "self").symlink_to(".")
    good = b"".join(tfevents.frame(tfevents.scalar_event(s, 1.7e9 + s, {"loss": float(s)})) for s in range(5))
    (tb / "events.out.tfevents.3.good").write_bytes(good)
    result = collect(job_env(receiver, out, [{"format": "tensorboard", "path": "tb"}]))
    assert series(receiver.store.path, RUN, "loss") == [(s, float(s)) for s in range(5)]
    told = [line for line in result["problems"] if "sparse" in line]
    assert len(told) == 1 and f"between byte 0 and {SPARSE - 11}" in told[0], result["problems"]
    again = collect(job_env(receiver, out, [{"format": "tensorboard", "path": "tb"}]))
    assert again["collected_points"] == 0 and not again["problems"]  # stepped over once, remembered


class Kept:
    """The SDK's side as the loop sees it: points kept, delivery confirmed at once."""

    def __init__(self) -> None:
        self.points: list[Point] = []

    def send(self, points: list[Point]) -> None:
        self.points.extend(points)

    def flush(self, timeout: float) -> bool:
        return True


def test_a_line_that_has_not_ended_is_not_searched_again_from_its_start(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """While the job runs, a pass looks only at the bytes added since the last pass for the end of a
    long line (every pass read all of it again: a 10 GiB sparse file, 10 GiB every 2 seconds)."""
    out = tmp_path / "out"
    out.mkdir()
    lines = out / "m.jsonl"
    lines.write_bytes(b'{"step": 1, "loss": 1.0}\n{"step": 9, "note": "' + b"a" * LONG)
    read = counted_reads(monkeypatch)
    sink = Kept()
    collector = run.Collector(str(out), sink, [Source("jsonl", "m.jsonl")])
    collector.pass_once()
    first = sum(read)
    assert first >= LONG and [p[2] for p in sink.points] == [{"loss": 1.0}]
    read.clear()
    with lines.open("ab") as handle:
        handle.write(b'x"}\n{"step": 2, "loss": 2.0}\n')
    collector.pass_once()
    assert sum(read) < 4 * run.CHUNK, "the second pass searched the whole line again"
    assert [p[2] for p in sink.points] == [{"loss": 1.0}, {"loss": 2.0}]
    assert collector.counts["line too long"] == 1


@pytest.mark.bulk
def test_the_offsets_of_a_hundred_thousand_files_survive_a_restart(receiver: IngestServer, tmp_path: Path) -> None:
    """A state of 100,000 event files is some 14 MB: it was read only up to 4 MiB, found unreadable,
    and every file was sent again from its start."""
    out = tmp_path / "out"
    tb = out / "tb"
    tb.mkdir(parents=True)
    for i in range(3):
        (tb / f"events.out.tfevents.{1_700_000_000 + i}.host").write_bytes(
            tfevents.frame(tfevents.scalar_event(i, 1.7e9 + i, {"loss": float(i)}))
        )
    env = job_env(receiver, out, [{"format": "tensorboard", "path": "tb"}])
    assert collect(env)["collected_points"] == 3
    state = out / ".tuneplane" / "collector-state.json"
    saved = json.loads(state.read_text())
    entry = next(iter(saved["files"].values()))
    for i in range(100_000):  # the entries of the files a long job rotated away meanwhile
        saved["files"][f"tensorboard:tb/run_{i}/events.out.tfevents.{1_700_000_000 + i}.host.12345.0"] = entry
    state.write_text(json.dumps(saved))
    assert state.stat().st_size > 8 * 2**20
    again = collect(env)
    assert again["collected_points"] == 0, again["skipped"]
    assert "unreadable state file (starting over)" not in again["skipped"]
    assert len(json.loads(state.read_text())["files"]) == 3  # the gone files' entries left


def test_json_lines_values_that_are_not_finite_or_not_utf8_are_counted_and_named(tmp_path: Path) -> None:
    """NaN and infinity (Python's json writes them) and a line of invalid UTF-8 are skipped and said,
    file and line, never dropped without a word; a BOM and CRLF line ends are read as text editors
    write them."""
    out = tmp_path / "out"
    out.mkdir()
    (out / "m.jsonl").write_bytes(
        b'\xef\xbb\xbf{"step": 1, "loss": 1.0}\r\n'
        b'{"step": 2, "loss": NaN, "acc": 0.5}\r\n'
        b'{"step": 3, "loss": -Infinity}\n'
        b'{"step": 4, "lo\xffss": 4.0}\n'
        b'{"step": 5, "loss": 5.0}\n'
    )
    sink = Kept()
    collector = run.Collector(str(out), sink, [Source("jsonl", "m.jsonl")])
    collector.pass_once()
    assert [(p[0], p[2]) for p in sink.points] == [(1, {"loss": 1.0}), (2, {"acc": 0.5}), (5, {"loss": 5.0})]
    assert collector.counts["value not finite"] == 2
    assert any(p.startswith("m.jsonl:2: ") and "'loss'" in p and "NaN" in p for p in collector.problems), (
        collector.problems
    )
    assert any(p.startswith("m.jsonl:3: ") for p in collector.problems), collector.problems
    assert any(p.startswith("m.jsonl:4: ") and "UTF-8" in p and "byte 16" in p for p in collector.problems), (
        collector.problems
    )


def test_a_file_or_folder_that_cannot_be_read_is_named_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Root reads everything, so the refusal the kernel gives another user is given here by `os.open`
    and `os.scandir` (what the loop calls): the file is named with the reason, once however many
    passes, and the readable files are still collected."""
    out = tmp_path / "out"
    (out / "tb" / "locked").mkdir(parents=True)
    for name in ("events.out.tfevents.1.ok", "events.out.tfevents.2.locked"):
        (out / "tb" / name).write_bytes(tfevents.frame(tfevents.scalar_event(1, 1.7e9, {name[-2:]: 1.0})))
    real_open, real_scandir = os.open, os.scandir

    def refusing_open(path: Any, flags: int, mode: int = 0o777, **kwargs: Any) -> int:
        if str(path).endswith(".locked"):
            raise PermissionError(13, "Permission denied", str(path))
        return real_open(path, flags, mode, **kwargs)

    def refusing_scandir(path: Any = ".") -> Any:
        if str(path).endswith("locked"):
            raise PermissionError(13, "Permission denied", str(path))
        return real_scandir(path)

    monkeypatch.setattr(os, "open", refusing_open)
    monkeypatch.setattr(os, "scandir", refusing_scandir)
    sink = Kept()
    collector = run.Collector(str(out), sink, [Source("tensorboard", "tb")])
    for _ in range(3):
        collector.pass_once()
    assert [p[2] for p in sink.points] == [{"ok": 1.0}]
    told = [p for p in collector.problems if "locked" in p]
    assert sorted(told) == sorted(
        [
            "tb/events.out.tfevents.2.locked: cannot be read (Permission denied); let the job's user read it",
            "tb/locked: cannot be read (Permission denied); let the job's user read it",
        ]
    ), collector.problems
    assert collector.counts["unreadable file or folder"] == 2


@pytest.mark.parametrize("make", ["state_dir", "state_fifo", "lock_dir", "folder_file"])
def test_a_state_or_lock_that_is_not_a_file_ends_in_one_line_never_a_hang(
    make: str, receiver: IngestServer, tmp_path: Path
) -> None:
    out = tmp_path / "out"
    (out / "tb").mkdir(parents=True)
    (out / "tb" / "events.out.tfevents.1.host").write_bytes(
        tfevents.frame(tfevents.scalar_event(1, 1.7e9, {"loss": 1.0}))
    )
    folder = out / ".tuneplane"
    if make == "folder_file":
        folder.write_text("not a folder\n")
    else:
        folder.mkdir()
        target = folder / ("collector.lock" if make == "lock_dir" else "collector-state.json")
        if make == "state_fifo":
            os.mkfifo(target)  # opening it to read blocked the collector for good
        else:
            target.mkdir()  # saving over it raised IsADirectoryError
    proc = subprocess.run(
        [sys.executable, "-m", "tuneplane.collector", "--once"],
        env=job_env(receiver, out, [{"format": "tensorboard", "path": "tb"}]),
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
    )
    assert "Traceback" not in proc.stderr, proc.stderr
    told = [line for line in proc.stderr.splitlines() if ".tuneplane" in line or "state" in line]
    assert told and all(line.startswith("tuneplane.collector: ") for line in told), proc.stderr
    if make.startswith("state"):  # the points still arrive; only the offsets cannot be kept
        assert proc.returncode == 0, proc.stderr
        assert series(receiver.store.path, RUN, "loss") == [(1, 1.0)]
    else:
        assert proc.returncode == 2, proc.stderr


@pytest.mark.parametrize("lines_before", [100, 40_000])  # a hole within one read, and one over a MiB
def test_copytruncate_rotation_loses_no_line_after_the_hole(lines_before: int, tmp_path: Path) -> None:
    """logrotate's copytruncate empties the file under a writer that did not open it for appending:
    its next line lands at its old position, after a hole of zeros. That line was read as zeros
    plus JSON: not valid, or a line over 1 MiB, and lost."""
    out = tmp_path / "out"
    out.mkdir()
    path = out / "m.jsonl"
    writer = path.open("w")  # not "a": the file position survives the truncation
    for step in range(lines_before):
        writer.write(json.dumps({"step": step, "loss": 1.0}) + "\n")
    writer.flush()
    sink = Kept()
    collector = run.Collector(str(out), sink, [Source("jsonl", "m.jsonl")])
    collector.pass_once()
    os.truncate(path, 0)  # copytruncate (the copy is beside it, not declared)
    for step in range(lines_before, lines_before + 10):
        writer.write(json.dumps({"step": step, "loss": 2.0}) + "\n")
    writer.close()
    collector.pass_once()
    assert sorted({p[0] for p in sink.points}) == list(range(lines_before + 10))
    assert [p[2] for p in sink.points[-10:]] == [{"loss": 2.0}] * 10
    assert "line too long" not in collector.counts and "bad json line" not in collector.counts
    assert any("zero" in p for p in collector.problems), collector.problems


def test_a_hole_is_stepped_over_where_the_file_system_tells_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A 10 GiB hole was read a chunk at a time, 40,960 reads of zeros per file: where the file
    system tells holes (`SEEK_DATA`), it is stepped over, told as one damaged stretch, and what
    follows it is read."""
    out = tmp_path / "out"
    (out / "tb").mkdir(parents=True)
    probe = out / "probe"
    _sparse(probe, SPARSE)
    with probe.open("rb") as handle:
        try:
            told_hole = not hasattr(os, "SEEK_DATA") or os.lseek(handle.fileno(), 0, os.SEEK_DATA) >= SPARSE
        except OSError as exc:
            told_hole = exc.errno == errno.ENXIO  # only a hole from there to the end
        if not told_hole:
            pytest.skip("this file system does not tell holes (SEEK_DATA); the zeros are read instead")
    probe.unlink()
    after = tfevents.frame(tfevents.scalar_event(7, 1.7e9, {"loss": 7.0}))
    for path, tail in (
        (out / "tb" / "events.out.tfevents.1.sparse", after),
        (out / "m.jsonl", b'{"step": 7, "acc": 0.5}\n'),
    ):
        with path.open("wb") as handle:
            handle.truncate(SPARSE)
            handle.seek(SPARSE)
            handle.write(tail)
    read = counted_reads(monkeypatch)
    sink = Kept()
    collector = run.Collector(str(out), sink, [Source("tensorboard", "tb"), Source("jsonl", "m.jsonl")])
    collector.pass_once()
    assert sorted((p[0], tuple(p[2].items())) for p in sink.points) == [(7, (("acc", 0.5),)), (7, (("loss", 7.0),))]
    assert sum(read) < 64 * run.CHUNK, "the hole was read through"
    told = [p for p in collector.problems if "damaged" in p]
    assert sorted(t.split(":")[0] for t in told) == ["m.jsonl", "tb/events.out.tfevents.1.sparse"], told
    assert all("between byte 0 and " in t for t in told), told
    read.clear()
    collector.pass_once()
    assert sum(read) < 4 * run.CHUNK and len(collector.problems) == 2  # stepped over once, remembered
