"""Prepare: resolve → compile → render a run request in memory, one way for every command and the bot.

`tp render`, `tp submit`, `tp rerun`, `tp export`, `tp eval` and the bot's reconcile all call `prepare`,
so every refusal happens before a file is written or a job exists, and what `tp render` shows is by
construction what the backend is sent: the same manifests (Kubernetes), the same batch script
(Slurm), the same JobSpec and process (a local run). `backend_request` packs a prepared run for the
backend that will run it (the cluster manifests, or the local backend's `LocalRun`).
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tuneplane.backends.base import SubmitRequest
from tuneplane.backends.factory import batch_manifest, cluster_kind
from tuneplane.backends.local.backend import local_manifest
from tuneplane.check.rules.launch import zero_process_launch
from tuneplane.constants import HF_TOKEN, INGEST_SECRET_ENV, JOB_TOKEN
from tuneplane.ingest import mint_token
from tuneplane.lab.catalog import load_catalog
from tuneplane.lab.load import Lab
from tuneplane.lab.modelparse import first_problem_error
from tuneplane.models.jobspec import JobSpec
from tuneplane.models.run import RunRequest
from tuneplane.plan.adapters import compile_plan
from tuneplane.plan.environment import job_env
from tuneplane.plan.launchplan import LaunchPlan
from tuneplane.plan.resolve import PreparedExperiment, job_config, prepare_experiment, resolve_prepared
from tuneplane.render.manifests import jobspec_document, render_documents

Echo = Callable[[str], None]


@dataclass(frozen=True)
class PreparedRun:
    request: RunRequest
    spec: JobSpec
    plan: LaunchPlan
    manifests: list[dict[str, Any]]  # what the backend is sent: the cluster's objects, Slurm's batch; none locally
    text: str | None = None  # what was rendered and parsed back: the manifests' YAML, the batch script
    warnings: tuple[str, ...] = ()  # admitted, but worth saying (a `--set` key no plugin declares)
    config: Mapping[str, object] = field(default_factory=dict)  # config.yaml merged with --set, as the job gets it


def prepare(
    lab: Lab,
    request: RunRequest,
    *,
    commit: str,
    dirty: bool,
    allow_dirty: bool = False,
    prepared_experiment: PreparedExperiment | None = None,
    env: dict[str, str] | None = None,
    warn: Echo | None = None,
) -> PreparedRun:
    """Resolve → compile → render, in memory; raises UsageError with the first refusal.

    `prepared_experiment` (from `plan.resolve.prepare_experiment`) is reused by callers that prepare
    many requests of one experiment; `warn` hears each warning as soon as resolving finds it, before
    the render (which may still refuse the run)."""
    warnings: list[str] = []
    if prepared_experiment is None:
        prepared_experiment = prepare_experiment(lab, request.experiment, load_catalog())
    spec = resolve_prepared(
        lab,
        prepared_experiment,
        request,
        commit=commit,
        dirty=dirty,
        allow_dirty=allow_dirty,
        env=env,
        warnings=warnings,
    )
    if warn is not None:
        for warning in warnings:
            warn(warning)
    _refuse_zero_processes(lab, prepared_experiment.dir, spec)
    run = rendered(lab, request, spec, compile_plan(spec), tuple(warnings))
    return dataclasses.replace(run, config=job_config(prepared_experiment, spec))


def _refuse_zero_processes(lab: Lab, exp_dir: Path, spec: JobSpec) -> None:
    """A launch line that would start no process on this run's profile (rule `launch-zero-procs`)."""
    recipe, resources = spec.spec.recipe, spec.spec.resources
    if recipe.entrypoint_kind != "experiment":
        return
    rel = lab.experiment_rel(spec.metadata.experiment)
    found = zero_process_launch(exp_dir, rel, recipe.entrypoint, resources.gpus_per_node, resources.profile)
    if found is not None:
        raise first_problem_error([found])


def rendered(
    lab: Lab, request: RunRequest, spec: JobSpec, plan: LaunchPlan, warnings: tuple[str, ...] = ()
) -> PreparedRun:
    """The run as each backend is sent it. A local run has no manifests (render refuses it); a cluster
    run is rendered and checked now."""
    if spec.spec.resources.local:
        return PreparedRun(request, spec, plan, [], None, warnings)
    if cluster_kind(lab).batch_script:
        batch = batch_manifest(spec, plan, lab)
        return PreparedRun(request, spec, plan, [dict(batch)], batch["script"], warnings)
    text, manifests = render_documents(spec, plan, lab.config)
    return PreparedRun(request, spec, plan, manifests, text, warnings)


def backend_request(lab_root: Path, lab: Lab, run: PreparedRun, env: dict[str, str] | None = None) -> SubmitRequest:
    """What the backend gets: a `LocalRun` for local specs, the rendered manifests for the cluster."""
    spec = run.spec
    if spec.spec.resources.local:
        manifest = local_manifest(
            spec,
            run.plan,
            jobspec_document(spec, run.plan),
            lab_root,
            job_env(spec, run.plan.env, gpu_watchdog=lab.config.cluster.gpu_watchdog),
        )
        return SubmitRequest(
            run_id=spec.metadata.run_id,
            experiment=spec.metadata.experiment,
            namespace="",
            object_name=spec.metadata.name,
            manifests=[manifest],
        )
    secret_data: dict[str, str] = {}
    secret = _ingest_secret(os.environ if env is None else env)
    if secret and JOB_TOKEN in run.plan.secret_env:
        secret_data[run.plan.secret_env[JOB_TOKEN]] = mint_token(secret, spec.metadata.run_id, spec.metadata.experiment)
    if cluster_kind(lab).batch_script:
        token = secret_data.get(run.plan.secret_env.get(JOB_TOKEN, ""), "")
        manifests = [dict(m, lab_root=str(lab_root)) for m in run.manifests]
        return SubmitRequest(
            run_id=spec.metadata.run_id,
            experiment=spec.metadata.experiment,
            namespace="",
            object_name=spec.metadata.name,
            manifests=manifests,
            secret_data={"job-token": token} if token and lab.config.cluster.ingest.endpoint else {},
        )
    copies = {}
    hf_secret = lab.config.cluster.hf_token_secret
    if hf_secret and HF_TOKEN in run.plan.secret_env:
        copies[run.plan.secret_env[HF_TOKEN]] = (hf_secret, "token")
    return SubmitRequest(
        run_id=spec.metadata.run_id,
        experiment=spec.metadata.experiment,
        namespace=lab.config.cluster.namespace,
        object_name=spec.metadata.name,
        manifests=run.manifests,
        secret_data=secret_data,
        secret_copies=copies,
        secret_settings=_secret_settings(lab),
    )


def _secret_settings(lab: Lab) -> dict[str, str]:
    """Which tuneplane.yaml setting names each Secret the pods read, for the backend's refusals."""
    cluster = lab.config.cluster
    named = {name: "cluster.image_pull_secrets" for name in cluster.image_pull_secrets}
    if cluster.hf_token_secret:
        named[cluster.hf_token_secret] = "cluster.hf_token_secret"
    if cluster.repo.credentials_secret:
        named[cluster.repo.credentials_secret] = "cluster.repo.credentials_secret"
    return named


def _ingest_secret(env: Mapping[str, str]) -> bytes:
    value = str(env.get(INGEST_SECRET_ENV, "")).strip()
    return value.encode() if value else b""
