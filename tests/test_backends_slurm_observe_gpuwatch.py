"""A Slurm run the launcher's GPU watchdog stopped ends with reason `GpuOveruse` and the watchdog's words,
whatever the other node ranks did as srun ended them; one it only warned succeeds with the warning in
the attempt's message. Read from the node ranks' attempt records, as the job leaves them."""

from __future__ import annotations

from typing import Any

from tuneplane.backends.slurm.observe import Evidence, concluded, ended_reason, report

OVERUSE = "the run's processes occupy 8 GPUs on this node (0, 1, 2, 3, 4, 5, 6, 7; 8 processes) but it was granted 4"


def _record(rank: int, code: int, signal: int | None = None, **more: Any) -> dict[str, Any]:
    record = {"attempt": 1, "node_rank": rank, "node": f"n{rank + 1}", "started_at": "2026-01-01T00:00:00Z"}
    record |= {"finished_at": f"2026-01-01T01:00:0{rank}Z", "exit_code": code, **more}
    return record | ({"signal": signal} if signal else {})


def _seen(nodes: list[dict[str, Any]], code: int) -> Any:
    evidence = Evidence(
        started={1: {"started_at": "2026-01-01T00:00:00Z", "nodes": "n1,n2"}},
        ended={1: {"finished_at": "2026-01-01T01:00:05Z", "exit_code": code}},
        nodes={1: nodes},
    )
    return concluded((report(evidence, 1, ended_reason(evidence, 1)),))


def test_a_node_the_watchdog_stopped_ends_the_run_gpu_overuse() -> None:
    stopped = _record(1, 143, 15, error=f"GPU watchdog: {OVERUSE}; stopped", warning=f"{OVERUSE}; stopped")
    # rank 0 was ended by srun first, once rank 1's launcher gave up: the watchdog's stop is still the cause
    seen = _seen([_record(0, 143, 15), {**stopped, "reason": "GpuOveruse"}], 143)

    (attempt,) = seen.attempts
    assert (seen.phase, seen.reason, attempt.reason) == ("Failed", "GpuOveruse", "GpuOveruse")
    assert (attempt.failed_rank, attempt.message) == (1, f"GPU watchdog: {OVERUSE}; stopped")
    assert seen.message.startswith("the GPU watchdog stopped the job (cluster.gpu_watchdog: stop): rank 1 on n2")


def test_a_warned_run_succeeds_with_the_warning_in_its_attempt() -> None:
    seen = _seen([_record(0, 0), _record(1, 0, warning=OVERUSE)], 0)

    (attempt,) = seen.attempts
    assert (seen.phase, attempt.reason, attempt.message) == ("Succeeded", "Completed", f"GPU watchdog: {OVERUSE}")
