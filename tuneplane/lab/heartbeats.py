"""Heartbeats of local runs published beside the lab's branches, for the machines that cannot see them.

A local run's supervisor lives on one machine (a CI runner, a laptop); a bot pass on another machine
cannot read its run directory, so it cannot tell a run that goes on from one whose machine went away.
The supervisor therefore publishes its heartbeat to the lab's remote as a ref only tp writes,
`refs/tuneplane/heartbeats/<experiment>/<run-id>`: a commit with the empty tree, its committer time the
heartbeat, force-pushed over the last one. It adds no commit to any branch and no file under status/,
so `main` stays the record and the heartbeat costs one tiny object per beat.

The bot reads them once per pass, and only when some run needs it (`PublishedHeartbeats`). Once no run
needs one (the bot pushed the run's end, or the run left the lab), the bot's push deletes it, with its
commit (`tuneplane.record.publish`): a lab keeps one ref per run under way, not one per run ever made.
"""

from __future__ import annotations

import datetime
import os
from pathlib import Path

from tuneplane.constants import STAMP_FORMAT
from tuneplane.errors import UsageError
from tuneplane.lab.gitrepo import BOT_REFS, FALLBACK_EMAIL, FALLBACK_NAME, GitFailed, GitRepo, run_git, upstream_prefix

HEARTBEAT_REFS = BOT_REFS + "heartbeats"
PUBLISH_ENV = "TUNEPLANE_HEARTBEAT_PUBLISH"  # seconds between published heartbeats; 0 publishes none
DEFAULT_PUBLISH = 60.0
REMOTE_TIMEOUT = 30.0  # seconds a push or fetch of heartbeats may take before it is killed


def heartbeat_ref(experiment: str, run_id: str) -> str:
    return f"{HEARTBEAT_REFS}/{experiment}/{run_id}"


def fetched(repo: GitRepo, remote: str) -> dict[str, tuple[str, str] | None]:
    """The heartbeat refs `remote` held when the bot's refs were last fetched from it (`GitRepo.fetch`
    copies them under `upstream_prefix`), by their name on `remote` → (experiment, run id); None for a
    ref that names no run."""
    copies = upstream_prefix(remote) + HEARTBEAT_REFS.removeprefix(BOT_REFS) + "/"
    found: dict[str, tuple[str, str] | None] = {}
    for name in repo.git("for-each-ref", "--format=%(refname)", copies).splitlines():
        experiment, _, run_id = name.removeprefix(copies).partition("/")
        found[f"{HEARTBEAT_REFS}/{name.removeprefix(copies)}"] = (
            (experiment, run_id) if experiment and run_id and "/" not in run_id else None
        )
    return found


def forget_fetched(repo: GitRepo, remote: str, refs: list[str]) -> None:
    """Drop the copies of `refs` deleted on `remote`, as the next fetch would."""
    copies = upstream_prefix(remote) + HEARTBEAT_REFS.removeprefix(BOT_REFS)
    lines = "".join(f"delete {copies}{ref.removeprefix(HEARTBEAT_REFS)}\n" for ref in refs)
    if lines:
        run_git(repo.root, ["update-ref", "--stdin"], lines.encode())


def publish_interval(env: dict[str, str] | None = None) -> float:
    """Seconds between published heartbeats (`TUNEPLANE_HEARTBEAT_PUBLISH`); 0 when publishing is off.
    A value that is not a number is the default: a typo must not silence a run's heartbeat."""
    text = (os.environ if env is None else env).get(PUBLISH_ENV, "").strip()
    try:
        value = float(text) if text else DEFAULT_PUBLISH
    except ValueError:
        return DEFAULT_PUBLISH
    return max(value, 0.0)


def remote_of(root: Path, remote: str = "origin") -> GitRepo | None:
    """The lab's repository when it has `remote`; None when it is no repository or has no such remote
    (a lab never pushed: nobody else could read a heartbeat anyway)."""
    try:
        repo = GitRepo(root)
    except (UsageError, OSError):
        return None
    try:
        return repo if repo.has_remote(remote) else None
    except (GitFailed, OSError):
        return None


def publish(
    repo: GitRepo, remote: str, experiment: str, run_id: str, message: str, timeout: float = REMOTE_TIMEOUT
) -> None:
    """Force-push one heartbeat of the run to `remote`; raises GitFailed (a hung push: killed after
    `timeout` seconds). Nothing changes in the working tree, the index or any local ref."""
    tree = repo.git("mktree")  # no entries on its (empty) stdin: the empty tree, written if missing
    commit = repo.git(
        "-c", f"user.name={FALLBACK_NAME}", "-c", f"user.email={FALLBACK_EMAIL}", "commit-tree", tree, "-m", message
    )
    repo._run(["push", "--quiet", "--force", remote, f"{commit}:{heartbeat_ref(experiment, run_id)}"], timeout=timeout)


class PublishedHeartbeats:
    """The heartbeats on the lab's remote, fetched at most once (on the first question) per instance.

    `at()` is None for a run that published none, or when they could not be fetched (`error` says why):
    the bot then has no evidence either way and must not guess."""

    def __init__(self, root: Path, remote: str = "origin", timeout: float = REMOTE_TIMEOUT) -> None:
        self.root, self.remote, self.timeout = root, remote, timeout
        self.error = ""
        self._seen: dict[str, str] | None = None

    def at(self, experiment: str, run_id: str) -> str | None:
        if self._seen is None:
            self._seen = self._fetch()
        return self._seen.get(heartbeat_ref(experiment, run_id))

    def _fetch(self) -> dict[str, str]:
        repo = remote_of(self.root, self.remote)
        if repo is None:
            self.error = f"the lab has no remote {self.remote!r} to read published heartbeats from"
            return {}
        try:
            # --prune: a heartbeat ref deleted on the remote is not read from an older fetch
            repo._run(
                ["fetch", "--quiet", "--prune", "--no-tags", self.remote, f"+{HEARTBEAT_REFS}/*:{HEARTBEAT_REFS}/*"],
                timeout=self.timeout,
            )
            listed = repo.git("for-each-ref", "--format=%(refname) %(committerdate:unix)", HEARTBEAT_REFS)
        except (GitFailed, OSError) as exc:
            self.error = f"could not fetch the published heartbeats from {self.remote}: {exc}"
            return {}
        seen: dict[str, str] = {}
        for line in listed.splitlines():
            name, _, stamp = line.rpartition(" ")
            if stamp.isdigit():
                moment = datetime.datetime.fromtimestamp(int(stamp), datetime.UTC)
                seen[name] = moment.strftime(STAMP_FORMAT)
        return seen
