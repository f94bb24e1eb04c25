"""Notifications: one webhook message per run per phase change, sent by the bot that owns the change.

Who sends: racing bots all observe the same run, but only one bot's status commit carries each phase
change onto the shared branch (the push race, with conflicts resolved by keeping the more advanced
status, decides). Each bot marks its commit with a pass id (a `Tp-Bot-Pass:` trailer); after the
push, the phase changes it owns are those its marked commit made to status files, whatever it lost in
the race. It queues them in an outbox in the clone's git directory, then sends, then records each sent
message by taking it out of the outbox. A bot killed after the push and before sending leaves the
outbox full, and its next run sends them; a bot killed between sending and recording sends that one
message again on its next run, with the same idempotency key (the `Idempotency-Key` header and the
`idempotency_key` field, derived from the run and its transition), so a receiver can drop the repeat.

What a webhook costs: each webhook gets `timeout_seconds` per bot run for all its messages and retries.
A webhook that fails or hangs never fails the bot's run: the statuses are committed and pushed before
any message is sent, and undelivered messages stay in the outbox for the next run (a few runs at most).
"""

from __future__ import annotations

import hashlib
import json
import os
import secrets
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tuneplane.bot.report import NOTIFY_OUTBOX, checkpoint
from tuneplane.lab.fs import atomic_write
from tuneplane.lab.gitrepo import GitFailed, GitRepo
from tuneplane.lab.runs import STATUS_DIR, unchecked_status
from tuneplane.models.lab import LabFile, Webhook
from tuneplane.runtime.records import FrozenRecord
from tuneplane.runtime.reporter import Echo

TRAILER = "Tp-Bot-Pass"
MAX_RUNS_KEPT = 5  # bot runs an undeliverable message is tried in before it is dropped (and said so)
_SCAN_COMMITS = 20  # the pass's own commit is HEAD or a few commits below it once others rebased onto it
Post = Callable[[str, bytes, dict[str, str], float], int]  # url, body, headers, timeout → HTTP status


class Change(FrozenRecord):
    """One run's phase change as the branch records it."""

    experiment: str
    run_id: str
    old: str  # "" for a run's first status
    new: str
    at: str
    message: str = ""

    @property
    def key(self) -> str:
        """The idempotency key: the same for every message about this transition of this run."""
        text = f"{self.experiment}/{self.run_id}|{self.old}|{self.new}|{self.at}"
        return hashlib.sha256(text.encode()).hexdigest()[:32]


