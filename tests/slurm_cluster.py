"""A real two-node Slurm cluster on 127.0.0.1 for the tests: `munged`, `slurmctld`, two `slurmd -N`.

Everything lives under one temporary directory (munge key and socket, slurm.conf, state, spool, logs);
ports are picked free at run time; every daemon runs in the foreground under our control and is
stopped by its PID. The nodes declare `Gres=gpu:2` backed by plain files (`AutoDetect=off`), so GPU
shapes are scheduled for real on a machine without GPUs.

Use the `slurm_cluster` fixture (session-scoped). Commands reach this cluster only through
`SLURM_CONF` (`cluster.env`), never through /etc. Without root or without the packages the fixture
skips with the reason; with `CI=true` it fails instead.

Run it by hand: `python tests/slurm_cluster.py` starts the cluster, prints `SLURM_CONF=…` and waits
for Ctrl-C.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from support.wait import wait_until

NODES = ("n1", "n2")
GPUS_PER_NODE = 2
CPUS_PER_NODE = 4
# A partition that holds one node at most and 5 minutes: jobs asking more stay PENDING with a reason.
LIMITED_PARTITION = "small"
DAEMONS = ("munged", "slurmctld", "slurmd")
CLIENTS = ("sbatch", "squeue", "scontrol", "scancel", "sinfo", "srun")
START_TIMEOUT = 60.0
MIN_JOB_AGE = 5


class ClusterUnavailable(Exception):
    """Slurm cannot run on this machine (the message says why)."""


@dataclass
class SlurmCluster:
    root: Path
    conf: Path
    ctld_port: int
    processes: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)

    @property
    def env(self) -> dict[str, str]:
        """The environment entries that point Slurm's commands at this cluster."""
        return {"SLURM_CONF": str(self.conf)}

    def command(self, *args: str, timeout: float = 30, check: bool = True) -> str:
        done = subprocess.run(
            list(args),
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
            env={**os.environ, **self.env},
        )
        if check and done.returncode:
            raise RuntimeError(f"{' '.join(args)} failed ({done.returncode}): {done.stderr.strip()}")
        return done.stdout

    def node_states(self) -> dict[str, str]:
        out = self.command("sinfo", "--noheader", "--Node", "--format=%N %t", check=False)
        states: dict[str, str] = {}
        for line in out.splitlines():
            name, _, state = line.strip().partition(" ")
            if name in NODES:
                states[name] = state.strip()
        return states

    def wait_idle(self, timeout: float = START_TIMEOUT) -> None:
        """Until both nodes are idle (or mixed/allocated by nothing left over); resumes a downed node."""
        states: dict[str, str] = {}

        def idle() -> bool:
            self.check_alive()
            states.clear()
            states.update(self.node_states())
            return len(states) == len(NODES) and all(s.rstrip("*~#") == "idle" for s in states.values())

        _wait(idle, timeout, 0.3, lambda: f"the Slurm nodes did not become idle: {states}\n{self.logs_tail()}")

    def wait_answering(self, timeout: float = START_TIMEOUT) -> None:
        """Until slurmctld answers again (after a test stopped it)."""
        _wait(
            lambda: len(self.node_states()) == len(NODES),
            timeout,
            0.3,
            lambda: f"slurmctld does not answer\n{self.logs_tail()}",
        )

    def resume(self, node: str, timeout: float = START_TIMEOUT) -> None:
        """Bring a node that a test set DOWN back to service (jobs of other tests may still run on it)."""
        self.command("scontrol", "update", f"nodename={node}", "state=resume", check=False)
        state = [""]

        def back() -> bool:
            state[0] = self.node_states().get(node, "")
            return bool(state[0]) and not state[0].startswith(("down", "drain", "fail", "unk", "not_resp"))

        _wait(back, timeout, 0.3, lambda: f"node {node} did not come back: {state[0]}\n{self.logs_tail()}")

    def restart_slurmd(self, node: str) -> None:
        """Start the slurmd of `node` again after a test killed it (its state returns on registration)."""
        proc = self.processes.get(f"slurmd-{node}")
        if proc is not None and proc.poll() is None:
            return
        self.processes[f"slurmd-{node}"] = subprocess.Popen(
            ["slurmd", "-D", "-N", node, "-f", str(self.conf)],
            env={**os.environ, **self.env},
            stdout=subprocess.DEVNULL,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )

    def forgotten(self, job_id: str) -> bool:
        """Whether slurmctld has purged the job (MinJobAge after it ended)."""
        done = subprocess.run(
            ["scontrol", "show", "job", job_id],
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
            env={**os.environ, **self.env},
        )
        return done.returncode != 0 and "invalid job id" in done.stderr.lower()

    def check_alive(self) -> None:
        for name, proc in self.processes.items():
            if proc.poll() is not None:
                raise ClusterUnavailable(f"{name} exited with {proc.returncode}\n{self.logs_tail()}")

    def logs_tail(self, lines: int = 15) -> str:
        parts = []
        for log in sorted(self.root.glob("log/*.log")):
            text = log.read_text(errors="replace").splitlines()[-lines:]
            parts.append(f"--- {log.name}\n" + "\n".join(text))
        return "\n".join(parts)

    def stop(self) -> None:
        """Stop every daemon by its PID: TERM, then KILL after a grace period."""
        for name in reversed(list(self.processes)):
            proc = self.processes[name]
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in self.processes.values():
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=10)
        self.processes.clear()


