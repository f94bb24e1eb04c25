"""Pack a run for Slurm: the rendered batch script, checked, and what staging the run needs."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from tuneplane.backends.base import BackendError, Payload, SubmitRequest
from tuneplane.backends.slurm.commands import check_script
from tuneplane.models.jobspec import JobSpec
from tuneplane.plan.launchplan import LaunchPlan
from tuneplane.plan.names import jobspec_digest
from tuneplane.render.slurm import render_batch
from tuneplane.runtime.jsonvalue import JSONObject
from tuneplane.runtime.records import FrozenRecord, field

if TYPE_CHECKING:
    from tuneplane.lab.load import Lab

KIND = "SlurmBatch"  # what `tp render --format json` calls it


class SlurmBatch(FrozenRecord):
    """What the Slurm backend is sent for one run, in place of manifests."""

    job_name: str
    comment: str  # names the run, so a resubmit finds the job Slurm already holds
    script: str
    run_dir: str
    work_dir: str
    launch_document: JSONObject = field(default_factory=dict)
    sources: dict[str, str] = field(default_factory=dict)  # sbatch option → the tuneplane.yaml setting it came from
    out_dir: str = ""
    commit: str = ""
    jobspec_digest: str = ""
    plugins: list[str] = field(default_factory=list)
    artifacts: list[dict[str, str]] = field(default_factory=list)
    lab_root: str = ""  # set as the run is packed for submission: where the lab's commit is staged from

    def shown(self) -> tuple[str | None, list[JSONObject]]:
        """The script, and as JSON the script and the launch document it fills in."""
        return self.script, [
            {
                "kind": KIND,
                "job_name": self.job_name,
                "comment": self.comment,
                "script": self.script,
                "launch_document": self.launch_document,
            }
        ]


def batch_manifest(spec: JobSpec, plan: LaunchPlan, lab: Lab) -> SlurmBatch:
    """The Slurm backend's one "manifest": the batch script and what staging the run needs."""
    batch = render_batch(spec, plan, lab.config)
    check_script(batch.script)
    paths = spec.spec.paths
    return SlurmBatch(
        job_name=batch.job_name,
        comment=batch.comment,
        script=batch.script,
        launch_document=batch.launch_document,
        sources=batch.sources,
        run_dir=paths.run_dir,
        work_dir=paths.work_dir,
        out_dir=paths.out_dir,
        commit=spec.provenance.commit,
        jobspec_digest=jobspec_digest(spec),
        plugins=[p.name for p in spec.spec.plugins],
        artifacts=[{"kind": a.kind, "pattern": a.pattern, "format": a.format} for a in plan.artifacts],
    )


def pack(spec: JobSpec, lab: Lab, lab_root: Path, batch: Payload, job_token: str) -> SubmitRequest:
    """The request for the rendered `batch`: staged from `lab_root`, with the run's token (if it has one
    and the lab reports to an ingest endpoint) for the token file."""
    run_id = spec.metadata.run_id
    return SubmitRequest(
        run_id=run_id,
        experiment=spec.metadata.experiment,
        namespace="",
        object_name=spec.metadata.name,
        payload=batch_of(run_id, batch).replace(lab_root=str(lab_root)),
        secret_data={"job-token": job_token} if job_token and lab.config.cluster.ingest.endpoint else {},
    )


def batch_of(run_id: str, payload: Payload) -> SlurmBatch:
    """The payload as this backend's own, or a refusal: another backend's payload is no batch script."""
    if not isinstance(payload, SlurmBatch):
        raise BackendError(
            f"run {run_id}: the Slurm backend takes one rendered batch script per run, and was handed "
            f"{type(payload).__name__} (a run packed for another backend); submit it to the backend it was "
            "rendered for"
        )
    return payload
