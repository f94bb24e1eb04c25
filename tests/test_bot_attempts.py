"""The bot's retries against a scripted engine: `tp bot sync` records each attempt and decides, `tp bot
reconcile` submits the next attempt under its own object name, once, whatever restarts in between.

The engine is a fake (the point is the bot, not an engine): it counts the objects it creates by name,
adopts an object it already has as the real backends do, keeps the job environment each object was
submitted with, and reports what the test scripts for each object.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from support.repos import clone, git, make_remote, quiet, request, seed_lab, tp_run

from tuneplane.backends.base import NO_HEARTBEAT, AttemptReport, BackendError, BackendRef, Observation, SubmitRequest
from tuneplane.bot.entry import reconcile, sync
from tuneplane.constants import utc_now
from tuneplane.lab.runs import RunKey, mark_cancel, read_status, write_request
from tuneplane.models.base import RetryPolicy
from tuneplane.plan.names import attempt_name, object_name
from tuneplane.record.ledger import LEDGER
from tuneplane.runs.observe import observe_run

RUN = "20250102-100000-00000a"
KEY = RunKey("demo", RUN)
FIRST = object_name("demo", RUN)


class Engine:
    name = "kubernetes"
    requeues = True  # its engine may start a later attempt after the bot saw an end (Slurm's requeue)

    def __init__(self) -> None:
        self.creations: Counter[str] = Counter()
        self.env: dict[str, dict[str, str]] = {}
        self.says: dict[str, Observation] = {}
        self.cancelled: list[str] = []
        self.down = False  # the engine's controller does not answer
        self.refusals = 0  # cancels that fail before one succeeds

    def submit(self, req: SubmitRequest) -> BackendRef:
        if req.object_name not in self.env:
            self.creations[req.object_name] += 1
            self.env[req.object_name] = dict(_env(req.payload.shown()[1]))
        return BackendRef("kubernetes", "Job", req.object_name, "tuneplane", uid=f"uid-{req.object_name}")

    def observe(self, ref: BackendRef) -> Observation:
        if self.down:
            raise BackendError("slurmctld did not answer within 60 s")
        return self.says.get(ref.name, Observation("Pending", reason="Queued"))

    def logs(self, ref: BackendRef, tail: int | None = None, follow: bool = False) -> Iterator[str]:
        return iter(())

    def cancel(self, ref: BackendRef) -> None:
        if self.refusals:
            self.refusals -= 1
            raise BackendError("scancel 7 failed (1): Unable to contact slurm controller")
        self.cancelled.append(ref.name)
        # as an engine does: a stopped object reads cancelled from then on
        said = self.says.get(ref.name, Observation("Pending", reason="Queued"))
        self.says[ref.name] = said.replace(phase="Cancelled", reason="Cancelled")


def _env(node: Any) -> Iterator[tuple[str, str]]:
    if isinstance(node, dict):
        if set(node) >= {"name", "value"} and isinstance(node["name"], str):
            yield node["name"], str(node["value"])
        for value in node.values():
            yield from _env(value)
    elif isinstance(node, list):
        for item in node:
            yield from _env(item)


def lab(tmp_path: Path, retry: RetryPolicy | None = None) -> Path:
    remote = make_remote(tmp_path)
    seed_lab(remote, tmp_path / "seed", {"demo": "echo hi\n"}, backend="kubernetes")
    bot = clone(remote, tmp_path / "bot")
    write_request(bot, request("demo", RUN, "h200:8", retry=retry or RetryPolicy(backoff_seconds=0)))
    git(bot, "add", "-A")
    git(bot, "commit", "-q", "-m", "request a run")
    return bot


def attempt(
    number: int, start: str, end: str | None = None, reason: str | None = None, message: str = ""
) -> AttemptReport:
    return AttemptReport(
        number=number,
        started_at=f"2025-01-02T{start}Z",
        finished_at=f"2025-01-02T{end}Z" if end else None,
        reason=reason,  # type: ignore[arg-type]
        message=message,
        gpus=8,
    )


def passes(bot: Path, engine: Engine) -> None:
    """One scheduled round: sync what runs, then reconcile (submit what is due)."""
    sync(bot, backends=lambda _n: engine, echo=quiet)
    reconcile(bot, backends=lambda _n: engine, echo=quiet)


def committed_attempts(bot: Path) -> list[int]:
    """How many attempts each committed version of the status file holds, oldest commit first."""
    revs = git(bot, "log", "--reverse", "--format=%H", "--", KEY.status_rel).split()
    return [len(json.loads(git(bot, "show", f"{r}:{KEY.status_rel}"))["attempts"]) for r in revs]


def test_a_run_preempted_twice_runs_three_attempts_each_once(tmp_path: Path) -> None:
    bot, engine = lab(tmp_path), Engine()
    reconcile(bot, backends=lambda _n: engine, echo=quiet)
    second, third = attempt_name(FIRST, 2), attempt_name(FIRST, 3)

    engine.says[FIRST] = Observation("Failed", attempts=(attempt(1, "10:00:00", "10:30:00", "Preempted"),))
    passes(bot, engine)
    status = read_status(bot, KEY)
    assert status.phase == "Pending" and status.backend.name == second
    assert [(a.number, a.reason, a.object) for a in status.attempts] == [(1, "Preempted", FIRST), (2, "", second)]

    engine.says[second] = Observation("Failed", attempts=(attempt(1, "10:31:00", "11:01:00", "Preempted"),))
    passes(bot, engine)
    passes(bot, engine)  # nothing new: no third attempt is made twice
    engine.says[third] = Observation("Succeeded", attempts=(attempt(3, "11:02:00", "12:02:00", "Completed"),))
    passes(bot, engine)

    status = read_status(bot, KEY)
    assert status.phase == "Succeeded" and status.finished_at == "2025-01-02T12:02:00Z"
    assert [(a.number, a.reason, a.object) for a in status.attempts] == [
        (1, "Preempted", FIRST),
        (2, "Preempted", second),
        (3, "Completed", third),
    ]
    assert sum(a.gpu_seconds for a in status.attempts) == 8 * 7200.0
    assert engine.creations == {FIRST: 1, second: 1, third: 1}
    assert "TUNEPLANE_ATTEMPT" not in engine.env[FIRST]
    assert (engine.env[second]["TUNEPLANE_ATTEMPT"], engine.env[third]["TUNEPLANE_ATTEMPT"]) == ("2", "3")
    assert max(committed_attempts(bot)) == 3 and committed_attempts(bot)[-1] == 3
    assert "| 16.0 |" in (bot / "status/demo/README.md").read_text()  # GPU-hours of the run


def test_an_error_is_not_retried_by_default_and_the_trainer_says_why(tmp_path: Path) -> None:
    bot, engine = lab(tmp_path, RetryPolicy()), Engine()
    reconcile(bot, backends=lambda _n: engine, echo=quiet)
    line = "ValueError: learning_rate must be positive, got -0.1"
    engine.says[FIRST] = Observation("Failed", attempts=(attempt(1, "10:00:00", "10:01:00", "Error", line),))
    passes(bot, engine)
    passes(bot, engine)

    status = read_status(bot, KEY)
    assert (status.phase, status.reason, status.message) == ("Failed", "Error", line)
    assert engine.creations == {FIRST: 1}
    assert line.replace("_", "\\_") in (bot / "status/demo/README.md").read_text()  # shown as written
    code, out = tp_run(bot, "job", "status", RUN)
    assert code == 0, out
    assert f"message    {line}" in out and f"attempt    1 · Error · 0.1 GPU-h: {line}" in out


def test_a_budget_of_two_stops_at_two_across_restarts_and_a_rebuilt_ledger(tmp_path: Path) -> None:
    bot, engine = lab(tmp_path, RetryPolicy(attempts=2, backoff_seconds=0)), Engine()
    reconcile(bot, backends=lambda _n: engine, echo=quiet)
    second = attempt_name(FIRST, 2)
    engine.says[FIRST] = Observation("Failed", attempts=(attempt(1, "10:00:00", "10:30:00", "Preempted"),))
    passes(bot, engine)
    engine.says[second] = Observation("Failed", attempts=(attempt(2, "10:31:00", "11:01:00", "Preempted"),))
    passes(bot, engine)
    git(bot, "rm", "-q", LEDGER)
    git(bot, "commit", "-q", "-m", "lose the ledger")
    passes(bot, engine)
    passes(bot, engine)

    status = read_status(bot, KEY)
    assert (status.phase, status.reason) == ("Failed", "RetriesExhausted")
    assert "attempt 2 of 2: no retry left" in status.message
    assert engine.creations == {FIRST: 1, second: 1}
    # the engine shows the object running again: the bot's decision stands
    engine.says[second] = Observation(
        "Running", attempts=(attempt(2, "10:31:00", "11:01:00", "Preempted"), attempt(3, "11:05:00"))
    )
    passes(bot, engine)
    assert read_status(bot, KEY).phase == "Failed"


def test_a_bot_killed_between_resubmission_and_commit_is_adopted(tmp_path: Path) -> None:
    bot, engine = lab(tmp_path), Engine()
    reconcile(bot, backends=lambda _n: engine, echo=quiet)
    engine.says[FIRST] = Observation("Failed", attempts=(attempt(1, "10:00:00", "10:30:00", "Preempted"),))
    sync(bot, backends=lambda _n: engine, echo=quiet)
    reconcile(bot, backends=lambda _n: engine, echo=quiet)
    git(bot, "reset", "-q", "--hard", "HEAD~1")  # as if the bot had died before its commit

    reconcile(bot, backends=lambda _n: engine, echo=quiet)

    assert engine.creations == {FIRST: 1, attempt_name(FIRST, 2): 1}
    assert [a.number for a in read_status(bot, KEY).attempts] == [1, 2]


def test_cancel_stops_the_run_between_attempts(tmp_path: Path) -> None:
    bot, engine = lab(tmp_path), Engine()
    reconcile(bot, backends=lambda _n: engine, echo=quiet)
    engine.says[FIRST] = Observation("Failed", attempts=(attempt(1, "10:00:00", "10:30:00", "Preempted"),))
    sync(bot, backends=lambda _n: engine, echo=quiet)
    mark_cancel(bot, KEY)
    git(bot, "commit", "-q", "-am", "cancel")

    passes(bot, engine)
    passes(bot, engine)

    status = read_status(bot, KEY)
    assert (status.phase, status.reason) == ("Cancelled", "CancelRequested")
    assert engine.creations == {FIRST: 1}


def test_a_requeue_after_an_old_exit_marker_never_ends_the_run(tmp_path: Path) -> None:
    """Slurm requeued the job after attempt 1 wrote its exit marker; the controller stops answering in
    between, and at times only the old marker is in sight. No sync may end the run."""
    bot, engine = lab(tmp_path), Engine()
    reconcile(bot, backends=lambda _n: engine, echo=quiet)
    marker = attempt(1, "10:00:00", "10:20:00", "Completed")
    seen: list[tuple[str, str]] = []
    for says in (
        Observation("Running", attempts=(attempt(1, "10:00:00"),)),
        Observation("Succeeded", attempts=(marker, attempt(2, "10:25:00"))),
        None,  # no answer
        Observation("Succeeded", attempts=(marker,)),
    ):
        engine.down = says is None
        if says is not None:
            engine.says[FIRST] = says
        sync(bot, backends=lambda _n: engine, echo=quiet)
        seen.append((read_status(bot, KEY).phase, read_status(bot, KEY).message))
    assert [phase for phase, _ in seen] == ["Running"] * 4
    assert "could not observe the run: slurmctld did not answer" in seen[2][1]
    engine.says[FIRST] = Observation("Succeeded", attempts=(marker, attempt(2, "10:25:00", "11:25:00", "Completed")))
    sync(bot, backends=lambda _n: engine, echo=quiet)
    status = read_status(bot, KEY)
    assert (status.phase, status.finished_at, len(status.attempts)) == ("Succeeded", "2025-01-02T11:25:00Z", 2)


def test_a_run_recorded_ended_that_runs_again_is_reopened(tmp_path: Path) -> None:
    """An engine that reported the old marker as the run's end (no attempts told apart) ended the run;
    the next sync sees attempt 2 running: the run is open again, and watched until it ends."""
    bot, engine = lab(tmp_path), Engine()
    reconcile(bot, backends=lambda _n: engine, echo=quiet)
    ended = utc_now()  # just now: the engine may still requeue it
    engine.says[FIRST] = Observation("Succeeded", started_at="2025-01-02T10:00:00Z", finished_at=ended, exit_code=0)
    sync(bot, backends=lambda _n: engine, echo=quiet)
    assert read_status(bot, KEY).phase == "Succeeded"

    first = AttemptReport(number=1, started_at="2025-01-02T10:00:00Z", finished_at=ended, reason="Completed")
    engine.says[FIRST] = Observation("Running", attempts=(first, attempt(2, "10:25:00")))
    sync(bot, backends=lambda _n: engine, echo=quiet)
    status = read_status(bot, KEY)
    assert (status.phase, status.reason, status.finished_at) == ("Running", "Corrected", None)
    assert [a.number for a in status.attempts] == [1, 2]
    engine.says[FIRST] = Observation("Failed", attempts=(first, attempt(2, "10:25:00", "10:40:00", "Error", "boom")))
    sync(bot, backends=lambda _n: engine, echo=quiet)
    assert (read_status(bot, KEY).phase, read_status(bot, KEY).message) == ("Failed", "boom")


class Elsewhere(Engine):
    """The local backend for a run of another machine: its run directory is not on this one, and the
    backend knows only the run's last heartbeat (`heartbeat_at`; None: it cannot tell at all)."""

    name = "local"

    def __init__(self, tmp_path: Path, heartbeat_at: str | None) -> None:
        super().__init__()
        self.where, self.heartbeat_at = tmp_path / "laptop/runs/demo/run", heartbeat_at

    def submit(self, req: SubmitRequest) -> BackendRef:
        return BackendRef("local", "Process", req.object_name, uid="u1", run_dir=str(self.where))

    def run_dir(self, ref: BackendRef) -> Path:
        return Path(ref.run_dir)

    def observe(self, ref: BackendRef) -> Observation:
        if self.heartbeat_at is None:  # what the local backend says of a directory it cannot see
            return Observation("Failed", reason="Lost", message="the run directory has no state")
        return Observation("Unknown", reason=NO_HEARTBEAT, heartbeat_at=self.heartbeat_at, message="on laptop-7")


