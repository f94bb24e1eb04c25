"""Pack a run for Slurm: the rendered batch script, checked, and what staging the run needs."""

from __future__ import annotations

from typing import TYPE_CHECKING

from tuneplane.backends.slurm.commands import check_script
from tuneplane.models.jobspec import JobSpec
from tuneplane.plan.launchplan import LaunchPlan
from tuneplane.plan.names import jobspec_digest
from tuneplane.render.slurm import render_batch

if TYPE_CHECKING:
    from tuneplane.lab.load import Lab


def batch_manifest(spec: JobSpec, plan: LaunchPlan, lab: Lab) -> dict[str, object]:
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
