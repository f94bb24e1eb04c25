"""The collector's state file in shapes its writer never leaves: JSON of the wrong shape, millions of
empty entries within the size cap, entries of files long gone. A restart never crashes on it, reads
it within bounded memory and time, says once that it was not used, and still collects every point."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tuneplane.collector import run, state, tfevents
from tuneplane.collector.sources import Point, Source
from tuneplane.constants import METRICS_NATIVE_ENV
from tuneplane.ingest import mint_token, series
from tuneplane.ingest.server import IngestServer

TIMEOUT = 60
UNREADABLE = "unreadable state file (starting over)"
SECRET = b"s" * 32
RUN = "run-state-hostile"


@pytest.fixture()
def receiver(tmp_path: Path) -> Iterator[IngestServer]:
    server = IngestServer(tmp_path / "ingest.sqlite", SECRET).start()
    yield server
    server.stop()


class Kept:
    """The SDK's side as the loop sees it: points kept, delivery confirmed at once."""

    def __init__(self) -> None:
        self.points: list[Point] = []

    def send(self, points: list[Point]) -> None:
        self.points.extend(points)

    def flush(self, timeout: float) -> bool:
        return True


def _job(tmp_path: Path) -> Path:
    out = tmp_path / "out"
    (out / "tb").mkdir(parents=True)
    (out / "tb" / "events.out.tfevents.1.host").write_bytes(
        b"".join(tfevents.frame(tfevents.scalar_event(s, 1.7e9 + s, {"loss": float(s)})) for s in range(3))
    )
    (out / ".tuneplane").mkdir()
    return out


def _state(out: Path) -> Path:
    return out / ".tuneplane" / "collector-state.json"


@pytest.mark.parametrize(
    "text",
    [
        '{"version": 1}',
        '{"version": 1, "files": []}',
        "[]",
        "null",
        "3",
        '{"files": {"tensorboard:tb/events.out.tfevents.1.host": 7}}',
        '{"files": {"tensorboard:tb/events.out.tfevents.1.host": {}}}',
        '{"files": {"tensorboard:tb/events.out.tfevents.1.host": {"offset": 5}}}',
        '{"files": {"tensorboard:tb/events.out.tfevents.1.host": {"ino": 1}}}',
        '{"files": {"x": {"offset": "10", "ino": 1}}}',
        '{"files": {"x": {"offset": 10, "ino": null}}}',
    ],
)
def test_a_state_of_the_wrong_shape_is_said_once_and_every_point_still_comes(tmp_path: Path, text: str) -> None:
    out = _job(tmp_path)
    _state(out).write_text(text)
    sink = Kept()
    collector = run.Collector(str(out), sink, [Source("tensorboard", "tb")])
    collector.load()
    collector.pass_once()
    assert [p[0] for p in sink.points] == [0, 1, 2]
    assert collector.counts.get(UNREADABLE) == 1, collector.counts
    told = [p for p in collector.problems if "collector-state.json" in p]
    assert len(told) == 1 and "read from the top" in told[0], collector.problems
    saved = json.loads(_state(out).read_text())  # written anew, in the shape a restart reads
    assert list(saved["files"]) == ["tensorboard:tb/events.out.tfevents.1.host"]


def test_a_state_without_files_does_not_stop_the_collector_process(receiver: IngestServer, tmp_path: Path) -> None:
    """It exited 1 with a traceback on every restart: that job's metrics were never collected."""
    out = _job(tmp_path)
    _state(out).write_text('{"version": 1}\n')
    env = {k: v for k, v in os.environ.items() if not k.startswith("TUNEPLANE_")}
    env.update(
        {
            "TUNEPLANE_JOB_ENABLED": "1",
            "TUNEPLANE_JOB_ENDPOINT": receiver.url,
            "TUNEPLANE_JOB_RUN_ID": RUN,
            "TUNEPLANE_JOB_TOKEN": mint_token(SECRET, RUN),
            "TUNEPLANE_OUT_DIR": str(out),
            "TUNEPLANE_REPORT_FLUSH_INTERVAL": "0.02",
            METRICS_NATIVE_ENV: json.dumps([{"format": "tensorboard", "path": "tb"}]),
        }
    )
    proc = subprocess.run(
        [sys.executable, "-m", "tuneplane.collector", "--once", "--stats"],
        env=env,
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
    )
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr
    assert "collector-state.json" in proc.stderr and "no files object" in proc.stderr, proc.stderr
    stats = json.loads(proc.stdout.strip().splitlines()[-1])
    assert stats["skipped"].get(UNREADABLE) == 1 and stats["files"] == 1, stats
    assert series(receiver.store.path, RUN, "loss") == [(0, 0.0), (1, 1.0), (2, 2.0)]


def test_millions_of_empty_entries_stop_the_parse_at_the_cap(tmp_path: Path) -> None:
    """5.7 million `{}` entries fit in 64 MiB and took 4 GB to load: the parse stops past `MAX_ENTRIES`."""
    path = tmp_path / "collector-state.json"
    count = 3 * state.MAX_ENTRIES
    path.write_text('{"version":1,"files":{' + ",".join(f'"{i}":{{}}' for i in range(count)) + "}}")
    with pytest.raises(state.Unreadable, match=f"over {state.MAX_ENTRIES} entries"):
        state.read(str(path))
    # the same entries under the cap are read (they then fail on their shape, not on their number)
    path.write_text('{"version":1,"files":{' + ",".join(f'"{i}":{{}}' for i in range(state.MAX_ENTRIES)) + "}}")
    with pytest.raises(state.Unreadable, match="integer offset and ino"):
        state.read(str(path))


def test_entries_of_gone_files_leave_before_the_first_save(tmp_path: Path) -> None:
    """A state full of rotated-away files was written back whole at the first commit, before the
    pass that forgets them."""
    out = _job(tmp_path)
    sink = Kept()
    first = run.Collector(str(out), sink, [Source("tensorboard", "tb")])
    first.pass_once()
    saved = json.loads(_state(out).read_text())
    entry = next(iter(saved["files"].values()))
    for i in range(1000):
        saved["files"][f"tensorboard:tb/gone_{i}/events.out.tfevents.{i}.host"] = entry
    _state(out).write_text(json.dumps(saved))
    again = run.Collector(str(out), Kept(), [Source("tensorboard", "tb")])
    again.load()
    assert sorted(again.files) == ["tensorboard:tb/events.out.tfevents.1.host"]
    assert not again.counts


def test_a_state_write_into_storage_gone_out_of_sight_makes_nothing_beneath(tmp_path: Path) -> None:
    """The run's storage gone mid-run (a mount missing): the save fails with a reason, and no new tree
    is laid on the disk beneath the mount point."""
    out = tmp_path / "storage" / "run" / "out"
    (out / run.STATE_DIR).mkdir(parents=True)
    (tmp_path / "storage").rename(tmp_path / "hidden")

    why = state.write(str(out / run.STATE_DIR / "collector.json"), {})

    assert why and not (tmp_path / "storage").exists()