def local_lab(tmp_path: Path) -> Path:
    remote = make_remote(tmp_path)
    seed_lab(remote, tmp_path / "seed", {"demo": "echo hi\n"})
    bot = clone(remote, tmp_path / "bot")
    write_request(bot, request("demo", RUN, "local"))
    git(bot, "add", "-A")
    git(bot, "commit", "-q", "-m", "request a run")
    return bot


def test_a_local_run_of_another_machine_silent_past_lost_after_is_lost(tmp_path: Path) -> None:
    bot = local_lab(tmp_path)
    reconcile(bot, backends=lambda _n: Elsewhere(tmp_path, None), echo=quiet)
    for engine in (Elsewhere(tmp_path, None), Elsewhere(tmp_path, utc_now())):  # cannot tell; alive
        sync(bot, backends=lambda _n, e=engine: e, echo=quiet)  # type: ignore[misc]
        assert read_status(bot, KEY).phase == "Submitted"

    sync(bot, backends=lambda _n: Elsewhere(tmp_path, "2025-01-02T10:00:00Z"), echo=quiet)

    status = read_status(bot, KEY)
    assert (status.phase, status.attempts[-1].reason) == ("Failed", "Lost")
    assert "no heartbeat for more than 900 s (last: 2025-01-02T10:00:00Z)" in status.message


