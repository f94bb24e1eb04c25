"""sbatch refusals as errors a person can act on: which `tuneplane.yaml` setting to change, and how.

A refusal is final for the run as written (the bot records it as refused, it does not retry); a
controller that does not answer is not a refusal (`commands.SlurmUnavailable`).
"""

from __future__ import annotations

from collections.abc import Mapping

from tuneplane.backends.base import SubmitRefused
from tuneplane.backends.slurm.commands import first_line

# (text in sbatch's message, lowercased) → (the sbatch options it may be about, first present wins; the fix)
KNOWN = (
    ("invalid partition", "--partition", "name a partition that exists (sinfo --summarize lists them)"),
    (
        "partition configuration not available",
        "--partition",
        "the partition is down or closed to you: ask the cluster's administrators, or name another partition",
    ),
    ("invalid account", "--account", "name an account you belong to (sacctmgr show assoc user=$USER)"),
    ("invalid qos", "--qos", "name a QOS your account may use (sacctmgr show assoc user=$USER format=qos)"),
    ("qos policy", "--qos", "the job exceeds a limit of its QOS or account: ask for fewer resources or another QOS"),
    (
        "time limit",
        "--time",
        "lower the run's timeout (tp submit --timeout) to the partition's limit "
        "(scontrol show partition), or choose a partition that allows it",
    ),
    (
        "node count specification invalid",
        "--nodes",
        "the profile asks for more nodes than the partition "
        "has: lower profiles.<name>.max_nodes or the run's GPU count",
    ),
    (
        "requested node configuration is not available",
        "--gpus-per-node --gres --cpus-per-task --mem --nodes",
        "no node of the partition has what the "
        "profile asks for (GPUs, CPUs, memory per node): check gpus_per_node and the slurm profile mapping "
        "against `sinfo -o '%P %D %c %m %G'`",
    ),
    ("memory", "--mem", "lower memory_per_node to what the partition's nodes have"),
    (
        "gres",
        "--gres --gpus-per-node",
        "the GPU request does not match the cluster's generic resources: check gpu_request and gpu_type",
    ),
)


class SlurmRefused(SubmitRefused):
    """sbatch refused the job as written: retrying the same request cannot succeed."""


def refusal(stderr: str, sources: Mapping[str, str]) -> SlurmRefused:
    """The refusal for sbatch's message; `sources` maps each sbatch option to the setting it came from."""
    said = first_line(stderr)
    lowered = said.lower()
    for text, option, fix in KNOWN:
        if text in lowered:
            setting = next((sources[o] for o in option.split() if o in sources), "")
            where = f"{setting}: " if setting else ""
            return SlurmRefused(f"{where}sbatch refused the job: {said}\n  hint: {fix}", setting, fix)
    return SlurmRefused(f"sbatch refused the job: {said}", "", "")
