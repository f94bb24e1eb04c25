"""Labs that run on the real test cluster (`slurm_cluster.py`): settings, experiments, and a bot loop.

`slurm_lab_settings` writes a `tuneplane.yaml` whose `cluster.slurm` section points at the cluster's
slurm.conf, keeps run directories under a temporary "shared filesystem", and runs jobs with this
interpreter's environment (`software: host`), so the job's `python3` imports the tuneplane under test.
"""

from __future__ import annotations

import json
import math
import os
import sys
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from support.labs import new_lab
from support.repos import configure, git
from support.wait import wait_until

if TYPE_CHECKING:
    from slurm_cluster import SlurmCluster

# A custom experiment that meets across nodes with torchrun (static rendezvous from MASTER_ADDR and
# MASTER_PORT, node rank from Slurm) and all-reduces rank + 1 over gloo on CPU.
ALLREDUCE_TRAIN = """#!/usr/bin/env bash
set -euo pipefail
: "${TUNEPLANE_OUT_DIR:?}" "${TUNEPLANE_NODE_RANK:?}" "${MASTER_ADDR:?}" "${MASTER_PORT:?}"
echo "$TUNEPLANE_RUN_ID node=$SLURMD_NODENAME rank=$TUNEPLANE_NODE_RANK" >> "$TUNEPLANE_RUN_DIR/launches.txt"
export GLOO_SOCKET_IFNAME=lo OMP_NUM_THREADS=1
exec python3 -m torch.distributed.run --nnodes "$TUNEPLANE_CLUSTER_NUM_NODES" \\
  --node_rank "$TUNEPLANE_NODE_RANK" --nproc_per_node 1 \\
  --master_addr "$MASTER_ADDR" --master_port "$MASTER_PORT" "$TUNEPLANE_EXP_DIR/allreduce.py"
"""
ALLREDUCE_PY = """import json
import os

import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
total = torch.tensor([float(rank + 1)])
dist.all_reduce(total)
out = os.environ["TUNEPLANE_OUT_DIR"]
with open(f"{out}/rank-{rank}.json", "w") as handle:
    json.dump({"rank": rank, "world": world, "sum": total.item(), "node": os.environ.get("SLURMD_NODENAME"),
               "nodes": os.environ["TUNEPLANE_CLUSTER_NUM_NODES"],
               "gpus": os.environ["TUNEPLANE_CLUSTER_GPUS_PER_NODE"]}, handle)
if rank == 0:
    os.makedirs(f"{out}/checkpoints", exist_ok=True)
    with open(f"{out}/checkpoints/step-1.txt", "w") as handle:
        handle.write("ok")
    from tuneplane import report

    report.init(monitor_hardware=False)
    report.log({"train/loss": 0.25, "allreduce/sum": total.item()}, step=1)
    report.finish()
dist.barrier()
dist.destroy_process_group()
"""
# Scripts for the failure cases: the first line of train.sh decides.
EXIT7_TRAIN = '#!/usr/bin/env bash\necho "failing on purpose"\nexit 7\n'
SLEEP_TRAIN = (
    '#!/usr/bin/env bash\necho "sleeping $TUNEPLANE_RUN_ID"\necho started > "$TUNEPLANE_OUT_DIR/started"\nsleep 600\n'
)
IMAGE = "python:3.12"
OBSERVABILITY = "https://track.example.org/p"


def job_python_env(shared: Path) -> Path:
    """A host environment on the "shared filesystem" for the jobs: this interpreter (so the job imports
    the tuneplane under test) and torchrun. Jobs start with no environment of the bot (--export=NONE),
    so they find nothing on the bot's PATH: what they run must be here."""
    env = shared / "env"
    bin_dir = env / "bin"
    bin_dir.mkdir(parents=True, exist_ok=True)
    python = Path(sys.executable)
    for name in ("python", "python3"):
        _wrapper(bin_dir / name, f'exec {python} "$@"')
    _wrapper(bin_dir / "torchrun", f'exec {python} -m torch.distributed.run "$@"')
    return env


def _wrapper(path: Path, line: str) -> None:
    path.write_text(f"#!/bin/sh\n{line}\n", encoding="utf-8")
    path.chmod(0o755)