def missing_reason() -> str:
    """Why the cluster cannot start here, or '' when it can."""
    if os.geteuid() != 0:
        return "the Slurm test cluster needs root (slurmd runs jobs as their users)"
    absent = [name for name in (*DAEMONS, *CLIENTS) if shutil.which(name) is None]
    if absent:
        return f"Slurm is not installed ({', '.join(absent)} missing): apt-get install slurm-wlm munge"
    return ""


def free_ports(count: int) -> list[int]:
    socks = []
    try:
        for _ in range(count):
            sock = socket.socket()
            sock.bind(("127.0.0.1", 0))
            socks.append(sock)
        return [s.getsockname()[1] for s in socks]
    finally:
        for sock in socks:
            sock.close()


def _write_conf(root: Path, ports: list[int]) -> Path:
    hostname = socket.gethostname()
    gpu_dir = root / "gpu"
    gpu_dir.mkdir()
    gres = ["AutoDetect=off"]
    nodes = []
    for index, node in enumerate(NODES):
        for gpu in range(GPUS_PER_NODE):
            (gpu_dir / f"{node}-{gpu}").touch()
        gres.append(f"NodeName={node} Name=gpu File={gpu_dir}/{node}-[0-{GPUS_PER_NODE - 1}]")
        nodes.append(
            f"NodeName={node} NodeAddr=127.0.0.1 NodeHostname={hostname} Port={ports[index + 1]} "
            f"CPUs={CPUS_PER_NODE} RealMemory=4000 Gres=gpu:{GPUS_PER_NODE} State=UNKNOWN"
        )
    (root / "gres.conf").write_text("\n".join(gres) + "\n")
    node_list = ",".join(NODES)
    conf = root / "slurm.conf"
    conf.write_text(
        "\n".join(
            [
                "ClusterName=tptest",
                "SlurmctldHost=localhost(127.0.0.1)",
                f"SlurmctldPort={ports[0]}",
                "SlurmUser=root",
                "SlurmdUser=root",
                "AuthType=auth/munge",
                "CredType=cred/munge",
                # cred_expire: a requeued job waits this long (+1 s) before it may start again
                f"AuthInfo=socket={root}/munge/munge.socket,cred_expire=10",
                f"StateSaveLocation={root}/state",
                f"SlurmdSpoolDir={root}/spool/%n",
                f"SlurmctldPidFile={root}/run/slurmctld.pid",
                f"SlurmdPidFile={root}/run/slurmd-%n.pid",
                f"SlurmctldLogFile={root}/log/slurmctld.log",
                f"SlurmdLogFile={root}/log/slurmd-%n.log",
                "SlurmctldDebug=info",
                "SlurmdDebug=info",
                "ProctrackType=proctrack/linuxproc",
                "TaskPlugin=task/none",
                "SelectType=select/cons_tres",
                "SelectTypeParameters=CR_Core_Memory",
                "GresTypes=gpu",
                "SlurmdParameters=config_overrides",
                "AccountingStorageType=accounting_storage/none",
                # Memory is enforced the way sites without cgroups do: the step is sampled every
                # second and killed once it exceeds --mem ("exceeded memory limit").
                "JobAcctGatherType=jobacct_gather/linux",
                "JobAcctGatherFrequency=task=1",
                "JobAcctGatherParams=OverMemoryKill",
                "JobCompType=jobcomp/none",
                "MpiDefault=none",
                "SchedulerType=sched/backfill",
                "SchedulerParameters=sched_interval=2",
                "ReturnToService=2",
                # Slurm forgets a finished job this long after it ended (purged within a minute more):
                # the tests check that a run reads the same once only its own evidence is left
                f"MinJobAge={MIN_JOB_AGE}",
                "KillWait=2",
                "OverTimeLimit=0",
                "InactiveLimit=0",
                "SlurmdTimeout=30",
                "MessageTimeout=10",
                "DefMemPerCPU=100",
                *nodes,
                f"PartitionName=debug Nodes={node_list} Default=YES MaxTime=INFINITE State=UP",
                f"PartitionName={LIMITED_PARTITION} Nodes={node_list} MaxNodes=1 MaxTime=5 State=UP",
                "",
            ]
        )
    )
    return conf


