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


def test_render_and_submit_parse_every_set_value_alike(demo_lab: Path, tp: Callable[..., object]) -> None:
    sets = [arg for item in SETS for arg in ("--set", item)]
    rendered = tp("render", "demo", *FLAGS, *sets, "--format", "json")
    assert rendered.code == 0, rendered.output  # type: ignore[attr-defined]
    spec = json.loads(rendered.out)[0]  # type: ignore[attr-defined]
    submitted = tp("submit", "demo", *FLAGS, *sets)
    assert submitted.code == 0, submitted.output  # type: ignore[attr-defined]
    request_file = next((demo_lab / "runs" / "demo").glob("*.yaml"))
    request = YAML(typ="safe").load(request_file.read_text())
    expected = {"flag": True, "off": False, "count": 3, "neg": -2, "lr": 2e-5, "ratio": 0.5, "quoted": "3",
                "dq": "on", "word": "cosine", "notnum": "nan", "big": "inf", "dotted.key": 1.0, "empty": ""}
    assert request["set"] == expected
    assert spec["spec"]["hyperparams"] == expected
    for key in ("count", "neg"):
        assert type(request["set"][key]) is int and type(spec["spec"]["hyperparams"][key]) is int


# Every spelling a person may type, read by CONTRACT §2 the same way by render, submit and rerun.
EVERY = {"b1": ("yes", True), "b2": ("True", True), "b3": ("TRUE", True), "b4": ("on", True), "b5": ("No", False),
         "q1": ('"yes"', "yes"), "q2": ("'1'", "1"), "q3": ("''", ""), "n1": ("nan", "nan"), "n2": ("-inf", "-inf"),
         "n3": (".inf", ".inf"), "f1": ("1e3", 1000.0), "f2": ("-1.5E-3", -0.0015), "t1": ("1_000", "1_000"),
         "t2": ("0x10", "0x10"), "i1": ("010", 10), "i2": ("+7", 7), "e1": ("", ""), "e2": ("  ", ""),
         "eq": ("b=c", "b=c"), "u1": ("ünï ✓", "ünï ✓"), "z1": ("null", "null"), "z2": ("~", "~"),
         "y1": ("a: b", "a: b"), "y2": ("#x", "#x"), "y3": ("- x", "- x"), "y4": ("2001-12-14", "2001-12-14"),
         "opt.lr.dotted": ("2e-5", 2e-5), "ключ": ("значение", "значение")}


def test_every_spelling_lands_alike_in_the_manifest_the_request_and_its_rerun(
        demo_lab: Path, tp: Callable[..., object], git: Callable[..., str]) -> None:
    sets = [arg for key, (text, _) in EVERY.items() for arg in ("--set", f"{key}={text}")]
    expected = {key: value for key, (_, value) in EVERY.items()}
    rendered = tp("render", "demo", *FLAGS, *sets, "--format", "json")
    assert rendered.code == 0, rendered.output  # type: ignore[attr-defined]
    hyperparams = json.loads(rendered.out)[0]["spec"]["hyperparams"]  # type: ignore[attr-defined]
    submitted = tp("submit", "demo", *FLAGS, *sets)
    assert submitted.code == 0, submitted.output  # type: ignore[attr-defined]
    (first,) = (demo_lab / "runs" / "demo").glob("*.yaml")
    again = tp("rerun", first.stem)
    assert again.code == 0, again.output  # type: ignore[attr-defined]
    (second,) = set((demo_lab / "runs" / "demo").glob("*.yaml")) - {first}
    for landed in (hyperparams, *(YAML(typ="safe").load(f.read_text())["set"] for f in (first, second))):
        assert landed == expected
        assert {k: type(v) for k, v in landed.items()} == {k: type(v) for k, v in expected.items()}


@pytest.mark.parametrize("command", ["render", "submit"])
@pytest.mark.parametrize(("item", "says"), [
    ("x=[1,2]", "is not a single value"), ("x={a: 1}", "is not a single value"), ("x=[1", "is not a single value"),
    ("=1", "is not KEY=VALUE"), ("novalue", "is not KEY=VALUE"),
])
def test_what_is_not_one_value_is_refused_by_both(demo_lab: Path, tp: Callable[..., object], command: str,
                                                   item: str, says: str) -> None:
    result = tp(command, "demo", *FLAGS, "--set", item, *(["--format", "json"] if command == "render" else []))
    assert result.code == 2  # type: ignore[attr-defined]
    assert says in result.output and "Traceback" not in result.output  # type: ignore[attr-defined]
    assert not list((demo_lab / "runs").glob("*/*.yaml"))


def test_a_bad_field_names_the_command_line_and_the_help() -> None:
    with pytest.raises(UsageError) as info:
        request_from_flags(RunFlags("demo", "local", timeout=-5), run_id=PREVIEW_RUN_ID, command="render")
    assert str(info.value).startswith("the command line: timeout")
    assert "tp render --help" in info.value.hint
