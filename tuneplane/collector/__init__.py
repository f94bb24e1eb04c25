"""The native collector: TensorBoard event files and JSON-lines metrics under the out dir, sent
through the same path as `tuneplane.report`, exactly once across restarts. Standard library only.

    python -m tuneplane.collector [--out-dir DIR] [--once | --follow] [--sources JSON]

The launcher starts it on rank zero beside the trainer (`start_beside`), and the local backend runs a
last pass after the job (`collect_once`), which also uploads what the SDK's `finish()` left in the
out dir. The declaration format is in `tuneplane.collector.sources`.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Mapping

__all__ = ["start_beside", "wanted"]

DISABLE_ENV = "TUNEPLANE_COLLECTOR"  # "0" turns the collector off for a job


def wanted(env: Mapping[str, str]) -> bool:
    """Whether a job with this environment needs a collector: reporting on, an out dir, rank zero."""
    if env.get(DISABLE_ENV, "").strip() == "0" or env.get("TUNEPLANE_JOB_ENABLED", "").strip() == "0":
        return False
    if not env.get("TUNEPLANE_JOB_TOKEN", "").strip() or not env.get("TUNEPLANE_OUT_DIR", "").strip():
        return False
    rank = (env.get("RANK") or env.get("LOCAL_RANK") or "0").strip()
    return rank in ("", "0")


def start_beside(env: Mapping[str, str] | None = None) -> subprocess.Popen[bytes] | None:
    """Start `python -m tuneplane.collector --follow` for this job, or None when it is not wanted.

    It follows until its parent (this process, or what it execs into) exits, then makes a last pass.
    """
    env = dict(os.environ if env is None else env)
    if not wanted(env):
        return None
    env.update({"RANK": "0", "LOCAL_RANK": "0", "TUNEPLANE_REPORT_ALL_RANKS": "0"})
    try:
        return subprocess.Popen(  # our own module under this interpreter
            [sys.executable, "-m", "tuneplane.collector", "--follow", "--parent", str(os.getpid())],
            env=env, stdin=subprocess.DEVNULL, start_new_session=False)
    except OSError:
        return None
