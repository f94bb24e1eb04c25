"""Rule `status-owned`: a change under `status/` never writes the status of a run the bot submitted.

`status/` is the bot's record of what it runs: the bot writes a run's status, and acts only on the
copy it keeps itself (`refs/tuneplane/authority`). A pull request that edits one is refused here
(the bot would put it back anyway), so nobody merges a status that lies about a run.

Passing: the status of a local run committed by `tp submit --local` (a new `status/<exp>/<run>.json`
naming the `local` backend, its request beside it, and its later updates); a team's notes beside the
pages (`status/demo/NOTES.md`); the pages and the ledger that `tp submit --local` renders with it.
Failing: `status/demo/<run>.json` of a run the bot submitted, edited (`"phase": "Succeeded"` →
`"Failed"`, changed metrics) or deleted while its request stays; a new status that names a Kubernetes
Job or a Slurm job (only the bot submits there), names no backend, or has no request; a status whose
`experiment` and `run_id` are not its path.

The change is the work tree against the merge base with the default branch, as `tp validate --changed`
sees it. Which runs are the bot's comes from its record when this clone has it (fetch
`refs/tuneplane/*`), else from the base version of the status: a run on a cluster backend, or one the
bot refused (no backend), is the bot's; a local one is taken as `tp submit --local`'s.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from typing import Any

from tuneplane.errors import UsageError
from tuneplane.lab.load import Lab
from tuneplane.lab.yamlio import LoadFailed, load_json
from tuneplane.problems import Problem

RULE = "status-owned"
STATUS = "status/"
HINT = ("status/ is the bot's: drop this change (git checkout <base> -- FILE); to change a run, edit its "
        "request (`cancel: true`) or submit a new one with tp submit")


def check(lab: Lab) -> Iterator[Problem]:
    if not os.path.isdir(lab.root / "status") and not os.path.islink(lab.root / "status"):
        return  # nothing of the bot's to protect: no git command is paid for
    from tuneplane.lab.gitrepo import GitRepo  # lazy: only a lab with statuses pays for git

    try:
        repo = GitRepo(lab.root)
        base = repo.default_merge_base()
    except UsageError:
        return  # not a repository, or a shallow clone without the base: --changed says so itself
    if not base:
        return
    for rel, before in _changed_statuses(repo, base).items():
        yield from _check_one(lab, repo, rel, before)


def _changed_statuses(repo: Any, base: str) -> dict[str, str]:
    """Changed `status/<exp>/<run>.json` files → their blob id at `base` ("" when new there)."""
    paths: set[str] = set()
    paths.update(repo.git("diff", "--name-only", "--no-renames", base, "--", STATUS).splitlines())
    paths.update(repo.git("ls-files", "--others", "--exclude-standard", "--", STATUS).splitlines())
    runs = sorted(p for p in paths if p.count("/") == 2 and p.endswith(".json") and p != "status/index.json")
    before: dict[str, str] = dict.fromkeys(runs, "")
    if runs:
        out = repo.git("ls-tree", "-z", base, "--", *runs)
        for item in out.split("\0"):
            meta, _, path = item.partition("\t")
            parts = meta.split()
            if len(parts) == 3 and parts[1] == "blob":
                before[path] = parts[2]
    return before


def _check_one(lab: Lab, repo: Any, rel: str, before: str) -> Iterator[Problem]:
    _status, exp, name = rel.split("/")
    run_id = name.removesuffix(".json")
    request = any((lab.root / "runs" / exp / f"{run_id}{ext}").is_file() for ext in (".yaml", ".yml"))
    path = lab.root / rel
    if not os.path.lexists(path):
        if before and request and _bots(repo, rel, before):
            yield Problem(rel, 0, 0, RULE, f"{rel} is deleted while its request stays: the bot submitted this "
                          "run, and it restores its status", hint="delete the request too, to remove the run")
        return
    try:
        doc = load_json(path, rel, root=lab.root)
    except LoadFailed as exc:
        yield exc.problem
        return
    data = doc.data if isinstance(doc.data, dict) else {}
    if (data.get("experiment"), data.get("run_id")) != (exp, run_id):
        yield doc.problem("/experiment" if data.get("experiment") != exp else "/run_id", RULE,
                          f"{rel} names experiment {data.get('experiment')!r}, run {data.get('run_id')!r}, "
                          "not the run of its path", hint=HINT)
        return
    if before and _bots(repo, rel, before):
        yield doc.problem(_first_change(repo, before, data), RULE,
                          f"{rel} is the status of a run the bot submitted: only the bot writes it", hint=HINT)
        return
    backend = data.get("backend")
    where = backend.get("backend") if isinstance(backend, dict) else None
    if not before and where != "local":
        what = f"a {where} object" if where else "no backend"
        yield doc.problem("/backend", RULE, f"{rel} is a new status naming {what}: only the bot submits runs "
                          "and writes their status (a local run's own status names the local backend)", hint=HINT)
    elif not before and not request:
        yield doc.problem("", RULE, f"{rel} is a new status without its request runs/{exp}/{run_id}.yaml",
                          hint="commit the status with its request, as tp submit --local does")


def _bots(repo: Any, rel: str, before: str) -> bool:
    """Whether the base version of `rel` is one the bot wrote."""
    from tuneplane.record.authority import REF  # lazy: as above

    for ref in (REF, f"refs/tuneplane-upstream/origin/{REF.rsplit('/', 1)[-1]}"):
        if not repo.has_commit(ref):
            continue
        try:
            repo.git("rev-parse", "-q", "--verify", f"{ref}:{rel}")
        except UsageError:
            return False  # a record exists and has no such run: not the bot's
        return True  # the record decides, whatever the file says
    try:
        data = json.loads(repo.git("cat-file", "blob", before))
    except (UsageError, ValueError):
        return True
    backend = data.get("backend") if isinstance(data, dict) else None
    return not isinstance(backend, dict) or backend.get("backend") != "local"


def _first_change(repo: Any, before: str, now: dict[str, Any]) -> str:
    """The pointer of the first top-level field the change altered (for the annotation's line)."""
    try:
        old = json.loads(repo.git("cat-file", "blob", before))
    except (UsageError, ValueError):
        return ""
    if not isinstance(old, dict):
        return ""
    for key in sorted(set(old) | set(now)):
        if old.get(key) != now.get(key):
            return "/" + key.replace("~", "~0").replace("/", "~1")
    return ""
