"""The one ValidationError converter: positioned problems, and a real "did you mean" for unknown keys."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from tuneplane.lab.modelparse import known_keys, parse_model, unknown_key_hint
from tuneplane.lab.yamlio import parse_yaml
from tuneplane.models.lab import LabFile
from tuneplane.models.run import RunRequest


@pytest.mark.parametrize("typo,expected", [
    ("profles:\n  x: {}\n", "did you mean 'profiles'?"),
    ("clusterr:\n  backend: local\n", "did you mean 'cluster'?"),
])
def test_a_typo_in_tuneplane_yaml_gets_the_closest_key(lab: Path, tp: Callable[..., object], typo: str,
                                                       expected: str) -> None:
    path = lab / "tuneplane.yaml"
    path.write_text(path.read_text() + typo)
    result = tp("validate")
    assert result.code == 1  # type: ignore[attr-defined]
    assert expected in result.output  # type: ignore[attr-defined]
    line = len(path.read_text().splitlines()) - len(typo.splitlines()) + 1
    assert f"tuneplane.yaml:{line}:1" in result.output  # type: ignore[attr-defined]


def test_nested_unknown_keys_are_matched_against_their_own_model() -> None:
    doc = parse_yaml("experiment: demo\nrun_id: 20250101-000000-000001\nprofile: local\n"
                     "inputs:\n  modle: m\n", "runs/demo/r.yaml")
    request, problems = parse_model(RunRequest, doc, "run-schema")
    assert request is None and len(problems) == 1
    assert problems[0].line == 5 and "did you mean 'model'?" in problems[0].hint
    assert "model" in known_keys(RunRequest, ["inputs"])
    assert "profiles" in known_keys(LabFile, [])


def test_no_close_key_lists_the_known_ones() -> None:
    hint = unknown_key_hint("zzzzzz", ["alpha", "beta"])
    assert hint == "known keys here: alpha, beta"
