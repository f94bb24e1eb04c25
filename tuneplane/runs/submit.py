"""Submit: turn a run request into a job, by the same path for `tp submit`, `tp rerun` and the bot.

`prepare_run` resolves, compiles and renders in memory, so every refusal happens before a file is
written or a job exists; `backend_request` packs the result for the backend that will run it (the
cluster manifests, or the local backend's `LocalRun`). `submit` is `tp submit`: check, write the
request, commit only that file, and optionally run it here (`--local`) and push.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tuneplane.backends.base import SubmitRequest
from tuneplane.backends.factory import local_lab
from tuneplane.backends.local.backend import local_manifest
from tuneplane.constants import HF_TOKEN, INGEST_SECRET_ENV, JOB_TOKEN, utc_now
from tuneplane.errors import UsageError
from tuneplane.ingest import mint_token
from tuneplane.lab.gitrepo import GitRepo
from tuneplane.lab.load import Lab, load_lab, open_lab
from tuneplane.lab.runs import RunKey, new_run_id, write_request
from tuneplane.models.jobspec import JobSpec
from tuneplane.models.run import RunRequest, RunStatus
from tuneplane.plan.adapters import compile_plan
from tuneplane.plan.adapters.base import cpu_smoke_test
from tuneplane.plan.environment import job_env
from tuneplane.plan.launchplan import LaunchPlan
from tuneplane.plan.resolve import resolve, resolve_prepared
from tuneplane.record.publish import (
    publish,
    resolve_target,
)
from tuneplane.render.manifests import jobspec_document, render_manifests
from tuneplane.runs.localrun import run_local
from tuneplane.runs.requests import RunFlags, request_from_flags, requester

Echo = Callable[[str], None]




@dataclass(frozen=True)
class PreparedRun:
    request: RunRequest
    spec: JobSpec
    plan: LaunchPlan
    manifests: list[dict[str, Any]]  # the cluster render; checked even for local runs
    warnings: tuple[str, ...] = ()  # admitted, but worth saying (a `--set` key no plugin declares)


@dataclass(frozen=True)
class SubmitOptions(RunFlags):
    """Everything `tp submit` takes: the run's flags, and what to do with the request once written."""

    push: bool = False
    local: bool = False
    detach: bool = False  # with local: start the run and return; a background owner records its end
    allow_dirty: bool = False
    remote: str | None = None
    branch: str | None = None


@dataclass
class SubmitResult:
    key: RunKey
    request_commit: str
    spec: JobSpec
    status: RunStatus | None = None
    status_commit: str | None = None
    pushed: bool = False


def prepare_run(
    lab: Lab,
    request: RunRequest,
    *,
    commit: str,
    dirty: bool,
    allow_dirty: bool = False,
    prepared_experiment: Any = None,
    env: dict[str, str] | None = None,
) -> PreparedRun:
    """Resolve → compile → render, in memory; raises UsageError with the first refusal."""
    warnings: list[str] = []
    if prepared_experiment is not None:
        spec = resolve_prepared(
            lab, prepared_experiment, request, commit=commit, dirty=dirty, allow_dirty=allow_dirty, env=env,
            warnings=warnings,
        )
    else:
        spec = resolve(
            lab, request.experiment, request, commit=commit, dirty=dirty, allow_dirty=allow_dirty, env=env,
            warnings=warnings,
        )
    plan = compile_plan(spec)
    # A local run has no manifests (render refuses it); a cluster run is rendered and checked now.
    if spec.spec.resources.local:
        manifests: list[dict[str, Any]] = []
    elif lab.config.cluster.backend == "slurm":
        manifests = [slurm_batch(spec, plan, lab)]
    else:
        manifests = render_manifests(spec, plan, lab.config)
    return PreparedRun(request, spec, plan, manifests, tuple(warnings))


def slurm_batch(spec: JobSpec, plan: LaunchPlan, lab: Lab) -> dict[str, Any]:
    """The Slurm backend's one "manifest": the batch script and what staging the run needs."""
    from tuneplane.backends.slurm.commands import check_script  # lazy: as above
    from tuneplane.plan.names import jobspec_digest  # lazy: only Slurm labs render batch scripts
    from tuneplane.render.slurm import render_batch  # lazy: as above

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


def backend_request(
    lab_root: Path, lab: Lab, run: PreparedRun, env: dict[str, str] | None = None
) -> SubmitRequest:
    """What the backend gets: a `LocalRun` for local specs, the rendered manifests for the cluster."""
    spec = run.spec
    if spec.spec.resources.local:

        manifest = local_manifest(
            spec, run.plan, jobspec_document(spec, run.plan), lab_root, job_env(spec, run.plan.env)
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

        secret_data[run.plan.secret_env[JOB_TOKEN]] = mint_token(secret, spec.metadata.run_id)
    if lab.config.cluster.backend == "slurm":
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
    )