def requeued(*attempts: AttemptReport) -> Observation:
    """What an engine that requeued the job itself says (Slurm's `--requeue`, a Kueue re-admission): the
    object is under way again, its attempts so far ended, the next one not started yet."""
    return Observation("Running", reason="REQUEUED", message="Slurm requeued the job", attempts=attempts, requeued=True)


def test_an_engine_requeue_past_a_budget_of_two_is_stopped_across_a_bot_restart(tmp_path: Path) -> None:
    bot, engine = lab(tmp_path, RetryPolicy(attempts=2, backoff_seconds=0)), Engine()
    reconcile(bot, backends=lambda _n: engine, echo=quiet)
    first = attempt(1, "10:00:00", "10:30:00", "Preempted")
    engine.says[FIRST] = requeued(first)
    passes(bot, engine)
    assert (read_status(bot, KEY).phase, read_status(bot, KEY).reason) == ("Pending", "REQUEUED")
    engine.says[FIRST] = Observation("Running", attempts=(first, attempt(2, "10:31:00")))
    passes(bot, engine)
    assert (read_status(bot, KEY).phase, len(read_status(bot, KEY).attempts), engine.cancelled) == ("Running", 2, [])

    # a new bot (a fresh CI runner: only what was committed and pushed) sees the engine requeue attempt 2
    git(bot, "push", "-q", "origin", "HEAD")
    restarted = clone(Path(git(bot, "remote", "get-url", "origin").strip()), tmp_path / "restarted")
    engine.says[FIRST] = requeued(first, attempt(2, "10:31:00", "11:00:00", "Preempted"))
    looked = observe_run(engine, read_status(restarted, KEY), utc_now())  # `tp job status`: it only looks
    assert (looked.phase, engine.cancelled) == ("Pending", [])
    assert "the retry budget is spent: `tp bot sync` stops the job" in looked.message
    passes(restarted, engine)
    passes(restarted, engine)

    status = read_status(restarted, KEY)
    assert (status.phase, status.reason) == ("Failed", "RetriesExhausted")
    assert [(a.number, a.reason) for a in status.attempts] == [(1, "Preempted"), (2, "Preempted")]
    assert "attempt 2 of 2 ended Preempted; the engine requeued it, but the retry budget is spent" in status.message
    assert "the job was stopped" in status.message
    assert status.finished_at == "2025-01-02T11:00:00Z"
    assert engine.cancelled == [FIRST] and engine.creations == {FIRST: 1}


