"""Submit: `tp submit` checks a run request, writes it and commits only that file, then optionally
runs it here (`--local`) and pushes.

The request arrives built (`runs.requests`: from the command line, or a rerun's copy); `SubmitOptions`
says only what to do with it, and `submit` stamps who asks and when where the request leaves them empty.

The run is prepared (`runs.prepare`: resolve, compile, render in memory) before anything is written,
so every refusal comes before a file or a job exists; `lab_at` gives the lab as it was at a commit,
for a pinned run (`tp submit --commit`, `tp rerun`, the bot).
"""

from __future__ import annotations

import contextlib
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

from tuneplane.backends.factory import local_lab
from tuneplane.constants import utc_now
from tuneplane.errors import UsageError
from tuneplane.lab.gitrepo import GitRepo
from tuneplane.lab.load import Lab, load_lab, open_lab
from tuneplane.lab.runs import RunKey, write_request
from tuneplane.models.jobspec import JobSpec
from tuneplane.models.run import RunRequest, RunStatus
from tuneplane.plan.adapters.base import cpu_smoke_test
from tuneplane.problems import Problem
from tuneplane.record.publish import (
    publish,
    resolve_target,
)
from tuneplane.runs.localrun import run_local
from tuneplane.runs.prepare import PreparedRun, backend_request, prepare
from tuneplane.runs.requests import check_local_inputs, requester
from tuneplane.runtime.records import FrozenRecord, Record
from tuneplane.runtime.reporter import Echo, plain


class SubmitOptions(FrozenRecord):
    """How `tp submit` submits a request: what to do with it once written (the request says what runs)."""

    push: bool = False
    local: bool = False
    detach: bool = False  # with local: start the run and return; a background owner records its end
    allow_dirty: bool = False
    remote: str | None = None
    branch: str | None = None


class SubmitResult(Record):
    key: RunKey
    request_commit: str
    spec: JobSpec
    status: RunStatus | None = None
    status_commit: str | None = None
    pushed: bool = False


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


def stamped(request: RunRequest, repo: GitRepo) -> RunRequest:
    """`request` with who asks (`requester`) and when, each only where the request leaves it empty."""
    update = {"requested_by": request.requested_by or requester(repo), "created_at": request.created_at or utc_now()}
    return request.model_copy(update=update)


def submit(
    request: RunRequest,
    opts: SubmitOptions,
    root: Path | None = None,
    echo: Echo = plain.line,
    notify: Echo | None = None,
) -> SubmitResult:
    """`tp submit`: check everything, write and commit the request, then run (`--local`) and push.

    `echo` gets the job's output lines (`--local`), `notify` what tp itself did, as it happens.
    """
    say = notify or (lambda _line: None)
    lab = open_lab(root)
    repo = lab_repo(lab)
    request = stamped(request, repo)
    if opts.local:  # the trainer reads them here: a missing one is refused before the commit
        check_local_inputs(lab.root, request.inputs)
    commit, dirty = repo.head(), lab_dirty(repo, lab)
    run, checked = _prepare_for_submit(repo, lab, request, opts, commit, dirty)
    for warning in run.warnings:
        say(f"warning: {warning}")
    for problem in checked:  # what `tp validate EXP` warns about, each said once
        if not any(problem.message in warning for warning in run.warnings):
            say(f"{problem.location()}: warning [{problem.rule}] {problem.message}")
            if problem.hint:
                say(f"    hint: {problem.hint}")
    key = RunKey(request.experiment, request.run_id)
    write_request(lab.root, request)
    title = f"Request run {key.run_id} of {key.experiment} ({request.profile})"
    request_commit = repo.add_and_commit([key.request_rel], _message(title, request))
    say(f"wrote {key.request_rel} (committed {request_commit[:12]})")
    if dirty and not request.commit:
        say(f"warning: uncommitted changes are not part of the run; it runs commit {commit[:12]}")
    if cpu_smoke_test(run.spec):
        say(
            f"warning: {run.spec.spec.recipe.name} is a GPU recipe; here it runs on CPU, which is fine for a "
            "smoke test and slow for real training"
        )
    result = SubmitResult(key, request_commit, run.spec)
    if opts.local:
        say(f"running {key.run_id} on this machine" + ("" if opts.detach else "; its output follows"))
        result.status, result.status_commit = run_local(
            repo,
            lab,
            run.request,
            run.spec,
            backend_request(lab.root, lab, run),
            echo,
            say,
            detach=opts.detach,
            config=run.config,
        )
    if opts.push:
        target = resolve_target(repo, opts.remote, opts.branch)
        publish(repo, target)
        result.pushed = True
        say(f"pushed to {target.remote}/{target.branch}")
    return result


def lab_repo(lab: Lab) -> GitRepo:
    repo = GitRepo(lab.root)
    if not repo.has_commits():
        raise UsageError("the lab has no commits yet", hint="commit your experiment first (git add -A && git commit)")
    repo.ensure_identity()
    return repo


def _prepare_for_submit(
    repo: GitRepo, lab: Lab, request: RunRequest, opts: SubmitOptions, commit: str, dirty: bool
) -> tuple[PreparedRun, list[Problem]]:
    """The prepared run (or its refusal), and the warnings `tp validate` has for its experiment."""
    if request.commit:
        with lab_at(repo, request.commit) as pinned:
            run = prepare(local_lab(pinned) if opts.local else pinned, request, commit=request.commit, dirty=False)
            return run, experiment_warnings(pinned, request.experiment)
    run = prepare(
        local_lab(lab) if opts.local else lab,
        request,
        commit=commit,
        dirty=dirty,
        allow_dirty=opts.allow_dirty,
    )
    return run, experiment_warnings(lab, request.experiment)


def experiment_warnings(lab: Lab, experiment: str) -> list[Problem]:
    """The warnings `tp validate EXP` reports in the experiment's files: admitted, but the run may not
    do what was meant (the lab's own settings are `tp validate`'s to report)."""
    # lazy: the rules load only for a run that was admitted
    from tuneplane.check.validate import validate
    from tuneplane.lab.shellsyntax import bash_syntax

    own = lab.experiment_rel(experiment) + "/"
    problems = validate(lab, [experiment], shell_check=bash_syntax)
    return [p for p in problems if not p.is_error and p.file.startswith(own)]


def _message(title: str, request: RunRequest) -> str:
    lines = [title, ""]
    if request.message:
        lines += [request.message, ""]
    if request.rerun_of:
        lines.append(f"Rerun of {request.rerun_of} at {request.commit}.")
    lines.append("Written by tp submit.")
    return "\n".join(lines)
