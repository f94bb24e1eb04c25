"""The native collector: TensorBoard event files and JSON-lines metrics under the out dir, sent
through the same path as `tuneplane.report`, exactly once across restarts. Standard library only.

    python -m tuneplane.collector [--out-dir DIR] [--once | --follow] [--sources JSON]

The launcher on node rank zero starts it beside the trainer (`start_beside`) when native files are
declared, and after the trainer makes its last pass, or without one uploads what the SDK's
`finish()` left in the out dir (`end_job`): on a cluster no backend runs after the job. The local
backend runs a last pass after the job as well (`collect_after`). The declaration format is in
`tuneplane.collector.sources`.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from collections.abc import Mapping
from urllib.parse import urlsplit

from tuneplane.constants import (
    JOB_ENABLED,
    JOB_ENDPOINT,
    JOB_TOKEN,
    METRICS_NATIVE_ENV,
    NODE_RANK_ENV,
    OUT_DIR_ENV,
    REPORT_ALL_RANKS_ENV,
)

__all__ = [
    "claim",
    "collect_after",
    "collect_before",
    "end_job",
    "finish_in_process_report",
    "leftovers",
    "start_beside",
    "stop",
    "take_job",
    "uploads",
    "wanted",
]

DISABLE_ENV = "TUNEPLANE_COLLECTOR"  # "0" turns the collector off for a job
# Set by the launcher that collects for the job (`claim`), for what it starts next: torchrun's and
# accelerate's ranks re-enter the launcher with RANK set, and rank 0's must not collect a second time.
RUNNING_ENV = "TUNEPLANE_COLLECTOR_PID"
PROBE_SECONDS = 2.0  # how long `collect_before` waits to connect before it leaves the files for later


def uploads(env: Mapping[str, str]) -> bool:
    """Whether this process collects for the job: reporting on, an out dir, node rank zero, and no
    launcher above it that already does. It uploads at least what the SDK left unsent (`collect_after`)."""
    if env.get(DISABLE_ENV, "").strip() == "0" or env.get(JOB_ENABLED, "").strip() == "0":
        return False
    if not env.get(JOB_TOKEN, "").strip() or not env.get(OUT_DIR_ENV, "").strip():
        return False
    if env.get(RUNNING_ENV, "").strip():
        return False  # a launcher above this process already collects for the job
    # The launcher runs once per node (before torchrun sets RANK): the node rank decides there.
    for name in (NODE_RANK_ENV, "RANK", "LOCAL_RANK"):
        value = env.get(name, "").strip()
        if value and value != "0":
            return False
    return True


def wanted(env: Mapping[str, str]) -> bool:
    """Whether a job with this environment needs a collector beside it: `uploads`, and native files declared."""
    # nothing declared: only leftovers of the SDK, uploaded after the job (`collect_after`)
    return uploads(env) and bool(env.get(METRICS_NATIVE_ENV, "").strip())


def claim() -> None:
    """Mark this process as the job's collector for every process it starts from now on."""
    os.environ[RUNNING_ENV] = str(os.getpid())


def take_job() -> bool:
    """For the launcher: whether it collects for this job (`uploads`), and if so `claim` it."""
    if not uploads(os.environ):
        return False
    claim()
    return True


def finish_in_process_report() -> None:
    """End an in-process entry's `tuneplane.report` session now rather than at interpreter exit, so
    what it could not deliver is in the out dir before the last pass (`end_job`)."""
    report = sys.modules.get("tuneplane.report")
    finish = getattr(report, "finish", None)
    if callable(finish):
        finish()


def end_job(proc: subprocess.Popen[bytes] | None, uploads: bool, timeout: float = 60.0) -> None:
    """After the trainer: the collector's last pass (`stop`), or without a collector, the upload of
    what the SDK left unsent (`collect_after`) when this process collects for the job."""
    if proc is not None:
        stop(proc)
    elif uploads:
        collect_after(os.environ, timeout=timeout)


def start_beside(env: Mapping[str, str] | None = None) -> subprocess.Popen[bytes] | None:
    """Start `python -m tuneplane.collector --follow` for this job, or None when it is not wanted.

    It follows until its parent (this process, or what it execs into) exits, then makes a last pass.
    """
    env = dict(os.environ if env is None else env)
    if not wanted(env):
        return None
    env.update({"RANK": "0", "LOCAL_RANK": "0", REPORT_ALL_RANKS_ENV: "0"})
    try:
        proc = subprocess.Popen(  # our own module under this interpreter
            [sys.executable, "-m", "tuneplane.collector", "--follow", "--parent", str(os.getpid())],
            env=env,
            stdin=subprocess.DEVNULL,
            start_new_session=False,
        )
    except OSError:
        return None
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
    out = _reporting_out_dir(env)
    if not out or (not leftovers(out) and not env.get(METRICS_NATIVE_ENV, "").strip()):
        return False
    return _last_pass(env, timeout)


def collect_before(env: Mapping[str, str], timeout: float = 30.0) -> bool:
    """Before the trainer starts: upload what an earlier attempt of the job left in the out dir (cut
    short, or killed with its overflow file), when anything is there. After the job, those older
    points would replace this attempt's at the same steps (the receiver keeps one value per step, and
    a restarted job logs the steps after its checkpoint again). Returns whether a pass ran and finished."""
    out = _reporting_out_dir(env)
    if not out or not leftovers(out):
        return False
    problem = _unreachable(env.get(JOB_ENDPOINT, "").strip(), min(PROBE_SECONDS, timeout))
    if problem:
        # Waiting out the whole pass would hold every restart back while the receiver is down.
        print(
            f"tuneplane.collector: an earlier attempt's unsent points stay in {out}/.tuneplane for the "
            f"pass after the job: the receiver is unreachable ({problem})",
            file=sys.stderr,
            flush=True,
        )
        return False
    return _last_pass(env, timeout)


def _unreachable(endpoint: str, timeout: float) -> str:
    """Why no TCP connection to `endpoint` opens within `timeout` seconds, or '' when one does."""
    try:
        parts = urlsplit(endpoint)
        host, port = parts.hostname, parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError as exc:
        return f"endpoint {endpoint!r}: {exc}"
    if not host:
        return f"endpoint {endpoint!r} names no host"
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return ""
    except OSError as exc:
        return f"{host}:{port}: {exc.strerror or type(exc).__name__}"


def _reporting_out_dir(env: Mapping[str, str]) -> str:
    """The job's out dir when it reports and the collector is not turned off, else ''."""
    if (
        not env.get(JOB_TOKEN, "").strip()
        or env.get(DISABLE_ENV, "").strip() == "0"
        or env.get(JOB_ENABLED, "").strip() == "0"
    ):
        return ""
    return env.get(OUT_DIR_ENV, "").strip()


def leftovers(out: str) -> bool:
    """Whether the SDK left points in the out dir: files `finish()` could not deliver, or the
    overflow file of a process that was killed (or of one that still runs: the pass leaves that be)."""
    try:
        names = os.listdir(os.path.join(out, ".tuneplane"))
    except OSError:
        return False
    return any(n.startswith(("report-unsent-", "report-spill-")) and n.endswith(".jsonl") for n in names)


def _last_pass(env: Mapping[str, str], timeout: float) -> bool:
    child = {**env, "RANK": "0", "LOCAL_RANK": "0", REPORT_ALL_RANKS_ENV: "0"}
    try:
        done = subprocess.run(
            [sys.executable, "-m", "tuneplane.collector", "--once", "--final"],
            env=child,
            stdin=subprocess.DEVNULL,
            timeout=timeout,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return False
    return done.returncode == 0
