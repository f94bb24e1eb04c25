"""Pull requests, as far as the bot knows them: whom it submitted a merged run for, and the section of
the pull request's plan comment that says how that pull request's runs are doing.

The bot makes no call to GitHub; its workflow does, and hands the answers in. Before a pass it asks
which pull request merged each pushed commit (`gh api repos/OWNER/REPO/commits/SHA/pulls`) and writes
`{"<commit>": {"number": N, "login": "<author>"}}` to a file (`tp bot reconcile --pull-requests FILE`).
At submit the bot finds the commit of the branch's own history that added each new request; when the
file names it, the status records `submitted_for` (the commit, the pull request, its author): the
identity per-person budgets count, which no pull request can write (the request's `requested_by` is
its own word). After a pass, `sections` gives per pull request whose runs changed the Markdown the
workflow writes into that pull request's plan comment (one edit per pull request per pass).
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from tuneplane.errors import UsageError
from tuneplane.lab.gitrepo import GitFailed, GitRepo
from tuneplane.lab.runs import STATUS_DIR, UncheckedStatus, unchecked_status
from tuneplane.models.base import GITHUB_LOGIN
from tuneplane.models.run import SubmittedFor
from tuneplane.runtime.records import FrozenRecord

SECTION_MARK = "<!-- tuneplane:runs -->"  # where the plan comment's part the bot keeps up to date begins
MAX_ROWS = 200  # runs one section lists (a comment holds 65,536 characters, the plan's share included)
_COMMIT = re.compile(r"[0-9a-f]{40}\Z")


class PullRequest(FrozenRecord):
    number: int
    login: str


def read_pulls(path: str | None) -> tuple[dict[str, PullRequest], str]:
    """The workflow's answers, by commit, and a note when the file could not be used (the runs are then
    submitted for nobody known: a lookup that failed never stops a submission)."""
    if not path:
        return {}, ""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8") or "{}")
    except (OSError, ValueError) as exc:
        return {}, f"{path}: not read ({exc}); the runs are submitted without their pull request"
    if not isinstance(data, dict):
        return {}, f"{path}: not a JSON object of commits; the runs are submitted without their pull request"
    return {c.lower(): p for c, v in data.items() if (p := _pull(v)) is not None and _COMMIT.match(c.lower())}, ""


def _pull(value: Any) -> PullRequest | None:
    if not isinstance(value, dict):
        return None
    number, login = value.get("number"), value.get("login")
    if not isinstance(number, int) or isinstance(number, bool) or number < 1:
        return None
    return PullRequest(number, login if isinstance(login, str) and re.fullmatch(GITHUB_LOGIN, login) else "")


def submitted_for(repo: GitRepo, request_rel: str, pulls: dict[str, PullRequest], remote: str) -> SubmittedFor | None:
    """Whom a new request is submitted for: the pull request that merged the branch commit adding it,
    as the workflow reported it; None when the workflow named none (a push without a pull request, a
    request merged while another bot run held the queue) or its history cannot be read."""
    if not pulls:
        return None
    try:
        commit = repo.added_in(request_rel, remote, first_parent=True)
    except (GitFailed, UsageError):
        return None
    pull = pulls.get(commit)
    return SubmittedFor(commit=commit, pull_request=pull.number, login=pull.login) if pull else None


# ── the pull request's comment ──────────────────────────────────────────────────────────────────────


class Section(FrozenRecord):
    """What the workflow writes into one pull request's plan comment, from `SECTION_MARK` on."""

    pull_request: int
    body: str


def sections(repo: GitRepo, since: str, until: str = "HEAD") -> list[Section]:
    """One section per pull request whose runs' rows changed between `since` and `until` (a pass's
    commits): each lists all that pull request's runs as `until` has them."""
    changed = repo.git("diff", "--name-only", "--no-renames", "--end-of-options", since, until, "--", STATUS_DIR)
    numbers: set[int] = set()
    for rel in changed.splitlines():
        now = unchecked_status(repo.show(until, rel)) if _is_status(rel) else None
        number = _number(now)
        if number is not None and _row(rel, now) != _row(rel, unchecked_status(repo.show(since, rel))):
            numbers.add(number)
    commit = repo.rev_parse(until)
    return [Section(n, section(n, _runs_of(repo, commit, n), commit)) for n in sorted(numbers)]


def section(number: int, runs: list[tuple[str, UncheckedStatus]], commit: str) -> str:
    """The Markdown of pull request `number`'s runs (status path, status) as of `commit`."""
    shown = runs[:MAX_ROWS]
    lines = [
        SECTION_MARK,
        f"### Runs of this pull request, as the bot last saw them ({len(runs)})",
        "",
        "| run | phase | reason | attempts | GPU-hours |",
        "|:--|:--|:--|--:|--:|",
        *(_row(rel, status) for rel, status in shown),
    ]
    if len(runs) > len(shown):
        lines.append(f"\n{len(runs) - len(shown)} more in `status/` (the dashboard lists them all).")
    return "\n".join([*lines, "", f"_Updated by the bot at commit {commit[:12]}._", ""])


def _runs_of(repo: GitRepo, commit: str, number: int) -> list[tuple[str, UncheckedStatus]]:
    """The statuses at `commit` the bot submitted for pull request `number` (a text search narrows them
    down; each is then read whole)."""
    try:
        found = repo.git("grep", "-l", "-E", f'"pull_request": {number}(,|$)', commit, "--", f"{STATUS_DIR}/*/*.json")
    except GitFailed:  # 1: nothing matched
        return []
    out = []
    for line in found.splitlines():
        rel = line.split(":", 1)[1]
        status = unchecked_status(repo.show(commit, rel))
        if _is_status(rel) and _number(status) == number and status is not None:
            out.append((rel, status))
    return sorted(out)


def _row(rel: str, status: UncheckedStatus | None) -> str:
    if status is None:
        return ""
    hours = sum(a.gpu_seconds for a in status.attempts) / 3600
    run = rel.removeprefix(f"{STATUS_DIR}/").removesuffix(".json")
    reason = status.reason.replace("|", "\\|")
    return f"| `{run}` | {status.phase or '?'} | {reason} | {len(status.attempts)} | {hours:,.2f} |"


def _is_status(rel: str) -> bool:
    parts = rel.split("/")
    return len(parts) == 3 and parts[0] == STATUS_DIR and parts[2].endswith(".json")


def _number(status: UncheckedStatus | None) -> int | None:
    owner = status.submitted_for if status else None
    return owner.pull_request if owner else None
