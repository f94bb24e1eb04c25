"""Who gets which hyperparameter: the trainer, or the locked algorithm plugins' install(params) alone.

A key a locked plugin declares in its `params:`, or a key nothing declares that was admitted with a
warning because an algorithm plugin is locked, is recorded in the JobSpec's `plugin_params` and stays
out of the trainer's `--overrides-json` and Hydra overrides; a recipe parameter whose switch (`when`)
is off (TRL's LoRA keys with LoRA off) is not passed at all; an adapter passes only the flags the
recipe says its entrypoint takes. Resolved and compiled in this process from real labs (`tp new`,
`tp plugin lock`, a git commit).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from conftest import write_tree
from support.repos import git

from tuneplane.lab.catalog import load_catalog
from tuneplane.lab.load import load_lab
from tuneplane.models.jobspec import JobSpec
from tuneplane.models.run import RunRequest
from tuneplane.plan.adapters import compile_plan
from tuneplane.plan.resolve import resolve

RUN_ID = "20250101-120000-abc123"
INPUTS = {"model": "tiny-model", "train_data": "train.jsonl", "validation_data": "val.jsonl"}
PLUGIN_YAML = """schema: tuneplane/plugin/v1
name: opsd-patch
version: 1.2.0
capability: algorithm
entrypoint: patch:install
load: eager
"""
DECLARED = (
    PLUGIN_YAML + 'params:\n  opsd.scale: {type: float, doc: "Multiplies the advantages.", default: 1.0, min: 0}\n'
)
PATCH_PY = 'def install(params):\n    float(params.get("opsd.scale", 1.0))\n'


def _lab(lab: Path, tp: Any, method: str, manifest: str | None) -> Path:
    assert tp("new", "exp", "--method", method, cwd=lab).code == 0
    if manifest is not None:
        write_tree(lab, {"plugins/opsd-patch/plugin.yaml": manifest, "plugins/opsd-patch/patch.py": PATCH_PY})
        locked = tp("plugin", "lock", "exp", "alice/opsd-patch", cwd=lab)
        assert locked.code == 0, locked.output
    git(lab, "add", "-A")
    git(lab, "commit", "-q", "-m", "experiment")
    return lab


def _resolve(lab: Path, sets: dict[str, Any], warnings: list[str] | None = None) -> JobSpec:
    request = RunRequest(
        experiment="exp", run_id=RUN_ID, profile="local", image="example/trainer:1", set=sets, inputs=INPUTS
    )
    return resolve(
        load_lab(lab), "exp", request, commit="0" * 40, dirty=False, catalog=load_catalog(), warnings=warnings
    )


def _overrides(argv: list[str]) -> dict[str, Any]:
    return dict(json.loads(argv[argv.index("--overrides-json") + 1]))


@pytest.mark.parametrize("method", ["pytorch/image-classification", "trl/sft"])
def test_a_declared_plugin_key_reaches_install_and_never_the_trainer(lab: Path, tp: Any, method: str) -> None:
    spec = _resolve(_lab(lab, tp, method, DECLARED), {"opsd.scale": 2})
    assert spec.spec.hyperparams["opsd.scale"] == 2.0  # install(params) is spec.hyperparams
    assert spec.spec.plugin_params == {"opsd.scale": ["alice/opsd-patch@1.2.0"]}
    argv = compile_plan(spec).argv
    assert "opsd.scale" not in _overrides(argv) and not any("opsd" in arg for arg in argv)
    assert spec.to_json_dict()["spec"]["plugin_params"] == {"opsd.scale": ["alice/opsd-patch@1.2.0"]}


def test_a_declared_default_never_reaches_the_trainer_without_set(lab: Path, tp: Any) -> None:
    spec = _resolve(_lab(lab, tp, "pytorch/image-classification", DECLARED), {})
    assert spec.spec.hyperparams["opsd.scale"] == 1.0
    assert "opsd.scale" not in _overrides(compile_plan(spec).argv)


def test_an_undeclared_key_admitted_for_the_plugins_is_theirs_alone(lab: Path, tp: Any) -> None:
    """The guide's manifest declares no params: `--set opsd.scale=2` is admitted with a warning."""
    warnings: list[str] = []
    spec = _resolve(_lab(lab, tp, "pytorch/image-classification", PLUGIN_YAML), {"opsd.scale": 2}, warnings)
    assert any("opsd.scale" in w and "params:" in w for w in warnings), warnings
    assert spec.spec.plugin_params == {"opsd.scale": ["alice/opsd-patch@1.2.0"]}
    overrides = _overrides(compile_plan(spec).argv)
    assert "opsd.scale" not in overrides and overrides["learning_rate"] == spec.spec.hyperparams["learning_rate"]


