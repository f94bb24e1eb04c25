"""One `--set` parser and one request builder: `tp render` and `tp submit` read every flag the same way."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
from ruamel.yaml import YAML

from tuneplane.constants import PREVIEW_RUN_ID
from tuneplane.errors import UsageError
from tuneplane.runs.requests import TypedFlags, new_request, read_request

SETS = [
    "flag=yes",
    "off=OFF",
    "count=3",
    "neg=-2",
    "lr=2e-5",
    "ratio=.5",
    "quoted='3'",
    'dq="on"',
    "word=cosine",
    "notnum=nan",
    "big=inf",
    "dotted.key=1.0",
    "empty=",
]
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
    expected = {
        "flag": True,
        "off": False,
        "count": 3,
        "neg": -2,
        "lr": 2e-5,
        "ratio": 0.5,
        "quoted": "3",
        "dq": "on",
        "word": "cosine",
        "notnum": "nan",
        "big": "inf",
        "dotted.key": 1.0,
        "empty": "",
    }
    assert request["set"] == expected
    assert spec["spec"]["hyperparams"] == expected
    for key in ("count", "neg"):
        assert type(request["set"][key]) is int and type(spec["spec"]["hyperparams"][key]) is int


# Every spelling a person may type, read by CONTRACT §2 the same way by render, submit and rerun.
EVERY = {
    "b1": ("yes", True),
    "b2": ("True", True),
    "b3": ("TRUE", True),
    "b4": ("on", True),
    "b5": ("No", False),
    "q1": ('"yes"', "yes"),
    "q2": ("'1'", "1"),
    "q3": ("''", ""),
    "n1": ("nan", "nan"),
    "n2": ("-inf", "-inf"),
    "n3": (".inf", ".inf"),
    "f1": ("1e3", 1000.0),
    "f2": ("-1.5E-3", -0.0015),
    "t1": ("1_000", "1_000"),
    "t2": ("0x10", "0x10"),
    "i1": ("010", 10),
    "i2": ("+7", 7),
    "e1": ("", ""),
    "e2": ("  ", ""),
    "eq": ("b=c", "b=c"),
    "u1": ("ünï ✓", "ünï ✓"),
    "z1": ("null", "null"),
    "z2": ("~", "~"),
    "y1": ("a: b", "a: b"),
    "y2": ("#x", "#x"),
    "y3": ("- x", "- x"),
    "y4": ("2001-12-14", "2001-12-14"),
    "opt.lr.dotted": ("2e-5", 2e-5),
    "ключ": ("значение", "значение"),
}


def test_every_spelling_lands_alike_in_the_manifest_the_request_and_its_rerun(
    demo_lab: Path, tp: Callable[..., object], git: Callable[..., str]
) -> None:
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
@pytest.mark.parametrize(
    ("item", "says"),
    [
        ("x=[1,2]", "is not a single value"),
        ("x={a: 1}", "is not a single value"),
        ("x=[1", "is not a single value"),
        ("=1", "is not KEY=VALUE"),
        ("novalue", "is not KEY=VALUE"),
    ],
)
def test_what_is_not_one_value_is_refused_by_both(
    demo_lab: Path, tp: Callable[..., object], command: str, item: str, says: str
) -> None:
    result = tp(command, "demo", *FLAGS, "--set", item, *(["--format", "json"] if command == "render" else []))
    assert result.code == 2  # type: ignore[attr-defined]
    assert says in result.output and "Traceback" not in result.output  # type: ignore[attr-defined]
    assert not list((demo_lab / "runs").glob("*/*.yaml"))


def test_a_bad_field_names_the_command_line_and_the_help() -> None:
    with pytest.raises(UsageError) as info:
        new_request(command="render", experiment="demo", run_id=PREVIEW_RUN_ID, profile="local", timeout=-5)
    assert str(info.value).startswith("the command line: timeout")
    assert "tp render --help" in info.value.hint


def test_a_typed_command_line_is_read_and_checked_once(demo_lab: Path) -> None:
    """`read_request` reads `--set` and `--timeout` and checks the whole request, naming the command's --help."""
    typed = TypedFlags("demo", "local", sets=["count=3", "word=cosine"], model="m", timeout="90m", message="why")
    request = read_request(typed, run_id=PREVIEW_RUN_ID, command="submit", requested_by="Ada")
    assert (request.set, request.inputs.model, request.timeout) == ({"count": 3, "word": "cosine"}, "m", 5400)
    assert (request.message, request.requested_by, request.run_id) == ("why", "Ada", PREVIEW_RUN_ID)
    with pytest.raises(UsageError) as info:
        read_request(TypedFlags("demo", "h200:x"), run_id=PREVIEW_RUN_ID, command="sweep")
    assert str(info.value).startswith("the command line: profile") and "tp sweep --help" in info.value.hint


