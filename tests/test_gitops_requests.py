"""One `--set` parser and one request builder: `tp render` and `tp submit` read every flag the same way."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
from ruamel.yaml import YAML

from tuneplane.constants import PREVIEW_RUN_ID
from tuneplane.errors import UsageError
from tuneplane.gitops.requests import RunFlags, request_from_flags

SETS = ["flag=yes", "off=OFF", "count=3", "neg=-2", "lr=2e-5", "ratio=.5", "quoted='3'", "dq=\"on\"",
        "word=cosine", "notnum=nan", "big=inf", "dotted.key=1.0", "empty="]
FLAGS = ["--profile", "local", "--image", "python:3.12", "--observability-url", "https://track.example.org/p"]


@pytest.fixture
def custom_lab(lab: Path, tp: Callable[..., object], git: Callable[..., str]) -> Path:
    assert tp("new", "demo", "--method", "custom/custom").code == 0  # type: ignore[attr-defined]
    git(lab, "add", "-A")
    git(lab, "commit", "-q", "-m", "demo")
    return lab


def test_render_and_submit_parse_every_set_value_alike(custom_lab: Path, tp: Callable[..., object]) -> None:
    sets = [arg for item in SETS for arg in ("--set", item)]
    rendered = tp("render", "demo", *FLAGS, *sets, "--format", "json")
    assert rendered.code == 0, rendered.output  # type: ignore[attr-defined]
    spec = json.loads(rendered.out)[0]  # type: ignore[attr-defined]
    submitted = tp("submit", "demo", *FLAGS, *sets)
    assert submitted.code == 0, submitted.output  # type: ignore[attr-defined]
    request_file = next((custom_lab / "runs" / "demo").glob("*.yaml"))
    request = YAML(typ="safe").load(request_file.read_text())
    expected = {"flag": True, "off": False, "count": 3, "neg": -2, "lr": 2e-5, "ratio": 0.5, "quoted": "3",
                "dq": "on", "word": "cosine", "notnum": "nan", "big": "inf", "dotted.key": 1.0, "empty": ""}
    assert request["set"] == expected
    assert spec["spec"]["hyperparams"] == expected
    for key in ("count", "neg"):
        assert type(request["set"][key]) is int and type(spec["spec"]["hyperparams"][key]) is int


@pytest.mark.parametrize("command", ["render", "submit"])
def test_a_list_value_is_refused_by_both(custom_lab: Path, tp: Callable[..., object], command: str) -> None:
    result = tp(command, "demo", *FLAGS, "--set", "x=[1,2]", *(["--format", "json"] if command == "render" else []))
    assert result.code == 2  # type: ignore[attr-defined]
    assert "is not a single value" in result.output  # type: ignore[attr-defined]


def test_a_bad_field_names_the_command_line_and_the_help() -> None:
    with pytest.raises(UsageError) as info:
        request_from_flags(RunFlags("demo", "local", timeout=-5), run_id=PREVIEW_RUN_ID, command="render")
    assert str(info.value).startswith("the command line: timeout")
    assert "tp render --help" in info.value.hint
