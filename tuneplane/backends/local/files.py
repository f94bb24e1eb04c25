"""Files of a local run directory: names, atomic JSON, the state file, locks, signals, environment."""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
from pathlib import Path
from typing import IO, Any

from tuneplane.constants import ENV_PREFIX, STORAGE_ROOT_ENV
from tuneplane.lab.fs import write_json

API_VERSION = "tuneplane.dev/local/v1"
KIND = "LocalRun"
REF_KIND = "Process"
LAUNCH, STATE, LOG, CANCEL = "launch.json", "state.json", "run.log", "cancel"
TERMINATION_LOG = "termination-log"  # the job's one-line status message, as a pod's /dev/termination-log
SUPERVISOR_LOCK, SUBMIT_LOCK, DB = "supervisor.lock", ".submit.lock", "metrics.sqlite"
JOBSPEC_PATH = ".tuneplane/jobspec.json"
ARTIFACTS_VERSION = "tuneplane/artifacts/v1"
MESSAGE_LINES = 20  # log lines quoted in a failed run's message
START_GRACE = 60.0  # seconds a spawned supervisor may take to show up before the run counts as lost
KILL_GRACE_ENV = "TUNEPLANE_LOCAL_KILL_GRACE"  # seconds between SIGTERM and SIGKILL (default 10)
GPUS_ENV = "TUNEPLANE_LOCAL_GPUS"  # this machine's GPU ids ("0,1,2,3") or a count ("4")
_SCRUB = (ENV_PREFIX, "GIT_", "STARFORGE_", "FORGE_")  # never inherited: the contract sets its own



# ── small file helpers ───────────────────────────────────────────────────────────────────────────


def read_state(run_dir: Path) -> dict[str, Any] | None:
    try:
        data = json.loads((run_dir / STATE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def update_state(run_dir: Path, **changes: Any) -> dict[str, Any]:
    state = read_state(run_dir) or {}
    state.update(changes)
    write_json(run_dir / STATE, state)  # atomic: `observe` never reads half a state file
    return state


def try_lock(path: Path) -> IO[str] | None:
    """Take `path`'s lock without waiting; the open file is the lock (None: someone holds it)."""
    fh = open(path, "a+")  # the caller keeps it open for as long as it holds the lock
    try:
        fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        fh.close()
        return None
    return fh


def supervisor_alive(run_dir: Path) -> bool:
    lock = try_lock(run_dir / SUPERVISOR_LOCK)
    if lock is None:
        return True
    lock.close()
    return False



def signal_group(pgid: Any, sig: int) -> None:
    if isinstance(pgid, int) and pgid > 1:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pgid, sig)


def scrubbed_env(base: Any, keep_storage: bool = False) -> dict[str, str]:
    env = {k: v for k, v in base.items() if not k.startswith(_SCRUB)}
    if keep_storage and STORAGE_ROOT_ENV in base:
        env[STORAGE_ROOT_ENV] = base[STORAGE_ROOT_ENV]
    for key in (GPUS_ENV, KILL_GRACE_ENV):
        if key in base:
            env[key] = base[key]
    return env
