"""The job side's attempt records: written whole, read back typed, bounded, and hostile ones ignored."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tuneplane.runtime import attempts


def test_a_record_round_trips_and_attempts_are_grouped_by_number(tmp_path: Path) -> None:
    attempts.write(tmp_path, {"attempt": 1, "node_rank": 1, "exit_code": 3, "node": "n2"})
    attempts.write(tmp_path, {"attempt": 1, "node_rank": 0, "exit_code": 143, "signal": 15})
    attempts.write(tmp_path, {"attempt": 2, "node_rank": 0, "started_at": "2026-01-02T03:04:05Z"})

    found = attempts.read_all(tmp_path)

    assert sorted(found) == [1, 2]
    assert [r["node_rank"] for r in found[1]] == [0, 1]
    assert found[1][1] == {"attempt": 1, "node_rank": 1, "exit_code": 3, "node": "n2"}
    assert "exit_code" not in found[2][0]


def test_a_run_directory_out_of_sight_is_not_made_again_beneath(tmp_path: Path) -> None:
    """The run's storage gone (a mount missing): the launcher's record fails, it does not lay a new
    tree on the disk beneath, which the mount would hide again, or which would block its return."""
    storage = tmp_path / "storage"
    run_dir = storage / "user" / "demo" / "20260101-000000-000000"
    run_dir.mkdir(parents=True)
    storage.rename(tmp_path / "hidden")

    with pytest.raises(FileNotFoundError):
        attempts.write(run_dir, {"attempt": 1, "node_rank": 0, "started_at": "2026-01-02T03:04:05Z"})

    assert not storage.exists()


def test_a_termination_message_fits_the_kubelets_limit_dropping_the_oldest_lines() -> None:
    record = {
        "attempt": 1,
        "exit_code": 1,
        "error": "ValueError: x",
        "log_tail": [f"line {i} " + "x" * 400 for i in range(20)],
    }
    text = attempts.encode(record, limit=attempts.TERMINATION_LIMIT)

    assert len(text.encode()) <= attempts.TERMINATION_LIMIT
    decoded = attempts.decode(text)
    assert decoded is not None and decoded["error"] == "ValueError: x"
    assert decoded["log_tail"][-1].startswith("line 19 ")


def test_what_is_not_a_record_is_ignored(tmp_path: Path) -> None:
    folder = tmp_path / attempts.ATTEMPTS_DIR
    folder.mkdir()
    (folder / "1-0.json").write_text("not json")
    (folder / "2-0.json").write_text(json.dumps({"attempt": True, "exit_code": 0}))
    (folder / "3-0.json").write_text(json.dumps({"attempt": 3, "exit_code": "0", "log_tail": [1, "ok"]}))
    (folder / "4-0.json").symlink_to(folder / "3-0.json")

    found = attempts.read_all(tmp_path)

    assert list(found) == [3]
    assert found[3] == [{"attempt": 3, "log_tail": ["ok"]}]
    assert attempts.decode("exited with code 3") is None


def test_the_attempt_number_comes_from_the_environment() -> None:
    assert attempts.attempt_number({"TUNEPLANE_ATTEMPT": "3"}) == 3
    assert attempts.attempt_number({"TUNEPLANE_ATTEMPT": "0"}) == 1
    assert attempts.attempt_number({"TUNEPLANE_ATTEMPT": "x"}) == 1
    assert attempts.attempt_number({}) == 1
