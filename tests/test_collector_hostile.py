"""The native collector against what real jobs leave behind: damaged framing in the middle of an
event file, offsets from a damaged or foreign state file, JSON lines longer than a read, bad lines
named by file and line, the last line of a finished job with no newline."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import support.collector

from tuneplane.collector import sources, tfevents
from tuneplane.ingest import mint_token, series, summary
from tuneplane.ingest.server import IngestServer

SECRET = b"h" * 32
RUN = "run-hostile"
TIMEOUT = 120
TB = [{"format": "tensorboard", "path": "tb"}]


@pytest.fixture()
def receiver(tmp_path: Path) -> Iterator[IngestServer]:
    server = IngestServer(tmp_path / "ingest.sqlite", SECRET).start()
    yield server
    server.stop()


def job_env(receiver: IngestServer, out: Path, native: list[dict[str, Any]]) -> dict[str, str]:
    return support.collector.job_env(receiver, out, native, run=RUN, secret=SECRET)


def collect(env: dict[str, str], *args: str) -> dict[str, Any]:
    return support.collector.collect(env, *args, timeout=TIMEOUT)


def record(step: int, value: float, tag: str = "loss") -> bytes:
    return tfevents.frame(tfevents.scalar_event(step, 1.7e9 + step, {tag: value}))


def test_a_damaged_length_in_the_middle_loses_only_that_record(receiver: IngestServer, tmp_path: Path) -> None:
    out = tmp_path / "out"
    events = out / "tb" / "events.out.tfevents.1.host"
    events.parent.mkdir(parents=True)
    damaged = bytearray(record(5, 5.0))
    damaged[2] ^= 0x40  # the length no longer matches its CRC
    events.write_bytes(
        b"".join(record(s, float(s)) for s in range(5))
        + bytes(damaged)
        + b"".join(record(s, float(s)) for s in range(6, 10))
    )
    result = collect(job_env(receiver, out, TB))
    assert [s for s, _ in series(receiver.store.path, RUN, "loss")] == [0, 1, 2, 3, 4, 6, 7, 8, 9]
    assert result["skipped"] == {"corrupt tensorboard record": 1}


def test_garbage_between_records_is_skipped_and_later_records_still_arrive(
    receiver: IngestServer, tmp_path: Path
) -> None:
    out = tmp_path / "out"
    events = out / "tb" / "events.out.tfevents.2.host"
    events.parent.mkdir(parents=True)
    events.write_bytes(record(0, 0.0) + os.urandom(3000) + record(1, 1.0))
    env = job_env(receiver, out, TB)
    collect(env)
    with events.open("ab") as handle:
        handle.write(record(2, 2.0))  # the writer carries on after the damage
    collect(env)
    assert series(receiver.store.path, RUN, "loss") == [(0, 0.0), (1, 1.0), (2, 2.0)]


def _state(out: Path) -> Path:
    return out / ".tuneplane" / "collector-state.json"


@pytest.mark.parametrize("offset", [-5, 7, 10**12, "abc", None, 1.5])
def test_a_damaged_offset_in_the_state_file_neither_crashes_nor_loses_points(
    receiver: IngestServer, tmp_path: Path, offset: Any
) -> None:
    out = tmp_path / "out"
    events = out / "tb" / "events.out.tfevents.3.host"
    events.parent.mkdir(parents=True)
    events.write_bytes(b"".join(record(s, float(s)) for s in range(10)))
    env = job_env(receiver, out, TB)
    collect(env)
    state = json.loads(_state(out).read_text())
    (name,) = state["files"]
    state["files"][name]["offset"] = offset
    _state(out).write_text(json.dumps(state))
    with events.open("ab") as handle:
        handle.write(b"".join(record(s, float(s)) for s in range(10, 15)))
    collect(env)
    assert [s for s, _ in series(receiver.store.path, RUN, "loss")] == list(range(15))


def test_offsets_of_another_file_with_the_same_name_are_not_trusted(receiver: IngestServer, tmp_path: Path) -> None:
    out = tmp_path / "out"
    events = out / "tb" / "events.out.tfevents.4.host"
    events.parent.mkdir(parents=True)
    events.write_bytes(b"".join(record(s, float(s), "a") for s in range(3)))
    env = job_env(receiver, out, TB)
    collect(env)
    first_offset = events.stat().st_size
    # The file is replaced in place by a longer one with the same inode (a job restarted from scratch
    # that truncates and rewrites): an offset that lands inside a record must not hide what follows.
    with events.open("r+b") as handle:
        handle.truncate(0)
        handle.write(b"".join(record(s, float(s), "bb") for s in range(20)))
    assert events.stat().st_size > first_offset
    collect(env)
    assert [s for s, _ in series(receiver.store.path, RUN, "bb")] == list(range(20))


def test_a_json_line_longer_than_one_read_does_not_stall_the_file(receiver: IngestServer, tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    path = out / "m.jsonl"
    big = json.dumps({"step": 1, "loss": 1.0, "note": "x" * 400_000})  # 400 kB: larger than one read
    path.write_text(
        json.dumps({"step": 0, "loss": 0.5}) + "\n" + big + "\n" + json.dumps({"step": 2, "loss": 0.25}) + "\n"
    )
    collect(job_env(receiver, out, [{"format": "jsonl", "path": "m.jsonl"}]))
    assert series(receiver.store.path, RUN, "loss") == [(0, 0.5), (1, 1.0), (2, 0.25)]


def test_a_line_past_the_limit_is_skipped_whole_and_the_next_line_is_read(
    receiver: IngestServer, tmp_path: Path
) -> None:
    out = tmp_path / "out"
    out.mkdir()
    path = out / "m.jsonl"
    huge = '{"step": 1, "note": "' + "y" * (3 * sources.MAX_LINE) + '"}'
    path.write_text(huge + "\n" + json.dumps({"step": 2, "loss": 0.25}) + "\n")
    result = collect(job_env(receiver, out, [{"format": "jsonl", "path": "m.jsonl"}]))
    assert series(receiver.store.path, RUN, "loss") == [(2, 0.25)]
    assert result["skipped"] == {"line too long": 1}


def test_bad_lines_are_named_by_file_and_line(receiver: IngestServer, tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    (out / "m.jsonl").write_text(
        '{"step": 0, "loss": 1}\n{"step": 1, "loss": \n[1, 2]\n{"loss": 3}\n{"step": 4, "loss": 4}\n'
    )
    result = collect(job_env(receiver, out, [{"format": "jsonl", "path": "m.jsonl"}]))
    assert series(receiver.store.path, RUN, "loss") == [(0, 1.0), (4, 4.0)]
    assert "m.jsonl:2:" in result["stderr"] and "m.jsonl:3:" in result["stderr"]
    assert "m.jsonl:4:" in result["stderr"] and "step" in result["stderr"]


def test_the_finished_jobs_last_line_without_a_newline_is_collected(receiver: IngestServer, tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    (out / "m.jsonl").write_text("\n".join(json.dumps({"step": s, "loss": float(s)}) for s in range(3)))
    env = job_env(receiver, out, [{"format": "jsonl", "path": "m.jsonl"}])
    collect(env, "--final")
    assert [s for s, _ in series(receiver.store.path, RUN, "loss")] == [0, 1, 2]


def test_real_writers_mixed_summaries_and_several_files(receiver: IngestServer, tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    tensorboard = pytest.importorskip("torch.utils.tensorboard")
    tbx = pytest.importorskip("tensorboardX")
    out = tmp_path / "out"
    first = tensorboard.SummaryWriter(str(out / "tb"), filename_suffix=".a")
    for step in range(4):
        first.add_scalar("train/loss", 4.0 - step, step)
        first.add_histogram("weights", torch.arange(10.0) * step, step)
        first.add_image("img", torch.zeros(3, 8, 8), step)
        first.add_text("note", f"step {step}", step)
        first.add_scalar("train/lr", 1e-8 * (step + 1), step, new_style=True, double_precision=True)
    first.close()
    env = job_env(receiver, out, TB)
    collect(env)
    second = tbx.SummaryWriter(str(out / "tb"), filename_suffix=".b")  # a file appearing later
    for step in range(4, 8):
        second.add_scalar("train/loss", 4.0 - step, step)
        second.add_histogram("weights", torch.arange(10.0).numpy(), step)
        second.add_text("note", "later", step)
    second.close()
    collect(env)
    got = summary(receiver.store.path, RUN)
    assert sorted(got) == ["train/loss", "train/lr"]
    assert series(receiver.store.path, RUN, "train/loss") == [(s, 4.0 - s) for s in range(8)]
    assert [v for _, v in series(receiver.store.path, RUN, "train/lr")] == pytest.approx(
        [1e-8 * (s + 1) for s in range(4)], rel=1e-9
    )


def test_run_subdirectories_are_not_part_of_the_name(receiver: IngestServer, tmp_path: Path) -> None:
    """NeMo-RL writes `logs/exp_001/tensorboard/`, and a restarted job `exp_002/`: one series named
    by its tags; `add_scalars` folders still keep their runs apart."""
    tensorboard = pytest.importorskip("torch.utils.tensorboard")
    out = tmp_path / "out"
    first = tensorboard.SummaryWriter(str(out / "logs" / "exp_001" / "tensorboard"))
    for step in range(3):
        first.add_scalar("train/loss", 3.0 - step, step)
        first.add_scalar("validation/val_loss", 4.0 - step, step)
    first.close()
    again = tensorboard.SummaryWriter(str(out / "logs" / "exp_002" / "tensorboard"))  # resumed at step 3
    for step in range(3, 5):
        again.add_scalar("train/loss", 3.0 - step, step)
    again.add_scalars("val", {"acc": 0.5, "f1": 0.25}, 4)
    again.close()
    collect(job_env(receiver, out, [{"format": "tensorboard", "path": "logs"}]))
    got = summary(receiver.store.path, RUN)
    assert sorted(got) == ["train/loss", "val/acc", "val/f1", "validation/val_loss"], sorted(got)
    assert series(receiver.store.path, RUN, "train/loss") == [(s, 3.0 - s) for s in range(5)]


def test_sibling_folders_with_the_same_tags_stay_apart(receiver: IngestServer, tmp_path: Path) -> None:
    """Keras writes `logs/train/` and `logs/validation/` with the same tags: two series, never one
    overwriting the other; transformers' `runs/<date>_<host>/` and Lightning's `version_N/` name an
    attempt of the run, not a series."""
    tensorboard = pytest.importorskip("torch.utils.tensorboard")
    out = tmp_path / "out"
    for folder, offset in (("train", 0.0), ("validation", 10.0)):
        writer = tensorboard.SummaryWriter(str(out / "logs" / folder))
        for step in range(3):
            writer.add_scalar("epoch_loss", offset + step, step)
        writer.close()
    hf = tensorboard.SummaryWriter(str(out / "hf" / "runs" / "Dec01_12-00-00_node-7"))
    hf.add_scalar("train/loss", 1.5, 1)
    hf.close()
    lightning = tensorboard.SummaryWriter(str(out / "pl" / "lightning_logs" / "version_3"))
    lightning.add_scalar("val_acc", 0.75, 2)
    lightning.close()
    collect(
        job_env(
            receiver,
            out,
            [
                {"format": "tensorboard", "path": "logs"},
                {"format": "tensorboard", "path": "hf"},
                {"format": "tensorboard", "path": "pl"},
            ],
        )
    )
    got = summary(receiver.store.path, RUN)
    assert sorted(got) == ["train/epoch_loss", "train/loss", "val_acc", "validation/epoch_loss"], sorted(got)
    assert series(receiver.store.path, RUN, "train/epoch_loss") == [(s, float(s)) for s in range(3)]
    assert series(receiver.store.path, RUN, "validation/epoch_loss") == [(s, 10.0 + s) for s in range(3)]


def test_a_json_lines_time_is_read_in_the_forms_writers_use(receiver: IngestServer, tmp_path: Path) -> None:
    import time

    from tuneplane.ingest import timed_series

    out = tmp_path / "out"
    out.mkdir()
    rows = [
        {"step": 0, "hw/gpu": 1.0, "ts": 1_800_000_000.5},  # seconds
        {"step": 1, "hw/gpu": 2.0, "time": "2027-01-15T08:00:01Z"},  # ISO-8601
        {"step": 2, "hw/gpu": 3.0, "wall_time": 1_800_000_002_000},  # milliseconds
        {"step": 3, "hw/gpu": 4.0},
    ]  # none: when it was collected
    (out / "m.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    before = time.time()
    collect(job_env(receiver, out, [{"format": "jsonl", "path": "m.jsonl"}]))
    times = [t for _, _, t in timed_series(receiver.store.path, RUN, "hw/gpu")]
    assert times[:3] == pytest.approx([1_800_000_000.5, 1_800_000_001.0, 1_800_000_002.0], abs=1e-3)
    assert before - 1 <= times[3] <= time.time() + 1  # not 1970


def test_a_zeroed_stretch_is_stepped_over_and_a_length_with_a_zero_byte_is_still_found() -> None:
    records = [record(s, float(s)) for s in range(3)]
    sized = tfevents.frame(b"\x08" + b"x" * 255)  # a 256-byte payload: its length starts with a zero byte
    data = records[0] + b"\0" * 4_000_000 + records[1] + b"\0\0\0" + sized + records[2]
    found = tfevents.read_records(data)
    assert found.offset == len(data) and found.corrupt == 2
    assert [tfevents.scalars(p)[0].step for p in found.payloads if tfevents.scalars(p)] == [0, 1, 2]
    assert sized[12:-4] in found.payloads


def test_the_search_for_event_files_is_bounded_in_depth(tmp_path: Path) -> None:
    out = tmp_path / "out"
    shallow = out / "tb" / "a" / "b"
    deep = out / "tb" / Path(*["d"] * (sources.MAX_DEPTH + 4))
    for folder in (shallow, deep):
        folder.mkdir(parents=True)
        (folder / "events.out.tfevents.1.host").write_bytes(record(0, 1.0))
    found = [rel for rel, _ in sources.files_of(str(out), sources.parse(json.dumps(TB))[0])]
    assert found == ["tb/a/b/events.out.tfevents.1.host"]


def test_add_hparams_metrics_are_named_by_their_tag(receiver: IngestServer, tmp_path: Path) -> None:
    """`SummaryWriter.add_hparams(params, metrics)` writes its metrics into a folder named by the
    time of the call (`<out>/tb/1796154182.67/`): that folder names no series, so the metric is keyed
    `hparam/accuracy`, the same in a rerun."""
    tensorboard = pytest.importorskip("torch.utils.tensorboard")
    out = tmp_path / "out"
    writer = tensorboard.SummaryWriter(str(out / "tb"))
    writer.add_scalar("train/loss", 0.5, 1)
    writer.add_hparams({"lr": 0.1, "layers": 2}, {"hparam/accuracy": 0.75})
    writer.close()
    collect(job_env(receiver, out, [{"format": "tensorboard", "path": "tb"}]))
    got = summary(receiver.store.path, RUN)
    assert sorted(got) == ["hparam/accuracy", "train/loss"], sorted(got)
    assert got["hparam/accuracy"]["last"] == 0.75


@pytest.mark.parametrize("writer_module", ["torch.utils.tensorboard", "tensorboardX"])
def test_add_scalars_series_are_keyed_main_tag_then_name(
    writer_module: str, receiver: IngestServer, tmp_path: Path
) -> None:
    """`add_scalars("Loss", {"train": a, "test": b})` draws one TensorBoard chart `Loss` with a
    line per name; the writers store it as `Loss_train/` and `Loss_test/` folders whose events carry
    the tag `Loss`. The keys are `Loss/train` and `Loss/test` (what the person wrote), which read as
    `train/loss` and `validation/loss`."""
    module = pytest.importorskip(writer_module)
    out = tmp_path / "out"
    writer = module.SummaryWriter(str(out / "tb"))
    for step in range(3):
        writer.add_scalars("Loss", {"train": 1.0 / (step + 1), "test": 2.0 / (step + 1)}, step)
        writer.add_scalars("run/x", {"sin": 0.5, "cos": 0.25}, step)  # a main tag with a slash
    writer.close()
    collect(job_env(receiver, out, [{"format": "tensorboard", "path": "tb"}]))
    got = summary(receiver.store.path, RUN)
    assert sorted(got) == ["Loss/test", "Loss/train", "run/x/cos", "run/x/sin"], sorted(got)
    assert series(receiver.store.path, RUN, "Loss/train") == [(s, pytest.approx(1.0 / (s + 1))) for s in range(3)]
    from tuneplane.metrics.vocab import Vocabulary

    assert list(Vocabulary().pick(got)) == ["train/loss", "validation/loss", "run/x/cos", "run/x/sin"]


def test_a_state_folder_that_links_out_of_the_out_dir_is_refused(receiver: IngestServer, tmp_path: Path) -> None:
    """`.tuneplane` linking elsewhere: the collector neither reads, removes nor writes there (it removed
    the unsent files it delivered and kept its lock and offsets in the other folder)."""
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    unsent = outside / "report-unsent-r0-1-x.jsonl"
    unsent.write_text(json.dumps([1, 1.7e9, {"not-this-job": 1.0}]) + "\n")
    out = tmp_path / "out"
    out.mkdir()
    (out / ".tuneplane").symlink_to(outside)
    proc = subprocess.run(
        [sys.executable, "-m", "tuneplane.collector", "--once", "--final"],
        env=job_env(receiver, out, []),
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
    )
    assert proc.returncode == 2 and ".tuneplane is a link out of the out dir" in proc.stderr, proc.stderr
    assert sorted(p.name for p in outside.iterdir()) == [unsent.name]
    assert summary(receiver.store.path, RUN) == {}


def test_offsets_of_removed_event_files_leave_the_state(receiver: IngestServer, tmp_path: Path) -> None:
    out = tmp_path / "out"
    for name in ("a", "b", "c"):
        path = out / "tb" / f"events.out.tfevents.1.{name}"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(b"".join(record(step, 1.0, tag=name) for step in range(3)))
    env = job_env(receiver, out, TB)
    assert collect(env)["collected_points"] == 9
    (out / "tb" / "events.out.tfevents.1.a").unlink()  # rotated away
    (out / "tb" / "events.out.tfevents.1.b").unlink()
    assert collect(env)["collected_points"] == 0
    state = json.loads((out / ".tuneplane" / "collector-state.json").read_text())
    assert sorted(state["files"]) == ["tensorboard:tb/events.out.tfevents.1.c"]
    assert collect(env)["collected_points"] == 0  # the file still there is not read again
    assert {key: got["count"] for key, got in summary(receiver.store.path, RUN).items()} == {"a": 3, "b": 3, "c": 3}


def test_an_unreachable_receiver_does_not_hold_the_restart_back(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Before the trainer starts, an earlier attempt's leftovers go up only when the receiver answers:
    while it is down the pass (30 s of retries) is skipped with one line, and the files stay for the
    pass after the job."""
    import socket

    import tuneplane.collector as collector

    out = tmp_path / "out"
    (out / ".tuneplane").mkdir(parents=True)
    left = out / ".tuneplane" / "report-unsent-1.jsonl"
    left.write_text('{"step": 1, "values": {"loss": 1.0}}\n')
    with socket.socket() as sock:  # a port nothing listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    env = {
        "TUNEPLANE_JOB_ENABLED": "1",
        "TUNEPLANE_JOB_ENDPOINT": f"http://127.0.0.1:{port}",
        "TUNEPLANE_JOB_RUN_ID": RUN,
        "TUNEPLANE_JOB_TOKEN": mint_token(SECRET, RUN),
        "TUNEPLANE_OUT_DIR": str(out),
    }
    passes: list[float] = []
    monkeypatch.setattr(collector, "_last_pass", lambda env, timeout: passes.append(timeout) or True)
    assert collector.collect_before(env, 30) is False
    assert passes == [] and left.exists()
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "unreachable" in err and f"127.0.0.1:{port}" in err, err
    for endpoint in ("", "not a url", "http://[::1"):  # no host, or one that does not parse: said, not raised
        env["TUNEPLANE_JOB_ENDPOINT"] = endpoint
        assert collector.collect_before(env, 30) is False
        assert "unreachable" in capsys.readouterr().err
    with socket.socket() as sock:  # a receiver that answers: the pass runs, with the whole timeout
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        env["TUNEPLANE_JOB_ENDPOINT"] = f"http://127.0.0.1:{sock.getsockname()[1]}"
        assert collector.collect_before(env, 30) is True
    assert passes == [30]


