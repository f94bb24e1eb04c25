"""The one place a Backend is made from a lab's settings: `tp submit --local`, cancel and the bot use it.

Each backend's module is imported only when that backend is asked for (the Kubernetes client costs
start-up time, and a lab that never leaves this machine never pays it). What each backend can do, by its
name, is its row in `models.backendkinds.BACKEND_KINDS`: a new backend is a row there and a branch of
`make_backend` (and of `render_payload` and `pack_request`, for its payload).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

from tuneplane.backends.base import Backend, BackendError, Payload, RunsHere, SubmitRequest
from tuneplane.models.backendkinds import BACKEND_KINDS as BACKEND_KINDS  # runs/ and bot/ ask a kind here
from tuneplane.models.backendkinds import KUBERNETES, LOCAL, SLURM, BackendKind
from tuneplane.models.backendkinds import backend_kind as backend_kind
from tuneplane.runtime.records import FrozenRecord

if TYPE_CHECKING:
    from tuneplane.lab.load import Lab
    from tuneplane.models.jobspec import JobSpec
    from tuneplane.plan.launchplan import LaunchPlan


def cluster_kind(lab: Lab) -> BackendKind:
    """The backend the lab's cluster runs go to: the one `cluster.backend` names, or Kubernetes where that
    is this machine (a lab set to `local` still renders its cluster profiles' runs for Kubernetes)."""
    kind = backend_kind(lab.config.cluster.backend)
    return BACKEND_KINDS[KUBERNETES] if kind.runs_here else kind


def backend_name(lab: Lab, local: bool) -> str:
    """The backend a run is sent to: this machine's for a local run, else the lab's cluster."""
    return LOCAL if local else cluster_kind(lab).name


def render_payload(spec: JobSpec, plan: LaunchPlan, lab: Lab) -> Payload:
    """What the lab's cluster backend is sent for a cluster run, rendered and checked now: the objects
    (Kubernetes), the batch script (Slurm). `tp render` shows it (`Payload.shown`) before it is packed."""
    if cluster_kind(lab).name == SLURM:
        # lazy: only Slurm labs render batch scripts
        from tuneplane.backends.slurm.batch import batch_manifest

        return batch_manifest(spec, plan, lab)
    # lazy: only a cluster run is rendered
    from tuneplane.backends.kubernetes.payload import render_objects

    return render_objects(spec, plan, lab)


def pack_request(
    lab: Lab, lab_root: Path, spec: JobSpec, plan: LaunchPlan, rendered: Payload | None, job_token: str = ""
) -> SubmitRequest:
    """What the backend of a prepared run is sent, packed by that backend: a local run's `LocalRun`
    (`rendered` is None: nothing was rendered), or the cluster's `rendered` payload with what only the
    submit adds (where the lab is staged from, the run's ingest token `job_token`, the Secrets)."""
    name = backend_name(lab, spec.spec.resources.local)
    if name == LOCAL:
        # lazy: only local runs start here
        from tuneplane.backends.local.backend import pack as pack_local

        return pack_local(spec, plan, lab, lab_root)
    if rendered is None:
        raise BackendError(f"run {spec.metadata.run_id}: a cluster run is submitted as it was rendered, and it was not")
    if name == SLURM:
        # lazy: only Slurm labs need it
        from tuneplane.backends.slurm.batch import pack as pack_batch

        return pack_batch(spec, lab, lab_root, rendered, job_token)
    # lazy: as for rendering
    from tuneplane.backends.kubernetes.payload import pack as pack_objects

    return pack_objects(spec, plan, lab, rendered, job_token)


class ClusterAccess(FrozenRecord):
    """How to reach a cluster: the kubeconfig flags of `tp bot` and `tp job`."""

    kubeconfig: str | None = None
    context: str | None = None
    in_cluster: bool = False


def local_lab(lab: Lab) -> Lab:
    """The lab as the local backend sees it: `--local` runs get local paths whatever the cluster is."""
    if lab.settings is None or lab.settings.cluster.backend == LOCAL:
        return lab
    cluster = lab.settings.cluster.model_copy(update={"backend": LOCAL})
    return lab.replace(settings=lab.settings.model_copy(update={"cluster": cluster}))


def local_backend(lab: Lab) -> RunsHere:
    """This machine's backend, with the lab's local storage root: its runs are supervised here, so the
    run service starts, stops and records them through it (`RunsHere`), never through its modules."""
    # lazy: only local runs pay for it; the storage root's rules come with the pipeline, a heavy import
    from tuneplane.backends.local.backend import LocalBackend
    from tuneplane.plan.resolve import storage_root

    return LocalBackend(Path(storage_root(local_lab(lab), True, dict(os.environ))))


def run_metrics_store(backend: str, run_dir: str) -> Path | None:
    """The metrics database a run that runs here keeps in its own folder, where it has one; None for a
    run of any other backend (its points are in the lab's receiver, or the engine's). `backend` and
    `run_dir` as the run's status records them."""
    if not backend_kind(backend).runs_here:
        return None
    from tuneplane.backends.local.files import DB  # lazy: as above

    path = Path(run_dir) / DB
    return path if path.exists() else None


def make_backend(name: str, lab: Lab, access: ClusterAccess | None = None) -> Backend:
    """The backend called `name` (`local`, `slurm`, or else Kubernetes) for this lab."""
    if name == LOCAL:
        return local_backend(lab)
    if name == SLURM:
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
