"""`tp rerun`: request a run again with the same overrides, inputs, image and, when pinned, commit."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tuneplane.backends.factory import local_lab
from tuneplane.errors import UsageError
from tuneplane.lab.gitrepo import GitRepo
from tuneplane.lab.load import Lab, open_lab
from tuneplane.lab.runs import RunKey, find_run, new_run_id, read_request, read_status
from tuneplane.models.jobspec import JobSpec
from tuneplane.models.run import RunRequest
from tuneplane.runs.prepare import prepare
from tuneplane.runs.requests import new_request
from tuneplane.runs.submit import SubmitOptions, SubmitResult, lab_at, lab_repo, submit
from tuneplane.runtime.records import Record
from tuneplane.runtime.reporter import Echo, plain

# what a rerun copies from the original request; it adds its own id, message, commit and `rerun_of`
COPIED = {"experiment", "profile", "image", "observability_url", "set", "inputs", "operation", "timeout"}


class RerunResult(Record):
    original: RunKey
    result: SubmitResult
    same_job: bool  # the new JobSpec equals the original's apart from run id, name, paths and requester


def rerun(
    run: str,
    root: Path | None = None,
    *,
    local: bool = False,
    push: bool = False,
    message: str = "",
    remote: str | None = None,
    branch: str | None = None,
    echo: Echo = plain.line,
    notify: Echo | None = None,
) -> RerunResult:
    """A new request reproducing a run: same overrides, inputs, image and profile, pinned to its commit."""
    lab = open_lab(root)
    key = find_run(lab.root, run)
    original = read_request(lab.root, key)
    status = read_status(lab.root, key)
    repo = lab_repo(lab)
    commit = original.commit or (status.provenance.commit if status else "") or _added_in(repo, key)
    request = new_request(
        command="rerun",
        **original.model_dump(include=COPIED),
        run_id=new_run_id(),
        message=message or f"rerun of {key.run_id}",
        commit=commit,
        rerun_of=key.run_id,
    )
    if notify is not None:
        notify(f"rerun of {key}: its request, pinned to commit {commit[:12]}")
    opts = SubmitOptions(push=push, local=local, remote=remote, branch=branch)
    result = submit(request, opts, lab.root, echo, notify)
    before = _original_spec(repo, lab, original, commit, local)
    return RerunResult(key, result, before is not None and comparable(before) == comparable(result.spec))


def _added_in(repo: GitRepo, key: RunKey) -> str:
    """The commit that added a request the bot has not submitted yet: the code it would have run."""
    found = repo.added_in(key.request_rel)  # a shallow clone fetches history until the answer is sure
    if not found:
        raise UsageError(
            f"{key.request_rel} is not committed, so the commit of {key} is unknown",
            hint="commit the request first, or submit a new run",
        )
    return found


def _original_spec(repo: GitRepo, lab: Lab, request: RunRequest, commit: str, local: bool) -> JobSpec | None:
    """The original request resolved again at its commit (None when it no longer resolves)."""
    try:
        with lab_at(repo, commit) as pinned:
            return prepare(local_lab(pinned) if local else pinned, request, commit=commit, dirty=False).spec
    except UsageError:
        return None


def comparable(spec: JobSpec) -> dict[str, Any]:
    """A JobSpec without what differs between two runs of the same job by design."""
    data = spec.to_json_dict()
    data["metadata"] = {k: v for k, v in data["metadata"].items() if k not in ("name", "run_id")}
    data["spec"] = {k: v for k, v in data["spec"].items() if k != "paths"}
    data["provenance"] = {k: v for k, v in data["provenance"].items() if k not in ("requested_by", "dirty")}
    return data
