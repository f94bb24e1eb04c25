"""The fold of observations into a status with attempts: the phase is the newest attempt's truth.

Each case is a sequence of observations, as an engine reports them across syncs, folded one after the
other the way `tp bot sync` folds them.
"""

from __future__ import annotations

from tuneplane.backends.base import NO_HEARTBEAT, AttemptReport, Observation
from tuneplane.models.base import RetryPolicy
from tuneplane.models.run import BackendObject, RunStatus, Transition
from tuneplane.runs.observe import apply_observation, overrun, reopened

T0 = "2025-01-01T00:00:00Z"


def at(minute: int) -> str:
    return f"2025-01-01T{minute // 60:02d}:{minute % 60:02d}:00Z"


def status(**fields: object) -> RunStatus:
    values: dict[str, object] = {
        "experiment": "demo",
        "run_id": "20250101-000000-abcdef",
        "profile": "h200:8",
        "phase": "Submitted",
        "history": [Transition(phase="Submitted", at=T0)],
        "backend": BackendObject(backend="kubernetes", kind="Job", name="demo-0123456789"),
    }
    values.update(fields)
    return RunStatus.model_validate(values)


def ran(
    number: int, start: int, end: int | None = None, reason: str = "", message: str = "", gpus: int = 8
) -> AttemptReport:
    return AttemptReport(
        number=number,
        started_at=at(start),
        finished_at=at(end) if end is not None else None,
        reason=reason or None,
        message=message,
        gpus=gpus,
    )  # type: ignore[arg-type]


def fold(s: RunStatus, *observations: Observation, retry: bool = True) -> RunStatus:
    for i, obs in enumerate(observations):
        s = apply_observation(s, obs, at(500 + i), retry=retry)
    return s


def test_a_run_preempted_twice_has_three_attempts_and_its_gpu_hours_summed() -> None:
    s = fold(status(), Observation("Running", started_at=at(1), attempts=(ran(1, 1),)))
    assert (s.phase, [a.number for a in s.attempts]) == ("Running", [1])

    s = fold(s, Observation("Running", attempts=(ran(1, 1, 31, "Preempted"), ran(2, 35))))
    assert s.phase == "Running" and [(a.number, a.reason) for a in s.attempts] == [(1, "Preempted"), (2, "")]
    assert [t.phase for t in s.history] == ["Submitted", "Running", "Running"]  # attempt 2 is written down
    assert s.history[-1].at == at(35)

    s = fold(s, Observation("Pending", attempts=(ran(1, 1, 31, "Preempted"), ran(2, 35, 65, "Preempted"))))
    assert (s.phase, s.reason) == ("Pending", "Requeued")  # back from Running: the engine requeued it
    assert "attempt 2 ended Preempted" in s.message

    s = fold(
        s,
        Observation(
            "Succeeded",
            finished_at=at(131),
            attempts=(ran(1, 1, 31, "Preempted"), ran(2, 35, 65, "Preempted"), ran(3, 71, 131, "Completed")),
        ),
    )
    assert s.phase == "Succeeded" and s.finished_at == at(131)
    assert [(a.number, a.reason, a.gpus) for a in s.attempts] == [
        (1, "Preempted", 8),
        (2, "Preempted", 8),
        (3, "Completed", 8),
    ]
    assert [a.gpu_seconds for a in s.attempts] == [8 * 1800.0, 8 * 1800.0, 8 * 3600.0]
    assert [t.phase for t in s.history] == ["Submitted", "Running", "Running", "Pending", "Running", "Succeeded"]
    assert all(a.object == "demo-0123456789" for a in s.attempts)


def test_an_evicted_run_goes_back_to_pending_instead_of_staying_running() -> None:
    s = fold(status(), Observation("Running", started_at=at(1), attempts=(ran(1, 1),)))
    s = fold(s, Observation("Pending", attempts=(ran(1, 1, 9, "Evicted", "node drained"), AttemptReport(number=2))))
    assert s.phase == "Pending"
    assert [(a.number, a.reason) for a in s.attempts] == [(1, "Evicted"), (2, "")]


