"""What a bot run is asked to do and what it reports, with its crash points: the standard library only.

These are shared by the full bot pass (`passes`, `reconcile`, `sync`) and by the idle check (`idle`),
which must answer a no-op run without importing the models, the YAML readers or the backends.

Crash testing: `TUNEPLANE_BOT_CRASH_AT=<step>` makes the bot die (`os._exit(CRASH_EXIT)`, as `kill -9`
would) at that step; see `STEPS`. It exists for the crash-injection tests and changes nothing else.
"""

from __future__ import annotations

import os

from tuneplane.constants import CANCELLED, SUBMITTED
from tuneplane.runtime.records import Record, field

CRASH_ENV = "TUNEPLANE_BOT_CRASH_AT"
CRASH_EXIT = 197
STEPS = (
    "recovered",  # after cleaning up what an earlier, killed bot left
    "scanned",  # after deciding what to do, before touching a backend
    "submitted",  # right after the first backend submission, before its status is written
    "cancelled",  # right after the first backend cancellation, before its status is written
    "status-written",  # status files written, not committed
    "committed",  # committed, not pushed
    "rebasing",  # in a rebase that stopped on conflicts, before resolving them
    "pushed",  # after the push
)
# in a lab with webhooks only (`notify:`): a notification sent, not yet taken out of the outbox (bot.notify)
NOTIFY_STEPS = ("notified",)
# undelivered notifications, in the clone's git directory (bot.notify); named here for the idle check
NOTIFY_OUTBOX = "tuneplane-notify-outbox.json"
IDLE_MESSAGE = "nothing to do: every run request has its status"  # what `tp bot` prints for a no-op run
MAX_BACKEND_FAILURES = 3  # in a row: the backend is down, leave the rest for the next run


def checkpoint(step: str) -> None:
    """Die here when asked to (crash-injection tests); otherwise nothing."""
    if os.environ.get(CRASH_ENV) == step:
        os._exit(CRASH_EXIT)


class BotReport(Record):
    submitted: list[str] = field(default_factory=list)
    cancelled: list[str] = field(default_factory=list)
    refused: list[str] = field(default_factory=list)
    waiting: list[str] = field(default_factory=list)  # the backend refused for now; retried next time
    updated: list[str] = field(default_factory=list)
    restored: list[str] = field(default_factory=list)  # statuses others deleted or broke, put back
    held: list[str] = field(default_factory=list)  # runs whose new metric points wait for `bot.metrics_every`
    errors: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)  # entries of the commit the bot refused to act on
    commit: str | None = None
    pushed: bool = False
    push_attempts: int = 0

    def outcomes(self) -> tuple[tuple[str, str, list[str]], ...]:
        """What the run did to runs: (verb for the commit title, heading for its body, the runs)."""
        return (
            ("submit", SUBMITTED, self.submitted),
            ("cancel", CANCELLED, self.cancelled),
            ("refuse", "Refused", self.refused),
            ("retry later", "Not yet submitted", self.waiting),
            ("update", "Updated", self.updated),
            ("restore the status of", "Restored", self.restored),
        )

    @property
    def changed(self) -> bool:
        return any(items for _, _, items in self.outcomes())


class BotOptions(Record):
    push: bool = False
    remote: str | None = None
    branch: str | None = None
    kubeconfig: str | None = None
    context: str | None = None
    in_cluster: bool = False
    pull_requests: str | None = None  # the workflow's answers: which pull request merged each commit (bot.pulls)
