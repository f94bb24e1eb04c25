"""Status records: what a run's status file says when it is submitted, refused, left waiting or
cancelled before it ran; written by `tp submit`, a local run and the bot alike."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tuneplane import __version__
from tuneplane.backends.base import BackendRef
from tuneplane.constants import CANCELLED, FAILED, PENDING, SUBMITTED
from tuneplane.models.base import RetryPolicy
from tuneplane.models.jobspec import JobSpec
from tuneplane.models.run import Attempt, Provenance, RunRequest, RunStatus, Transition
from tuneplane.plan.names import jobspec_digest
from tuneplane.runs.hyperparams import kept_hyperparameters
from tuneplane.runs.observe import backend_object


def provenance_of(spec: JobSpec) -> Provenance:
    image = spec.spec.image
    return Provenance(
        commit=spec.provenance.commit,
        dirty=spec.provenance.dirty,
        recipe=f"{spec.spec.recipe.name}@{spec.spec.recipe.version}",
        recipe_digest=spec.spec.recipe.digest,
        plugin_digests={p.id: p.digest for p in spec.spec.plugins},
        image=image,
        image_digest=image.partition("@")[2] if "@sha256:" in image else "",
        jobspec_digest=jobspec_digest(spec),
        tool_version=spec.provenance.tool_version or __version__,
    )


def _base(req: RunRequest, phase: str, now: str, **fields: Any) -> RunStatus:
    return RunStatus(
        experiment=req.experiment,
        run_id=req.run_id,
        operation=req.operation,
        profile=req.profile,
        phase=phase,  # type: ignore[arg-type, unused-ignore]
        history=[Transition(phase=phase, at=now)],  # type: ignore[arg-type, unused-ignore]
        **fields,
    )


def submitted_status(
    req: RunRequest, spec: JobSpec, ref: BackendRef, now: str, config: Mapping[str, object] | None = None
) -> RunStatus:
    """The status of a run its backend took; `config` (config.yaml merged with `--set`, as the job
    gets it: `PreparedRun.config`) gives the hyperparameters it keeps."""
    kept, left_out = kept_hyperparameters(config or {}, first=spec.spec.hyperparams)
    provenance = provenance_of(spec)
    message = f"submitted to {ref.backend} as {ref.kind} {ref.name}"
    if ref.commit and ref.commit != provenance.commit:
        # another bot created the object from another commit: record what actually runs
        provenance = provenance.model_copy(
            update={"commit": ref.commit, "jobspec_digest": ref.jobspec_digest or provenance.jobspec_digest}
        )
        message += f" (adopted: the job was created at commit {ref.commit[:12]})"
    return _base(
        req,
        SUBMITTED,
        now,
        method=spec.spec.recipe.name,
        submitted_at=now,
        backend=backend_object(ref),
        provenance=provenance,
        out_dir=spec.spec.paths.out_dir,
        message=message,
        retry=None if spec.spec.retry == RetryPolicy() else spec.spec.retry,  # none: the default
        hyperparameters=kept,
        hyperparameters_left_out=left_out,
        # the first attempt, under way: what it holds is known now (a report that omits it keeps this)
        attempts=[
            Attempt(number=1, object=ref.name, gpus=spec.spec.resources.nodes * spec.spec.resources.gpus_per_node)
        ],
    )


def refused_status(
    req: RunRequest, now: str, message: str, reason: str = "Refused", spec: JobSpec | None = None
) -> RunStatus:
    """The request can never run as written (a validation or admission refusal): Failed at once."""
    extra: dict[str, Any] = {}
    if spec is not None:
        extra = {"method": spec.spec.recipe.name, "provenance": provenance_of(spec)}
    return _base(req, FAILED, now, reason=reason, message=message, finished_at=now, **extra)


def waiting_status(req: RunRequest, spec: JobSpec, now: str, message: str) -> RunStatus:
    """The backend could not take the run yet (unreachable, refusing): the bot tries again next time."""
    return _base(
        req,
        PENDING,
        now,
        reason="SubmitFailed",
        method=spec.spec.recipe.name,
        provenance=provenance_of(spec),
        out_dir=spec.spec.paths.out_dir,
        message=f"{message} (the bot retries on its next run; set `cancel: true` to give up)",
    )


def cancelled_before_submit(req: RunRequest, now: str) -> RunStatus:
    return _base(
        req,
        CANCELLED,
        now,
        reason="CancelRequested",
        finished_at=now,
        message="cancelled before it was submitted",
    )
