"""The one ValidationError converter: positioned problems, and a real "did you mean" for unknown keys."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tuneplane.check.plugin_dirs import parse_plugin_manifest
from tuneplane.check.plugin_locks import parse_plugins_lock
from tuneplane.errors import UsageError
from tuneplane.lab.modelparse import known_keys, parse_model, unknown_key_hint
from tuneplane.lab.runs import RunKey, read_status
from tuneplane.lab.yamlio import parse_json, parse_yaml
from tuneplane.models.experiment import ExperimentManifest
from tuneplane.models.lab import LabFile
from tuneplane.models.lock import RecipeLock
from tuneplane.models.recipe import Recipe
from tuneplane.models.run import RunRequest
from tuneplane.problems import Problem


@pytest.mark.parametrize(
    "typo,expected",
    [
        ("profles:\n  x: {}\n", "did you mean 'profiles'?"),
        ("clusterr:\n  backend: local\n", "did you mean 'cluster'?"),
    ],
)
def test_a_typo_in_tuneplane_yaml_gets_the_closest_key(
    lab: Path, tp: Callable[..., object], typo: str, expected: str
) -> None:
    path = lab / "tuneplane.yaml"
    path.write_text(path.read_text() + typo)
    result = tp("validate")
    assert result.code == 1  # type: ignore[attr-defined]
    assert expected in result.output  # type: ignore[attr-defined]
    line = len(path.read_text().splitlines()) - len(typo.splitlines()) + 1
    assert f"tuneplane.yaml:{line}:1" in result.output  # type: ignore[attr-defined]


def test_nested_unknown_keys_are_matched_against_their_own_model() -> None:
    doc = parse_yaml(
        "experiment: demo\nrun_id: 20250101-000000-000001\nprofile: local\ninputs:\n  modle: m\n", "runs/demo/r.yaml"
    )
    request, problems = parse_model(RunRequest, doc, "run-schema")
    assert request is None and len(problems) == 1
    assert problems[0].line == 5 and "did you mean 'model'?" in problems[0].hint
    assert "model" in known_keys(RunRequest, ["inputs"])
    assert "profiles" in known_keys(LabFile, [])


def test_no_close_key_lists_the_known_ones() -> None:
    hint = unknown_key_hint("zzzzzz", ["alpha", "beta"])
    assert hint == "known keys here: alpha, beta"


# ── every file kind, through the reader that kind really goes through ────────────────────────────

LAB = """apiVersion: tuneplane/project/v1
name: demo-lab
profiles:
  h200:
    gpus_per_node: 8
    max_nodes: 2
    tolerations:
      - key: nvidia.com/gpu
        operator: Exists
cluster:
  backend: local
  storage:
    pvc: data
"""
RUN = """apiVersion: tuneplane/run/v1
kind: RunRequest
experiment: demo
run_id: 20261129-101500-a1b2c3
profile: local
inputs:
  model: hub/tiny
timeout: 7200
"""
EXPERIMENT = """apiVersion: tuneplane/experiment/v1
metrics:
  native:
    - format: tensorboard
      path: logs/tb
"""
RECIPE = """name: acme/sft
version: "1.0.0"
framework: acme
entrypoint:
  kind: experiment
  value: train.py
adapter_options:
  observability: platform
runtime:
  default_version: "1.0"
  versions:
    "1.0":
      runtime_id: acme-1.0
params:
  lr:
    type: float
    path: optim.lr
    default: 0.001
