"""The SDK never loses a call for one bad key or one odd setting: wide calls fit the receiver's limits,
a key that cannot be named is dropped alone, settings out of range fall back to their defaults. The
SDK runs in its own process against a real receiver on 127.0.0.1."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tuneplane.ingest import mint_token, summary
from tuneplane.ingest.server import IngestServer, Limits

SECRET = b"w" * 32
EXPERIMENT = "exp-wide"
RUNNER = r"""
import json, sys
import tuneplane.report as report
exec(sys.argv[1])
report.finish(timeout=30)
print(json.dumps(report.stats()))
"""


@pytest.fixture()
def receiver(tmp_path: Path) -> Iterator[IngestServer]:
    with IngestServer(tmp_path / "ingest.sqlite", SECRET) as server:
        yield server


def run_sdk(receiver: IngestServer, code: str, run: str, **env_extra: str) -> tuple[dict[str, Any], str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TUNEPLANE_")}
    env.update(
        {
            "TUNEPLANE_JOB_ENABLED": "1",
            "TUNEPLANE_JOB_RUN_ID": run,
            "TUNEPLANE_JOB_ENDPOINT": receiver.url,
            "TUNEPLANE_JOB_TOKEN": mint_token(SECRET, run, EXPERIMENT),
            **env_extra,
        }
    )
    proc = subprocess.run([sys.executable, "-c", RUNNER, code], env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1]), proc.stderr


def stored(receiver: IngestServer, run: str) -> dict[str, dict[str, Any]]:
    return summary(receiver.store.path, run, experiment=EXPERIMENT)


def test_a_call_with_more_keys_than_the_receiver_takes_in_one_block_is_delivered_whole(receiver: IngestServer) -> None:
    """12,000 keys a call, three calls: every point arrives (the receiver reads at most 10,000 keys a
    block, so the SDK splits the call's record under that)."""
    code = "for step in range(3):\n    report.log({f'layer{i}/grad': float(i + step) for i in range(12000)}, step=step)"
    stats, err = run_sdk(receiver, code, "run-wide")
    assert stats["delivered_points"] == 36_000 and stats["refused_points"] == 0, (stats, err)
    found = stored(receiver, "run-wide")
    assert len(found) == 12_000 and {v["count"] for v in found.values()} == {3}
    assert found["layer11999/grad"]["last"] == 11_999.0 + 2


def test_a_key_that_cannot_be_named_is_dropped_alone(receiver: IngestServer) -> None:
    code = """
class Unnamed:
    def __str__(self):
        raise RuntimeError("no name")
    __repr__ = __format__ = lambda self, *a: (_ for _ in ()).throw(RuntimeError("no name"))
report.log({Unnamed(): 1.0, "loss": 0.5, "nested": {Unnamed(): 2.0, "acc": 0.9}}, step=1)
report.log({"loss": 0.25}, step=2)
"""
    stats, err = run_sdk(receiver, code, "run-unnamed")
    assert stats["delivered_points"] == 3 and stats["internal_errors"] == 0, (stats, err)
    assert stats["dropped"] == {"key that cannot be named": 2}
    assert sorted(stored(receiver, "run-unnamed")) == ["loss", "nested.acc"]


@pytest.mark.parametrize(
    "variable",
    [
        "TUNEPLANE_REPORT_REQUEST_TIMEOUT",
        "TUNEPLANE_REPORT_FLUSH_INTERVAL",
        "TUNEPLANE_REPORT_RETRY_CAP",
        "TUNEPLANE_REPORT_BUFFER_BYTES",
        "TUNEPLANE_REPORT_BATCH_POINTS",
    ],
)
@pytest.mark.parametrize("value", ["inf", "nan", "-1", "1e308"])
def test_a_setting_out_of_range_falls_back_to_its_default_with_one_warning(
    receiver: IngestServer, variable: str, value: str
) -> None:
    code = "for step in range(1000):\n    report.log({'loss': 1.0 / (step + 1)}, step=step)"
    stats, err = run_sdk(receiver, code, "run-cfg", **{variable: value})
    assert stats["delivered_points"] == 1000, (stats, err)
    assert stored(receiver, "run-cfg")["loss"]["count"] == 1000
    warnings = [line for line in err.splitlines() if variable in line]
    assert len(warnings) == 1 and "using the default" in warnings[0], err
    assert "Traceback" not in err


def test_points_the_receiver_leaves_out_for_its_name_limit_are_counted_as_dropped(tmp_path: Path) -> None:
    with IngestServer(tmp_path / "ingest.sqlite", SECRET, limits=Limits(max_series=100)) as server:
        code = "for step in range(3):\n    report.log({f'm{i:03d}': 1.0 for i in range(150)}, step=step)"
        stats, err = run_sdk(server, code, "run-names")
        assert stats["delivered_points"] == 300 and stats["dropped"] == {
            "over the receiver's limit of metric names per run": 150
        }, (stats, err)
        assert stats["ledger"]["balanced"]
        assert "at most 100 metric names" in err
        assert len(stored(server, "run-names")) == 100