def lab_yaml(
    cluster: SlurmCluster, shared: Path, ingest: str = "", extra_slurm: str = "", partition: str = "debug"
) -> str:
    endpoint = f"  ingest:\n    endpoint: {json.dumps(ingest)}\n" if ingest else ""
    return f"""apiVersion: tuneplane/project/v1
name: slurm-lab
profiles:
  local:
    local: true
    gpus_per_node: 0
  gpu:
    gpus_per_node: 1
    max_nodes: 2
  wide:
    gpus_per_node: 1
    max_nodes: 2
  cpu:
    gpus_per_node: 0
    max_nodes: 1
cluster:
  backend: slurm
{endpoint}  slurm:
    conf: {json.dumps(str(cluster.conf))}
    runs_root: {json.dumps(str(shared))}
    partition: {partition}
    cpus_per_node: 1
    memory_per_node: 900M
    software:
      kind: host
      python_env: {json.dumps(str(job_python_env(shared)))}
    profiles:
      wide:
        partition: small
{extra_slurm}"""


def make_slurm_lab(
    work: Path,
    cluster: SlurmCluster,
    shared: Path,
    experiments: Mapping[str, Mapping[str, str]],
    *,
    ingest: str = "",
    remote: Path | None = None,
    method: str = "custom/custom",
    methods: Mapping[str, str] | None = None,
) -> Path:
    """A committed lab (optionally pushed to `remote`) with experiments name → {file: content}."""
    from tuneplane.author.scaffold import new_experiment
    from tuneplane.lab.load import load_lab

    new_lab(work, "slurm-lab")
    configure(work)
    (work / "tuneplane.yaml").write_text(lab_yaml(cluster, shared, ingest), encoding="utf-8")
    lab = load_lab(work)
    for name, files in experiments.items():
        new_experiment(lab, name, (methods or {}).get(name, method), None)
        for rel, content in files.items():
            (work / "experiments" / name / rel).write_text(content, encoding="utf-8")
    git(work, "add", "-A")
    git(work, "commit", "-q", "-m", "slurm lab")
    if remote is not None:
        git(work, "remote", "add", "origin", str(remote))
        git(work, "push", "-q", "origin", "HEAD:main")
    return work


def request_run(root: Path, experiment: str, run_id: str, profile: str, commit: bool = True, **fields: Any) -> str:
    from tuneplane.lab.runs import write_request
    from tuneplane.models.run import RunRequest

    values: dict[str, Any] = {"image": IMAGE, "observability_url": OBSERVABILITY}
    values.update(fields)
    rel = write_request(root, RunRequest(experiment=experiment, run_id=run_id, profile=profile, **values))
    rel_path = rel.relative_to(root).as_posix()
    if commit:
        git(root, "add", "--", rel_path)
        git(root, "commit", "-q", "-m", f"request {run_id}")
    return rel_path


def status_of(root: Path, experiment: str, run_id: str) -> dict[str, Any]:
    path = root / "status" / experiment / f"{run_id}.json"
    return json.loads(path.read_text(encoding="utf-8")) if path.exists() else {}


def sync_until(
    root: Path,
    done: Callable[[dict[str, dict[str, Any]]], bool],
    keys: list[tuple[str, str]],
    timeout: float = 150,
    env: Mapping[str, str] | None = None,
) -> dict[str, dict[str, Any]]:
    """`tp bot sync` (in this process) once a second until `done(statuses)` or the deadline; returns the
    statuses either way: past the deadline it does not fail, its callers' assertions say what is wrong."""
    from tuneplane.bot.entry import sync

    deadline = time.monotonic() + timeout
    statuses: dict[str, dict[str, Any]] = {}

    def settled() -> bool:
        """Done, or out of time (true as well: `wait_until` itself never fails here)."""
        sync(root, echo=quiet)
        statuses.update((run_id, status_of(root, exp, run_id)) for exp, run_id in keys)
        return done(statuses) or time.monotonic() > deadline

    with _env(env):
        wait_until(settled, math.inf, 1.0)
    return statuses


class _env:
    def __init__(self, values: Mapping[str, str] | None) -> None:
        self.values, self.saved = dict(values or {}), {}  # type: ignore[var-annotated]

    def __enter__(self) -> None:
        for key, value in self.values.items():
            self.saved[key] = os.environ.get(key)
            os.environ[key] = value

    def __exit__(self, *exc: object) -> None:
        for key, value in self.saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def quiet(_line: str) -> None:
    pass


def terminal(status: dict[str, Any]) -> bool:
    return status.get("phase") in ("Succeeded", "Failed", "Cancelled")


def run_dir_of(status: dict[str, Any]) -> Path:
    return Path(status["out_dir"]).parent