def _wait(ready: Callable[[], bool], timeout: float, interval: float, why: Callable[[], str]) -> None:
    """`wait_until`, failing as `ClusterUnavailable`: a cluster that does not come up is no test's assertion."""
    try:
        wait_until(ready, timeout, interval, why)
    except AssertionError as timed_out:
        raise ClusterUnavailable(str(timed_out)) from None


def _start_munge(root: Path, log: Path) -> subprocess.Popen[bytes]:
    munge = root / "munge"
    munge.mkdir(mode=0o700)
    key = munge / "munge.key"
    key.write_bytes(os.urandom(1024))
    key.chmod(0o400)
    proc = subprocess.Popen(
        [
            "munged",
            "--foreground",
            "--force",
            f"--key-file={key}",
            f"--socket={munge}/munge.socket",
            f"--pid-file={munge}/munged.pid",
            f"--log-file={log}",
            f"--seed-file={munge}/munge.seed",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )

    def not_started() -> str:
        return f"munged did not start: {log.read_text(errors='replace')[-800:]}"

    def listening() -> bool:
        if (munge / "munge.socket").exists():
            return True
        if proc.poll() is not None:
            raise ClusterUnavailable(not_started())
        return False

    _wait(listening, 10, 0.05, not_started)
    return proc


def start(root: Path) -> SlurmCluster:
    """Start munged, slurmctld and one slurmd per node under `root`; returns once both nodes are idle."""
    reason = missing_reason()
    if reason:
        raise ClusterUnavailable(reason)
    for sub in ("state", "run", "log", *(f"spool/{n}" for n in NODES)):
        (root / sub).mkdir(parents=True, exist_ok=True)
    ports = free_ports(1 + len(NODES))
    conf = _write_conf(root, ports)
    cluster = SlurmCluster(root, conf, ports[0])
    env = {**os.environ, "SLURM_CONF": str(conf)}
    try:
        cluster.processes["munged"] = _start_munge(root, root / "log" / "munged.log")
        cluster.processes["slurmctld"] = subprocess.Popen(
            ["slurmctld", "-D", "-i", "-f", str(conf)],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        for node in NODES:
            cluster.processes[f"slurmd-{node}"] = subprocess.Popen(
                ["slurmd", "-D", "-N", node, "-f", str(conf)],
                env=env,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        cluster.wait_idle()
    except BaseException:
        cluster.stop()
        raise
    return cluster


@contextlib.contextmanager
def running_cluster(root: Path | None = None) -> Iterator[SlurmCluster]:
    base = root or Path(tempfile.mkdtemp(prefix="tp-slurm-"))
    cluster = start(base)
    try:
        yield cluster
    finally:
        cluster.stop()
        if root is None:
            shutil.rmtree(base, ignore_errors=True)


def _stop_on_term(_signum: int, _frame: object) -> None:
    raise SystemExit(0)  # unwinds through running_cluster, which stops the daemons


if __name__ == "__main__":
    signal.signal(signal.SIGTERM, _stop_on_term)
    with running_cluster() as running:
        print(f"SLURM_CONF={running.conf}", flush=True)
        with contextlib.suppress(KeyboardInterrupt):
            while True:
                time.sleep(1)
                running.check_alive()


# ── pytest ──────────────────────────────────────────────────────────────────────────────────────────
# A plugin module: test files say `pytest_plugins = ("slurm_cluster",)`.

try:
    import pytest
except ImportError:  # run by hand without pytest
    pytest = None  # type: ignore[assignment]

if pytest is not None:

    @pytest.fixture(scope="session")
    def slurm_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SlurmCluster]:
        """The real two-node cluster, one per test process; skipped (failed in CI) where it cannot run."""
        reason = missing_reason()
        if reason:
            if os.environ.get("CI") == "true":
                pytest.fail(f"CI must run the Slurm tests: {reason}")
            pytest.skip(reason)
        with running_cluster(tmp_path_factory.mktemp("slurm")) as cluster:
            yield cluster
