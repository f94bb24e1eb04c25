"""Cancelling a run: `cancel: true` in its request, and with `--now` stopping it at once."""

from __future__ import annotations

from pathlib import Path, PurePath

from tuneplane.backends.factory import backend_kind
from tuneplane.constants import TERMINAL
from tuneplane.errors import UsageError
from tuneplane.lab.gitrepo import GitRepo
from tuneplane.lab.load import Lab, open_lab
from tuneplane.lab.runs import RunKey, find_run, mark_cancel, read_request, read_status
from tuneplane.models.run import RunStatus
from tuneplane.record.publish import publish, resolve_target
from tuneplane.runs.localrun import stop_local
from tuneplane.runs.submit import lab_repo


def cancel_run(
    run: str,
    root: Path | None = None,
    *,
    now: bool = False,
    push: bool = False,
    remote: str | None = None,
    branch: str | None = None,
) -> list[str]:
    """Mark the request `cancel: true` and commit it; a local run is also stopped at once.

    A local run has no bot to act on the request, so cancelling it stops its process group, waits for
    its owner to record `Cancelled`, and only then commits the request (one git writer at a time).
    `now` asks the same of any run; only local runs can be stopped from here.
    """
    lab = open_lab(root)
    key = find_run(lab.root, run)
    status = read_status(lab.root, key)
    if status is not None and status.phase in TERMINAL:
        raise UsageError(f"run {key} already ended ({status.phase}); there is nothing to cancel")
    repo = lab_repo(lab)
    said: list[str] = []
    local = status is not None and status.backend is not None and backend_kind(status.backend.backend).runs_here
    if local and status is not None:
        _refuse_foreign_dir(key, status)
    changed = _mark(lab, key)
    stopped = stop_local(repo, lab, status) if local and status is not None else ""
    said.append(_commit_mark(repo, key, changed))  # after the run's owner has committed its end
    if stopped:
        said.append(stopped)
    if now and not local:
        said.append(_stop_now(status))
    if push:
        publish(repo, resolve_target(repo, remote, branch))
        said.append("pushed")
    elif not now and not local:
        said.append("next: push it (or open a pull request); the bot cancels the job once merged")
    return said


def _refuse_foreign_dir(key: RunKey, status: RunStatus) -> None:
    """A local run's directory is `<storage>/runs/<user>/<experiment>/<run id>`: a status naming any
    other folder (copied from another run, or edited) would have this command stop that run's process
    group, so nothing is stopped, marked or committed."""
    assert status.backend is not None
    where = PurePath(status.backend.run_dir)
    if (where.parent.name, where.name) != (key.experiment, key.run_id):
        raise UsageError(
            f"{key.status_rel} names {where}, which is not the run directory of {key}: nothing was stopped",
            hint=f"status/ is the bot's; restore the file (git checkout origin/main -- {key.status_rel}), "
            "or stop the run on the machine that started it",
        )


def _mark(lab: Lab, key: RunKey) -> bool:
    """Write `cancel: true` into the request; False when it already says so."""
    if read_request(lab.root, key).cancel:
        return False
    mark_cancel(lab.root, key)
    return True


def _commit_mark(repo: GitRepo, key: RunKey, changed: bool) -> str:
    if not changed:
        return f"{key.request_rel} already says `cancel: true`"
    commit = repo.add_and_commit(
        [key.request_rel], f"Cancel run {key.run_id} of {key.experiment}\n\nWritten by tp job cancel."
    )
    return f"marked {key.request_rel} `cancel: true` (committed {commit[:12]})"


def _stop_now(status: RunStatus | None) -> str:
    if status is None or status.backend is None:
        return "nothing is running yet: the request alone keeps it from starting"
    raise UsageError(
        f"--now stops local runs only; run {status.run_id} runs on {status.backend.backend}",
        hint="push the cancel commit; the bot deletes the job once it is merged",
    )
