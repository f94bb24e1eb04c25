"""Files of a local run directory: names, atomic JSON, the state file, locks, signals, environment."""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import socket
from collections.abc import Mapping
from pathlib import Path
from typing import IO, Any

from tuneplane.constants import ENV_PREFIX, STORAGE_ROOT_ENV, utc_now
from tuneplane.lab.fs import write_json
from tuneplane.lab.heartbeats import PUBLISH_ENV
from tuneplane.runtime.gpuwatch import INTERVAL_ENV as WATCHDOG_INTERVAL_ENV
from tuneplane.runtime.jsonvalue import JSONObject

API_VERSION = "tuneplane.dev/local/v1"
KIND = "LocalRun"
REF_KIND = "Process"
LAUNCH, STATE, LOG, CANCEL = "launch.json", "state.json", "run.log", "cancel"
TERMINATION_LOG = "termination-log"  # the job's one-line status message, as a pod's /dev/termination-log
SUPERVISOR_LOCK, SUBMIT_LOCK, DB = "supervisor.lock", ".submit.lock", "metrics.sqlite"
# Written first into a run directory the local backend makes: nothing is ever written into a folder
# without it (a cancel of a run dir someone else made, or one reached through a symlink, is refused).
MARKER = ".tuneplane-local-run"
HEARTBEAT = "heartbeat"  # rewritten by the supervisor every HEARTBEAT_ENV seconds while it lives
HEARTBEAT_ENV = "TUNEPLANE_LOCAL_HEARTBEAT"  # seconds between heartbeats (default 10)
DEFAULT_HEARTBEAT = 10.0
JOBSPEC_PATH = ".tuneplane/jobspec.json"
ARTIFACTS_VERSION = "tuneplane/artifacts/v1"
MESSAGE_LINES = 20  # log lines quoted in a failed run's message
START_GRACE = 60.0  # seconds a spawned supervisor may take to show up before the run counts as lost
KILL_GRACE_ENV = "TUNEPLANE_LOCAL_KILL_GRACE"  # seconds between SIGTERM and SIGKILL (default 10)
GPUS_ENV = "TUNEPLANE_LOCAL_GPUS"  # this machine's GPU ids ("0,1,2,3") or a count ("4")
# the local backend's own settings (and the GPU watchdog's interval) reach its supervisor and the job
_KEPT = (GPUS_ENV, KILL_GRACE_ENV, HEARTBEAT_ENV, PUBLISH_ENV, WATCHDOG_INTERVAL_ENV)
BOOT_ID = Path("/proc/sys/kernel/random/boot_id")
_SCRUB = (ENV_PREFIX, "GIT_", "STARFORGE_", "FORGE_")  # never inherited: the contract sets its own


# ── small file helpers ───────────────────────────────────────────────────────────────────────────


