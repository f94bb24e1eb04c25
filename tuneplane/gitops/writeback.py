"""Writeback: status files, the `status/README.md` dashboard, and getting them into the shared branch.

The bot owns `status/` and nothing else. Every run has its own status file, so two bots that raced
only ever conflict on the same run's file (resolved by keeping the more advanced status) or on the
dashboard (resolved by regenerating it from the files). Pushing is fetch, rebase, retry: bounded
and jittered, so a handful of bots converge instead of colliding in lockstep.
"""

from __future__ import annotations

import json
import os
import random
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from tuneplane import __version__
from tuneplane.backends.base import BackendRef
from tuneplane.errors import UsageError
from tuneplane.gitops.observe import RANK, backend_object, metric_order
from tuneplane.lab.fs import atomic_write
from tuneplane.lab.gitrepo import GitRepo
from tuneplane.lab.runs import DASHBOARD, STATUS_DIR, RunKey, status_keys
from tuneplane.models.jobspec import JobSpec
from tuneplane.models.run import Provenance, RunRequest, RunStatus, Transition
from tuneplane.plan.names import jobspec_digest

Checkpoint = Callable[[str], None]
SPARK = "▁▂▃▄▅▆▇█"
ICON = {
    "Submitted": "📨",
    "Pending": "⏳",
    "Running": "🏃",
    "Succeeded": "✅",
    "Failed": "❌",
    "Cancelled": "⛔",
}
PUSH_ATTEMPTS = 8


def _noop(step: str) -> None:
    """Default checkpoint: the bot passes its crash hook instead."""


# ── building status records ──────────────────────────────────────────────────────────────────────


def provenance_of(spec: JobSpec) -> Provenance:
    image = spec.spec.image
    return Provenance(
        commit=spec.provenance.commit,
        dirty=spec.provenance.dirty,
        recipe=f"{spec.spec.recipe.name}@{spec.spec.recipe.version}",
        recipe_digest=spec.spec.recipe.digest,
        plugin_digests={p.id: p.digest for p in spec.spec.plugins},
        image=image,
        image_digest=image.partition("@")[2] if "@sha256:" in image else "",
        jobspec_digest=jobspec_digest(spec),
        tool_version=spec.provenance.tool_version or __version__,
    )


def _base(req: RunRequest, phase: str, now: str, **fields: Any) -> RunStatus:
    return RunStatus(
        experiment=req.experiment,
        run_id=req.run_id,
        operation=req.operation,
        profile=req.profile,
        phase=phase,  # type: ignore[arg-type, unused-ignore]
        history=[Transition(phase=phase, at=now)],  # type: ignore[arg-type, unused-ignore]
        **fields,
    )


def submitted_status(req: RunRequest, spec: JobSpec, ref: BackendRef, now: str) -> RunStatus:
    provenance = provenance_of(spec)
    message = f"submitted to {ref.backend} as {ref.kind} {ref.name}"
    if ref.commit and ref.commit != provenance.commit:
        # another bot created the object from another commit: record what actually runs
        provenance = provenance.model_copy(update={"commit": ref.commit,
                                                   "jobspec_digest": ref.jobspec_digest or provenance.jobspec_digest})
        message += f" (adopted: the job was created at commit {ref.commit[:12]})"
    return _base(
        req,
        "Submitted",
        now,
        method=spec.spec.recipe.name,
        submitted_at=now,
        backend=backend_object(ref),
        provenance=provenance,
        out_dir=spec.spec.paths.out_dir,
        message=message,
    )


def refused_status(
    req: RunRequest, now: str, message: str, reason: str = "Refused", spec: JobSpec | None = None
) -> RunStatus:
    """The request can never run as written (a validation or admission refusal): Failed at once."""
    extra: dict[str, Any] = {}
    if spec is not None:
        extra = {"method": spec.spec.recipe.name, "provenance": provenance_of(spec)}
    return _base(req, "Failed", now, reason=reason, message=message, finished_at=now, **extra)


def waiting_status(req: RunRequest, spec: JobSpec, now: str, message: str) -> RunStatus:
    """The backend could not take the run yet (unreachable, refusing): the bot tries again next time."""
    return _base(
        req,
        "Pending",
        now,
        reason="SubmitFailed",
        method=spec.spec.recipe.name,
        provenance=provenance_of(spec),
        out_dir=spec.spec.paths.out_dir,
        message=f"{message} (the bot retries on its next run; set `cancel: true` to give up)",
    )


