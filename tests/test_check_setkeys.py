"""`--set` values are read by the type of the parameter their key declares, through the real CLI.

`eval_strategy=no` for TRL's enum (`"no"`, steps, epoch) is the text "no", not false; a str parameter
keeps `007` and `1e3` as typed; a bool one takes the words, a number one parses; a key that a locked
plugin declares is read by the plugin's type; a key nothing declares keeps CONTRACT §2 (checked by
tests/test_runs_requests.py). `tp render`, `tp submit`, the request file and `tp rerun` agree.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from conftest import write_tree
from ruamel.yaml import YAML
from support.repos import git

from tuneplane.check.params import parse_sets, parse_typed_value, set_keys
from tuneplane.models.recipe import Param, Recipe

FLAGS = ("--profile", "local", "--format", "json")
INPUTS = ("--model", "hub/tiny", "--train-data", "data/train.jsonl", "--validation-data", "data/val.jsonl")


def _commit(lab: Path, message: str) -> None:
    git(lab, "add", "-A")
    git(lab, "commit", "-q", "-m", message)


def _hyperparams(tp: Any, exp: str, *sets: str, extra: tuple[str, ...] = ()) -> dict[str, Any]:
    args = [a for item in sets for a in ("--set", item)]
    result = tp("render", exp, *FLAGS, *extra, *args)
    assert result.code == 0, result.output
    return dict(json.loads(result.out)[0]["spec"]["hyperparams"])


@pytest.fixture()
def trl_lab(lab: Path, tp: Any) -> Path:
    assert tp("new", "sft", "--method", "trl/sft").code == 0
    _commit(lab, "sft")
    return lab


def _trl(tp: Any, *sets: str) -> dict[str, Any]:
    return _hyperparams(tp, "sft", *sets, extra=INPUTS)


@pytest.mark.parametrize("text", ["no", "steps", "epoch"])
def test_an_enum_choice_that_looks_like_a_boolean_is_the_choice(trl_lab: Path, tp: Any, text: str) -> None:
    assert _trl(tp, f"eval_strategy={text}")["eval_strategy"] == text


def test_an_enum_value_written_otherwise_is_refused_with_its_choices(  # not silently false either
    trl_lab: Path, tp: Any
) -> None:
    result = tp("render", "sft", *FLAGS, *INPUTS, "--set", "eval_strategy=No")
    assert result.code != 0
    assert "text ('No') is not one of: no, steps, epoch" in result.output


def test_numbers_and_bools_of_a_trl_experiment_parse_by_their_type(trl_lab: Path, tp: Any) -> None:
    got = _trl(
        tp, "learning_rate=1e-4", "num_train_epochs=2", "gradient_checkpointing=off", "bf16=YES", "weight_decay=0"
    )
    assert got["learning_rate"] == 1e-4
    assert got["num_train_epochs"] == 2 and type(got["num_train_epochs"]) is int
    assert got["gradient_checkpointing"] is False and got["bf16"] is True
    assert got["weight_decay"] == 0.0 and type(got["weight_decay"]) is float


@pytest.mark.parametrize(
    ("assignment", "needle"),
    [
        ("num_train_epochs=two", "expected an integer, got text ('two')"),
        ("num_train_epochs=1e3", "expected an integer, got a number (1000.0)"),
        ("gradient_checkpointing=1", "expected true or false, got text ('1')"),
        ("learning_rate=nan", "is not a finite number"),
        ("learning_rate=[1]", "is not a single value"),
    ],
)
def test_a_value_that_does_not_read_as_its_type_is_refused(
    trl_lab: Path, tp: Any, assignment: str, needle: str
) -> None:
    result = tp("render", "sft", *FLAGS, *INPUTS, "--set", assignment)
    assert result.code != 0
    assert needle in result.output, result.output


def test_submit_writes_the_typed_value_and_rerun_keeps_it(trl_lab: Path, tp: Any) -> None:
    submitted = tp(
        "submit", "sft", "--profile", "local", *INPUTS, "--set", "eval_strategy=no", "--set", "save_steps=50"
    )
    assert submitted.code == 0, submitted.output
    [request_file] = (trl_lab / "runs" / "sft").glob("*.yaml")
    text = request_file.read_text(encoding="utf-8")
    request = YAML(typ="safe").load(text)
    assert request["set"] == {"eval_strategy": "no", "save_steps": 50}
    # the file itself keeps the text quoted, so a YAML 1.1 reader (PyYAML, the bot's users) gets "no" too
    import yaml

    assert yaml.safe_load(text)["set"]["eval_strategy"] == "no"
    rerun = tp("rerun", request_file.stem)
    assert rerun.code == 0, rerun.output
    requests = sorted((trl_lab / "runs" / "sft").glob("*.yaml"))
    assert len(requests) == 2
    assert [YAML(typ="safe").load(p.read_text())["set"] for p in requests] == [request["set"]] * 2


def test_a_str_parameter_keeps_the_text_as_typed(lab: Path, tp: Any) -> None:
    assert tp("new", "bench", "--method", "evalkit/benchmark").code == 0
    _commit(lab, "bench")
    image = ("--image", "python:3.12", "--model", "hub/tiny")
    got = _hyperparams(tp, "bench", "batch_size=16", "suites=007", extra=image)
    assert got["batch_size"] == "16" and got["suites"] == "007"
    assert _hyperparams(tp, "bench", "batch_size=1e3", extra=image)["batch_size"] == "1e3"
    assert _hyperparams(tp, "bench", "batch_size=auto", extra=image)["batch_size"] == "auto"
    assert _hyperparams(tp, "bench", "apply_chat_template=no", extra=image)["apply_chat_template"] is False


PLUGIN_YAML = """schema: tuneplane/plugin/v1
name: opsd
version: 1.0.0
capability: algorithm
entrypoint: opsd_patch:install
load: eager
params:
  opsd.mode: {type: enum, choices: ["off", token, sequence], doc: "Where the patch applies."}
  opsd.tag: {type: str, doc: "A label."}
  opsd.scale: {type: float, doc: "Multiplies the advantages.", min: 0}