class Notifier:
    """The bot's notifications for one run: `mark` its commit, `queue` what it owns, `send` the outbox."""

    def __init__(self, repo: GitRepo, lab: LabFile, post: Post | None = None) -> None:
        self.repo = repo
        self.hooks = list(lab.notify.webhooks)
        self.lab_name = lab.name
        self.pass_id = secrets.token_hex(8)
        self.post = post or http_post

    def mark(self, message: str) -> str:
        """The commit message with this pass's id, so the pass finds its commit after a rebase."""
        return f"{message}\n\n{TRAILER}: {self.pass_id}"

    def queue(self) -> int:
        """Put the phase changes this pass's commit made on the branch into the outbox; how many."""
        try:
            changes = owned_changes(self.repo, self.pass_id)
        except GitFailed:
            return 0  # never fail a pass whose statuses are already pushed
        box = self._read()
        added = 0
        for change in changes:
            for index, hook in enumerate(self.hooks):
                if change.new not in hook.phases or (hook.experiments and change.experiment not in hook.experiments):
                    continue
                box.setdefault(f"{change.key}:{index}", {"change": change.__dict__, "hook": index, "runs": 0})
                added += 1
        self._write(box)
        return added

    def send(self, echo: Echo) -> int:
        """Send what the outbox holds, each webhook within its time; returns how many were delivered."""
        box = self._read()
        spent: dict[int, float] = {}
        sent = 0
        for entry_key in sorted(box):
            entry = box[entry_key]
            index = int(entry["hook"])
            if index >= len(self.hooks):
                del box[entry_key]  # the webhook was removed from tuneplane.yaml
                continue
            hook, change = self.hooks[index], Change(**entry["change"])
            budget = hook.timeout_seconds - spent.get(index, 0.0)
            started = time.monotonic()
            ok, why = self._deliver(hook, change, budget) if budget > 0 else (False, "out of time this run")
            spent[index] = spent.get(index, 0.0) + time.monotonic() - started
            if ok:
                sent += 1
                checkpoint("notified")  # sent, not yet recorded: the crash tests stop here
                del box[entry_key]
            else:
                entry["runs"] = int(entry["runs"]) + 1
                if entry["runs"] >= MAX_RUNS_KEPT:
                    del box[entry_key]
                    echo(
                        f"  ! notify {_hook_name(hook)}: gave up on {change.experiment}/{change.run_id} "
                        f"{change.new} after {MAX_RUNS_KEPT} runs ({why})"
                    )
                else:
                    echo(
                        f"  ! notify {_hook_name(hook)}: {change.experiment}/{change.run_id} {change.new} "
                        f"not delivered ({why}); tried again next run"
                    )
            self._write(box)
        return sent

    def _deliver(self, hook: Webhook, change: Change, budget: float) -> tuple[bool, str]:
        url = webhook_url(hook)
        if not url:
            return False, f"no URL in {'$' + hook.url_env if hook.url_env else hook.url_file}"
        body = json.dumps(payload(hook, change, self.lab_name), sort_keys=True).encode()
        headers = {"Content-Type": "application/json", "Idempotency-Key": change.key, "User-Agent": "tuneplane-bot"}
        deadline = time.monotonic() + budget
        why = ""
        for attempt in range(hook.retries + 1):
            left = deadline - time.monotonic()
            if left <= 0:
                return False, why or "timed out"
            try:
                code = self.post(url, body, headers, left)
            except (OSError, ValueError) as exc:  # refused, reset, timed out, a malformed URL
                why = f"{type(exc).__name__}: {exc}"
            else:
                if 200 <= code < 300:
                    return True, ""
                why = f"HTTP {code}"
                if 400 <= code < 500 and code not in (408, 429):
                    return False, why  # the receiver refuses this message: asking again changes nothing
            time.sleep(min(0.2 * 2**attempt, max(0.0, deadline - time.monotonic())))
        return False, why

    def _path(self) -> Path:
        return Path(self.repo.git("rev-parse", "--absolute-git-dir")) / NOTIFY_OUTBOX

    def _read(self) -> dict[str, Any]:
        try:
            data = json.loads(self._path().read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return {}
        return data if isinstance(data, dict) else {}

    def _write(self, box: dict[str, Any]) -> None:
        """The outbox; an empty one is removed, so its presence alone tells the idle check there is work."""
        if box:
            atomic_write(self._path(), json.dumps(box, sort_keys=True, indent=1) + "\n")
        else:
            self._path().unlink(missing_ok=True)

    def pending(self) -> int:
        return len(self._read())


def notifier_for(repo: GitRepo, lab: LabFile) -> Notifier | None:
    """The notifier of a lab with webhooks; None without any (the bot then does nothing of this)."""
    return Notifier(repo, lab) if lab.notify.webhooks else None


def owned_changes(repo: GitRepo, pass_id: str) -> list[Change]:
    """The phase changes the commit marked with `pass_id` made to status files, as it stands on the branch."""
    try:
        log = repo.git("log", f"-{_SCAN_COMMITS}", "--first-parent", "--format=%H%x00%B%x1e", "HEAD")
    except GitFailed:
        return []
    mine = [c.split("\0", 1)[0].strip() for c in log.split("\x1e") if f"{TRAILER}: {pass_id}" in c]
    out: list[Change] = []
    for commit in mine:
        names = repo.git("diff", "--name-only", "--no-renames", f"{commit}^", commit, "--", STATUS_DIR)
        for rel in names.splitlines():
            parts = rel.split("/")
            if len(parts) != 3 or not parts[2].endswith(".json"):
                continue
            change = _change(repo.show(f"{commit}^", rel), repo.show(commit, rel), parts[1], parts[2][:-5])
            if change is not None:
                out.append(change)
    return out


def _change(before: str | None, after: str | None, experiment: str, run_id: str) -> Change | None:
    old, new = unchecked_status(before), unchecked_status(after)
    was = old.phase if old else ""
    if new is None or not new.phase or new.phase == was:
        return None
    entered = [at for phase, at in new.history if phase == new.phase]
    at = entered[-1] if entered else new.finished_at or new.submitted_at
    return Change(experiment, run_id, was, new.phase, at, new.message[:500])


def payload(hook: Webhook, change: Change, lab: str) -> dict[str, str]:
    """The message: the transition as JSON, or a Slack-compatible `text` (Slack ignores the other keys)."""
    run = f"{change.experiment}/{change.run_id}"
    text = f"[{lab}] run {run}: {change.old or 'new'} → {change.new}"
    text += f" ({change.message})" if change.message else ""
    if hook.format == "slack":
        return {"text": text, "idempotency_key": change.key}
    return {
        "idempotency_key": change.key,
        "lab": lab,
        "run": run,
        "experiment": change.experiment,
        "run_id": change.run_id,
        "previous_phase": change.old,
        "phase": change.new,
        "at": change.at,
        "message": change.message,
        "text": text,
    }


def webhook_url(hook: Webhook) -> str:
    """The URL from the environment or the file; "" when it is not there."""
    if hook.url_env:
        return os.environ.get(hook.url_env, "").strip()
    try:
        return Path(os.path.expanduser(hook.url_file)).read_text(encoding="utf-8").strip()
    except OSError:
        return ""


def http_post(url: str, body: bytes, headers: dict[str, str], timeout: float) -> int:
    """POST `body`; the HTTP status (an error status is returned, not raised); OSError when unreachable."""
    # lazy: urllib's HTTP client loads only when a lab has webhooks and a message to send
    import http.client
    import urllib.error
    import urllib.request

    if not url.startswith(("http://", "https://")):
        raise ValueError("the webhook URL must start with http:// or https://")
    request = urllib.request.Request(url, data=body, headers=headers, method="POST")
    try:
        with urllib.request.urlopen(request, timeout=timeout) as answer:  # the scheme is checked above
            return int(answer.status)
    except urllib.error.HTTPError as exc:
        return int(exc.code)
    except http.client.HTTPException as exc:  # a garbled answer: as unreachable, so it is tried again
        raise OSError(f"{type(exc).__name__}: {exc}") from exc


def _hook_name(hook: Webhook) -> str:
    return hook.name or (f"${hook.url_env}" if hook.url_env else hook.url_file)
