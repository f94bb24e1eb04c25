"""The process launchers adapters share: torchrun, accelerate launch, a Ray driver, a plain process. Pure.

Each rank of a process group re-enters `tuneplane.launcher`, which verifies and installs the job's
algorithm plugins in that rank's interpreter before running the entry (`-m module …` or `file.py …`).
Across nodes the rendezvous is static, as Kubeflow Trainer and the JobSet examples do it: the master is
the JobSet's first pod (`PET_MASTER_ADDR`/`PET_MASTER_PORT`), each pod's node rank is its completion
index (`PET_NODE_RANK` / `TUNEPLANE_NODE_RANK`, set by the manifest), and torchrun reads the `PET_*`
variables as its defaults. No rendezvous store is negotiated and no name is looked up until the
process group connects to the master.
"""

from __future__ import annotations

from tuneplane.constants import NODE_RANK_ENV
from tuneplane.models.jobspec import JobSpec
from tuneplane.plan.adapters.base import LAUNCHER_MODULE, PYTHON, make_plan, processes_per_node
from tuneplane.plan.launchplan import LaunchPlan
from tuneplane.plan.names import RENDEZVOUS_PORT, rendezvous_host

NODE_RANK = NODE_RANK_ENV


def group_env(spec: JobSpec) -> dict[str, str]:
    """Where ranks meet across nodes (one node: nothing; torchrun runs standalone)."""
    nodes = spec.spec.resources.nodes
    if nodes == 1:
        return {}
    host, port = rendezvous_host(spec), str(RENDEZVOUS_PORT)
    return {
        "MASTER_ADDR": host,
        "MASTER_PORT": port,
        "PET_MASTER_ADDR": host,
        "PET_MASTER_PORT": port,
        "PET_NNODES": str(nodes),
    }


def torchrun(spec: JobSpec, entry: list[str], env: dict[str, str] | None = None) -> LaunchPlan:
    """`torchrun` with `--standalone` on one node, a static rendezvous on the first pod across nodes."""
    nodes, procs = spec.spec.resources.nodes, processes_per_node(spec)
    argv = ["torchrun", "--nnodes", str(nodes), "--nproc_per_node", str(procs)]
    if nodes == 1:
        argv.insert(1, "--standalone")
    else:
        argv += ["--rdzv_backend", "static"]  # master address, port and node rank: the PET_* variables
    argv += ["-m", LAUNCHER_MODULE, *entry]
    return make_plan(
        spec, argv, mode="process-group", procs_per_node=procs, extra_env={**group_env(spec), **(env or {})}
    )


def accelerate(spec: JobSpec, entry: list[str]) -> LaunchPlan:
    """`accelerate launch` with the whole job's process count; across nodes the machine rank is the pod's."""
    nodes, procs = spec.spec.resources.nodes, processes_per_node(spec)
    flags = ["--num_processes", str(nodes * procs), "--num_machines", str(nodes)]
    if nodes * procs > 1:
        flags.append("--multi_gpu")
    if nodes > 1:
        flags += ["--main_process_ip", rendezvous_host(spec), "--main_process_port", str(RENDEZVOUS_PORT)]
    tail = [*flags, "-m", LAUNCHER_MODULE, *entry]
    if nodes == 1:
        argv = ["accelerate", "launch", "--machine_rank", "0", *tail]
    else:
        # argv is exec'd, not run by a shell; only this fixed script reads the pod's rank, and every
        # other argument passes through "$@" untouched.
        script = f'exec accelerate launch --machine_rank "${NODE_RANK}" "$@"'
        argv = ["sh", "-c", script, "accelerate", *tail]
    return make_plan(spec, argv, mode="process-group", procs_per_node=procs, extra_env=group_env(spec))


def ray_driver(spec: JobSpec, entry: list[str], env: dict[str, str] | None = None) -> LaunchPlan:
    """The driver runs on the Ray head in the launcher's interpreter (plugins apply there)."""
    return make_plan(
        spec,
        [PYTHON, *entry],
        mode="ray-driver",
        in_process=True,
        procs_per_node=processes_per_node(spec),
        extra_env=env,
    )


def single(spec: JobSpec, entry: list[str]) -> LaunchPlan:
    """One Python process (lifecycle operations, evaluation runners)."""
    return make_plan(spec, [PYTHON, *entry], in_process=True)
