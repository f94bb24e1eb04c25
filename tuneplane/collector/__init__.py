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

from tuneplane.constants import (
    JOB_ENABLED,
    JOB_TOKEN,
    METRICS_NATIVE_ENV,
    NODE_RANK_ENV,
    OUT_DIR_ENV,
    REPORT_ALL_RANKS_ENV,
)

__all__ = ["collect_after", "start_beside", "stop", "wanted"]

DISABLE_ENV = "TUNEPLANE_COLLECTOR"  # "0" turns the collector off for a job
# Set by `start_beside` for what the launcher starts next: torchrun's and accelerate's ranks re-enter
# the launcher with RANK set, and rank 0's must not start a second collector beside the first.
RUNNING_ENV = "TUNEPLANE_COLLECTOR_PID"


def wanted(env: Mapping[str, str]) -> bool:
    """Whether a job with this environment needs a collector: reporting on, an out dir, rank zero."""
    if env.get(DISABLE_ENV, "").strip() == "0" or env.get(JOB_ENABLED, "").strip() == "0":
        return False
    if not env.get(JOB_TOKEN, "").strip() or not env.get(OUT_DIR_ENV, "").strip():
        return False
    if env.get(RUNNING_ENV, "").strip():
        return False  # a launcher above this process already collects for the job
    if not env.get(METRICS_NATIVE_ENV, "").strip():
        return False  # nothing declared: leftovers of the SDK are uploaded after the job (`collect_after`)
    # The launcher runs once per node (before torchrun sets RANK): the node rank decides there.
    for name in (NODE_RANK_ENV, "RANK", "LOCAL_RANK"):
        value = env.get(name, "").strip()
        if value and value != "0":
            return False
    return True


def start_beside(env: Mapping[str, str] | None = None) -> subprocess.Popen[bytes] | None:
    """Start `python -m tuneplane.collector --follow` for this job, or None when it is not wanted.

    It follows until its parent (this process, or what it execs into) exits, then makes a last pass.
    With no `env` (this process's own), the processes this one starts afterwards inherit
    `RUNNING_ENV`, so none of them starts another.
    """
    own = env is None
    env = dict(os.environ if env is None else env)
    if not wanted(env):
        return None
    env.update({"RANK": "0", "LOCAL_RANK": "0", REPORT_ALL_RANKS_ENV: "0"})
    try:
        proc = subprocess.Popen(  # our own module under this interpreter
            [sys.executable, "-m", "tuneplane.collector", "--follow", "--parent", str(os.getpid())],
            env=env, stdin=subprocess.DEVNULL, start_new_session=False)
    except OSError:
        return None
    if own:
        os.environ[RUNNING_ENV] = str(proc.pid)
    return proc


def stop(proc: subprocess.Popen[bytes] | None, timeout: float = 30.0) -> None:
    """Ask a collector for its last pass (SIGTERM) and wait for it, at most `timeout` seconds."""
    if proc is None or proc.poll() is not None:
        return
    try:
        proc.terminate()
        proc.wait(timeout)
    except (OSError, subprocess.TimeoutExpired):
        proc.kill()


def collect_after(env: Mapping[str, str], timeout: float = 120.0) -> bool:
    """After the job: one pass over the declared files and what the SDK left unsent, when there is
    anything to do (the local backend calls this before it stops the run's receiver). Returns whether
    a pass ran and finished."""
    out = env.get(OUT_DIR_ENV, "").strip()
    if not out or not env.get(JOB_TOKEN, "").strip() or env.get(DISABLE_ENV, "").strip() == "0":
        return False
    folder = os.path.join(out, ".tuneplane")
    try:
        unsent = any(n.startswith("report-unsent-") for n in os.listdir(folder))
    except OSError:
        unsent = False
    if not unsent and not env.get(METRICS_NATIVE_ENV, "").strip():
        return False
    child = {**env, "RANK": "0", "LOCAL_RANK": "0", REPORT_ALL_RANKS_ENV: "0"}
    try:
        done = subprocess.run([sys.executable, "-m", "tuneplane.collector", "--once", "--final"], env=child,
                              stdin=subprocess.DEVNULL, timeout=timeout, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return done.returncode == 0
