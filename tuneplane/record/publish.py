"""Publish: getting status commits (the bot's, `tp submit --local`'s) into the shared branch.

The bot owns `status/` and nothing else. Every run has its own status file, so two bots that raced
only ever conflict on the same run's file (resolved by keeping the more advanced status), on the
ledger (merged) or on a dashboard page (rendered again from the files). Pushing is fetch, rebase,
retry: bounded and jittered, so a handful of bots converge instead of colliding in lockstep.

Every push also deletes the heartbeat refs no run needs any more (`ended_heartbeats`), atomically with
the commit that records why: a run's end, or its leaving the lab.
"""

from __future__ import annotations

import json
import os
import random
import time
from collections.abc import Callable
from pathlib import Path

from tuneplane.constants import TERMINAL
from tuneplane.errors import UsageError
from tuneplane.lab.gitrepo import GitRepo
from tuneplane.lab.gittrees import read_blobs
from tuneplane.lab.heartbeats import fetched, forget_fetched
from tuneplane.lab.runs import STATUS_DIR, RunKey, unchecked_status
from tuneplane.record.authority import Authority, pick_status
from tuneplane.record.authority import upstream as upstream_record
from tuneplane.record.batch import safe_write
from tuneplane.record.ledger import LEDGER, Ledger, merge
from tuneplane.runtime.records import FrozenRecord
from tuneplane.views.sweep import SWEEP_PAGES

__all__ = [
    "Target",
    "commit_status",
    "ended_heartbeats",
    "integrate",
    "pick_status",
    "publish",
    "pull",
    "record_published",
    "recover",
    "resolve_target",
]

Checkpoint = Callable[[str], None]
PUSH_ATTEMPTS = 8


def _noop(step: str) -> None:
    """Default checkpoint: the bot passes its crash hook instead."""


# ── commit and push ──────────────────────────────────────────────────────────────────────────────


def commit_status(repo: GitRepo, message: str) -> str | None:
    """Commit everything under `status/` (and only that); None when nothing changed."""
    repo.stage([STATUS_DIR])
    return repo.commit_staged(message, [STATUS_DIR])


class Target(FrozenRecord):
    remote: str
    branch: str


def resolve_target(repo: GitRepo, remote: str | None, branch: str | None) -> Target:
    remote = remote or "origin"
    if not repo.has_remote(remote):
        raise UsageError(
            f"this repository has no remote {remote!r}",
            hint="pass --remote NAME, or add one with git remote add",
        )
    branch = branch or repo.current_branch()
    if not branch:
        raise UsageError(
            "HEAD is detached, so there is no branch to push to",
            hint="pass --branch main (or your default branch)",
        )
    return Target(remote, branch)


def pull(repo: GitRepo, target: Target, checkpoint: Checkpoint = _noop) -> bool:
    """Fetch and rebase local commits onto the remote branch; True when anything new came in."""
    published = tracking(repo, target)
    upstream = repo.fetch(target.remote, target.branch)
    Authority(repo).merge_upstream(target.remote)  # another bot's record, taken in before the scan
    if not upstream or repo.is_ancestor(upstream):
        return False
    integrate(repo, target, checkpoint, published)
    return True


def tracking(repo: GitRepo, target: Target) -> str:
    """The commit this clone last saw on the remote branch ("" when it never fetched it)."""
    try:
        return repo.rev_parse(f"refs/remotes/{target.remote}/{target.branch}")
    except UsageError:
        return ""


def publish(
    repo: GitRepo,
    target: Target,
    *,
    attempts: int = PUSH_ATTEMPTS,
    rng: random.Random | None = None,
    sleep: Callable[[float], None] = time.sleep,
    checkpoint: Checkpoint = _noop,
) -> int:
    """Push, rebasing onto whatever other writers pushed first; returns the number of attempts it took."""
    rng = rng or random.Random()
    for attempt in range(1, attempts + 1):
        published = tracking(repo, target)
        upstream = repo.fetch(target.remote, target.branch)
        authority = Authority(repo)
        authority.merge_upstream(target.remote)
        if upstream and not repo.is_ancestor(upstream):
            integrate(repo, target, checkpoint, published)
        ended = ended_heartbeats(repo, authority, target.remote)
        if upstream and repo.head() == upstream and record_published(repo, authority, target.remote) and not ended:
            return attempt
        # the bot's record goes with its commits, all or nothing: a record ahead of the branch, or
        # behind it, would have the next bot restore a status the other had just written; so do the
        # deletions of heartbeats, which the commits make stale
        if repo.push(target.remote, target.branch, [*authority.push_spec(), *(f":{ref}" for ref in ended)]):
            if authority.known:  # what the remote now holds, as a fetch would have recorded it
                repo.git("update-ref", upstream_record(target.remote), authority.commit)
            forget_fetched(repo, target.remote, ended)
            return attempt
        sleep(rng.uniform(0.05, min(2.0, 0.1 * 2**attempt)))  # full jitter: racing bots spread out
    raise UsageError(
        f"could not push to {target.remote}/{target.branch} after {attempts} attempts: "
        "other writers kept pushing first",
        hint="nothing is lost: the commits are local; run the same command again",
    )


