"""`runs.lookup`: the runs `tp job ls` and `tp job status` show, read without writing anything."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tuneplane.runs.lookup import LS_COLUMNS, located, run_rows

FLAGS = ("--profile", "local", "--image", "python:3.12", "--observability-url", "https://track.example.org/p")


def _submit(tp: Any, times: int) -> list[str]:
    for _ in range(times):
        assert tp("submit", "demo", *FLAGS).code == 0
    return sorted(p.stem for p in Path("runs/demo").glob("*.yaml"))


def test_rows_newest_first_with_the_count_left_out(demo_lab: Path, tp: Any) -> None:
    runs = _submit(tp, 3)
    rows, older = run_rows(None, 2)
    assert [r[0] for r in rows] == runs[::-1][:2] and older == 1
    assert all(len(r) == len(LS_COLUMNS) and r[2] == "(not submitted)" for r in rows)
    assert run_rows("other", None) == ([], 0)


def test_a_broken_status_file_is_one_row_not_a_failure(demo_lab: Path, tp: Any) -> None:
    (run,) = _submit(tp, 1)
    status = demo_lab / "status" / "demo" / f"{run}.json"
    status.parent.mkdir(parents=True)
    status.write_text("{not json", encoding="utf-8")
    rows, _ = run_rows(None, None)
    assert rows == [[run, "demo", "(unreadable)", "", "", "", ""]]
    listed = tp("job", "ls")
    assert listed.code == 0 and "(unreadable)" in listed.out


def test_located_names_the_run_of_a_prefix(demo_lab: Path, tp: Any) -> None:
    (run,) = _submit(tp, 1)
    root, key, status = located(run[:15])
    assert root == demo_lab.resolve() and key.run_id == run and status is None


@pytest.mark.parametrize("field", ["run_dir", "namespace"])  # namespace: a status of an older tp
def test_a_status_naming_a_folder_the_local_backend_did_not_make_is_not_read(
    demo_lab: Path, tp: Any, tmp_path: Path, field: str
) -> None:
    """A merged status whose backend names any folder (one with a state file saying Succeeded): the
    listing keeps what the status records, and nothing is written into that folder."""
    import json

    (run,) = _submit(tp, 1)
    elsewhere = tmp_path / "someone-else"
    elsewhere.mkdir()
    (elsewhere / "state.json").write_text(json.dumps({"phase": "Succeeded", "uid": "u1"}), encoding="utf-8")
    status = demo_lab / "status" / "demo" / f"{run}.json"
    status.parent.mkdir(parents=True)
    backend = {"backend": "local", "kind": "Process", "name": run, field: str(elsewhere), "uid": "u1"}
    status.write_text(json.dumps({"phase": "Running", "backend": backend}), encoding="utf-8")

    rows, _ = run_rows(None, None)

    assert rows[0][2].startswith("Running"), rows
    assert sorted(p.name for p in elsewhere.iterdir()) == ["state.json"]


def test_a_status_too_deeply_nested_to_read_is_one_unreadable_row(demo_lab: Path, tp: Any) -> None:
    (run,) = _submit(tp, 1)
    status = demo_lab / "status" / "demo" / f"{run}.json"
    status.parent.mkdir(parents=True)
    status.write_text("[" * 100_000, encoding="utf-8")

    rows, _ = run_rows(None, None)

    assert rows == [[run, "demo", "(unreadable)", "", "", "", ""]]


def test_a_status_with_forged_fields_lists_what_it_says_in_the_shape_it_should(demo_lab: Path, tp: Any) -> None:
    """A status a pull request wrote: each field of the right type is listed, every other one is empty,
    and a backend in no shape the bot writes is not asked anything."""
    import json

    first, second = _submit(tp, 2)
    folder = demo_lab / "status" / "demo"
    folder.mkdir(parents=True)
    valid = {
        "phase": "Failed",
        "reason": "Error",
        "profile": "local",
        "started_at": "2025-01-02T00:00:00Z",
        "finished_at": "2025-01-02T00:01:05Z",
        "metrics": {"loss": 0.25},
    }
    forged = {"phase": "Running", "reason": ["x"], "profile": {"p": 1}, "backend": "local", "metrics": {"loss": "low"}}
    (folder / f"{first}.json").write_text(json.dumps(valid), encoding="utf-8")
    (folder / f"{second}.json").write_text(json.dumps(forged), encoding="utf-8")

    rows, _ = run_rows(None, None)

    assert rows == [
        [second, "demo", "Running", "", "", "", ""],
        [first, "demo", "Failed (Error)", "local", "2025-01-02 00:00", "1m 05s", "loss 0.25"],
    ]
