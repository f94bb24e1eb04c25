"""`bot.passes`: what a pass lists as waiting for the dashboard, read from the statuses it watches."""

from __future__ import annotations

from typing import Any, cast

from tuneplane.bot.passes import waiting_list
from tuneplane.bot.report import BotReport
from tuneplane.bot.scan import Scan
from tuneplane.lab.runs import RunKey
from tuneplane.record.ledger import Ledger

RUNS = [RunKey("demo", f"20250101-000000-00000{n}") for n in range(1, 6)]


def test_a_run_its_backend_could_not_take_is_waiting_whatever_else_its_status_says() -> None:
    """Waiting: a status that says `SubmitFailed` and names no backend object. Not waiting: one that
    names one, one that says another reason, one forged in other types, one that is unreadable."""
    never_sent = {"phase": "Pending", "reason": "SubmitFailed"}
    sent = {"phase": "Pending", "reason": "SubmitFailed", "backend": {"backend": "kubernetes", "name": "j"}}
    running = {"phase": "Running", "reason": ""}
    forged = {"phase": "Pending", "reason": ["SubmitFailed"], "backend": "none"}
    statuses: list[dict[str, Any] | None] = [never_sent, sent, running, forged, None]
    work = Scan(snap=cast(Any, None), ledger=Ledger(), authority=cast(Any, None))
    for key, status in zip(RUNS, statuses, strict=True):
        work.ledger.active[str(key)] = "Pending"
        work.active[key] = status

    waiting = waiting_list(work, BotReport())

    assert waiting == [(RUNS[0], "the backend could not take it yet; retried")]