def ended_heartbeats(repo: GitRepo, authority: Authority, remote: str) -> list[str]:
    """The heartbeat refs `remote` held at the last fetch that no run needs any more, given HEAD: those
    of runs that ended (the bot's own record of the status first, else the branch's) and of runs no
    longer in the lab (neither a request nor a status). A run under way keeps its heartbeat, request or
    not: the bot watches it until its end is recorded. A ref another bot deleted meanwhile fails nothing:
    git only warns of it (a server that refuses it is a lost race: the next fetch no longer lists it)."""
    refs = fetched(repo, remote)
    if not refs:
        return []
    keys = {ref: RunKey(*run) for ref, run in refs.items() if run is not None}
    head = _oids_at(repo, [rel for key in keys.values() for rel in (key.status_rel, key.request_rel)])
    mine = authority.read([key.status_rel for key in keys.values()])
    branch = read_blobs(repo, [head[k.status_rel] for k in keys.values() if k.status_rel in head])
    ended = []
    for ref in refs:
        key = keys.get(ref)
        status = None if key is None else mine.get(key.status_rel) or branch.get(head.get(key.status_rel, ""))
        needed = key is not None and (key.request_rel in head if status is None else _phase(status) not in TERMINAL)
        if not needed:
            ended.append(ref)
    return sorted(ended)


def _oids_at(repo: GitRepo, paths: list[str]) -> dict[str, str]:
    """Blob ids of those of `paths` that HEAD holds."""
    found: dict[str, str] = {}
    for start in range(0, len(paths), 500):  # bounded command lines
        out = repo.git("ls-tree", "-z", "HEAD", "--", *paths[start : start + 500])
        for item in out.split("\0"):
            meta, _, path = item.partition("\t")
            if len(meta.split()) == 3 and meta.split()[1] == "blob":
                found[path] = meta.split()[2]
    return found


def _phase(data: bytes) -> str:
    status = unchecked_status(data)
    return status.phase if status else ""


def integrate(repo: GitRepo, target: Target, checkpoint: Checkpoint = _noop, published: str = "") -> None:
    """Rebase onto the fetched `target`, resolving the conflicts the bot understands; abort on any other.

    A rebase replays what lies between the merge base and HEAD. A shallow clone (the workflow's
    `fetch-depth: 1`) may lack that base: its history is deepened until it is found, so a missing
    commit never reads as "no common history" (which would replay the clone's first commit, the whole
    lab, as if it were the bot's). Histories that truly share no commit stop here, nothing rebased.
    A branch rewritten on the remote (a force push) no longer holds `published`, the commit this
    clone saw there last: only the commits after it, the bot's own, are replayed, never the history
    the rewrite removed (a kept clone, such as a self-hosted runner's, would otherwise push it back).
    """
    upstream = f"{target.remote}/{target.branch}"
    if not repo.merge_base_deepening(upstream, target.remote, target.branch):
        raise UsageError(
            f"HEAD and {upstream} have no commit in common: the branch on {target.remote} was replaced by "
            "an unrelated history (a force push?), so the bot's commits cannot be rebased onto it",
            hint="nothing is lost: the bot's commits stay in this clone (git log); clone the lab again and "
            "run the bot there, or rebase them by hand",
        )
    rewritten = bool(published) and repo.is_ancestor(published) and not repo.is_ancestor(published, upstream)
    conflicts = repo.rebase(upstream, since=published if rewritten else "")
    while conflicts:
        checkpoint("rebasing")
        foreign = [p for p in conflicts if not p.startswith(STATUS_DIR + "/")]
        if foreign:
            repo.rebase_abort()
            raise UsageError(
                f"rebasing onto {upstream} conflicts in {', '.join(foreign)}, outside status/",
                hint="resolve it by hand (git pull --rebase), then run the command again",
            )
        for path in sorted(conflicts, key=_resolve_order):
            _resolve(repo, path)
        conflicts = repo.rebase_continue()
    _refuse_broken_statuses(repo, upstream)


