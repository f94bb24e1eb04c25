"""`tp job` finds a run by its id, EXP/RUN, or the unique start or end of its id (the end is what
`tp job compare` heads its columns with); an ambiguous reference lists the runs it matches."""

from __future__ import annotations

from pathlib import Path

from support.repos import request

from tuneplane.lab.runs import write_request

RUNS = (
    ("demo", "20250101-000000-aaaaaa1234"),
    ("demo", "20250101-000000-bbbbbb1234"),
    ("demo", "20250102-000000-cccccc5678"),
)


def _requests(lab: Path) -> None:
    for exp, run_id in RUNS:
        write_request(lab, request(exp, run_id))


def test_the_end_of_a_run_id_finds_the_run(demo_lab: Path, tp) -> None:
    _requests(demo_lab)
    result = tp("job", "status", "cccccc5678")
    assert result.code == 0, result.output
    assert result.out.startswith("run 20250102-000000-cccccc5678 of demo: requested, not submitted yet"), result.out


def test_an_ambiguous_reference_lists_its_runs(demo_lab: Path, tp) -> None:
    _requests(demo_lab)
    result = tp("job", "status", "1234")
    assert result.code == 2, result.output
    assert result.err.startswith(
        "error: '1234' matches 2 runs:\n  demo/20250101-000000-aaaaaa1234\n  demo/20250101-000000-bbbbbb1234\n  hint: "
    ), result.err


def test_metrics_of_an_ambiguous_reference_is_said_not_guessed(demo_lab: Path, tp) -> None:
    _requests(demo_lab)
    result = tp("job", "metrics", "1234")
    assert result.code == 2 and "matches 2 runs" in result.err, result.output


def test_an_unknown_run_is_said_as_such(demo_lab: Path, tp) -> None:
    _requests(demo_lab)
    result = tp("job", "status", "zzz")
    assert result.code == 2 and result.err.startswith("error: no run 'zzz' in this lab"), result.output
