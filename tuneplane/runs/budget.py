"""GPU-hours before a run: each new run request's estimate, the plan's total, and the monthly budgets of
`tuneplane.yaml` that `tp validate --changed` holds a pull request to.

An estimate is an upper bound where one exists (the request's `timeout`, else its profile's
`time_limit`: the job is stopped there), else the median GPU-seconds of the experiment's past attempts
on the same profile, else unknown, said so. Spent GPU-hours are the attempts the bot recorded in
`status/` at the change's base (which the change can neither edit nor delete), counted by the month
each attempt started in, as the dashboard counts them (`views.dashboard.attempt_month`).

A person's budget knows them only by what a pull request cannot write: at the gate, the pull request's
author as the workflow reports it (`AUTHOR_ENV`); in `status/`, the login the bot recorded at submit
(`submitted_for`, from the pull request that merged the request). A run request's `requested_by` is
the pull request's own word, and never counts.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Iterable, Iterator
from datetime import datetime
from pathlib import Path

from tuneplane.check.shapes import ShapeError, parse_profile
from tuneplane.errors import UsageError
from tuneplane.lab.fs import present
from tuneplane.lab.gitrepo import GitRepo
from tuneplane.lab.gittrees import read_blobs
from tuneplane.lab.load import Lab
from tuneplane.lab.runs import (
    STATUS_DIR,
    RunKey,
    UncheckedStatus,
    parse_request,
    read_unchecked,
    status_keys,
    unchecked_status,
)
from tuneplane.lab.yamlio import LoadFailed, read_text
from tuneplane.models.run import RUN_ID, RunRequest
from tuneplane.problems import Problem, Severity
from tuneplane.runtime.records import FrozenRecord
from tuneplane.views.dashboard import attempt_month, run_ids

EXCEEDED = "budget-exceeded"
UNKNOWN = "budget-unknown"
AUTHOR_ENV = "TUNEPLANE_PR_AUTHOR"  # the pull request's author, as the lab's workflow passes it in


class Estimate(FrozenRecord):
    """One new run request's GPU-hours (None: unknown), rounded to hundredths so that the plan's total
    is the sum of the rows it shows, and how it was made."""

    rel: str
    experiment: str
    hours: float | None
    how: str


def estimate(lab: Lab, request: RunRequest, rel: str) -> Estimate:
    """The GPU-hours `request` may take: its time bound × its GPUs, else the median of past attempts."""
    try:
        shape = parse_profile(request.profile, lab.config)
    except ShapeError as exc:
        return Estimate(rel, request.experiment, None, f"unknown: {exc}")
    gpus = shape.nodes * shape.gpus_per_node
    if gpus == 0:
        return Estimate(rel, request.experiment, 0.0, f"no GPUs on {request.profile}")
    bound = request.timeout or lab.config.profiles[shape.profile].time_limit
    if bound:
        what = "timeout" if request.timeout else f"time limit of {shape.profile}"
        return Estimate(rel, request.experiment, _hours(gpus * bound), f"{_gpus(gpus)} × {what} {_duration(bound)}")
    past = past_attempts(lab.root, request.experiment, request.profile)
    if past:
        n = len(past)
        how = f"median of {n} past attempt{'s' if n > 1 else ''} on {request.profile}"
        return Estimate(rel, request.experiment, _hours(statistics.median(past)), how)
    return Estimate(rel, request.experiment, None, f"unknown: no timeout and no past runs on {request.profile}")


def past_attempts(root: Path, exp: str, profile: str) -> list[float]:
    """GPU-seconds of the experiment's ended attempts on exactly this profile (`h200:8` is not `h200:16`)."""
    out = []
    for run_id in run_ids(root, exp):
        status = read_unchecked(root, RunKey(exp, run_id))
        if status is None or status.profile != profile:
            continue
        out += [a.gpu_seconds for a in status.attempts if a.reason and a.gpu_seconds]
    return out


def _hours(seconds: float) -> float:
    return round(seconds / 3600, 2)


def _gpus(n: int) -> str:
    return f"{n} GPU{'s' if n > 1 else ''}"


def _duration(seconds: int) -> str:
    """`5400` → `1h30m`, as `--timeout` takes it."""
    h, rest = divmod(seconds, 3600)
    m, s = divmod(rest, 60)
    return "".join(f"{v}{unit}" for v, unit in ((h, "h"), (m, "m"), (s, "s")) if v) or "0s"


# ── which requests are new ──────────────────────────────────────────────────────────────────────────


def base_commit(repo: GitRepo, base: str | None) -> str:
    """The change's base: `base`, else the merge base with the default branch ("" when there is none)."""
    return repo.verify_commit(base) if base else repo.default_merge_base()


