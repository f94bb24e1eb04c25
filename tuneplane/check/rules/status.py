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
`experiment` and `run_id` are not its path; a status that writes `submitted_for` (whom the bot
submitted the run for, which per-person budgets count).

`tp validate --changed` runs it on the statuses changed since `--base` (default: the merge base with
the default branch), the work tree and untracked files included. Which runs are the bot's comes from
its record when this clone has it (fetch `refs/tuneplane/*`), else from the base version of the
status: a run on a cluster backend, or one the bot refused (no backend), is the bot's; a local one is
taken as `tp submit --local`'s.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator, Sequence
from typing import Any, Protocol

from tuneplane.lab.load import Lab
from tuneplane.lab.yamlio import LoadFailed, load_json
from tuneplane.models.backendkinds import backend_kind
from tuneplane.problems import Problem
from tuneplane.runtime.records import Record

RULE = "status-owned"
OWNER = "submitted_for"  # whom the bot submitted a run for: per-person budgets count it
HINT = (
    "status/ is the bot's: drop this change (git checkout <base> -- FILE); to change a run, edit its "
    "request (`cancel: true`) or submit a new one with tp submit"
)


class StatusChange(Protocol):
    """A changed run status as git tells it (`lab.gittrees.StatusChange`; the check layer runs no git)."""

    @property
    def rel(self) -> str: ...
    @property
    def before(self) -> str | None: ...  # its text at the base (None: new)
    @property
    def recorded(self) -> bool | None: ...  # in the bot's record (None: the clone holds no record)


class StatusContext(Record):
    lab: Lab
    changes: Sequence[StatusChange]


def check(ctx: StatusContext) -> Iterator[Problem]:
    for change in ctx.changes:
        yield from _check_one(ctx.lab, change)


def _check_one(lab: Lab, change: StatusChange) -> Iterator[Problem]:
    rel, before = change.rel, change.before
    _status, exp, name = rel.split("/")
    run_id = name.removesuffix(".json")
    request = any((lab.root / "runs" / exp / f"{run_id}{ext}").is_file() for ext in (".yaml", ".yml"))
    bots = before is not None and _bots(change)
    path = lab.root / rel
    if not os.path.lexists(path):
        if bots and request:
            yield Problem(
                rel,
                0,
                0,
                RULE,
                f"{rel} is deleted while its request stays: the bot submitted this run, and it restores its status",
                hint="delete the request too, to remove the run",
            )
        return
    try:
        doc = load_json(path, rel, root=lab.root)
    except LoadFailed as exc:
        yield exc.problem
        return
    data = doc.data if isinstance(doc.data, dict) else {}
    if (data.get("experiment"), data.get("run_id")) != (exp, run_id):
        yield doc.problem(
            "/experiment" if data.get("experiment") != exp else "/run_id",
            RULE,
            f"{rel} names experiment {data.get('experiment')!r}, run {data.get('run_id')!r}, not the run of its path",
            hint=HINT,
        )
        return
    if bots:
        yield doc.problem(
            _first_change(before or "", data),
            RULE,
            f"{rel} is the status of a run the bot submitted: only the bot writes it",
            hint=HINT,
        )
        return
    old = _object(before or "") or {}
    if data.get(OWNER) is not None and data.get(OWNER) != old.get(OWNER):
        yield doc.problem(
            f"/{OWNER}",
            RULE,
            f"{rel} says whom the run was submitted for (`{OWNER}`): only the bot records that, from the "
            "pull request that merged the request, and per-person budgets count it",
            hint=HINT,
        )
        return
    backend = data.get("backend")
    where = backend.get("backend") if isinstance(backend, dict) else None
    if before is None and not _runs_here(where):
        what = f"a {where} object" if where else "no backend"
        yield doc.problem(
            "/backend",
            RULE,
            f"{rel} is a new status naming {what}: only the bot submits runs "
            "and writes their status (a local run's own status names the local backend)",
            hint=HINT,
        )
    elif before is None and not request:
        yield doc.problem(
            "",
            RULE,
            f"{rel} is a new status without its request runs/{exp}/{run_id}.yaml",
            hint="commit the status with its request, as tp submit --local does",
        )


def _bots(change: StatusChange) -> bool:
    """Whether the base version is one the bot wrote: its record decides when the clone has it."""
    if change.recorded is not None:
        return change.recorded
    old = _object(change.before or "")
    backend = old.get("backend") if old is not None else None
    return not isinstance(backend, dict) or not _runs_here(backend.get("backend"))


def _runs_here(backend: object) -> bool:
    """Whether a status's recorded backend runs its runs on the machine that commits their status."""
    return isinstance(backend, str) and backend_kind(backend).runs_here


def _object(text: str) -> dict[str, Any] | None:
    try:
        value = json.loads(text)
    except (ValueError, RecursionError):
        return None
    return value if isinstance(value, dict) else None


def _first_change(before: str, now: dict[str, Any]) -> str:
    """The pointer of the first top-level field the change altered (for the annotation's line)."""
    old = _object(before)
    if old is None:
        return ""
    for key in sorted(set(old) | set(now)):
        if old.get(key) != now.get(key):
            return "/" + key.replace("~", "~0").replace("/", "~1")
    return ""