def test_engine_requeues_within_the_budget_go_on_untouched(tmp_path: Path) -> None:
    bot, engine = lab(tmp_path, RetryPolicy(attempts=3, backoff_seconds=0)), Engine()
    reconcile(bot, backends=lambda _n: engine, echo=quiet)
    ended = (attempt(1, "10:00:00", "10:30:00", "Preempted"), attempt(2, "10:31:00", "11:00:00", "NodeFailure"))
    for says in (
        requeued(ended[0]),
        requeued(*ended),
        Observation("Running", attempts=(*ended, attempt(3, "11:05:00"))),
    ):
        engine.says[FIRST] = says
        passes(bot, engine)
    status = read_status(bot, KEY)
    assert (status.phase, [a.number for a in status.attempts]) == ("Running", [1, 2, 3])
    assert engine.cancelled == [] and engine.creations == {FIRST: 1}


def test_an_engine_that_goes_on_after_an_error_is_stopped_once_the_stop_goes_through(tmp_path: Path) -> None:
    """`Error` is not in the default `retry.on`: an engine that starts another attempt after one (here it
    already runs) is stopped. The first stop fails: the run is not ended before the job is stopped."""
    bot, engine = lab(tmp_path, RetryPolicy(backoff_seconds=0)), Engine()
    reconcile(bot, backends=lambda _n: engine, echo=quiet)
    line = "ValueError: learning_rate must be positive, got -0.1"
    engine.says[FIRST] = Observation(
        "Running", attempts=(attempt(1, "10:00:00", "10:01:00", "Error", line), attempt(2, "10:02:00"))
    )
    engine.refusals = 1
    passes(bot, engine)
    status = read_status(bot, KEY)
    assert status.phase == "Running" and engine.cancelled == []
    assert "stopping it failed (scancel 7 failed (1): Unable to contact slurm controller)" in status.message
    assert "the next sync tries again" in status.message

    passes(bot, engine)
    passes(bot, engine)
    status = read_status(bot, KEY)
    assert (status.phase, status.reason) == ("Failed", "RetriesExhausted")
    assert "attempt 1 ended Error, which the retry policy does not retry" in status.message
    assert "the job was stopped" in status.message and line in status.message
    assert [(a.number, a.reason) for a in status.attempts] == [(1, "Error"), (2, "Cancelled")]
    assert engine.cancelled == [FIRST] and engine.creations == {FIRST: 1}