def test_an_attempt_that_completed_under_a_running_object_is_no_requeue_unless_the_engine_says_so() -> None:
    """A pod Succeeded before its Job is Complete, a trainer's end record before its supervisor's: the
    run is neither requeued nor ended yet. An engine that says it requeued (Slurm) is believed."""
    s = fold(status(), Observation("Running", started_at=at(1), attempts=(ran(1, 1),)))
    done = ran(1, 1, 20, "Completed")
    catching_up = fold(s, Observation("Running", attempts=(done,)))
    assert (catching_up.phase, catching_up.finished_at) == ("Running", None)
    assert [t.phase for t in catching_up.history] == ["Submitted", "Running"]
    assert fold(catching_up, Observation("Succeeded", finished_at=at(21), attempts=(done,))).phase == "Succeeded"

    requeued = fold(s, Observation("Running", reason="REQUEUED", attempts=(done,), requeued=True))
    assert (requeued.phase, requeued.reason) == ("Pending", "REQUEUED")
    failed = fold(s, Observation("Running", attempts=(ran(1, 1, 20, "Error"),)), retry=False)
    assert (failed.phase, failed.reason) == ("Pending", "Requeued")  # a Job replaces its failed pod


def test_an_attempt_whose_object_is_ending_is_no_requeue_nor_an_end_nor_an_overrun_until_it_ended() -> None:
    """A Job's `FailureTarget` before its `Failed`: the engine starts nothing again, and the ranks still
    save. The run runs on, with no exit code of its own; no retry (a budget left) or overrun (none left)
    is decided before the object's end."""
    policy = RetryPolicy(attempts=2, on=["Error"], backoff_seconds=0)
    s = fold(status(retry=policy), Observation("Running", started_at=at(1), attempts=(ran(1, 1),)))
    failed = AttemptReport(number=1, started_at=at(1), finished_at=at(20), reason="Error", message="boom", exit_code=1)
    stopping = Observation(
        "Running", reason="BackoffLimitExceeded", message="its pods are stopping", attempts=(failed,), ending=True
    )
    s = fold(s, stopping)
    assert (s.phase, s.reason, s.exit_code, s.finished_at) == ("Running", "BackoffLimitExceeded", None, None)
    assert s.message == "attempt 1 ended Error: boom\nits pods are stopping"
    spent = s.model_copy(update={"retry": RetryPolicy(attempts=1, on=["Error"])})
    assert overrun(spent, stopping, at(30)) is None
    assert overrun(spent, stopping.replace(ending=False), at(30)) is not None  # a requeue past the budget

    s = fold(s, Observation("Failed", reason="BackoffLimitExceeded", attempts=(failed,)))
    assert (s.phase, s.reason, s.exit_code) == ("Pending", "RetryBackoff", None)  # the run has not ended
    assert [(a.number, a.exit_code) for a in s.attempts] == [(1, 1)]


def test_a_requeue_after_an_old_exit_marker_never_ends_the_run() -> None:
    """Slurm: attempt 1 wrote its exit marker, the job was requeued; the controller stops answering in
    between, and a report from an engine that lost sight of attempt 2 still shows only the old marker."""
    s = fold(status(), Observation("Running", started_at=at(1), attempts=(ran(1, 1),)))
    marker = ran(1, 1, 20, "Completed")
    s = fold(s, Observation("Succeeded", attempts=(marker, ran(2, 25))))  # the old marker, the new attempt
    assert s.phase == "Running" and s.finished_at is None
    s = fold(s, Observation("Unknown", message="slurmctld did not answer"))
    assert s.phase == "Running" and s.message == "slurmctld did not answer"
    s = fold(s, Observation("Succeeded", finished_at=at(20), attempts=(marker,)))  # attempt 2 out of sight
    assert s.phase == "Running" and s.finished_at is None
    assert [(a.number, a.reason) for a in s.attempts] == [(1, "Completed"), (2, "")]
    s = fold(s, Observation("Succeeded", attempts=(marker, ran(2, 25, 90, "Completed"))))
    assert s.phase == "Succeeded" and s.finished_at == at(90)


def test_an_error_is_not_retried_by_default_and_says_what_the_trainer_said() -> None:
    line = "RuntimeError: CUDA error: an illegal memory access was encountered"
    s = fold(status(), Observation("Failed", attempts=(ran(1, 1, 5, "Error", line),)))
    assert (s.phase, s.reason, s.message) == ("Failed", "Error", line)
    assert s.attempts[0].message == line


