"""`--json` on every listing and report: one shape per output (docs/reference/json.md), an empty
listing is `[]`; the tables fit the terminal's width (`COLUMNS`)."""

from __future__ import annotations

import json
from pathlib import Path

from support.repos import request

from tuneplane.lab.runs import write_request


def test_empty_listings_are_empty_lists(lab: Path, tp) -> None:
    for args in (("ls",), ("job", "ls"), ("job", "ls", "--all")):
        result = tp(*args, "--json")
        assert result.code == 0, result.output
        assert json.loads(result.out) == [], result.out


def test_job_ls_json_has_the_table_s_columns(demo_lab: Path, tp) -> None:
    write_request(demo_lab, request("demo", "20250101-000000-aaaaaa1234"))
    result = tp("job", "ls", "--json")
    assert result.code == 0, result.output
    [row] = json.loads(result.out)
    assert set(row) == {"run", "experiment", "phase", "profile", "started", "duration", "metric"}
    assert (row["run"], row["experiment"]) == ("20250101-000000-aaaaaa1234", "demo")


def test_job_status_json_of_a_run_not_submitted_says_so(demo_lab: Path, tp) -> None:
    write_request(demo_lab, request("demo", "20250101-000000-aaaaaa1234"))
    data = json.loads(tp("job", "status", "aaaaaa1234", "--json").out)
    assert data["submitted"] is False and data["run_id"] == "20250101-000000-aaaaaa1234"
    assert data["request"]["profile"] == "local"


def test_methods_json_lists_every_method_and_shows_one(tp) -> None:
    listed = json.loads(tp("methods", "--json").out)
    assert {"method": "custom/custom"}.items() <= next(m for m in listed if m["method"] == "custom/custom").items()
    assert all(set(m) == {"method", "category", "default_version", "title"} for m in listed)
    one = json.loads(tp("methods", "trl/sft", "--json").out)
    assert one["method"] == "trl/sft" and one["params"], one
    assert set(one["params"][0]) == {"name", "type", "allowed", "default", "config_path", "doc"}


def test_compare_json_has_each_metric_s_last_value_per_run(tp, tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    from tuneplane.ingest.store import MetricStore

    db = tmp_path / "ingest.sqlite"
    store = MetricStore(db)
    store.add_points("run-a", [("loss", s, 1.0 + s, "") for s in range(3)], None)
    store.add_points("run-b", [("loss", s, 2.0 + s, "") for s in range(3)], None)
    store.close()
    monkeypatch.chdir(tmp_path)
    data = json.loads(tp("job", "compare", "run-a", "run-b", "--db", db, "--json").out)
    assert [r["run_id"] for r in data["runs"]] == ["run-a", "run-b"]
    assert data["metrics"] == [{"key": "train/loss", "last": {"run-a": 3.0, "run-b": 4.0}}]


def _longest_line(text: str) -> int:
    """The widest line of the parameter table (the summary above it is prose, never cut)."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("param "))
    return max(len(line) for line in lines[start:])


def test_a_table_uses_the_terminal_s_width(tp, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setenv("COLUMNS", "300")
    wide = tp("methods", "trl/sft").out
    assert "…" not in wide.split("\nparam ")[1] and _longest_line(wide) > 120, wide  # descriptions whole
    monkeypatch.setenv("COLUMNS", "100")
    narrow = tp("methods", "trl/sft").out
    assert _longest_line(narrow) <= 100 and "…" in narrow, narrow
