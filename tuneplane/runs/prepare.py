"""Prepare: resolve → compile → render a run request in memory, one way for every command and the bot.

`tp render`, `tp submit`, `tp rerun`, `tp export`, `tp eval` and the bot's reconcile all call `prepare`,
so every refusal happens before a file is written or a job exists, and what `tp render` shows is by
construction what the backend is sent: the same manifests (Kubernetes), the same batch script
(Slurm), the same JobSpec and process (a local run). Each backend renders and packs its own payload
(`backends.factory`); `backend_request` asks it to pack a prepared run for the backend that runs it.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

from tuneplane.backends.base import Payload, SubmitRequest
from tuneplane.backends.factory import pack_request, render_payload
from tuneplane.check.rules.launch import zero_process_launch
from tuneplane.constants import INGEST_SECRET_ENV, JOB_TOKEN
from tuneplane.ingest import mint_token
from tuneplane.lab.catalog import load_catalog
from tuneplane.lab.load import Lab
from tuneplane.lab.modelparse import first_problem_error
from tuneplane.models.jobspec import JobSpec
from tuneplane.models.run import RunRequest
from tuneplane.plan.adapters import compile_plan
from tuneplane.plan.launchplan import LaunchPlan
from tuneplane.plan.resolve import PreparedExperiment, job_config, prepare_experiment, resolve_prepared
from tuneplane.runtime.records import FrozenRecord, field
from tuneplane.runtime.reporter import Echo


class PreparedRun(FrozenRecord):
    request: RunRequest
    spec: JobSpec
    plan: LaunchPlan
    # What the cluster backend is sent, rendered and checked (its objects, its batch script: `shown` is
    # what `tp render` prints); None for a local run, packed only as it is submitted.
    payload: Payload | None
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
    return run.replace(config=job_config(prepared_experiment, spec))


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
    """The run as each backend is sent it. A local run has nothing rendered (render refuses it); a
    cluster run is rendered and checked now."""
    if spec.spec.resources.local:
        return PreparedRun(request, spec, plan, None, warnings)
    return PreparedRun(request, spec, plan, render_payload(spec, plan, lab), warnings)


def backend_request(lab_root: Path, lab: Lab, run: PreparedRun, env: dict[str, str] | None = None) -> SubmitRequest:
    """What the backend gets, packed by it: with the run's ingest token, minted from the bot's secret in
    `env` (the process's environment by default) when the job reports to an ingest receiver."""
    spec, token = run.spec, ""
    secret = _ingest_secret(os.environ if env is None else env)
    if secret and JOB_TOKEN in run.plan.secret_env:
        token = mint_token(secret, spec.metadata.run_id, spec.metadata.experiment)
    return pack_request(lab, lab_root, spec, run.plan, run.payload, token)


def _ingest_secret(env: Mapping[str, str]) -> bytes:
    value = str(env.get(INGEST_SECRET_ENV, "")).strip()
    return value.encode() if value else b""
