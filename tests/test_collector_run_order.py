"""A restarted TensorBoard writer, as the real `SummaryWriter` leaves it: the attempt that came later
wins at every step it logged again, whatever its folder sorts as, and `purge_step` drops the earlier
attempt's points from that step on, as TensorBoard does (a chart never shows the stale tail)."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import support.collector

from tuneplane.collector import tfevents
from tuneplane.ingest import series
from tuneplane.ingest.server import IngestServer

SECRET = b"o" * 32
RUN = "run-order"
TIMEOUT = 120


@pytest.fixture()
def receiver(tmp_path: Path) -> Iterator[IngestServer]:
    server = IngestServer(tmp_path / "ingest.sqlite", SECRET).start()
    yield server
    server.stop()


def job_env(receiver: IngestServer, out: Path, native: list[dict[str, Any]]) -> dict[str, str]:
    return support.collector.job_env(receiver, out, native, run=RUN, secret=SECRET)


def collect(env: dict[str, str], *args: str) -> dict[str, Any]:
    return support.collector.collect(env, *args, timeout=TIMEOUT)


def _writer(folder: Path, **kwargs: object) -> object:
    tensorboard = pytest.importorskip("torch.utils.tensorboard")
    return tensorboard.SummaryWriter(str(folder), **kwargs)


@pytest.mark.parametrize(
    "first, second",
    [
        ("version_9", "version_10"),  # Lightning's attempts
        ("Nov30_23-59-58_host", "Dec01_00-00-02_host"),  # transformers'
        ("exp_099", "exp_100"),
    ],
)
def test_the_later_attempt_wins_however_its_folder_sorts(
    first: str, second: str, receiver: IngestServer, tmp_path: Path
) -> None:
    out = tmp_path / "out"
    old = _writer(out / "logs" / first)
    for step in range(10):
        old.add_scalar("loss", 1.0, step, walltime=1_800_000_000.0 + step)
    old.close()
    new = _writer(out / "logs" / second)
    for step in range(5, 10):
        new.add_scalar("loss", 2.0, step, walltime=1_800_000_100.0 + step)
    new.close()
    collect(job_env(receiver, out, [{"format": "tensorboard", "path": "logs"}]))
    assert series(receiver.store.path, RUN, "loss") == [(s, 1.0) for s in range(5)] + [(s, 2.0) for s in range(5, 10)]


def test_the_later_file_wins_in_one_folder_when_names_sort_the_other_way(
    receiver: IngestServer, tmp_path: Path
) -> None:
    """Two writers of the same second: the name's pid part decides nothing (pid 1000 sorts before 999)."""
    out = tmp_path / "out"
    folder = out / "tb"
    folder.mkdir(parents=True)
    now = time.time()
    older = [tfevents.scalar_event(s, now + s, {"loss": 1.0}) for s in range(10)]
    newer = [tfevents.scalar_event(s, now + 50 + s, {"loss": 2.0}) for s in range(5, 10)]
    stamp = int(now)
    for name, events, start in (
        (f"events.out.tfevents.{stamp}.host.999.0", older, now),
        (f"events.out.tfevents.{stamp}.host.1000.0", newer, now + 50),
    ):
        version = tfevents.file_version_event(start)
        (folder / name).write_bytes(b"".join(tfevents.frame(e) for e in [version, *events]))
    collect(job_env(receiver, out, [{"format": "tensorboard", "path": "tb"}]))
    assert series(receiver.store.path, RUN, "loss") == [(s, 1.0) for s in range(5)] + [(s, 2.0) for s in range(5, 10)]