def ran_at_base(repo: GitRepo, base: str | None) -> Callable[[str], bool]:
    """Whether a status file exists at the change's base (`base_commit`): what says a run already ran. A
    status the change itself adds never does (the bot puts it back), so it can neither hide a new
    request from the plan nor take it out of the budget."""
    ref = base_commit(repo, base)
    if not ref:
        return lambda rel: present(repo.root / rel)  # no history to compare with: the tree is all there is
    return lambda rel: repo.show(ref, rel) is not None


def new_requests(lab: Lab, rels: Iterable[str], ran: Callable[[str], bool]) -> list[tuple[str, RunRequest]]:
    """The changed run request files the bot would submit: present, parsed, not cancelled, no status at
    the base (`ran`). A file that does not parse is `tp validate`'s to report, and left out here."""
    out = []
    for rel in sorted(set(rels)):
        parts = rel.split("/")
        if len(parts) != 3 or parts[0] != "runs" or not rel.endswith((".yaml", ".yml")):
            continue
        key = RunKey(parts[1], parts[2].rsplit(".", 1)[0])
        if not RUN_ID.match(key.run_id) or not present(lab.root / rel) or ran(key.status_rel):
            continue
        try:
            request = parse_request(read_text(lab.root / rel, rel, root=lab.root), rel)
        except (UsageError, LoadFailed):
            continue
        if not request.cancel:
            out.append((rel, request))
    return out


def estimates(lab: Lab, rels: Iterable[str], ran: Callable[[str], bool]) -> list[Estimate]:
    return [estimate(lab, request, rel) for rel, request in new_requests(lab, rels, ran)]


def total(found: Iterable[Estimate]) -> float:
    """The plan's total: the sum of the known estimates (an unknown one counts 0, and is said so)."""
    return round(sum(e.hours or 0.0 for e in found), 2)


# ── the plan ────────────────────────────────────────────────────────────────────────────────────────


def plan_table(found: list[Estimate]) -> str:
    """The Markdown rows of the pull-request plan: each new request's estimate, then the total."""
    if not found:
        return ""
    unknown = sum(1 for e in found if e.hours is None)
    said = f" ({unknown} unknown, counted 0)" if unknown else ""
    lines = [
        f"**GPU-hours of the {len(found)} new run request(s): {total(found):,.2f}**{said}",
        "",
        "| run request | GPU-hours | estimated from |",
        "|:--|--:|:--|",
        *(f"| `{e.rel}` | {_shown(e.hours)} | {_cell(e.how.removeprefix('unknown: '))} |" for e in found),
        f"| **total** | **{total(found):,.2f}** | |",
        "",
        "",
    ]
    return "\n".join(lines)


def plan_lines(found: list[Estimate]) -> list[str]:
    """The same plan as lines for a terminal."""
    rows = [f"{e.rel}: {_shown(e.hours)} GPU-hours ({e.how})" for e in found]
    return [*rows, f"total: {total(found):,.2f} GPU-hours for {len(found)} new run request(s)"] if found else []


def _cell(text: str) -> str:
    """Text in a Markdown table cell: a `|` of a message cannot end the cell, nor a line break the row."""
    return text.replace("|", "\\|").replace("\n", " ")


def _shown(hours: float | None) -> str:
    return "unknown" if hours is None else f"{hours:,.2f}"


# ── the gate ────────────────────────────────────────────────────────────────────────────────────────


Statuses = Iterable[tuple[RunKey, UncheckedStatus | None]]  # each run's status, unchecked (None: unreadable)


def statuses_in(root: Path) -> Statuses:
    """The statuses of the work tree."""
    return ((key, read_unchecked(root, key)) for key in status_keys(root))


def statuses_at_base(repo: GitRepo, base: str | None) -> Iterator[tuple[RunKey, UncheckedStatus | None]]:
    """The statuses at the change's base (`base_commit`; the work tree's when there is no history): what
    the bot recorded, which a change can neither edit nor delete. Read when first iterated."""
    ref = base_commit(repo, base)
    if not ref:
        yield from statuses_in(repo.root)
        return
    found: dict[str, RunKey] = {}
    for line in repo.git("ls-tree", "-r", "-z", "--end-of-options", ref, "--", f"{STATUS_DIR}/").split("\0"):
        meta, _, rel = line.partition("\t")
        parts = rel.split("/")
        if rel and meta.split()[1] == "blob" and len(parts) == 3 and RUN_ID.match(parts[2].removesuffix(".json")):
            found[meta.split()[2]] = RunKey(parts[1], parts[2].removesuffix(".json"))
    blobs = read_blobs(repo, list(found))
    yield from ((key, unchecked_status(blobs.get(oid))) for oid, key in sorted(found.items(), key=lambda kv: kv[1]))