def test_a_spill_file_is_adopted_only_on_its_host_once_its_writer_is_gone(tmp_path: Path) -> None:
    """On NFS (nolock, local_lock) and Lustre (localflock) a lock is node-local: another node's live
    overflow file can be locked here. So the name carries host and pid, and a file is adopted only when
    it is this host's, its pid is gone, and its lock is free; a name from before the host part goes by
    its lock alone, as before."""
    import fcntl

    from tuneplane.collector.run import adopt_orphans
    from tuneplane.report._spill import host_tag, owner_of, spill_name

    gone = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True, timeout=60, check=True
    )
    dead = int(gone.stdout)
    here = host_tag()
    assert here and "/" not in here and owner_of(spill_name("r0", 7, "ab" * 8)) == (7, here)
    folder = tmp_path / ".tuneplane"
    folder.mkdir()
    names = {
        "dead_here": spill_name("r0", dead, "a" * 16),
        "live_here": spill_name("r0", os.getpid(), "b" * 16),
        "dead_elsewhere": f"report-spill-rank1-{dead}-{'c' * 16}-h{here}x-node.jsonl",
        "old_free": f"report-spill-r0-{dead}-{'d' * 16}.jsonl",
        "old_held": f"report-spill-r0-1-{'e' * 16}.jsonl",
    }
    for name in names.values():
        (folder / name).write_text('[1, 0, {"loss": 1.0}]\n')
    held = os.open(folder / names["old_held"], os.O_RDONLY)
    try:
        fcntl.flock(held, fcntl.LOCK_EX)
        adopt_orphans(str(folder))
    finally:
        os.close(held)
    left = {path.name for path in folder.iterdir()}
    for kind, name in names.items():
        adopted = kind in ("dead_here", "old_free")
        assert (name.replace("report-spill-", "report-unsent-", 1) in left) is adopted, (kind, sorted(left))
        assert (name in left) is not adopted, (kind, sorted(left))


