"""The bot: make the backends match the run requests in git, and write what happened back into git.

`reconcile` (gitops.reconcile) submits every committed run request that has no status (or whose
submission must be retried) and cancels the runs whose committed request says `cancel: true`; `sync`
(gitops.sync) refreshes the runs it has not seen end from their backend and the metrics ingest. Both
read the commit, never the work tree (gitops.committed), look only at what changed since the bot's
ledger (gitops.ledger, gitops.scan), and commit their writes once (gitops.record).

Safe to kill at any point and to run several at once:
- a job object's name is derived from the run, and backends adopt an existing object of that name,
  so submitting again never starts a second job;
- status files are written atomically; a status left uncommitted by a killed bot is committed by
  the next one, an interrupted rebase is aborted and redone;
- each run has its own status file, so racing bots conflict only on the same run's file (the more
  advanced status wins), on the ledger (merged) or on a dashboard page (regenerated).
"""

from __future__ import annotations

from tuneplane.gitops.reconcile import cluster_backend, reconcile
from tuneplane.gitops.session import (
    CRASH_ENV,
    CRASH_EXIT,
    MAX_BACKEND_FAILURES,
    STEPS,
    Backends,
    BotOptions,
    BotReport,
    checkpoint,
)
from tuneplane.gitops.sync import sync

__all__ = ["CRASH_ENV", "CRASH_EXIT", "MAX_BACKEND_FAILURES", "STEPS", "Backends", "BotOptions", "BotReport",
           "checkpoint", "cluster_backend", "reconcile", "sync"]