def cancelled_before_submit(req: RunRequest, now: str) -> RunStatus:
    return _base(
        req,
        "Cancelled",
        now,
        reason="CancelRequested",
        finished_at=now,
        message="cancelled before it was submitted",
    )


# ── the dashboard ────────────────────────────────────────────────────────────────────────────────


Known = dict[RunKey, "dict[str, Any] | None"]  # status files already read, as plain JSON


def read_raw(root: Path, key: RunKey) -> dict[str, Any] | None:
    """Status files as plain JSON: the dashboard of thousands of runs must not pay for validation."""
    try:
        data = json.loads((root / key.status_rel).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def render_dashboard(root: Path, known: Known | None = None) -> str:
    """The dashboard text; `known` saves reading files the caller has read (and not changed) already."""
    known = known or {}
    keys = sorted(status_keys(root), key=lambda k: (k.run_id, k.experiment), reverse=True)
    rows = [(key, known[key] if key in known else read_raw(root, key)) for key in keys]
    phases = Counter(str(data.get("phase", "?")) if data else "unreadable" for _, data in rows)
    counts = " · ".join(f"{n} {phase.lower()}" for phase, n in sorted(phases.items()))
    lines = [
        "# Runs",
        "",
        "<!-- Written by `tp bot` from the status files beside it; edits here are overwritten. -->",
        "",
        f"**{len(rows)} run{'s' if len(rows) != 1 else ''}**" + (f" · {counts}" if counts else ""),
        "",
        "| run | experiment | method | profile | phase | started | duration | metric | files |",
        "|:--|:--|:--|:--|:--|:--|--:|:--|:--|",
    ]
    lines += [_row(key, data) for key, data in rows]
    return "\n".join(lines) + "\n"


def _row(key: RunKey, data: dict[str, Any] | None) -> str:
    links = f"[request](../{key.request_rel}) · [status]({key.status_rel.removeprefix(STATUS_DIR + '/')})"
    if data is None:
        return f"| `{key.run_id}` | {_cell(key.experiment)} | | | ⚠️ unreadable | | | | {links} |"
    phase = str(data.get("phase", ""))
    reason = str(data.get("reason") or "")
    shown = f"{ICON.get(phase, '')} {phase}".strip() + (
        f" ({reason})" if reason and phase != "Succeeded" else ""
    )
    cells = [
        f"`{key.run_id}`",
        key.experiment,
        str(data.get("method") or ""),
        str(data.get("profile") or ""),
        shown,
        short_time(data.get("started_at")),
        duration_text(data.get("started_at"), data.get("finished_at")),
        metric_cell(data),
    ]
    return "| " + " | ".join(_cell(c) for c in cells) + f" | {links} |"


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def short_time(value: Any) -> str:
    return str(value)[:16].replace("T", " ") if value else ""


def duration_text(start: Any, end: Any) -> str:
    try:
        seconds = int((_parse(end) - _parse(start)).total_seconds())
    except (TypeError, ValueError):
        return ""
    hours, rest = divmod(max(seconds, 0), 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}h {minutes:02d}m" if hours else f"{minutes}m {secs:02d}s" if minutes else f"{secs}s"


def _parse(value: Any) -> datetime:
    return datetime.fromisoformat(str(value).replace("Z", "+00:00"))


def metric_cell(data: dict[str, Any]) -> str:
    metrics = data.get("metrics") or {}
    if not isinstance(metrics, dict) or not metrics:
        return ""
    key = sorted(metrics, key=metric_order)[0]
    value = metrics[key]
    history = (data.get("metric_history") or {}).get(key) or []
    text = f"{key} {value:.4g}" if isinstance(value, int | float) else f"{key} {value}"
    return f"{text} {sparkline(history)}".rstrip()


def sparkline(values: list[Any]) -> str:
    nums = [float(v) for v in values if isinstance(v, int | float) and v == v][-20:]
    if len(nums) < 2:
        return ""
    low, high = min(nums), max(nums)
    span = (high - low) or 1.0
    return "".join(SPARK[min(len(SPARK) - 1, int((v - low) / span * (len(SPARK) - 1) + 0.5))] for v in nums)


def write_dashboard(root: Path, known: Known | None = None) -> bool:
    """Regenerate `status/README.md`; True when its text changed."""
    path = root / DASHBOARD
    text = render_dashboard(root, known)
    try:
        if path.read_text(encoding="utf-8") == text:
            return False
    except OSError:
        pass
    atomic_write(path, text)
    return True


# ── commit and push ──────────────────────────────────────────────────────────────────────────────


def commit_status(repo: GitRepo, message: str) -> str | None:
    """Commit everything under `status/` (and only that); None when nothing changed."""
    repo.stage([STATUS_DIR])
    return repo.commit_staged(message, [STATUS_DIR])


@dataclass(frozen=True)
class Target:
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
    upstream = repo.fetch(target.remote, target.branch)
    if not upstream or repo.is_ancestor(upstream):
        return False
    integrate(repo, f"{target.remote}/{target.branch}", checkpoint)
    return True


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
    root = repo.root
    for attempt in range(1, attempts + 1):
        upstream = repo.fetch(target.remote, target.branch)
        if upstream and not repo.is_ancestor(upstream):
            integrate(repo, f"{target.remote}/{target.branch}", checkpoint)
            if write_dashboard(root):
                commit_status(repo, "tp bot: regenerate the dashboard")
        if upstream and repo.head() == upstream:
            return attempt
        if repo.push(target.remote, target.branch):
            return attempt
        sleep(rng.uniform(0.05, min(2.0, 0.1 * 2**attempt)))  # full jitter: racing bots spread out
    raise UsageError(
        f"could not push to {target.remote}/{target.branch} after {attempts} attempts: "
        "other writers kept pushing first",
        hint="nothing is lost: the commits are local; run the same command again",
    )


def integrate(repo: GitRepo, upstream: str, checkpoint: Checkpoint = _noop) -> None:
    """Rebase onto `upstream`, resolving the conflicts the bot understands; abort on any other."""
    conflicts = repo.rebase(upstream)
    while conflicts:
        checkpoint("rebasing")
        foreign = [p for p in conflicts if not p.startswith(STATUS_DIR + "/")]
        if foreign:
            repo.rebase_abort()
            raise UsageError(
                f"rebasing onto {upstream} conflicts in {', '.join(foreign)}, outside status/",
                hint="resolve it by hand (git pull --rebase), then run the command again",
            )
        for path in sorted(conflicts, key=lambda p: p == DASHBOARD):
            _resolve(repo, path)
        conflicts = repo.rebase_continue()


def _resolve(repo: GitRepo, path: str) -> None:
    root = repo.root
    if path == DASHBOARD:
        atomic_write(root / path, render_dashboard(root))
    else:
        chosen = pick_status(repo.show_stage(2, path), repo.show_stage(3, path))
        if chosen is None:
            repo.git("rm", "-q", "--cached", "--ignore-unmatch", "--", path)
            (root / path).unlink(missing_ok=True)
            return
        atomic_write(root / path, chosen if chosen.endswith("\n") else chosen + "\n")
    repo.stage([path])


def pick_status(upstream: str | None, ours: str | None) -> str | None:
    """Of two versions of one status file, the more advanced; a tie keeps the one already published."""

    def rank(text: str | None) -> tuple[int, int, str]:
        try:
            data = json.loads(text or "")
        except ValueError:
            return (-1, 0, "")
        if not isinstance(data, dict):
            return (-1, 0, "")
        return (
            RANK.get(str(data.get("phase")), -1),
            len(data.get("history") or []),
            str(data.get("finished_at") or ""),
        )

    if upstream is None or ours is None:
        return upstream if ours is None else ours
    return ours if rank(ours) > rank(upstream) else upstream


def recover(repo: GitRepo, message: str = "tp bot: keep status written by an interrupted run") -> str | None:
    """Undo what a killed bot left half done: an interrupted rebase, status files not yet committed."""
    repo.rebase_abort()
    if os.path.isdir(repo.root / STATUS_DIR) and repo.is_dirty([STATUS_DIR]):
        return commit_status(repo, message)
    return None