def test_a_retry_budget_of_two_stops_at_two() -> None:
    s = status(retry=RetryPolicy(attempts=2, backoff_seconds=0))
    s = fold(s, Observation("Failed", attempts=(ran(1, 1, 5, "Preempted", "SIGTERM from the scheduler"),)))
    assert (s.phase, s.reason) == ("Pending", "RetryBackoff")
    assert "attempt 2 of 2 is submitted" in s.message
    s = s.model_copy(
        update={
            "backend": BackendObject(backend="kubernetes", kind="Job", name="demo-0123456789-a2"),
            "attempts": [
                *s.attempts,
                s.attempts[0].model_copy(
                    update={
                        "number": 2,
                        "reason": "",
                        "object": "demo-0123456789-a2",
                        "started_at": None,
                        "finished_at": None,
                        "message": "",
                    }
                ),
            ],
        }
    )
    s = fold(s, Observation("Failed", attempts=(ran(1, 10, 15, "Preempted"),)))  # numbered per object
    assert [(a.number, a.reason, a.object) for a in s.attempts] == [
        (1, "Preempted", "demo-0123456789"),
        (2, "Preempted", "demo-0123456789-a2"),
    ]
    assert (s.phase, s.reason) == ("Failed", "RetriesExhausted") and "no retry left" in s.message


def test_without_the_bot_a_retryable_failure_just_fails() -> None:
    s = fold(status(), Observation("Failed", attempts=(ran(1, 1, 5, "Preempted"),)), retry=False)
    assert (s.phase, s.reason) == ("Failed", "Preempted")


def test_a_terminal_run_the_engine_runs_again_is_reopened_unless_the_bot_ended_it() -> None:
    done = fold(status(), Observation("Succeeded", attempts=(ran(1, 1, 20, "Completed"),)))
    again = Observation("Running", attempts=(ran(1, 1, 20, "Completed"), ran(2, 25)))
    back = reopened(done, again, at(600))
    assert back is not None and back.phase == "Running" and back.finished_at is None
    assert [a.number for a in back.attempts] == [1, 2] and back.history[-1].phase == "Running"
    assert reopened(done, Observation("Succeeded", attempts=(ran(1, 1, 20, "Completed"),)), at(600)) is None
    for reason in ("CancelRequested", "RetriesExhausted"):
        assert reopened(done.model_copy(update={"reason": reason}), again, at(600)) is None


def test_a_silent_run_of_another_machine_is_lost_after_the_setting() -> None:
    s = fold(status(), Observation("Running", started_at=at(1), attempts=(ran(1, 1),)))
    quiet = Observation("Unknown", reason=NO_HEARTBEAT, heartbeat_at=at(495), message="on laptop-7")
    assert apply_observation(s, quiet, at(500), retry=True, lost_after=900).phase == "Running"
    lost = apply_observation(s, quiet, at(1400), retry=True, lost_after=900)
    assert (lost.phase, lost.attempts[-1].reason, lost.attempts[-1].number) == ("Failed", "Lost", 1)
    assert "no heartbeat" in lost.message
    retried = apply_observation(
        s.model_copy(update={"retry": RetryPolicy(on=["Lost"])}), quiet, at(1400), retry=True, lost_after=900
    )
    assert (retried.phase, retried.reason) == ("Pending", "RetryBackoff")


def test_gpus_recorded_at_submit_count_when_the_engine_does_not_say() -> None:
    from tuneplane.models.run import Attempt

    s = status(profile="h200", attempts=[Attempt(number=1, object="demo-0123456789", gpus=4)])
    s = fold(s, Observation("Succeeded", started_at=at(0), finished_at=at(30), exit_code=0))
    assert [(a.reason, a.gpus, a.gpu_seconds) for a in s.attempts] == [("Completed", 4, 4 * 1800.0)]


def test_an_attempts_object_name_keeps_the_runs_hash_within_the_name_limit() -> None:
    from tuneplane.plan.names import MAX_NAME, attempt_name, object_name

    first = object_name("a-very-long-experiment-name-that-goes-on-and-on", "20250101-000000-abcdef")
    assert attempt_name(first, 1) == first
    for n in (2, 10, 100):
        name = attempt_name(first, n)
        assert len(name) <= MAX_NAME and name.endswith(f"{first[-10:]}-a{n}") and name[0].isalpha()
    assert len({attempt_name(first, n) for n in range(1, 50)}) == 49
