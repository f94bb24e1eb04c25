"""The dashboard pages as a person reads them on the git host: every row one table row whatever a
message holds, a failed run's reason on the index too, durations people read at a glance."""

from __future__ import annotations

import json
from pathlib import Path

from tuneplane.views.dashboard import duration_text, experiment_page, index_page, phase_counts


def _write(root: Path, run_id: str, **fields: object) -> None:
    path = root / "status" / "demo" / f"{run_id}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"experiment": "demo", "run_id": run_id, "profile": "local", **fields}))


def _rows(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.startswith("| [`") or line.startswith("| `")]


def test_a_failed_runs_reason_is_on_the_index_and_every_row_stays_one_row(tmp_path: Path) -> None:
    _write(
        tmp_path,
        "20250102-000000-000002",
        phase="Failed",
        reason="Error\rInjected",
        message="\r\nCUDA out of memory\rretry with a smaller batch\u2028| done",
        started_at="2025-01-02T00:00:00Z",
        finished_at="2025-01-02T00:00:07.25Z",
    )
    _write(
        tmp_path,
        "20250101-000000-000001",
        phase="Succeeded",
        started_at="2025-01-01T00:00:00Z",
        finished_at="2025-01-01T00:00:59.97Z",
    )
    counts = {"demo": phase_counts(tmp_path, "demo")}
    for text in (index_page(tmp_path, counts), experiment_page(tmp_path, "demo", counts["demo"])):
        rows = _rows(text)
        assert len(rows) == 2, text
        assert not any(ch in text for ch in "\r\u2028\u2029"), repr(text)
        failed = next(r for r in rows if "000002" in r)
        assert "CUDA out of memory" in failed and ("| 7.2s |" in failed or "| 7.3s |" in failed), failed
        assert "1m 00s" in next(r for r in rows if "000001" in r)


def test_durations_under_a_minute_have_a_decimal_and_round_up_into_minutes() -> None:
    start = "2025-01-01T00:00:00Z"
    assert duration_text(start, "2025-01-01T00:00:12.34Z") == "12.3s"
    assert duration_text(start, "2025-01-01T00:00:59.97Z") == "1m 00s"
    assert duration_text(start, "2025-01-01T00:59:59.7Z") == "1h 00m"
    assert duration_text(start, "2025-01-01T00:00:00.04Z") == "0.04s"


def test_a_status_with_forged_fields_is_one_row_of_what_it_says_in_the_shape_it_should(tmp_path: Path) -> None:
    """A status a pull request wrote beside a valid one: the valid one's row is whole; the forged one's
    fields of another type show empty (a metric that is no number is not shown), and no page fails."""
    _write(
        tmp_path,
        "20250101-000000-000001",
        method="custom/custom",
        phase="Failed",
        reason="Error",
        message="exited with code 1",
        started_at="2025-01-01T00:00:00Z",
        finished_at="2025-01-01T01:00:00Z",
        attempts=[{"number": 1, "gpus": 2, "gpu_seconds": 7200.0, "started_at": "2025-01-01T00:00:00Z"}],
        metrics={"loss": 0.25},
    )
    _write(
        tmp_path,
        "20250102-000000-000002",
        method=["custom"],
        phase="Running",
        reason={"why": "forged"},
        started_at=12,
        attempts="many",
        metrics={"loss": "FORGED-METRIC"},
        metric_history={"loss": "up"},
    )
    counts = {"demo": phase_counts(tmp_path, "demo")}

    pages = (index_page(tmp_path, counts), experiment_page(tmp_path, "demo", counts["demo"]))

    assert counts["demo"] == {"Failed": 1, "Running": 1}
    for text in pages:
        assert "FORGED-METRIC" not in text and "forged" not in text, text
    rows = _rows(pages[1])
    valid = next(r for r in rows if "000001" in r)
    cells = [c.strip() for c in valid.split(" | ")]
    assert cells[1:8] == [
        "custom/custom",
        "local",
        "❌ Failed (Error): exited with code 1",
        "2025-01-01 00:00",
        "1h 00m",
        "2.0",
        "loss 0.25",
    ]
    forged = next(r for r in rows if "000002" in r)
    assert [c.strip() for c in forged.split(" | ")][1:8] == ["", "local", "🏃 Running", "12", "", "", ""], forged
