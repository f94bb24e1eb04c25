"""Cancelling a run: `cancel: true` in its request, and with `--now` stopping it at once."""

from __future__ import annotations

import time
from pathlib import Path

from tuneplane.backends.factory import local_backend
from tuneplane.constants import TERMINAL, utc_now
from tuneplane.errors import UsageError
from tuneplane.gitops.observe import apply_observation, backend_ref
from tuneplane.gitops.submit import commit_run_status, lab_repo
from tuneplane.gitops.writeback import publish, resolve_target
from tuneplane.lab.gitrepo import GitRepo
from tuneplane.lab.load import Lab, load_lab
from tuneplane.lab.runs import RunKey, find_run, mark_cancel, read_request, read_status
from tuneplane.models.run import RunStatus


def cancel_run(
    run: str,
    root: Path | None = None,
    *,
    now: bool = False,
    push: bool = False,
    remote: str | None = None,
    branch: str | None = None,
) -> list[str]:
    """Mark the request `cancel: true` and commit it; `now` also stops a local run and records it."""
    lab = load_lab(root)
    key = find_run(lab.root, run)
    status = read_status(lab.root, key)
    if status is not None and status.phase in TERMINAL:
        raise UsageError(f"run {key} already ended ({status.phase}); there is nothing to cancel")
    repo = lab_repo(lab)
    said: list[str] = []
    if read_request(lab.root, key).cancel:
        said.append(f"{key.request_rel} already says `cancel: true`")
    else:
        mark_cancel(lab.root, key)
        commit = repo.add_and_commit(
            [key.request_rel], f"Cancel run {key.run_id} of {key.experiment}\n\nWritten by tp job cancel."
        )
        said.append(f"marked {key.request_rel} `cancel: true` (committed {commit[:12]})")
    if now:
        said.append(_stop_now(repo, lab, key, status))
    if push:

        publish(repo, resolve_target(repo, remote, branch))
        said.append("pushed")
    elif not now:
        said.append("next: push it (or open a pull request); the bot cancels the job once merged")
    return said


def _stop_now(repo: GitRepo, lab: Lab, key: RunKey, status: RunStatus | None) -> str:


    ref = backend_ref(status) if status is not None else None
    if status is None or ref is None:
        return "nothing is running yet: the request alone keeps it from starting"
    if ref.backend != "local":
        raise UsageError(
            f"--now stops local runs only; {key} runs on {ref.backend}",
            hint="push the cancel commit; the bot deletes the job once it is merged",
        )
    backend = local_backend(lab)
    backend.cancel(ref)
    deadline = time.monotonic() + 30
    obs = backend.observe(ref)
    while obs.phase not in TERMINAL and time.monotonic() < deadline:
        time.sleep(0.2)
        obs = backend.observe(ref)
    final = apply_observation(status, obs, utc_now())
    commit = commit_run_status(repo, final)
    return f"stopped: {final.phase}" + (f" (status committed {commit[:12]})" if commit else "")
