"""The native collector: TensorBoard event files (written by the real writers) and JSON lines, sent
through a real receiver, exactly once across restarts, truncated records left until complete."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from support.wait import wait_until

from tuneplane.collector import sources, tfevents
from tuneplane.constants import METRICS_NATIVE_ENV
from tuneplane.ingest import mint_token, series, summary
from tuneplane.ingest.server import IngestServer

SECRET = b"c" * 32
RUN = "run-collect"
TIMEOUT = 120


@pytest.fixture()
def receiver(tmp_path: Path) -> Iterator[IngestServer]:
    server = IngestServer(tmp_path / "ingest.sqlite", SECRET).start()
    yield server
    server.stop()


def job_env(receiver: IngestServer, out: Path, native: list[dict[str, Any]] | None = None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TUNEPLANE_")}
    env.update(
        {
            "TUNEPLANE_JOB_ENABLED": "1",
            "TUNEPLANE_JOB_ENDPOINT": receiver.url,
            "TUNEPLANE_JOB_RUN_ID": RUN,
            "TUNEPLANE_JOB_TOKEN": mint_token(SECRET, RUN),
            "TUNEPLANE_OUT_DIR": str(out),
            "TUNEPLANE_REPORT_FLUSH_INTERVAL": "0.02",
            "TUNEPLANE_REPORT_RETRY_BASE": "0.02",
            "TUNEPLANE_REPORT_RETRY_CAP": "0.2",
        }
    )
    if native is not None:
        env[METRICS_NATIVE_ENV] = json.dumps(native)
    return env


def collect(env: dict[str, str], *args: str) -> dict[str, Any]:
    proc = subprocess.run(
        [sys.executable, "-m", "tuneplane.collector", "--once", "--stats", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
    )
    assert proc.returncode == 0, proc.stderr
    return dict(json.loads(proc.stdout.strip().splitlines()[-1]), stderr=proc.stderr)


def test_crc32c_matches_the_standard_check_value() -> None:
    assert tfevents.crc32c(b"123456789") == 0xE3069283
    assert tfevents.crc32c(b"") == 0
    assert tfevents.crc32c(b"\x00" * 32) == 0x8A9136AA  # RFC 3720 B.4 test vector


def test_torch_summary_writer_scalars_are_collected(receiver: IngestServer, tmp_path: Path) -> None:
    tensorboard = pytest.importorskip("torch.utils.tensorboard")
    out = tmp_path / "out"
    writer = tensorboard.SummaryWriter(str(out / "logs" / "tb"))
    for step in range(20):
        writer.add_scalar("train/loss", 1.0 / (step + 1), step)
        writer.add_scalar("train/lr", 1e-3, step, new_style=True)  # TensorBoard 2 tensor form
    writer.add_scalars("val", {"acc": 0.5, "f1": 0.25}, 19)  # subdirectories per tag
    writer.close()
    result = collect(job_env(receiver, out, [{"format": "tensorboard", "path": "logs/tb"}]))
    got = summary(receiver.store.path, RUN)
    assert got["train/loss"]["count"] == 20 and got["train/loss"]["last"] == pytest.approx(0.05)
    assert got["train/lr"]["count"] == 20 and got["train/lr"]["last"] == pytest.approx(1e-3)
    assert got["val/acc"]["last"] == 0.5 and got["val/f1"]["last"] == 0.25  # add_scalars("val", {...})
    assert result["collected_points"] == 42


def test_each_events_wall_time_is_the_points_time(receiver: IngestServer, tmp_path: Path) -> None:
    tensorboard = pytest.importorskip("torch.utils.tensorboard")
    from tuneplane.ingest import timed_series

    out = tmp_path / "out"
    writer = tensorboard.SummaryWriter(str(out / "tb"))
    start = 1_800_000_000.0
    for step in range(5):
        writer.add_scalar("train/loss", 1.0 / (step + 1), step, walltime=start + step)
        writer.add_scalar("hw/cpu_util", 10.0 * step, step, walltime=start + 60.0 * step)  # same step, own time
    writer.close()
    collect(job_env(receiver, out, [{"format": "tensorboard", "path": "tb"}]))
    hw = timed_series(receiver.store.path, RUN, "hw/cpu_util")
    assert [(s, v) for s, v, _ in hw] == [(s, 10.0 * s) for s in range(5)]
    assert [t for _, _, t in hw] == pytest.approx([start + 60.0 * s for s in range(5)], abs=0.002)
    loss = timed_series(receiver.store.path, RUN, "train/loss")
    assert [t for _, _, t in loss] == pytest.approx([start + s for s in range(5)], abs=0.002)


def test_tensorboardx_scalars_are_collected(receiver: IngestServer, tmp_path: Path) -> None:
    tbx = pytest.importorskip("tensorboardX")
    out = tmp_path / "out"
    writer = tbx.SummaryWriter(str(out / "tb"))
    for step in range(5):
        writer.add_scalar("loss", 2.0 - step, step)
    writer.close()
    collect(job_env(receiver, out, [{"format": "tensorboard", "path": "tb"}]))
    assert series(receiver.store.path, RUN, "loss") == [(s, 2.0 - s) for s in range(5)]


def _events(path: Path, steps: range, tags: tuple[str, ...] = ("loss",)) -> bytes:
    data = b"".join(tfevents.frame(tfevents.scalar_event(s, 1.7e9 + s, {t: float(s) for t in tags})) for s in steps)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("ab") as handle:
        handle.write(data)
    return data


def test_restart_mid_file_stores_no_point_twice_and_truncated_record_waits(
    receiver: IngestServer, tmp_path: Path
) -> None:
    out = tmp_path / "out"
    events = out / "tb" / "events.out.tfevents.1.host"
    env = job_env(receiver, out, [{"format": "tensorboard", "path": "tb"}])
    _events(events, range(0, 100))
    first = collect(env)
    assert first["collected_points"] == 100
    # A writer mid-flush: the next record is only half on disk.
    record = tfevents.frame(tfevents.scalar_event(100, 1.7e9, {"loss": 100.0}))
    with events.open("ab") as handle:
        handle.write(record[:7])
    second = collect(env)
    assert second["collected_points"] == 0  # nothing re-sent, the half record is not read yet
    with events.open("ab") as handle:
        handle.write(record[7:])
    _events(events, range(101, 150))
    third = collect(env)
    assert third["collected_points"] == 50
    points = series(receiver.store.path, RUN, "loss")
    assert [s for s, _ in points] == list(range(150))
    batches = receiver.store._db.execute("SELECT COUNT(*) FROM batches WHERE run_id = ?", (RUN,)).fetchone()[0]
    assert batches >= 2
    state = json.loads((out / ".tuneplane" / "collector-state.json").read_text())
    assert list(state["files"].values())[0]["offset"] == events.stat().st_size


def test_corrupt_record_is_skipped_and_counted(receiver: IngestServer, tmp_path: Path) -> None:
    out = tmp_path / "out"
    events = out / "tb" / "events.out.tfevents.2.host"
    good = tfevents.frame(tfevents.scalar_event(1, 1.7e9, {"loss": 1.0}))
    bad = bytearray(tfevents.frame(tfevents.scalar_event(2, 1.7e9, {"loss": 2.0})))
    bad[-6] ^= 0xFF  # a flipped payload byte: the payload CRC no longer matches
    events.parent.mkdir(parents=True)
    events.write_bytes(good + bytes(bad) + tfevents.frame(tfevents.scalar_event(3, 1.7e9, {"loss": 3.0})))
    result = collect(job_env(receiver, out, [{"format": "tensorboard", "path": "tb"}]))
    assert series(receiver.store.path, RUN, "loss") == [(1, 1.0), (3, 3.0)]
    assert result["skipped"] == {"corrupt tensorboard record": 1}


def test_jsonl_long_and_wide_mappings(receiver: IngestServer, tmp_path: Path) -> None:
    out = tmp_path / "out"
    (out / "logs").mkdir(parents=True)
    (out / "logs" / "long.jsonl").write_text(
        '{"name": "reward", "it": 1, "val": 0.5}\n{"name": "reward", "it": 2, "val": 0.75}\nnot json\n'
        '{"name": "reward", "it": 3, "val": 1.0}'
    )  # no newline yet: still being written
    (out / "logs" / "wide.jsonl").write_text(
        '{"step": 1, "data": {"train/loss": 2.0, "note": "x", "actor": {"kl": 0.1}}}\n'
    )
    native = [
        {"format": "jsonl", "path": "logs/long.jsonl", "key": "name", "step": "it", "value": "val"},
        {"format": "jsonl", "path": "logs/wide.jsonl", "step": "step", "values": "data"},
    ]
    result = collect(job_env(receiver, out, native))
    got = summary(receiver.store.path, RUN)
    assert series(receiver.store.path, RUN, "reward") == [(1, 0.5), (2, 0.75)]
    assert got["train/loss"]["last"] == 2.0 and got["actor.kl"]["last"] == 0.1
    assert result["skipped"] == {"bad json line": 1}
    with (out / "logs" / "long.jsonl").open("a") as handle:
        handle.write("\n")
    collect(job_env(receiver, out, native))
    assert [s for s, _ in series(receiver.store.path, RUN, "reward")] == [1, 2, 3]


@pytest.mark.parametrize(
    "bad",
    [
        [{"format": "tensorboard", "path": "/etc"}],
        [{"format": "tensorboard", "path": "../x"}],
        [{"format": "csv", "path": "x"}],
        [{"format": "jsonl", "path": "x", "colour": 1}],
        {"format": "jsonl"},
    ],
)
def test_bad_declarations_are_refused_with_the_entry_named(bad: Any) -> None:
    with pytest.raises(sources.SourceError, match=r"metrics\.native|TUNEPLANE_METRICS_NATIVE"):
        sources.parse(json.dumps(bad))


def test_symlink_out_of_the_out_dir_is_not_followed(receiver: IngestServer, tmp_path: Path) -> None:
    outside = tmp_path / "elsewhere"
    _events(outside / "events.out.tfevents.3.host", range(3))
    out = tmp_path / "out"
    out.mkdir()
    (out / "tb").symlink_to(outside)
    result = collect(job_env(receiver, out, [{"format": "tensorboard", "path": "tb"}]))
    assert result["collected_points"] == 0 and summary(receiver.store.path, RUN) == {}


@pytest.mark.bulk
@pytest.mark.slow
def test_one_million_scalars_within_the_sdk_memory_budget(receiver: IngestServer, tmp_path: Path) -> None:
    out = tmp_path / "out"
    tags = tuple(f"m{i:02d}" for i in range(100))
    _events(out / "tb" / "events.out.tfevents.4.host", range(10_000), tags)  # 1,000,000 scalars
    budget = 32 * 1024 * 1024  # the SDK's default memory budget
    env = job_env(receiver, out, [{"format": "tensorboard", "path": "tb"}])
    baseline = _peak_rss([sys.executable, "-c", "import tuneplane.collector.__main__, tuneplane.report._core"], env)
    peak = _peak_rss([sys.executable, "-m", "tuneplane.collector", "--once"], env)
    got = summary(receiver.store.path, RUN)
    assert len(got) == 100 and all(v["count"] == 10_000 for v in got.values())
    # The file is 30 MB; reading it costs one 256 KiB chunk at a time, and sending stays in the budget.
    assert peak - baseline < budget, (peak, baseline)


def _peak_rss(argv: list[str], env: dict[str, str]) -> int:
    code = (
        "import resource, runpy, sys; argv = sys.argv[1:]; sys.argv = argv;"
        "import subprocess; p = subprocess.run(argv, env=None); "
        "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss); sys.exit(p.returncode)"
    )
    proc = subprocess.run([sys.executable, "-c", code, *argv], env=env, capture_output=True, text=True, timeout=TIMEOUT)
    assert proc.returncode == 0, proc.stderr
    return int(proc.stdout.strip().splitlines()[-1]) * 1024


def test_a_recipe_declaration_reaches_the_job_environment(tmp_path: Path) -> None:
    from support.render import make_lab, request, resolve_run

    from tuneplane.models.recipe import Metrics
    from tuneplane.plan.environment import spec_to_env

    declared = Metrics.model_validate(
        {
            "native": [
                {"format": "tensorboard", "path": "logs/tb"},
                {"format": "jsonl", "path": "m.jsonl", "key": "name"},
            ]
        }
    )
    spec = resolve_run(make_lab(tmp_path / "lab"), request("trl-sft-exp"))
    assert "native_metrics" not in spec.to_json_dict()["spec"]["recipe"]["adapter"]  # digests unchanged
    assert METRICS_NATIVE_ENV not in spec_to_env(spec)
    adapter = spec.spec.recipe.adapter.model_copy(
        update={"native_metrics": [o.model_dump(exclude_none=True) for o in declared.native]}
    )
    recipe = spec.spec.recipe.model_copy(update={"adapter": adapter})
    spec = spec.model_copy(update={"spec": spec.spec.model_copy(update={"recipe": recipe})})
    parsed = sources.parse(spec_to_env(spec)[METRICS_NATIVE_ENV])
    expected = [("tensorboard", "logs/tb", None), ("jsonl", "m.jsonl", "name")]
    assert [(s.format, s.path, s.key) for s in parsed] == expected
    with pytest.raises(ValueError, match="inside the out dir"):
        Metrics.model_validate({"native": [{"format": "jsonl", "path": "../outside.jsonl"}]})


def test_a_collector_waiting_for_the_lock_stops_when_asked(receiver: IngestServer, tmp_path: Path) -> None:
    """A second collector of the same out dir waits for the first one's lock; asked to stop (SIGTERM,
    as the launcher does when its rank ends), it leaves at once instead of holding the rank's exit."""
    import fcntl
    import signal

    out = tmp_path / "out"
    (out / ".tuneplane").mkdir(parents=True)
    env = job_env(receiver, out, [{"format": "jsonl", "path": "m.jsonl"}])
    with open(out / ".tuneplane" / "collector.lock", "w") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        proc = subprocess.Popen(
            [sys.executable, "-m", "tuneplane.collector", "--follow", "--lock-timeout", "600"],
            env=env,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            wait_until(  # an ended collector is told by its exit below, with its stderr
                lambda: proc.poll() is not None or _has_signal_handler(proc.pid),
                10,
                message="the collector waiting for the lock never caught SIGTERM",
            )
            proc.send_signal(signal.SIGTERM)
            _, err = proc.communicate(timeout=20)  # well before the 600 s lock timeout
        finally:
            proc.kill()
    assert proc.returncode == 0 and "another collector holds this out dir" in err, err


def _has_signal_handler(pid: int) -> bool:
    """Whether a process catches SIGTERM yet (bit 15 of SigCgt in /proc/PID/status)."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return False
    caught = next((line.split()[1] for line in status.splitlines() if line.startswith("SigCgt:")), "0")
    return bool(int(caught, 16) & (1 << 14))
