"""Which statuses the bot trusts: its own record (`record.authority`) over whatever the branch says.

The scan finds the statuses that changed and the runs the bot watches; this module judges them. A
status of a run the bot recorded, changed by someone else, is put back from the record and said so.
A status the bot has no record of is a run it did not start: a local run of another machine is
listed, never acted on; one that claims a cluster object, names another run than its path, or says
whom the bot submitted it for, is a forgery, reported and ignored. Before any job starts, each new
run's status path is checked, so one bad path stops one experiment.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from tuneplane.backends.factory import backend_kind
from tuneplane.constants import TERMINAL
from tuneplane.errors import UsageError
from tuneplane.lab.runs import STATUS_DIR, RunKey, UncheckedStatus, unchecked_status
from tuneplane.record.batch import safe_path

if TYPE_CHECKING:  # the scan hands itself in; importing it at run time would be a cycle
    from tuneplane.bot.scan import Scan


def check_writable(work: Scan) -> None:
    """Before any job starts: each new run's status can be written. A link or a file where a folder of
    `status/` belongs stops that experiment only (reported), never the others."""
    refused: dict[str, str] = {}
    for key in sorted(work.new):
        if key.experiment not in refused:
            try:
                safe_path(work.snap.root, key.status_rel, make=False, replace_link=True)
            except UsageError as exc:
                refused[key.experiment] = exc.message
        if key.experiment in refused:
            del work.new[key]
    for exp, why in sorted(refused.items()):
        work.blocked.add(exp)
        work.listed.discard(exp)
        work.problems.append(
            f"{why}: the new runs of {exp} are not submitted until {STATUS_DIR}/{exp} is a "
            f"folder of this repository again (git rm it and commit)"
        )


def misnamed(key: RunKey, data: bytes | None) -> str:
    """What a status names, said when it is not the run its path is."""
    status = unchecked_status(data)
    if status is None or (status.experiment, status.run_id) == (key.experiment, key.run_id):
        return ""
    return f" (it named experiment {status.experiment!r}, run {status.run_id!r}, not its path)"


def put_back(work: Scan, key: RunKey, what: str) -> None:
    """Restore the bot's own copy of a status someone else changed, and say so."""
    data = work.authority.read([key.status_rel]).get(key.status_rel)
    if data is None:
        return
    work.restored[key] = data
    status = unchecked_status(data)
    if status is not None and status.phase not in TERMINAL:
        work.ledger.active.setdefault(str(key), status.phase)
    work.notes.append(
        f"{what}: restored as the bot last wrote it (status/ is the bot's: a pull request "
        "cannot change a run's status; change its request, e.g. `cancel: true`)"
    )


def foreign_ok(work: Scan, key: RunKey, status: UncheckedStatus) -> bool:
    """A status the bot has no record of: a local run the bot did not start (`tp submit --local`) is
    watched for the dashboard, never acted on; one that claims a cluster object, names another run
    than its path, or says whom the bot submitted it for (`submitted_for`, which only the bot records),
    is a forgery, reported and ignored."""
    backend = status.backend
    where = backend.backend if backend else None
    here = where is None or backend_kind(where).runs_here
    misnamed = (status.experiment, status.run_id) != (key.experiment, key.run_id)
    owner = status.submitted_for  # whom the bot submitted a run for: per-person budgets count it
    if here and not misnamed and owner is None:
        return True
    if owner is not None and here and not misnamed:
        claim = (
            f"says the bot submitted it for {owner.login!r}" if owner.login else "says whom the bot submitted it for"
        )
    elif backend and not here:
        claim = f"names {where} object {backend.name!r}"
    else:
        claim = f"names experiment {status.experiment!r}, run {status.run_id!r}"
    work.problems.append(
        f"{key.status_rel} {claim}, which the bot never submitted for this run: ignored, the bot "
        "never acts on it (status/ is the bot's; remove the file, and submit runs with tp submit)"
    )
    work.ledger.active.pop(str(key), None)
    return False


def foreign(work: Scan, key: RunKey, status: UncheckedStatus | None) -> None:
    """An active run the bot has no record of: it did not start it, so it never observes, reads or
    cancels it; it is watched (for the dashboard) until its status says it ended."""
    work.active[key] = None
    if status is None or status.phase in TERMINAL or not foreign_ok(work, key, status):
        work.ledger.active.pop(str(key), None)
        return
    work.notes.append(
        f"{key}: a local run of another machine (or of `tp submit --local`): the bot did not "
        "start it and leaves it to that machine, which commits its end; cancel it there "
        f"(`tp job cancel {key.run_id}` on that machine)"
    )
