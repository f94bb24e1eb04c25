"""The GPU watchdog: the GPUs a run's processes occupy on this node, measured against its grant.

Standard library only (it runs in training images). The node's launcher watches its trainer's process
tree (the trainer and every descendant, from Linux `/proc`) and asks `nvidia-smi`'s query interface
which compute processes hold which GPU. When the tree holds more GPUs than `TUNEPLANE_CLUSTER_GPUS_PER_NODE`
grants, it says so once in the job log (and again only if it grows), the attempt record keeps the line
for the status, and under the lab's `cluster.gpu_watchdog: stop` (`TUNEPLANE_GPU_WATCHDOG`) the trainer
is stopped and the attempt ends with reason `GpuOveruse`.

It never stands in the training's way: no `nvidia-smi` on PATH (a CPU machine), no grant in the
environment or the policy `off` → no watchdog; a query that fails is skipped, one that does not answer
within `QUERY_TIMEOUT` is killed and turns the watchdog off for the run, and all of it runs in a
daemon thread beside the trainer.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping

from tuneplane.constants import GPU_WATCHDOG_DEFAULT, GPU_WATCHDOG_ENV, GPUS_PER_NODE_ENV
from tuneplane.runtime.records import FrozenRecord, Record, field

POLICIES = ("warn", "stop", "off")
DEFAULT_POLICY = GPU_WATCHDOG_DEFAULT
OVERUSE_REASON = "GpuOveruse"  # the attempt reason (constants.AttemptReason) of a run the watchdog stopped
INTERVAL_ENV = "TUNEPLANE_GPU_WATCHDOG_INTERVAL"  # seconds between samples
DEFAULT_INTERVAL = 30.0
INTERVAL_BOUNDS = (1.0, 600.0)
FIRST_SAMPLE = 5.0  # seconds before the first sample (at most the interval): a run that starts wide is seen soon
QUERY_TIMEOUT = 10.0  # seconds one nvidia-smi query may take before it is killed and the watchdog goes off
FAILURES_OFF = 3  # consecutive failed queries after which the watchdog goes off for the run
STOP_GRACE = 30.0  # seconds between TERM and KILL when the watchdog stops the trainer
REAP_POLL = 0.2  # seconds between looks at the stopped processes that outlived the trainer
TOOL = "nvidia-smi"
APPS_QUERY = ("--query-compute-apps=pid,gpu_uuid,used_memory", "--format=csv,noheader,nounits")
GPUS_QUERY = ("--query-gpu=index,uuid", "--format=csv,noheader,nounits")
LOG_PREFIX = "tuneplane-launch: gpu watchdog:"


class QueryFailed(Exception):
    """nvidia-smi could not answer this time (it exited non-zero or printed nothing usable)."""


class QueryHung(QueryFailed):
    """nvidia-smi did not answer within the timeout: it is not asked again in this run."""


class Settings(FrozenRecord):
    """What the job's environment says: the policy, the GPUs granted per node, the sampling interval."""

    policy: str
    granted: int
    interval: float

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> Settings | None:
        """The watchdog's settings, or None when it is off: policy `off`, no grant, or no nvidia-smi."""
        env = os.environ if environ is None else environ
        policy = policy_of(env.get(GPU_WATCHDOG_ENV, ""))
        granted = env.get(GPUS_PER_NODE_ENV, "").strip()
        if policy == "off" or not granted.isdigit() or shutil.which(TOOL, path=env.get("PATH")) is None:
            return None
        return cls(policy, int(granted), interval_of(env.get(INTERVAL_ENV, "")))


def policy_of(text: str) -> str:
    """The policy a variable names; empty → the default; anything else is said once and read as the default."""
    value = text.strip().lower()
    if not value:
        return DEFAULT_POLICY
    if value not in POLICIES:
        _say(f"{GPU_WATCHDOG_ENV}={text!r} is not one of {', '.join(POLICIES)}; using {DEFAULT_POLICY}")
        return DEFAULT_POLICY
    return value


def interval_of(text: str) -> float:
    """Seconds between samples: the variable within `INTERVAL_BOUNDS`, else `DEFAULT_INTERVAL`."""
    try:
        value = float(text)
    except ValueError:
        return DEFAULT_INTERVAL
    if value != value:  # NaN
        return DEFAULT_INTERVAL
    return min(max(value, INTERVAL_BOUNDS[0]), INTERVAL_BOUNDS[1])