@pytest.mark.parametrize("same_folder", [True, False])
def test_purge_step_drops_the_earlier_attempts_points_from_that_step(
    same_folder: bool, receiver: IngestServer, tmp_path: Path
) -> None:
    """`SummaryWriter(purge_step=5)` after a crash at step 12: TensorBoard shows 0..4 of the first
    attempt and 5..7 of the second, never the first attempt's 8..12."""
    out = tmp_path / "out"
    first = out / "tb" if same_folder else out / "tb" / "exp_001"
    second = out / "tb" if same_folder else out / "tb" / "exp_002"
    old = _writer(first)
    for step in range(13):
        old.add_scalar("loss", 1.0, step)
        old.add_scalar("lr", 0.5, step)
    old.close()
    time.sleep(1.05)  # a restart takes longer than a second; the file names differ
    new = _writer(second, purge_step=5)
    for step in range(5, 8):
        new.add_scalar("loss", 2.0, step)
    new.close()
    result = collect(job_env(receiver, out, [{"format": "tensorboard", "path": "tb"}]))
    assert series(receiver.store.path, RUN, "loss") == [(s, 1.0) for s in range(5)] + [(s, 2.0) for s in range(5, 8)]
    assert series(receiver.store.path, RUN, "lr") == [(s, 0.5) for s in range(5)]  # purged for every tag
    assert result["skipped"]["purged by a later purge_step"] == 16
    # exactly once: a second pass and a restart send nothing more, and keep the purge
    assert collect(job_env(receiver, out, [{"format": "tensorboard", "path": "tb"}]))["collected_points"] == 0
    os.remove(out / ".tuneplane" / "collector-state.json")
    collect(job_env(receiver, out, [{"format": "tensorboard", "path": "tb"}]))
    assert series(receiver.store.path, RUN, "loss")[-1] == (7, 2.0)
    assert len(series(receiver.store.path, RUN, "loss")) == 8


class Kept:
    """The SDK's side as the loop sees it: points kept, delivery confirmed at once."""

    def __init__(self) -> None:
        self.points: list[tuple[int, float | None, dict[str, float]]] = []

    def send(self, points: list[tuple[int, float | None, dict[str, float]]]) -> None:
        self.points.extend(points)

    def flush(self, timeout: float) -> bool:
        return True


def test_a_purge_step_after_the_earlier_points_were_sent_is_told_once(tmp_path: Path) -> None:
    """Beside the job the first attempt's points are sent as they are written; the restart's
    purge_step cannot take them back here, and the collector says so, once, naming the file."""
    from tuneplane.collector import run
    from tuneplane.collector.sources import Source

    out = tmp_path / "out"
    old = _writer(out / "tb" / "exp_001")
    for step in range(10):
        old.add_scalar("loss", 1.0, step)
    old.close()
    collector = run.Collector(str(out), Kept(), [Source("tensorboard", "tb")])
    collector.pass_once()
    new = _writer(out / "tb" / "exp_002", purge_step=5)
    new.add_scalar("loss", 2.0, 5)
    new.close()
    for _ in range(3):
        collector.pass_once()
    told = [p for p in collector.problems if "purge_step 5" in p]
    assert len(told) == 1 and told[0].startswith("tb/exp_001/events.out.tfevents."), collector.problems
    assert collector.counts["purge_step after its points were sent"] == 1
    # a collector started again (the last pass) reads nothing new and tells nothing
    collector.save()
    again = run.Collector(str(out), Kept(), [Source("tensorboard", "tb")])
    again.load()
    again.pass_once()
    assert not again.problems and not again.counts


@pytest.mark.parametrize("writer_module", ["torch.utils.tensorboard", "tensorboardX"])
def test_steps_across_the_int64_range_keep_their_value_and_order(
    writer_module: str, receiver: IngestServer, tmp_path: Path
) -> None:
    module = pytest.importorskip(writer_module)
    out = tmp_path / "out"
    writer = module.SummaryWriter(str(out / "tb"))
    steps = [0, 2**31, 2**53 + 1, 2**62, 2**63 - 1]  # past float precision: a step is an integer
    for index, step in enumerate(steps):
        writer.add_scalar("loss", float(index), step)
    writer.close()
    collect(job_env(receiver, out, [{"format": "tensorboard", "path": "tb"}]))
    assert series(receiver.store.path, RUN, "loss") == [(step, float(i)) for i, step in enumerate(steps)]