def test_a_recipe_parameter_stays_the_trainers_and_a_run_without_plugins_records_no_routes(lab: Path, tp: Any) -> None:
    spec = _resolve(_lab(lab, tp, "pytorch/image-classification", None), {"learning_rate": 0.01})
    assert spec.spec.plugin_params == {}
    assert "plugin_params" not in spec.to_json_dict()["spec"]  # earlier JobSpecs keep their digests
    assert _overrides(compile_plan(spec).argv)["learning_rate"] == 0.01


def test_hydra_overrides_leave_the_plugins_keys_out(lab: Path, tp: Any) -> None:
    spec = _resolve(_lab(lab, tp, "verl/grpo", DECLARED), {"opsd.scale": 2})
    argv = compile_plan(spec).argv
    assert spec.spec.hyperparams["opsd.scale"] == 2.0 and not any(arg.startswith("opsd.") for arg in argv)


def test_trl_passes_no_lora_keys_while_lora_is_off_and_no_logging_dir(lab: Path, tp: Any) -> None:
    spec = _resolve(_lab(lab, tp, "trl/sft", None), {})
    argv = compile_plan(spec).argv
    overrides = _overrides(argv)
    assert not {"use_peft", "lora_r", "lora_alpha"} & set(overrides) and "learning_rate" in overrides
    assert "--logging-dir" not in argv and "--output-dir" in argv and "--model" in argv


def test_trl_passes_the_lora_keys_once_lora_is_on(lab: Path, tp: Any) -> None:
    spec = _resolve(_lab(lab, tp, "trl/sft", None), {"use_peft": True, "lora_r": 4})
    overrides = _overrides(compile_plan(spec).argv)
    assert (overrides["use_peft"], overrides["lora_r"], overrides["lora_alpha"]) == (True, 4, 32)


def test_a_lora_set_while_lora_is_off_warns_that_it_has_no_effect(lab: Path, tp: Any) -> None:
    warnings: list[str] = []
    spec = _resolve(_lab(lab, tp, "trl/sft", None), {"lora_r": 8}, warnings)
    assert "lora_r" not in spec.spec.hyperparams
    assert [w for w in warnings if "lora_r" in w] == [
        "--set lora_r has no effect: trl/sft passes lora_r only while use_peft is true (--set use_peft=true to use it)"
    ]


def test_a_when_that_names_no_bool_parameter_is_refused() -> None:
    from pydantic import ValidationError

    from tuneplane.models.recipe import Recipe

    recipe = load_catalog().recipe("trl/sft").model_dump(by_alias=True)
    recipe["params"]["lora_r"]["when"] = "learning_rate"
    with pytest.raises(ValidationError, match="not a bool parameter"):
        Recipe.model_validate(recipe)


def test_a_closed_config_refuses_a_plugins_key_the_trainer_would_get(lab: Path, tp: Any) -> None:
    """TRL builds its config class from the whole config.yaml: a plugin's key belongs on `--set`."""
    _lab(lab, tp, "trl/sft", DECLARED)
    config = lab / "experiments" / "exp" / "config.yaml"
    config.write_text(config.read_text(encoding="utf-8") + "opsd:\n  scale: 2.0\n", encoding="utf-8")
    result = tp("validate", "--format", "json", cwd=lab)
    problems = [p for p in json.loads(result.out)["problems"] if p["severity"] == "error"]
    assert [(p["rule"], p["pointer"]) for p in problems] == [("config-unknown", "/opsd/scale")], problems
    assert "locked plugin's parameter" in problems[0]["message"] and "--set opsd.scale" in problems[0]["hint"]


@pytest.mark.parametrize(("method", "config_class"), [("trl/sft", "SFTConfig"), ("trl/grpo", "GRPOConfig")])
def test_with_lora_off_trl_gets_only_keys_its_config_class_takes(
    lab: Path, tp: Any, method: str, config_class: str
) -> None:
    """A lab's own train.py hands the overrides to TRL's config class whole: each key must be a field."""
    import dataclasses

    trl = pytest.importorskip("trl", reason="TRL is not installed")
    fields = {f.name for f in dataclasses.fields(getattr(trl, config_class))}
    overrides = _overrides(compile_plan(_resolve(_lab(lab, tp, method, None), {})).argv)
    assert sorted(set(overrides) - fields) == []