# ── the process tree ─────────────────────────────────────────────────────────────────────────────────


def process_tree(root: int) -> list[int]:
    """`root` and its live descendants (Linux `/proc`), parents before children; [root] without /proc."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc") if os.path.isdir("/proc") else []:
        if entry.isdigit():
            parent = proc_field(int(entry), "PPid")
            if parent is not None:
                children.setdefault(parent, []).append(int(entry))
    found, todo = [], [root]
    while todo:
        pid = todo.pop(0)
        found.append(pid)
        todo.extend(children.get(pid, []))
    return found


def proc_field(pid: int, name: str, base: int = 10) -> int | None:
    """A number field of `/proc/<pid>/status` (`PPid`, `SigCgt` in base 16), None when unreadable."""
    try:
        with open(f"/proc/{pid}/status", encoding="ascii", errors="replace") as handle:
            for line in handle:
                if line.startswith(name + ":"):
                    return int(line.split()[1], base)
    except (OSError, ValueError, IndexError):
        return None
    return None


# ── asking nvidia-smi ────────────────────────────────────────────────────────────────────────────────


class Tool(Record):
    """nvidia-smi's query interface; each query in its own session, killed whole when it overstays."""

    timeout: float = QUERY_TIMEOUT
    running: subprocess.Popen[bytes] | None = None
    closed: bool = False
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def rows(self, args: tuple[str, ...]) -> list[list[str]]:
        """The query's CSV rows, each split on commas and stripped."""
        if self.closed:
            raise QueryFailed(f"{TOOL} is no longer asked: the trainer has ended")
        try:
            child = subprocess.Popen(
                [TOOL, *args],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
                start_new_session=True,  # a hung tool and whatever it started are killed as one group
            )
        except OSError as exc:
            raise QueryFailed(f"cannot start {TOOL}: {exc}") from None
        with self._lock:
            self.running = child
        try:
            out, _ = child.communicate(timeout=self.timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            raise QueryHung(f"{TOOL} did not answer within {self.timeout:g} s") from None
        finally:
            with self._lock:
                self.running = None
        if child.returncode != 0:
            raise QueryFailed(f"{TOOL} exited with code {child.returncode}")
        text = out.decode("utf-8", "replace")
        return [[cell.strip() for cell in line.split(",")] for line in text.splitlines() if line.strip()]

    def close(self) -> None:
        """No more queries (the trainer has ended): the one under way is killed."""
        self.closed = True
        self.kill()

    def kill(self) -> None:
        """Kill the query under way, if any, and everything it started; never waits on it for long."""
        with self._lock:
            child = self.running
        if child is None:
            return
        with contextlib.suppress(OSError):
            os.killpg(child.pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired, OSError):
            child.wait(timeout=1)  # a tool stuck in the kernel stays a zombie rather than hang us


def descends_from(pid: int, root: int, depth: int = 256) -> bool:
    """Whether `pid` is `root` or below it, by its chain of parents (`/proc`); a few reads per pid, where
    listing the whole tree would read every process of the machine."""
    for _ in range(depth):
        if pid == root:
            return True
        parent = proc_field(pid, "PPid")
        if parent is None or parent <= 1:
            return False
        pid = parent
    return False


def occupied(apps: list[list[str]], pids: set[int]) -> set[str]:
    """The GPU UUIDs compute processes of `pids` hold, from `--query-compute-apps=pid,gpu_uuid,…` rows."""
    held = set()
    for row in apps:
        if len(row) >= 2 and row[0].isdigit() and int(row[0]) in pids and row[1].startswith(("GPU-", "MIG-")):
            held.add(row[1])
    return held


def gpu_names(rows: list[list[str]], uuids: set[str]) -> list[str]:
    """How a person names the GPUs `uuids`: their indexes from `--query-gpu=index,uuid` rows, else the UUID."""
    index = {row[1]: row[0] for row in rows if len(row) >= 2}
    return sorted((index.get(u, u) for u in uuids), key=lambda name: (not name.isdigit(), name.zfill(8)))


def overuse_line(used: list[str], granted: int, pids: int) -> str:
    """The job log's (and the status's) words for an overuse."""
    gpus = "GPU" if len(used) == 1 else "GPUs"
    return (
        f"the run's processes occupy {len(used)} {gpus} on this node ({', '.join(used)}; "
        f"{pids} process{'' if pids == 1 else 'es'}) "
        f"but it was granted {granted} ({GPUS_PER_NODE_ENV}={granted}); start as many processes as granted "
        f'(torchrun --nproc_per_node / accelerate launch --num_processes "${{{GPUS_PER_NODE_ENV}}}")'
    )


# ── the watchdog ─────────────────────────────────────────────────────────────────────────────────────


class Watchdog(Record):
    """Samples `root`'s process tree every interval until `done`; `stop()` is called once on overuse
    when the policy is `stop`. `finding` is the last overuse line, `stopped` whether it stopped the run."""

    root: int
    settings: Settings
    stop: Callable[[], None]
    tool: Tool = field(default_factory=Tool)
    finding: str = ""
    stopped: bool = False
    _widest: int = 0

    def start(self, done: threading.Event) -> threading.Thread:
        thread = threading.Thread(target=self.watch, args=(done,), name="gpu-watchdog", daemon=True)
        thread.start()
        return thread

    def watch(self, done: threading.Event) -> None:
        wait = min(FIRST_SAMPLE, self.settings.interval)
        failures = 0
        while not done.wait(wait):
            wait = self.settings.interval
            try:
                self.sample()
                failures = 0
            except QueryHung as exc:
                _say(f"{exc}; the watchdog is off for the rest of this run")
                return
            except QueryFailed as exc:
                failures += 1
                if failures >= FAILURES_OFF:
                    _say(f"{exc} {failures} times in a row; the watchdog is off for the rest of this run")
                    return
            if self.stopped:
                return

    def sample(self) -> None:
        """One look: the tree's GPUs against the grant; a line when it is over (again only when wider)."""
        apps = self.tool.rows(APPS_QUERY)
        ours = {int(row[0]) for row in apps if row[0].isdigit() and descends_from(int(row[0]), self.root)}
        held = occupied(apps, ours)
        if len(held) <= self.settings.granted or len(held) <= self._widest:
            return
        self._widest = len(held)
        try:
            names = gpu_names(self.tool.rows(GPUS_QUERY), held)
        except QueryHung:
            raise
        except QueryFailed:
            names = sorted(held)
        self.finding = overuse_line(names, self.settings.granted, len(ours))
        if self.settings.policy == "stop":
            self.finding += "; stopped (cluster.gpu_watchdog: stop)"
            _say(f"error: {self.finding}")
            self.stopped = True
            self.stop()
        else:
            _say(f"warning: {self.finding}")


def _say(line: str) -> None:
    print(f"{LOG_PREFIX} {line}", file=sys.stderr, flush=True)


class TreeStop(Record):
    """Stops a trainer's process tree: TERM to the trainer and every descendant (a shell does not pass it
    on to its children); `grace` seconds later KILL to what is left, of the tree as it was stopped and
    as it is then. Once the trainer has ended, `finish()` gives what outlived it the rest of the grace."""

    root: int
    grace: float = STOP_GRACE
    pids: list[int] = field(default_factory=list)
    ended: threading.Event = field(default_factory=threading.Event)
    stopped_at: float = 0.0

    def __call__(self) -> None:
        self.stopped_at = time.monotonic()
        self.pids = process_tree(self.root)
        _signal_all(self.pids, signal.SIGTERM)
        threading.Thread(target=self._kill_later, name="gpu-watchdog-kill", daemon=True).start()

    def _kill_later(self) -> None:
        if not self.ended.wait(self.grace):
            _signal_all(list(dict.fromkeys([*self.pids, *process_tree(self.root)])), signal.SIGKILL)

    def finish(self) -> None:
        """The trainer has ended (and was reaped: its pid is not looked at again). The processes of the
        stopped tree still alive (a rank saving its state on TERM) get the rest of the grace, then KILL."""
        self.ended.set()
        left = [pid for pid in self.pids if pid != self.root]
        while left and time.monotonic() < self.stopped_at + self.grace:
            time.sleep(REAP_POLL)
            left = [pid for pid in left if alive(pid)]
        _signal_all(left, signal.SIGKILL)


def alive(pid: int) -> bool:
    """Whether `pid` runs (a zombie has ended: it only waits for its parent to read its status)."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as handle:
            return handle.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


def _signal_all(pids: list[int], signum: int) -> None:
    for pid in pids:
        with contextlib.suppress(OSError):
            os.kill(pid, signum)