# ── every flag render, submit and rerun share, on a cluster lab ─────────────────────────────────────
# `tp render EXP FLAGS --run-id R` must show exactly the manifests of the request `tp submit EXP FLAGS`
# wrote as R (rendered from its file), and `tp rerun R` must copy every one of those flags.

CLUSTER_BASE = ["--profile", "h200:8", "--image", "python:3.12", "--observability-url", "https://track.example.org/p"]
SHARED_FLAGS = {
    "default shape": ["--profile", "h200"],
    "one node, fewer GPUs": ["--profile", "h200:4"],
    "two nodes": ["--profile", "h200:16"],
    "image": ["--image", "registry.example.com/team/trainer:1.0"],
    "observability url": ["--observability-url", "https://other.example.org/q"],
    "timeout": ["--timeout", "90m"],
    "timeout in seconds": ["--timeout", "5400"],
    "set repeated for one key": ["--set", "lr=1e-3", "--set", "lr=2e-3"],
    "nested set key": ["--set", "optim.schedule.warmup=0.1", "--set", "optim.name=adamw"],
    "set key no recipe declares": ["--set", "anything=yes", "--set", "n=010"],
    "inputs": ["--model", "Qwen/Qwen3-0.6B", "--train-data", "data/t.jsonl", "--validation-data", "data/v.jsonl"],
}
COPIED = ("operation", "profile", "image", "observability_url", "set", "inputs", "timeout")


@pytest.fixture()
def cluster_lab(demo_lab: Path, git: Callable[..., str]) -> Path:
    """`demo_lab` whose jobs go to a Kubernetes cluster (so render shows the manifests a submit becomes)."""
    settings = demo_lab / "tuneplane.yaml"
    text = settings.read_text(encoding="utf-8")
    text = text.replace("  backend: local ", "  backend: kubernetes ", 1)
    text = text.replace('    url: ""  ', '    url: "https://git.example.com/ml/lab.git"  ', 1)
    settings.write_text(text, encoding="utf-8")
    git(demo_lab, "commit", "-q", "-am", "cluster")
    return demo_lab


def _requests(lab: Path) -> set[Path]:
    return set((lab / "runs" / "demo").glob("*.yaml"))


@pytest.mark.parametrize("case", list(SHARED_FLAGS))
def test_render_shows_what_submit_requests_and_rerun_copies_it(
    cluster_lab: Path, tp: Callable[..., object], case: str
) -> None:
    flags = [*CLUSTER_BASE, *SHARED_FLAGS[case]]
    submitted = tp("submit", "demo", *flags, "--message", "why")
    assert submitted.code == 0, submitted.output  # type: ignore[attr-defined]
    (request_file,) = _requests(cluster_lab)
    run_id = request_file.stem
    from_file = tp("render", f"runs/demo/{request_file.name}")
    assert from_file.code == 0, from_file.output  # type: ignore[attr-defined]
    from_flags = tp("render", "demo", *flags, "--run-id", run_id)
    assert from_flags.code == 0, from_flags.output  # type: ignore[attr-defined]
    assert from_flags.out == from_file.out  # type: ignore[attr-defined]

    again = tp("rerun", run_id)
    assert again.code == 0, again.output  # type: ignore[attr-defined]
    assert "same job as the original" in again.output  # type: ignore[attr-defined]
    (rerun_file,) = _requests(cluster_lab) - {request_file}
    original, copy = (YAML(typ="safe").load(f.read_text(encoding="utf-8")) for f in (request_file, rerun_file))
    assert {k: copy.get(k) for k in COPIED} == {k: original.get(k) for k in COPIED}
    assert original["message"] == "why" and copy["rerun_of"] == run_id


REFUSED_FLAGS = {
    "unknown profile": ["--profile", "nosuch"],
    "GPUs not a multiple of a node": ["--profile", "h200:12"],
    "too many nodes": ["--profile", "h200:800"],
    "bad GPU count": ["--profile", "h200:x"],
    "bad timeout": ["--timeout", "soon"],
    "negative timeout": ["--timeout", "-5"],
    "observability url not http": ["--observability-url", "ftp://x"],
    "set without value": ["--set", "novalue"],
}