def test_an_engine_that_restarts_a_run_recorded_ended_past_its_policy_is_stopped_not_reopened(tmp_path: Path) -> None:
    """The bot recorded attempt 1's `Error` as the run's end; the engine (which may requeue after an end)
    then starts attempt 2 by itself. `Error` is not retried: the job is stopped at that sync, and the run
    stays ended, now by the bot's decision."""
    bot, engine = lab(tmp_path, RetryPolicy(backoff_seconds=0)), Engine()
    reconcile(bot, backends=lambda _n: engine, echo=quiet)
    ended = utc_now()  # just now: the bot still watches for the engine's requeue
    first = AttemptReport(
        number=1, started_at="2025-01-02T10:00:00Z", finished_at=ended, reason="Error", message="boom"
    )
    engine.says[FIRST] = Observation("Failed", reason="Error", attempts=(first,))
    sync(bot, backends=lambda _n: engine, echo=quiet)
    assert (read_status(bot, KEY).phase, read_status(bot, KEY).reason) == ("Failed", "Error")

    engine.says[FIRST] = Observation("Running", attempts=(first, attempt(2, "10:25:00")))
    sync(bot, backends=lambda _n: engine, echo=quiet)

    status = read_status(bot, KEY)
    assert (status.phase, status.reason) == ("Failed", "RetriesExhausted")
    assert "attempt 1 ended Error, which the retry policy does not retry" in status.message
    assert "the engine started attempt 2 itself" in status.message and "the job was stopped" in status.message
    assert engine.cancelled == [FIRST]
    sync(bot, backends=lambda _n: engine, echo=quiet)  # the bot's decision: never reopened, stopped once
    assert read_status(bot, KEY).phase == "Failed" and engine.cancelled == [FIRST]


