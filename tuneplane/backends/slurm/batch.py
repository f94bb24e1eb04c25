"""Pack a run for Slurm: the rendered batch script, checked, and what staging the run needs."""

from __future__ import annotations

from typing import TYPE_CHECKING, Required, TypedDict

from tuneplane.backends.slurm.commands import check_script
from tuneplane.models.jobspec import JobSpec
from tuneplane.plan.launchplan import LaunchPlan
from tuneplane.plan.names import jobspec_digest
from tuneplane.render.slurm import render_batch
from tuneplane.runtime.jsonvalue import JSONObject

if TYPE_CHECKING:
    from tuneplane.lab.load import Lab


class SlurmBatch(TypedDict, total=False):
    """What the Slurm backend is sent for one run, in place of manifests."""

    kind: Required[str]  # "SlurmBatch"
    job_name: Required[str]
    comment: Required[str]  # names the run, so a resubmit finds the job Slurm already holds
    script: Required[str]
    launch_document: JSONObject
    sources: dict[str, str]  # sbatch option → the tuneplane.yaml setting it came from
    run_dir: Required[str]
    work_dir: Required[str]
    out_dir: str
    commit: str
    jobspec_digest: str
    plugins: list[str]
    artifacts: list[dict[str, str]]
    lab_root: str  # added as the run is submitted: where the lab's commit is staged from


def batch_manifest(spec: JobSpec, plan: LaunchPlan, lab: Lab) -> SlurmBatch:
    """The Slurm backend's one "manifest": the batch script and what staging the run needs."""
    batch = render_batch(spec, plan, lab.config)
    check_script(batch.script)
    paths = spec.spec.paths
    return {
        "kind": "SlurmBatch",
        "job_name": batch.job_name,
        "comment": batch.comment,
        "script": batch.script,
        "launch_document": batch.launch_document,
        "sources": batch.sources,
        "run_dir": paths.run_dir,
        "work_dir": paths.work_dir,
        "out_dir": paths.out_dir,
        "commit": spec.provenance.commit,
        "jobspec_digest": jobspec_digest(spec),
        "plugins": [p.name for p in spec.spec.plugins],
        "artifacts": [{"kind": a.kind, "pattern": a.pattern, "format": a.format} for a in plan.artifacts],
    }
