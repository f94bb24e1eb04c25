"""What the collector's process tests share: a job's environment and one `--once --stats` pass."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from tuneplane.constants import METRICS_NATIVE_ENV
from tuneplane.ingest import mint_token
from tuneplane.ingest.server import IngestServer


def job_env(
    receiver: IngestServer, out: Path, native: list[dict[str, Any]], *, run: str, secret: bytes
) -> dict[str, str]:
    """The environment of a job `run` reporting to `receiver`, with its out dir and native outputs."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("TUNEPLANE_")}
    env.update(
        {
            "TUNEPLANE_JOB_ENABLED": "1",
            "TUNEPLANE_JOB_ENDPOINT": receiver.url,
            "TUNEPLANE_JOB_RUN_ID": run,
            "TUNEPLANE_JOB_TOKEN": mint_token(secret, run),
            "TUNEPLANE_OUT_DIR": str(out),
            "TUNEPLANE_REPORT_FLUSH_INTERVAL": "0.02",
            "TUNEPLANE_REPORT_RETRY_BASE": "0.02",
            "TUNEPLANE_REPORT_RETRY_CAP": "0.2",
            METRICS_NATIVE_ENV: json.dumps(native),
        }
    )
    return env


def collect(env: dict[str, str], *args: str, timeout: float) -> dict[str, Any]:
    """One pass of the real collector process: its `--stats` line, and its stderr."""
    proc = subprocess.run(
        [sys.executable, "-m", "tuneplane.collector", "--once", "--stats", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr, proc.stderr
    return dict(json.loads(proc.stdout.strip().splitlines()[-1]), stderr=proc.stderr)
