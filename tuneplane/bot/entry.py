"""The bot: make the backends match the run requests in git, and write what happened back into git.

`reconcile` (bot.reconcile) submits every committed run request that has no status (or whose
submission must be retried) and cancels the runs whose committed request says `cancel: true`; `sync`
(bot.sync) refreshes the runs it has not seen end from their backend and the metrics ingest. Both
read the commit, never the work tree (bot.snapshot), look only at what changed since the bot's
ledger (record.ledger, bot.scan), and commit their writes once (record.batch). A run with nothing
to do is answered first by `bot.idle` from the commit's top trees and the ledger, without importing
the pipeline: the common CI run after a merge that requested nothing costs about `tp --help`.

Safe to kill at any point and to run several at once:
- a job object's name is derived from the run, and backends adopt an existing object of that name,
  so submitting again never starts a second job;
- status files are written atomically; a status left uncommitted by a killed bot is committed by
  the next one, an interrupted rebase is aborted and redone;
- each run has its own status file, so racing bots conflict only on the same run's file (the more
  advanced status wins), on the ledger (merged) or on a dashboard page (regenerated).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from tuneplane.bot.idle import idle
from tuneplane.bot.report import (
    CRASH_ENV,
    CRASH_EXIT,
    MAX_BACKEND_FAILURES,
    STEPS,
    BotOptions,
    BotReport,
    checkpoint,
)
from tuneplane.runtime.reporter import Echo, plain

if TYPE_CHECKING:
    from tuneplane.backends.base import Backend

__all__ = [
    "CRASH_ENV",
    "CRASH_EXIT",
    "MAX_BACKEND_FAILURES",
    "STEPS",
    "BotOptions",
    "BotReport",
    "checkpoint",
    "reconcile",
    "sync",
]


def reconcile(
    root: Path,
    opts: BotOptions | None = None,
    backends: Callable[[str], Backend] | None = None,
    echo: Echo = plain.line,
) -> BotReport:
    """`tp bot reconcile` (see bot.reconcile); nothing is imported or read when there is nothing to do."""
    report = idle(root, "reconcile", opts or BotOptions())
    if report is not None:
        return report
    from tuneplane.bot.reconcile import reconcile as run  # lazy: the pipeline, only when there is work

    return run(root, opts, backends, echo)


def sync(
    root: Path,
    opts: BotOptions | None = None,
    backends: Callable[[str], Backend] | None = None,
    echo: Echo = plain.line,
) -> BotReport:
    """`tp bot sync` (see bot.sync); nothing is imported or read when no run is being watched."""
    report = idle(root, "sync", opts or BotOptions())
    if report is not None:
        return report
    from tuneplane.bot.sync import sync as run  # lazy: the pipeline, only when there is work

    return run(root, opts, backends, echo)