"""


def test_a_locked_plugins_params_are_read_by_their_type(lab: Path, tp: Any) -> None:
    assert tp("new", "cls", "--method", "pytorch/image-classification").code == 0
    write_tree(
        lab, {"plugins/opsd/plugin.yaml": PLUGIN_YAML, "plugins/opsd/opsd_patch.py": "def install(params):\n    pass\n"}
    )
    locked = tp("plugin", "lock", "cls", "alice/opsd")
    assert locked.code == 0, locked.output
    _commit(lab, "plugin")
    got = _hyperparams(
        tp, "cls", "opsd.mode=off", "opsd.tag=0x10", "opsd.scale=2", "undeclared=on", extra=("--image", "python:3.12")
    )
    assert (got["opsd.mode"], got["opsd.tag"], got["opsd.scale"]) == ("off", "0x10", 2.0)
    assert got["undeclared"] is True  # nothing declares it: CONTRACT §2


# ── the parser on its own ────────────────────────────────────────────────────────────────────────


RECIPE = Recipe.model_validate(
    {
        "name": "fw/demo",
        "version": "1",
        "framework": "fw",
        "entrypoint": {"kind": "module", "value": "demo.train"},
        "adapter_options": {"observability": "platform"},
        "runtime": {"default_version": "1", "versions": {"1": {"runtime_id": "fw-1"}}},
        "params": {
            "lr": {"type": "float", "path": "optim.lr"},
            "tp_size": {"type": "enum", "path": "tp", "choices": [1, 2, 4]},
            "name": {"type": "str", "path": "run.name"},
        },
    }
)


def test_keys_are_names_and_config_paths() -> None:
    keys = set_keys(RECIPE)
    assert set(keys) == {"lr", "optim.lr", "tp_size", "tp", "name", "run.name"}
    assert parse_sets(["optim.lr=3", "tp=2", "run.name=1.0", "other=no"], keys) == {
        "optim.lr": 3.0,
        "tp": 2,
        "run.name": "1.0",
        "other": False,
    }


@pytest.mark.parametrize(
    ("spec", "text", "expected"),
    [
        ({"type": "str"}, " 007 ", "007"),
        ({"type": "str"}, "[INST]", "[INST]"),
        ({"type": "str"}, "'quoted'", "quoted"),
        ({"type": "enum", "choices": ["no", "yes"]}, "yes", "yes"),
        ({"type": "enum", "choices": [1, 2]}, "2", 2),
        ({"type": "enum", "choices": [1, 2]}, "3", "3"),
        ({"type": "bool"}, "On", True),
        ({"type": "bool"}, "'true'", "true"),
        ({"type": "int"}, "-3", -3),
        ({"type": "float"}, "-3", -3.0),
        ({"type": "float"}, "2.5e-5", 2.5e-5),
        ({"type": "float"}, "inf", "inf"),
    ],
)
def test_typed_values(spec: dict[str, Any], text: str, expected: object) -> None:
    value = parse_typed_value("k", text, Param.model_validate({"path": "x", **spec}))
    assert value == expected and type(value) is type(expected)


# ── config.yaml: the same reading for what the experiment writes ─────────────────────────────────


def _edit(path: Path, old: str, new: str) -> None:
    text = path.read_text(encoding="utf-8")
    assert old in text
    path.write_text(text.replace(old, new, 1), encoding="utf-8")


def test_config_values_are_read_by_the_parameters_type(trl_lab: Path, tp: Any) -> None:
    config = trl_lab / "experiments" / "sft" / "config.yaml"
    _edit(config, "eval_strategy: steps", "eval_strategy: no")
    validated = tp("validate", "sft")
    assert validated.code == 0, validated.output
    assert _trl(tp)["eval_strategy"] == "no"  # the job gets it in --overrides-json, over its own reading
    _edit(config, "eval_strategy: no", "eval_strategy: off")  # YAML's false too, but not a choice
    refused = tp("validate", "sft")
    assert refused.code != 0 and "is not one of: no, steps, epoch" in refused.output, refused.output
    _edit(config, "eval_strategy: off", "eval_strategy: no")
    _edit(config, "learning_rate: 2.0e-5", "learning_rate: 1e-5")
    refused = tp("validate", "sft")  # a number keeps YAML's reading: 1e-5 without a dot is text
    assert refused.code != 0 and "write it as 1.0e-5" in refused.output, refused.output


def test_a_str_config_value_keeps_its_text(lab: Path, tp: Any) -> None:
    assert tp("new", "bench", "--method", "evalkit/benchmark").code == 0
    _edit(lab / "experiments" / "bench" / "config.yaml", "batch_size: auto", "batch_size: 016")
    _commit(lab, "bench")
    assert tp("validate", "bench").code == 0
    got = _hyperparams(tp, "bench", extra=("--image", "python:3.12", "--model", "hub/tiny"))
    assert got["batch_size"] == "016"


ECHO_PY = "import json, sys\nprint(json.dumps(sys.argv[1:]))\n"


@pytest.mark.parametrize(
    ("style", "expected"),
    [
        (
            "flat",
            ["--eval_strategy", "no", "--run_name", "007", "--lr", "1e-5", "--quoted", "no", "--on", "yes", "--n", "3"],
        ),
        # OpenRLHF's dotted flags: a YAML boolean is a switch (false leaves it out), as its argparse wants
        ("dotted", ["--run_name", "7", "--lr", "1e-5", "--quoted", "no", "--on", "--n", "3"]),
    ],
)
def test_the_job_renders_flat_flags_as_written(tmp_path: Path, style: str, expected: list[str]) -> None:
    import subprocess
    import sys

    write_tree(
        tmp_path,
        {
            "config.yaml": 'eval_strategy: no\nrun_name: 007\nlr: 1e-5\nquoted: "no"\non: yes\n'
            "skip: null\nempty: ''\n",
            "echo.py": ECHO_PY,
        },
    )
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "tuneplane.lifecycle.cli_flags",
            "--style",
            style,
            "--config",
            str(tmp_path / "config.yaml"),
            "--overrides-json",
            '{"n": 3}',
            "--",
            str(tmp_path / "echo.py"),
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == expected
