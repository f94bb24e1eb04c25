"""The one place a Backend is made from a lab's settings: `tp submit --local`, cancel and the bot use it.

Each backend's module is imported only when that backend is asked for (the Kubernetes client costs
start-up time, and a lab that never leaves this machine never pays it).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from tuneplane.backends.base import Backend

if TYPE_CHECKING:
    from tuneplane.backends.local.backend import LocalBackend
    from tuneplane.lab.load import Lab


@dataclass(frozen=True)
class ClusterAccess:
    """How to reach a cluster: the kubeconfig flags of `tp bot` and `tp job`."""

    kubeconfig: str | None = None
    context: str | None = None
    in_cluster: bool = False


def local_lab(lab: Lab) -> Lab:
    """The lab as the local backend sees it: `--local` runs get local paths whatever the cluster is."""
    if lab.settings is None or lab.settings.cluster.backend == "local":
        return lab
    cluster = lab.settings.cluster.model_copy(update={"backend": "local"})
    return lab.replace(settings=lab.settings.model_copy(update={"cluster": cluster}))


def local_backend(lab: Lab) -> LocalBackend:
    """This machine's backend, with the lab's local storage root."""
    # lazy: only local runs pay for it; the storage root's rules come with the pipeline (~200 ms)
    from tuneplane.backends.local.backend import LocalBackend
    from tuneplane.plan.resolve import storage_root

    return LocalBackend(Path(storage_root(local_lab(lab), True, dict(os.environ))))


def make_backend(name: str, lab: Lab, access: ClusterAccess | None = None) -> Backend:
    """The backend called `name` (`local`, `slurm`, or else Kubernetes) for this lab."""
    if name == "local":
        return local_backend(lab)
    if name == "slurm":
        # lazy: only Slurm labs need it
        from tuneplane.backends.slurm import SlurmBackend

        slurm = lab.config.cluster.slurm
        return SlurmBackend(slurm.conf, timeout=slurm.command_timeout)
    # lazy: the kubernetes client is slow to import
    from tuneplane.backends.kubernetes.backend import KubernetesBackend

    access = access or ClusterAccess()
    return KubernetesBackend(
        lab.config.cluster.namespace,
        kubeconfig=access.kubeconfig,
        context=access.context,
        in_cluster=access.in_cluster,
        stuck_after=lab.config.cluster.stuck_after,
    )