@pytest.mark.parametrize("case", list(REFUSED_FLAGS))
def test_render_and_submit_refuse_a_bad_flag_with_the_same_message(
    cluster_lab: Path, tp: Callable[..., object], case: str
) -> None:
    flags = [*CLUSTER_BASE, *REFUSED_FLAGS[case]]
    said = []
    for command in ("render", "submit"):
        result = tp(command, "demo", *flags)
        assert result.code == 2 and "Traceback" not in result.output, (command, result.output)  # type: ignore[attr-defined]
        lines = [line for line in result.err.splitlines() if not line.startswith("note:")]  # type: ignore[attr-defined]
        said.append([line.replace(f"tp {command} --help", "tp COMMAND --help") for line in lines])
    assert said[0] == said[1] and said[0], said  # the same words, the command's own --help named
    assert not _requests(cluster_lab)


def test_a_catalog_recipe_reads_each_set_by_its_type_alike_in_render_submit_and_rerun(
    cluster_lab: Path, tp: Callable[..., object], git: Callable[..., str]
) -> None:
    assert tp("new", "sft", "--method", "trl/sft").code == 0  # type: ignore[attr-defined]
    git(cluster_lab, "add", "-A")
    git(cluster_lab, "commit", "-q", "-m", "sft")
    flags = [
        "--profile",
        "h200:8",
        "--model",
        "Qwen/Qwen3-0.6B",
        "--train-data",
        "data/t.jsonl",
        "--validation-data",
        "data/v.jsonl",
        "--set",
        "eval_strategy=no",
        "--set",
        "learning_rate=1",
        "--set",
        "use_peft=YES",
        "--set",
        "save_total_limit=007",
        "--set",
        "learning_rate=3e-4",
    ]
    submitted = tp("submit", "sft", *flags)
    assert submitted.code == 0, submitted.output  # type: ignore[attr-defined]
    (request_file,) = (cluster_lab / "runs" / "sft").glob("*.yaml")
    request = YAML(typ="safe").load(request_file.read_text(encoding="utf-8"))
    assert request["set"] == {"eval_strategy": "no", "learning_rate": 3e-4, "use_peft": True, "save_total_limit": 7}
    from_file = tp("render", f"runs/sft/{request_file.name}")
    from_flags = tp("render", "sft", *flags, "--run-id", request_file.stem)
    assert from_file.code == from_flags.code == 0, from_file.output + from_flags.output  # type: ignore[attr-defined]
    assert from_flags.out == from_file.out  # type: ignore[attr-defined]
    again = tp("rerun", request_file.stem)
    assert again.code == 0 and "same job as the original" in again.output, again.output  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("config", "env", "expected"),
    [
        ({"user.name": "Ada", "user.email": "ada@lab.org"}, {"USER": "alice"}, "Ada <ada@lab.org>"),
        ({"user.name": "Ada"}, {"USER": "alice"}, "Ada"),  # never an address git was not given
        ({}, {"TUNEPLANE_USER": "bob", "USER": "alice"}, "bob"),
        ({}, {"USER": "alice"}, "alice"),  # a container or login node with no git identity still names its user
        # what `tp init` / `tp submit` write into the repository when git has no identity: tp's, not a person's
        ({"user.name": "TunePlane", "user.email": "tuneplane@localhost"}, {"USER": "alice"}, "alice"),
        ({"user.name": "Ada", "user.email": "tuneplane@localhost"}, {"USER": "alice"}, "Ada"),
    ],
)
def test_the_requester_is_who_asked_not_tps_own_identity(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    git: Callable[..., str],
    config: dict[str, str],
    env: dict[str, str],
    expected: str,
) -> None:
    from tuneplane.lab.gitrepo import GitRepo
    from tuneplane.runs.requests import requester

    monkeypatch.setenv("HOME", str(tmp_path))  # no global git identity
    monkeypatch.setenv("GIT_CONFIG_NOSYSTEM", "1")
    for name in (
        "TUNEPLANE_USER",
        "USER",
        "GIT_AUTHOR_NAME",
        "GIT_AUTHOR_EMAIL",
        "GIT_COMMITTER_NAME",
        "GIT_COMMITTER_EMAIL",
        "EMAIL",
    ):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    git(tmp_path, "init", "-q", "lab")
    for key, value in config.items():
        git(tmp_path / "lab", "config", key, value)
    assert requester(GitRepo(tmp_path / "lab")) == expected