class _Delivered:
    """The collector's sink in memory, confirming every flush (what `tuneplane.report` would send)."""

    def __init__(self) -> None:
        self.points: list[Any] = []

    def send(self, points: list[Any]) -> None:
        self.points.extend(points)

    def flush(self, timeout: float) -> bool:
        return True


def test_a_listing_that_fails_for_a_moment_forgets_no_offset(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A folder listing that comes back empty once (a network file system's blip) while the files are
    still there: their offsets stay, so the next pass reads nothing again; only a file really gone is
    forgotten."""
    from tuneplane.collector.run import Collector

    out = tmp_path / "out"
    for name in ("a", "b"):
        path = out / "tb" / f"events.out.tfevents.1.{name}"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(b"".join(record(step, 1.0, tag=name) for step in range(3)))
    sink = _Delivered()
    collector = Collector(str(out), sink, sources.parse(json.dumps(TB)))
    assert collector.lock(5)
    try:
        assert collector.pass_once() == 6
        listing = sources.files_of
        monkeypatch.setattr(sources, "files_of", lambda out_dir, source, *told: iter(()))
        assert collector.pass_once() == 0
        saved = json.loads((out / ".tuneplane" / "collector-state.json").read_text())["files"]
        assert sorted(saved) == ["tensorboard:tb/events.out.tfevents.1.a", "tensorboard:tb/events.out.tfevents.1.b"]
        monkeypatch.setattr(sources, "files_of", listing)
        assert collector.pass_once() == 0  # nothing read twice
        (out / "tb" / "events.out.tfevents.1.a").unlink()
        collector.pass_once()
        assert sorted(collector.files) == ["tensorboard:tb/events.out.tfevents.1.b"]
    finally:
        collector.unlock()
    assert len(sink.points) == 6