"""
RECIPE_LOCK = """{
  "apiVersion": "tuneplane/recipe-lock/v1",
  "recipe": {
    "name": "custom/custom",
    "version": "1.0.0",
    "digest": "sha256:1111111111111111111111111111111111111111111111111111111111111111",
    "manifest_digest": "sha256:2222222222222222222222222222222222222222222222222222222222222222",
    "template_digest": "sha256:3333333333333333333333333333333333333333333333333333333333333333"
  },
  "framework": {"kind": "custom", "version": "user-managed", "runtime_id": ""},
  "bindings": {
    "entrypoint": {
      "kind": "experiment",
      "value": "train.sh"
    }
  },
  "created_by": {"core_version": "0.5.0"},
  "requires": {"core": ">=0.1,<1"}
}
"""
PLUGIN = """schema: tuneplane/plugin/v1
name: opsd
version: 0.1.0
capability: algorithm
summary: scales the loss
entrypoint: opsd_plugin:install
requires:
  core: ">=0.1,<1"
params:
  opsd.scale:
    type: float
    default: 1.0
"""
PLUGINS_LOCK = """{
  "apiVersion": "tuneplane/plugins-lock/v1",
  "plugins": [
    {
      "id": "local/opsd",
      "version": "0.1.0",
      "digest": "sha256:4444444444444444444444444444444444444444444444444444444444444444"
    }
  ]
}
"""
STATUS = """{
  "apiVersion": "tuneplane/status/v1",
  "kind": "RunStatus",
  "experiment": "demo",
  "run_id": "20261129-101500-a1b2c3",
  "phase": "Succeeded",
  "exit_code": 0,
  "backend": {
    "backend": "local",
    "kind": "Process",
    "name": "demo-1"
  },
  "artifacts": [
    {"kind": "checkpoint", "path": "checkpoints/step-100", "size_bytes": 1024, "step": 100}
  ]
}
"""


def _read_model(model: type[Any], rule: str, json_file: bool = False) -> Callable[[str, str], list[Problem]]:
    def read(text: str, rel: str) -> list[Problem]:
        doc = parse_json(text, rel) if json_file else parse_yaml(text, rel)
        return parse_model(model, doc, rule)[1]

    return read


def _read_status(text: str, rel: str, tmp_path: Path) -> list[Problem]:
    key = RunKey("demo", "20261129-101500-a1b2c3")
    path = tmp_path / key.status_rel
    path.parent.mkdir(parents=True)
    path.write_text(text)
    with pytest.raises(UsageError) as info:
        read_status(tmp_path, key)
    error = info.value
    where, _, message = error.message.partition(": ")
    file, line, col = where.rsplit(":", 2)
    return [Problem(file, int(line), int(col), "status", message, hint=error.hint)]


READERS: dict[str, tuple[str, str, Callable[..., list[Problem]]]] = {
    "lab": (LAB, "tuneplane.yaml", _read_model(LabFile, "lab-schema")),
    "run": (RUN, "runs/demo/20261129-101500-a1b2c3.yaml", _read_model(RunRequest, "run-schema")),
    "experiment": (
        EXPERIMENT,
        "experiments/demo/experiment.yaml",
        _read_model(ExperimentManifest, "experiment-schema"),
    ),
    "recipe": (RECIPE, "catalog/acme/sft/recipe.yaml", _read_model(Recipe, "recipe-schema")),
    "recipe-lock": (
        RECIPE_LOCK,
        "experiments/demo/recipe.lock.json",
        _read_model(RecipeLock, "lock-schema", json_file=True),
    ),
    "plugin": (PLUGIN, "plugins/opsd/plugin.yaml", lambda text, rel: parse_plugin_manifest(text, rel)[1]),
    "plugins-lock": (
        PLUGINS_LOCK,
        "experiments/demo/plugins.lock.json",
        lambda text, rel: parse_plugins_lock(text, rel)[1],
    ),
    "status": (STATUS, "status/demo/20261129-101500-a1b2c3.json", _read_status),
}


def _problems(kind: str, old: str, new: str, tmp_path: Path) -> tuple[str, list[Problem]]:
    base, rel, read = READERS[kind]
    assert base.count(old) == 1, f"{old!r} is not once in the {kind} example"
    text = base.replace(old, new)
    args = (text, rel, tmp_path) if read is _read_status else (text, rel)
    problems = [p for p in read(*args) if p.is_error]
    assert problems, f"{kind}: {new!r} was accepted"
    return text, problems


def _place(text: str, needle: str) -> tuple[int, int]:
    for number, line in enumerate(text.splitlines(), 1):
        col = line.find(needle)
        if col >= 0:
            return number, col + 1
    raise AssertionError(f"{needle!r} not in the text")


@pytest.mark.parametrize(
    ("kind", "old", "new", "right"),
    [
        ("lab", "name: demo-lab", "nmae: demo-lab", "name"),
        ("lab", "  backend: local", "  backnd: local", "backend"),
        ("lab", "        operator: Exists", "        opertor: Exists", "operator"),
        ("run", "profile: local", "profle: local", "profile"),
        ("run", "  model: hub/tiny", "  modl: hub/tiny", "model"),
        ("experiment", "metrics:", "metrcs:", "metrics"),
        ("experiment", "      path: logs/tb", "      paht: logs/tb", "path"),
        ("recipe", "framework: acme", "framwork: acme", "framework"),
        ("recipe", "      runtime_id: acme-1.0", "      runtime_idd: acme-1.0", "runtime_id"),
        ("recipe", "    default: 0.001", "    defualt: 0.001", "default"),
        ("recipe-lock", '"bindings"', '"bindigs"', "bindings"),
        ("recipe-lock", '"kind": "experiment"', '"knd": "experiment"', "kind"),
        ("plugin", "summary:", "summry:", "summary"),
        ("plugin", "  core:", "  cor:", "core"),
        ("plugin", "    default: 1.0", "    defualt: 1.0", "default"),
        ("plugins-lock", '"plugins"', '"plugin"', "plugins"),
        ("plugins-lock", '"version"', '"vresion"', "version"),
        ("status", '"exit_code"', '"exit_cod"', "exit_code"),
        ("status", '"name": "demo-1"', '"nmae": "demo-1"', "name"),
        ("status", '"size_bytes"', '"size_byte"', "size_bytes"),
    ],
)
def test_a_typo_anywhere_names_the_key_its_place_and_the_right_spelling(
    kind: str, old: str, new: str, right: str, tmp_path: Path
) -> None:
    text, problems = _problems(kind, old, new, tmp_path)
    wrong = new.strip().split(":")[0].strip('"')
    unknown = [p for p in problems if "unknown key" in p.message and wrong in p.message]
    assert unknown, problems
    problem = unknown[0]
    assert problem.file == READERS[kind][1]
    assert (problem.line, problem.col) == _place(text, new.strip()), problem
    assert f"did you mean {right!r}?" in problem.hint, problem


@pytest.mark.parametrize(
    ("kind", "old", "new", "field"),
    [
        ("lab", "max_nodes: 2", "max_nodes: many", "max_nodes"),
        ("run", "timeout: 7200", "timeout: soon", "timeout"),
        ("experiment", "format: tensorboard", "format: [tensorboard]", "format"),
        ("recipe", 'default_version: "1.0"', "default_version: [1]", "default_version"),
        ("recipe-lock", '"version": "user-managed"', '"version": 3', "version"),
        ("plugin", "version: 0.1.0", "version: [1]", "version"),
        ("plugins-lock", '"version": "0.1.0"', '"version": 1', "version"),
        ("status", '"exit_code": 0', '"exit_code": "zero"', "exit_code"),
    ],
)
def test_a_wrong_type_names_the_field_the_value_and_a_fix(
    kind: str, old: str, new: str, field: str, tmp_path: Path
) -> None:
    text, problems = _problems(kind, old, new, tmp_path)
    problem = problems[0]
    assert problem.file == READERS[kind][1]
    assert field in problem.message and problem.line == _place(text, new.strip())[0], problem
    assert problem.hint, f"{kind}: no hint for {problem.message!r}"


@pytest.mark.parametrize(
    ("kind", "old", "key"),
    [
        ("lab", "name: demo-lab\n", "name"),
        ("run", "experiment: demo\n", "experiment"),
        ("recipe", "framework: acme\n", "framework"),
        ("recipe-lock", '    "name": "custom/custom",\n', "recipe.name"),
        ("plugin", "version: 0.1.0\n", "version"),
        ("plugins-lock", '      "id": "local/opsd",\n', "plugins.0.id"),
        ("status", '  "phase": "Succeeded",\n', "phase"),
    ],
)
def test_a_missing_required_key_is_named_with_a_fix(kind: str, old: str, key: str, tmp_path: Path) -> None:
    _, problems = _problems(kind, old, "", tmp_path)
    problem = next((p for p in problems if key in p.message), problems[0])
    assert f"missing required key {key!r}" in problem.message, problems
    assert problem.line >= 1 and problem.hint, problem


@pytest.mark.parametrize(
    ("flag", "value", "form"),
    [
        ("--profile", "h200:abc", "profile: NAME or NAME:TOTAL_GPUS"),
        ("--run-id", "../x", "run_id: UTC time, then random hex: YYYYMMDD-HHMMSS-<6 to 12 hex digits>"),
    ],
)
def test_a_flag_of_the_wrong_form_is_told_its_form(
    lab: Path, tp: Callable[..., object], flag: str, value: str, form: str
) -> None:
    result = tp("render", "exp", "--profile", "local", flag, value)
    assert result.code == 2  # type: ignore[attr-defined]
    assert f"the command line: {flag[2:].replace('-', '_')}:" in result.output  # type: ignore[attr-defined]
    assert f"hint: {form}" in result.output and "tp render --help" in result.output  # type: ignore[attr-defined]
    assert f"{value!r} does not have the form this key takes" in result.output  # type: ignore[attr-defined]
    assert "should match pattern" not in result.output  # type: ignore[attr-defined]  # the form, not a regex


def test_a_value_of_the_wrong_form_without_a_description_is_told_its_pattern() -> None:
    """A key no description explains (a digest in a lock) still says what it must match, in the message
    itself: the places that keep only a key's own hint (`validate_or_raise`) drop a hint about schemas."""
    text = (
        '{"apiVersion": "tuneplane/recipe-lock/v1", "recipe": {"name": "custom/custom", "version": "1",'
        ' "digest": "sha256:abc", "manifest_digest": "sha256:abc", "template_digest": "sha256:abc"}}'
    )
    _model, problems = parse_model(RecipeLock, parse_json(text, "recipe.lock.json"), "schema")
    digest = next(p for p in problems if p.message.startswith("recipe.digest:"))
    assert digest.message == "recipe.digest: 'sha256:abc' does not match `^sha256:[0-9a-f]{64}$`", digest
    assert digest.line == 1 and digest.hint, digest


def test_a_flag_of_the_wrong_form_with_no_description_names_its_pattern(lab: Path, tp: Callable[..., object]) -> None:
    result = tp("render", "Bad Name", "--profile", "local")
    assert result.code == 2  # type: ignore[attr-defined]
    assert "experiment: 'Bad Name' does not match `^" in result.output, result.output  # type: ignore[attr-defined]


@pytest.mark.parametrize("args", [("validate",), ("render", "exp", "--profile", "local"), ("bot", "reconcile")])
def test_a_broken_tuneplane_yaml_stops_every_command_at_its_place(
    lab: Path, tp: Callable[..., object], args: tuple[str, ...]
) -> None:
    """One helper (`Lab.require_settings`) words it for tp validate, tp render and the bot alike."""
    (lab / "tuneplane.yaml").write_text("apiVersion: tuneplane/project/v1\nname: x\nprofiles: [1\n")
    result = tp(*args)
    assert result.code == 2, result.output  # type: ignore[attr-defined]
    assert "tuneplane.yaml:4:1: not valid YAML" in result.output  # type: ignore[attr-defined]
    assert "hint: " in result.output and "Traceback" not in result.output  # type: ignore[attr-defined]
