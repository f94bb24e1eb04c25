"""The process launchers adapters share: torchrun, accelerate launch, a Ray driver, a plain process. Pure.

Each rank of a process group re-enters `tuneplane.launcher`, which verifies and installs the job's
algorithm plugins in that rank's interpreter before running the entry (`-m module …` or `file.py …`).
Across nodes, the rendezvous is the JobSet's first pod; each pod's node rank comes from its completion
index (`TUNEPLANE_NODE_RANK` / `PET_NODE_RANK`, set by the manifest).
"""

from __future__ import annotations

from tuneplane.models.jobspec import JobSpec
from tuneplane.plan.adapters.base import LAUNCHER_MODULE, PYTHON, make_plan, processes_per_node
from tuneplane.plan.launchplan import LaunchPlan
from tuneplane.plan.names import RENDEZVOUS_PORT, rendezvous_host

NODE_RANK = "TUNEPLANE_NODE_RANK"


def group_env(spec: JobSpec) -> dict[str, str]:
    """Where ranks meet across nodes (one node: nothing; torchrun runs standalone)."""
    if spec.spec.resources.nodes == 1:
        return {}
    return {"MASTER_ADDR": rendezvous_host(spec), "MASTER_PORT": str(RENDEZVOUS_PORT)}


def torchrun(spec: JobSpec, entry: list[str], env: dict[str, str] | None = None) -> LaunchPlan:
    """`torchrun` with `--standalone` on one node, c10d rendezvous on the first pod across nodes."""
    nodes, procs = spec.spec.resources.nodes, processes_per_node(spec)
    argv = ["torchrun", "--nnodes", str(nodes), "--nproc_per_node", str(procs)]
    if nodes == 1:
        argv.insert(1, "--standalone")
    else:
        argv += ["--rdzv_backend", "c10d", "--rdzv_endpoint", f"{rendezvous_host(spec)}:{RENDEZVOUS_PORT}",
                 "--rdzv_id", spec.metadata.run_id]
    argv += ["-m", LAUNCHER_MODULE, *entry]
    return make_plan(spec, argv, mode="process-group", procs_per_node=procs,
                     extra_env={**group_env(spec), **(env or {})})


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
    return make_plan(spec, [PYTHON, *entry], mode="ray-driver", in_process=True,
                     procs_per_node=processes_per_node(spec), extra_env=env)


def single(spec: JobSpec, entry: list[str]) -> LaunchPlan:
    """One Python process (lifecycle operations, evaluation runners)."""
    return make_plan(spec, [PYTHON, *entry], in_process=True)