def _ingest_secret(env: Any) -> bytes:
    value = str(env.get(INGEST_SECRET_ENV, "")).strip()
    return value.encode() if value else b""



@contextlib.contextmanager
def lab_at(repo: GitRepo, commit: str, remote: str = "origin") -> Iterator[Lab]:
    """The lab as it was at `commit` (a pinned rerun resolves against the files of that commit).

    A commit this clone lacks (a shallow clone holds its tip only) is fetched from `remote` first;
    `CommitUnavailable` when it cannot be.
    """
    full = repo.ensure_commit(commit, remote)
    tmp = Path(tempfile.mkdtemp(prefix="tp-lab-"))
    try:
        repo.archive(full, tmp / "lab", exclude=("runs", "status"))
        yield load_lab(tmp / "lab")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def lab_dirty(repo: GitRepo, lab: Lab) -> bool:
    """Uncommitted changes to what a job is built from (other files do not matter to the run)."""
    paths = [p for p in lab.job_inputs() if (lab.root / p).exists()]
    return bool(paths) and repo.is_dirty(paths)


def build_request(opts: SubmitOptions, requested_by: str, run_id: str | None = None) -> RunRequest:
    return request_from_flags(opts, run_id=run_id or new_run_id(), command="submit",
                              requested_by=requested_by, created_at=utc_now())


def submit(
    opts: SubmitOptions, root: Path | None = None, echo: Echo = print, notify: Echo | None = None
) -> SubmitResult:
    """`tp submit`: check everything, write and commit the request, then run (`--local`) and push.

    `echo` gets the job's output lines (`--local`), `notify` what tp itself did, as it happens.
    """
    say = notify or (lambda _line: None)
    lab = open_lab(root)
    repo = lab_repo(lab)
    request = build_request(opts, requester(repo))
    commit, dirty = repo.head(), lab_dirty(repo, lab)
    run = _prepare_for_submit(repo, lab, request, opts, commit, dirty)
    for warning in run.warnings:
        say(f"warning: {warning}")
    key = RunKey(request.experiment, request.run_id)
    write_request(lab.root, request)
    title = f"Request run {key.run_id} of {key.experiment} ({request.profile})"
    request_commit = repo.add_and_commit([key.request_rel], _message(title, request))
    say(f"wrote {key.request_rel} (committed {request_commit[:12]})")
    if dirty and not opts.commit:
        say(f"warning: uncommitted changes are not part of the run; it runs commit {commit[:12]}")
    if cpu_smoke_test(run.spec):
        say(f"warning: {run.spec.spec.recipe.name} is a GPU recipe; here it runs on CPU, which is fine for a "
            "smoke test and slow for real training")
    result = SubmitResult(key, request_commit, run.spec)
    if opts.local:
        say(f"running {key.run_id} on this machine" + ("" if opts.detach else "; its output follows"))
        result.status, result.status_commit = run_local(
            repo, lab, run.request, run.spec, backend_request(lab.root, lab, run), echo, say, detach=opts.detach)
    if opts.push:
        target = resolve_target(repo, opts.remote, opts.branch)
        publish(repo, target)
        result.pushed = True
        say(f"pushed to {target.remote}/{target.branch}")
    return result


def lab_repo(lab: Lab) -> GitRepo:
    repo = GitRepo(lab.root)
    if not repo.has_commits():
        raise UsageError(
            "the lab has no commits yet", hint="commit your experiment first (git add -A && git commit)"
        )
    repo.ensure_identity()
    return repo


def _prepare_for_submit(
    repo: GitRepo, lab: Lab, request: RunRequest, opts: SubmitOptions, commit: str, dirty: bool
) -> PreparedRun:
    if opts.commit:
        with lab_at(repo, opts.commit) as pinned:
            return prepare_run(
                local_lab(pinned) if opts.local else pinned, request, commit=opts.commit, dirty=False
            )
    return prepare_run(
        local_lab(lab) if opts.local else lab,
        request,
        commit=commit,
        dirty=dirty,
        allow_dirty=opts.allow_dirty,
    )


def _message(title: str, request: RunRequest) -> str:
    lines = [title, ""]
    if request.message:
        lines += [request.message, ""]
    if request.rerun_of:
        lines.append(f"Rerun of {request.rerun_of} at {request.commit}.")
    lines.append("Written by tp submit.")
    return "\n".join(lines)