def test_a_requeue_after_the_bot_ended_the_run_at_its_budget_is_stopped(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Slurm requeues a job after a node failure that the bot already recorded as the budget's last
    attempt: the bot keeps looking at such a run for a while, and stops the engine's next attempt."""
    monkeypatch.setattr("tuneplane.bot.sync.REQUEUE_WATCH", 10**9)  # the attempts' clock is in 2025
    bot, engine = lab(tmp_path, RetryPolicy(attempts=2, backoff_seconds=0)), Engine()
    reconcile(bot, backends=lambda _n: engine, echo=quiet)
    second = attempt_name(FIRST, 2)
    engine.says[FIRST] = Observation("Failed", attempts=(attempt(1, "10:00:00", "10:30:00", "Preempted"),))
    passes(bot, engine)
    engine.says[second] = Observation("Failed", attempts=(attempt(2, "10:31:00", "11:01:00", "NodeFailure"),))
    passes(bot, engine)
    assert read_status(bot, KEY).reason == "RetriesExhausted" and engine.cancelled == []

    engine.says[second] = Observation(
        "Running", attempts=(attempt(2, "10:31:00", "11:01:00", "NodeFailure"), attempt(3, "11:05:00"))
    )
    passes(bot, engine)
    status = read_status(bot, KEY)
    assert engine.cancelled == [second]
    assert (status.phase, status.reason) == ("Failed", "RetriesExhausted")
    assert "the job was stopped" in status.message
    assert engine.creations == {FIRST: 1, second: 1}