def read_state(run_dir: Path) -> JSONObject | None:
    try:
        data = json.loads((run_dir / STATE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def update_state(run_dir: Path, **changes: Any) -> dict[str, Any]:
    state = read_state(run_dir) or {}
    state.update(changes)
    write_json(run_dir / STATE, state, parents=False)  # atomic: `observe` never reads half a state file
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
    """Whether a supervisor on this machine holds the run's lock. Never creates the lock file: a run
    directory that is gone, or that no supervisor ever started in, has no supervisor."""
    try:
        fd = os.open(run_dir / SUPERVISOR_LOCK, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)  # closing drops the lock if we took it
    return False


def log_name(attempt: int) -> str:
    """The log of one attempt: `run.log` for the first (what every earlier run has), `run.<N>.log` after."""
    return LOG if attempt <= 1 else f"run.{attempt}.log"


def attempt_of(state: JSONObject) -> int:
    value = state.get("attempt")
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 1 else 1


# ── which machine ────────────────────────────────────────────────────────────────────────────────


def this_machine() -> dict[str, str]:
    """This kernel's identity: a file lock and a process id mean something only on the kernel that holds
    them. The boot id changes on a restart and differs between machines; the host name is for people."""
    try:
        boot = BOOT_ID.read_text(encoding="ascii").strip()
    except OSError:  # not Linux: the host name has to do
        boot = ""
    host = socket.gethostname()
    return {"host": host, "machine": boot or f"host:{host}"}


def elsewhere(state: JSONObject) -> str:
    """The host name of the machine that supervises (or submitted) the run, when it is not this one
    running now; "" when it is this machine or the state does not say (runs of an earlier tp)."""
    machine = state.get("machine")
    if not isinstance(machine, str) or not machine:
        return ""
    here = this_machine()
    if machine == here["machine"]:
        return ""
    host = str(state.get("host") or "")
    if host == here["host"] and not machine.startswith("host:"):
        return ""  # this machine, restarted since: its runs' supervisors are certainly gone
    return host or "another machine"


# ── heartbeat ────────────────────────────────────────────────────────────────────────────────────


def heartbeat_interval(env: Mapping[str, str] | None = None) -> float:
    text = str((os.environ if env is None else env).get(HEARTBEAT_ENV, "")).strip()
    try:
        value = float(text) if text else DEFAULT_HEARTBEAT
    except ValueError:
        return DEFAULT_HEARTBEAT
    return value if value > 0 else DEFAULT_HEARTBEAT


def beat(run_dir: Path, attempt: int) -> None:
    """One heartbeat: who supervises the run, on which machine, and when it last said so. Only into the
    run directory as it is: one out of sight for a while (a mount gone) is not made again here."""
    try:
        said = {**this_machine(), "pid": os.getpid(), "attempt": attempt, "at": utc_now()}
        write_json(run_dir / HEARTBEAT, said, parents=False)
    except FileNotFoundError:
        pass  # out of sight now: the next beat finds it again, or the run is lost


def read_heartbeat(run_dir: Path) -> JSONObject | None:
    path = run_dir / HEARTBEAT
    if path.is_symlink():
        return None
    try:
        data = json.loads(path.read_text(encoding="utf-8")[:4096])
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) and isinstance(data.get("at"), str) else None


# ── whose folder ─────────────────────────────────────────────────────────────────────────────────


def not_ours(run_dir: Path, root: Path) -> str:
    """Why `run_dir` is not a run directory this backend made ("" when it is): gone, a symlink, reached
    through a symlink out of the storage root, or without the marker the backend writes first."""
    if run_dir.is_symlink():
        return "is a symbolic link"
    if not run_dir.is_dir():
        return "does not exist on this machine"
    if leads_out(run_dir, root):
        return "leads out of the storage root through a symbolic link"
    marker = run_dir / MARKER
    if marker.is_file() and not marker.is_symlink():
        return ""
    if _legacy(run_dir):
        return ""
    return f"has no {MARKER} marker: the local backend did not make it"


def leads_out(run_dir: Path, root: Path) -> bool:
    """Whether `run_dir`, inside the storage root by name, really lies outside it (a symlink on the way);
    its nearest existing folder is what counts. A run dir of another storage root is not judged here."""
    if not _under(run_dir, root):
        return False
    existing = run_dir
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    if not _under(existing, root):  # not even the storage root exists yet: nothing can lead out
        return False
    return not _under(Path(os.path.realpath(existing)), Path(os.path.realpath(root)))


def _legacy(run_dir: Path) -> bool:
    """A run directory of a tp from before the marker: its launch file and its state with a uid."""
    files = (run_dir / LAUNCH, run_dir / STATE)
    if any(f.is_symlink() or not f.is_file() for f in files):
        return False
    return bool((read_state(run_dir) or {}).get("uid"))


def _under(path: Path, root: Path) -> bool:
    return path == root or root in path.parents


def process_start(pid: int) -> int | None:
    """When the kernel started process `pid` (clock ticks since boot, field 22 of /proc/PID/stat): with
    the pid, it names one process for ever, where the pid alone is handed out again. None when unknown."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_bytes()
    except OSError:
        return None
    fields = stat[stat.rfind(b")") + 2 :].split()  # the name in parentheses may hold spaces
    try:
        return int(fields[19])
    except (IndexError, ValueError):
        return None


def signal_group(pgid: object, sig: int, started: object = None) -> None:
    """Signal the process group the run recorded, only while it is still the run's.

    `started` is the group leader's `process_start` recorded with it. A leader alive with another start
    time means the number now names someone else's group: nothing is sent. A leader gone is fine: the
    kernel hands out no pid equal to a live group's id, so a group that still exists is still ours."""
    if not (isinstance(pgid, int) and pgid > 1):
        return
    if isinstance(started, int):
        now = process_start(pgid)
        if now is not None and now != started:
            return
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


def scrubbed_env(base: Mapping[str, str], keep_storage: bool = False) -> dict[str, str]:
    env = {k: v for k, v in base.items() if not k.startswith(_SCRUB)}
    if keep_storage and STORAGE_ROOT_ENV in base:
        env[STORAGE_ROOT_ENV] = base[STORAGE_ROOT_ENV]
    for key in _KEPT:
        if key in base:
            env[key] = base[key]
    return env