def test_a_purge_step_written_one_record_at_a_time_is_still_found(tmp_path: Path) -> None:
    """Torch writes its file's first three records (file version, file version at step N, the
    SessionLog START) each in an append of its own: a pass between the second and the third took the
    file as one without a purge_step, for good. Here a real writer's file is laid down record by
    record, a pass after each."""
    from tuneplane.collector import run
    from tuneplane.collector.sources import Source

    out = tmp_path / "out"
    old = _writer(out / "tb" / "exp_001")
    for step in range(10):
        old.add_scalar("loss", 1.0, step)
    old.close()
    staged = _writer(tmp_path / "staged", purge_step=5)
    staged.add_scalar("loss", 2.0, 5)
    staged.close()
    (written,) = (tmp_path / "staged").iterdir()
    data = written.read_bytes()
    records = []
    offset = 0
    while offset < len(data):
        end = offset + 12 + int.from_bytes(data[offset : offset + 8], "little") + 4
        records.append(data[offset:end])
        offset = end
    assert len(records) >= 4  # file version, file version at step 5, START, the scalar
    target = out / "tb" / "exp_002" / written.name
    target.parent.mkdir()
    target.write_bytes(b"")
    (earlier,) = (out / "tb" / "exp_001").iterdir()
    first = f"tb/exp_001/{earlier.name}"
    files = [(first, str(earlier)), (f"tb/exp_002/{written.name}", str(target))]
    sink = Kept()
    collector = run.Collector(str(out), sink, [Source("tensorboard", "tb")])
    for record in records:
        with target.open("ab") as handle:
            handle.write(record)
        collector.order.arrange(Source("tensorboard", "tb"), files)
    assert collector.order.cutoffs == {first: 5}
    collector.pass_once()
    assert sorted(p[0] for p in sink.points if p[2] == {"loss": 1.0}) == [0, 1, 2, 3, 4]


@pytest.mark.parametrize("sent_past_the_cut", [True, False])
def test_a_purge_step_after_a_restart_is_told_when_the_earlier_points_were_already_sent(
    tmp_path: Path, sent_past_the_cut: bool
) -> None:
    """The notice was kept in memory: a collector restarted after sending the first attempt's points,
    then seeing the restart's purge_step, said nothing. It is told once, and not by the next restart;
    when what was sent stops before the cut, the rest is purged and nothing is told."""
    from tuneplane.collector import run
    from tuneplane.collector.sources import Source

    out = tmp_path / "out"
    old = _writer(out / "tb" / "exp_001")
    for step in range(10 if sent_past_the_cut else 4):
        old.add_scalar("loss", 1.0, step)
    old.flush()
    first = run.Collector(str(out), Kept(), [Source("tensorboard", "tb")])
    first.pass_once()
    first.save()
    for step in range(10 if sent_past_the_cut else 4, 10):
        old.add_scalar("loss", 1.0, step)
    old.close()
    new = _writer(out / "tb" / "exp_002", purge_step=5)
    new.add_scalar("loss", 2.0, 5)
    new.close()
    sink = Kept()
    second = run.Collector(str(out), sink, [Source("tensorboard", "tb")])
    second.load()
    for _ in range(2):
        second.pass_once()
    told = [p for p in second.problems if "purge_step 5" in p]
    if sent_past_the_cut:
        assert len(told) == 1 and told[0].startswith("tb/exp_001/events.out.tfevents."), second.problems
        assert second.counts == {"purge_step after its points were sent": 1}
        assert [(p[0], p[2]) for p in sink.points] == [(5, {"loss": 2.0})]
    else:
        assert not told and second.counts == {"purged by a later purge_step": 5}, second.counts
        assert [(p[0], p[2]) for p in sink.points] == [(4, {"loss": 1.0}), (5, {"loss": 2.0})]
    second.save()
    third = run.Collector(str(out), Kept(), [Source("tensorboard", "tb")])
    third.load()
    third.pass_once()
    assert not third.problems and not third.counts