def _refuse_broken_statuses(repo: GitRepo, upstream: str) -> None:
    """The backstop before a push: every status file the bot's commits change is one whole JSON object
    (a merge driver the lab configured could have joined two versions; the bot's clone sets none)."""
    changed = repo.git(
        "diff", "--name-only", "--no-renames", "--diff-filter=AM", upstream, "HEAD", "--", STATUS_DIR + "/"
    )
    for path in [p for p in changed.splitlines() if p.endswith(".json") and p.count("/") == 2]:
        text = repo.show("HEAD", path) or ""
        try:
            ok = isinstance(json.loads(text), dict)
        except (ValueError, RecursionError):
            ok = False
        if not ok:
            raise UsageError(
                f"after rebasing onto {upstream}, {path} is no JSON object: nothing was pushed",
                hint="check .gitattributes for a merge driver on status/ (the bot's clone should override it: "
                "see .git/info/attributes), then run the bot again",
            )


def _resolve_order(path: str) -> tuple[int, str]:
    """Status files first, then the ledger (merged), then the pages and sweep charts (rendered from both)."""
    return (2 if path.endswith(".md") or _sweep_chart(path) else 1 if path == LEDGER else 0, path)


def _sweep_chart(path: str) -> bool:
    """A sweep's chart: drawn from its trials' statuses, as its page is (a run's chart is the run's own)."""
    return path.startswith(SWEEP_PAGES + "/") and path.endswith(".svg")


def _resolve(repo: GitRepo, path: str) -> None:
    from tuneplane.record.batch import render_page  # lazy: pages are rendered only on conflicts

    root = repo.root
    if path == LEDGER:
        safe_write(root, path, merge(repo.show_stage(2, path), repo.show_stage(3, path)))
    elif path.endswith(".md"):
        safe_write(root, path, render_page(root, path, Ledger.parse(_text(root / LEDGER)).counts))
    elif path.endswith(".svg"):
        drawn = render_page(root, path, {}) if _sweep_chart(path) else ""
        chosen_svg = drawn or repo.show_stage(3, path) or repo.show_stage(2, path) or ""
        safe_write(root, path, chosen_svg if chosen_svg.endswith("\n") else chosen_svg + "\n")
    else:
        chosen = pick_status(repo.show_stage(2, path), repo.show_stage(3, path))
        if chosen is None:
            repo.git("rm", "-q", "--cached", "--ignore-unmatch", "--", path)
            (root / path).unlink(missing_ok=True)
            return
        safe_write(root, path, chosen if chosen.endswith("\n") else chosen + "\n")
    repo.stage([path])


def _text(path: Path) -> str | None:
    try:
        return None if path.is_symlink() else path.read_text(encoding="utf-8")
    except OSError:
        return None


def record_published(repo: GitRepo, authority: Authority, remote: str) -> bool:
    """Whether the remote already holds this clone's record (or there is none to push)."""
    if not authority.known:
        return True
    try:
        return repo.rev_parse(upstream_record(remote)) == authority.commit
    except UsageError:
        return False


RECOVERED = "tp bot: keep status written by an interrupted run"  # the subject of `recover`'s commit


def recover(repo: GitRepo, message: str = RECOVERED) -> str | None:
    """Undo what a killed bot left half done: an interrupted rebase, status files not yet committed."""
    repo.rebase_abort()
    status = repo.root / STATUS_DIR
    if not os.path.islink(status) and os.path.isdir(status) and repo.is_dirty([STATUS_DIR]):
        repo.stage([STATUS_DIR])
        # what a killed bot left in its own clone is its own writing: recorded as such, or its next run
        # would take the statuses it had just written for someone else's
        authority = Authority(repo)
        if authority.known:
            staged = repo.git("diff", "--cached", "--name-only", "--diff-filter=AM", "--", STATUS_DIR)
            for rel in staged.splitlines():
                if rel.endswith(".json"):
                    authority.record(rel)
            authority.save("tp bot: record the statuses of an interrupted run")
        return commit_status(repo, message)
    return None