def spent(statuses: Statuses, month: str, whose: Callable[[RunKey, UncheckedStatus | None], str]) -> dict[str, float]:
    """GPU-hours spent in `month` (`YYYY-MM`) by the statuses' attempts, each counted in the month it
    started as the dashboard counts them, summed by `whose` (an experiment, a person; "": nobody's)."""
    out: dict[str, float] = {}
    for key, status in statuses:
        who = whose(key, status)
        for attempt in status.attempts if who and status else ():
            if attempt.gpu_seconds and attempt_month(attempt, key.run_id) == month:
                out[who] = out.get(who, 0.0) + attempt.gpu_seconds / 3600
    return out


def by_experiment(key: RunKey, _status: UncheckedStatus | None) -> str:
    return key.experiment


def by_person(_key: RunKey, status: UncheckedStatus | None) -> str:
    """The login a run was submitted for, lower case ("" when the bot recorded none)."""
    return submitted_login(status)


def submitted_login(status: UncheckedStatus | None) -> str:
    """The login a status's run was submitted for, lower case ("" when the bot recorded none)."""
    owner = status.submitted_for if status else None
    return owner.login.lower() if owner else ""


def person_skipped(lab: Lab, author: str | None) -> str:
    """The one line said when per-person budgets are set but the change's author is not known."""
    people = lab.config.budgets.people
    if author or (people.monthly_gpu_hours is None and not people.logins):
        return ""
    return (
        f"budgets.people not checked: ${AUTHOR_ENV} is not set (the lab's workflow sets it to the pull "
        "request's author; a change made here has none)"
    )


def budget_problems(
    lab: Lab, found: list[Estimate], now: datetime, author: str | None = None, statuses: Statuses | None = None
) -> list[Problem]:
    """Rule `budget-exceeded` for each budget this change's estimates take past this month's limit, and
    `budget-unknown` (a warning) for each new request whose estimate is unknown, when a budget is set.
    `author` is the change's author as the workflow reports it (without one no person's budget is
    checked); what was spent is counted from `statuses` (default: the work tree's), read only when a
    budget is set."""
    budgets = lab.config.budgets
    person = budgets.people.limit(author) if author else None
    if budgets.monthly_gpu_hours is None and not budgets.experiments and person is None:
        return []
    month = now.strftime("%Y-%m")
    recorded = list(statuses_in(lab.root) if statuses is None else statuses)
    used = spent(recorded, month, by_experiment)
    problems = [_unknown(e) for e in found if e.hours is None]
    if budgets.monthly_gpu_hours is not None:
        problems += _over(month, sum(used.values()), found, budgets.monthly_gpu_hours, "budgets.monthly_gpu_hours")
    for exp, limit in sorted(budgets.experiments.items()):
        mine = [e for e in found if e.experiment == exp]
        problems += _over(month, used.get(exp, 0.0), mine, limit, f"budgets.experiments.{exp}")
    if person is not None and author:
        theirs = spent(recorded, month, by_person).get(author.lower(), 0.0)
        problems += _over(month, theirs, found, *person, who=author)
    return problems


def _over(month: str, used: float, found: list[Estimate], limit: float, setting: str, who: str = "") -> list[Problem]:
    adding = total(found)
    if adding <= 0 or used + adding <= limit:
        return []
    requests = ", ".join(f"{e.rel} {_shown(e.hours)} ({e.how})" for e in found if e.hours)
    by = f" by {who}, this pull request's author," if who else ""
    message = (
        f"this change would pass {setting} {limit:g}: {used:,.2f} GPU-hours spent{by} in {month} + "
        f"{adding:,.2f} estimated for this change = {used + adding:,.2f} (new: {requests})"
    )
    raise_it = f"raise {setting}"
    if who and setting == "budgets.people.monthly_gpu_hours":  # everyone's: one person gets their own instead
        raise_it = f"give {who} a budget of their own (budgets.people.logins.{who})"
    hint = (
        f"{raise_it} in tuneplane.yaml in a reviewed change, give the request a shorter `timeout:` "
        "(tp submit --timeout), or wait for next month"
    )
    rel = next(e.rel for e in found if e.hours)
    return [Problem(rel, 0, 0, EXCEEDED, message, hint=hint)]


def _unknown(e: Estimate) -> Problem:
    return Problem(
        e.rel,
        0,
        0,
        UNKNOWN,
        f"the GPU-hours of this run are {e.how}; the budget counts it as 0",
        Severity.WARNING,
        hint="give it a `timeout:` (tp submit --timeout 2h) so the budget can bound it",
    )
