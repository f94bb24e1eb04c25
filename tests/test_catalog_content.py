"""The shipped recipe catalog: every recipe.yaml is well formed and agrees with its template.

These checks read the catalog as files (PyYAML safe-load, the YAML 1.1 reading the digests use) so
they hold whatever the loader code does: exact key sets, existing templates and entrypoints, and
parameters whose path, type and default match the template's config.yaml. A few tests also run
template code that needs nothing beyond PyYAML (the custom scaffold, the NeMo-RL driver's config
merge, the reward functions).
"""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from packaging.specifiers import SpecifierSet
from support.render import CONTRACT_REQUIRED
from support.yamlfiles import load_yaml

CATALOG = Path(__file__).resolve().parents[1] / "catalog"
EXPECTED = {  # every recipe id the upstream client ships
    "custom/custom",
    "evalkit/benchmark",
    "pytorch/image-classification",
    *(
        f"ms-swift/{m}"
        for m in (
            "sft",
            "dpo",
            "kto",
            "orpo",
            "cpo",
            "rm",
            "gkd",
            "grpo",
            "reranker",
            "megatron-sft",
            "megatron-dpo",
            "megatron-gkd",
            "megatron-grpo",
        )
    ),
    *(f"nemo-rl/{m}" for m in ("sft", "dpo", "rm", "ppo", "grpo", "grpo-lora", "distillation", "maxrl", "opsd")),
    *(f"openrlhf/{m}" for m in ("sft", "dpo", "rm", "ppo", "grpo", "reinforce-baseline")),
    *(f"trl/{m}" for m in ("sft", "dpo", "kto", "rm", "rloo", "grpo", "grpo-judge", "opsd")),
    *(f"verl/{m}" for m in ("sft", "ppo", "grpo", "dapo", "rloo", "remax", "reinforce-baseline", "distillation")),
}
TOP_KEYS = {
    "name",
    "version",
    "framework",
    "title",
    "summary",
    "category",
    "template",
    "entrypoint",
    "adapter_options",
    "roles",
    "plugins",
    "lifecycle",
    "lifecycle_resources",
    "metrics",
    "artifacts",
    "runtime",
    "requires",
    "params",
    "config",
}
OPTIONAL_KEYS = {"rules"}  # only where the framework has cross-field requirements
ADAPTER_KEYS = {
    "observability",
    "orchestrator",
    "launcher",
    "config_mode",
    "bindings",
    "topology",
    "platform_owned",
    "required_inputs",
}
ARTIFACT_KEYS = {"version", "checkpoints", "logs", "exports", "evaluations", "formats"}
PARAM_KEYS = {"type", "path", "doc", "group", "required", "default", "min", "max", "exclusive_min", "choices", "when"}
INPUTS = {"model", "train_data", "validation_data"}
CATEGORIES = {"custom", "supervised", "sft", "rl", "preference", "evaluation"}
SCHEMA_COMMENT = "# yaml-language-server: $schema="
PY_TYPES: dict[str, tuple[type, ...]] = {
    "int": (int,),
    "float": (int, float),
    "bool": (bool,),
    "str": (str,),
    "enum": (str,),
}
IMAGE = re.compile(r"[a-z0-9.-]+(:\d+)?(/[a-z0-9._-]+)+(:[\w.-]+)?(@sha256:[0-9a-f]{64})?")
REQUIRED_ENV = tuple(CONTRACT_REQUIRED)


def recipe_dirs() -> list[Path]:
    return sorted(p.parent for p in CATALOG.glob("*/*/recipe.yaml"))


def recipe_id(folder: Path) -> str:
    return f"{folder.parent.name}/{folder.name}"


def load_recipe(folder: Path) -> dict[str, Any]:
    data = load_yaml(folder / "recipe.yaml")
    assert isinstance(data, dict)
    return data


def template_config(folder: Path) -> dict[str, Any]:
    recipe = load_recipe(folder)
    data = load_yaml(folder / recipe["template"] / "config.yaml")
    return data or {}


def lookup(config: dict[str, Any], dotted: str) -> tuple[bool, Any]:
    """(found, value) for a dotted path into nested mappings."""
    node: Any = config
    for part in dotted.split("."):
        if not isinstance(node, dict) or part not in node:
            return False, None
        node = node[part]
    return True, node


def is_type(value: Any, kind: str) -> bool:
    """The contract's typing: a bool is never an int or float; an int is accepted for a float."""
    if isinstance(value, bool) and kind != "bool":
        return False
    return isinstance(value, PY_TYPES[kind])


def load_module(path: Path, name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while the class is built
    saved, sys.dont_write_bytecode = sys.dont_write_bytecode, True  # no __pycache__ in the catalog
    try:
        spec.loader.exec_module(module)
    finally:
        sys.dont_write_bytecode = saved
    return module


RECIPES = recipe_dirs()
IDS = [recipe_id(p) for p in RECIPES]


def test_catalog_holds_exactly_the_published_recipes() -> None:
    assert set(IDS) == EXPECTED


@pytest.mark.parametrize("folder", RECIPES, ids=IDS)
def test_recipe_shape(folder: Path) -> None:
    text = (folder / "recipe.yaml").read_text(encoding="utf-8")
    assert text.startswith(SCHEMA_COMMENT)
    recipe = load_recipe(folder)
    assert TOP_KEYS <= set(recipe) <= TOP_KEYS | OPTIONAL_KEYS
    assert recipe["name"] == recipe_id(folder)
    assert recipe["framework"] == folder.parent.name
    assert isinstance(recipe["version"], str) and re.fullmatch(r"\d+\.\d+\.\d+", recipe["version"])
    assert recipe["category"] in CATEGORIES
    assert isinstance(recipe["title"], str) and recipe["title"].strip()
    assert isinstance(recipe["summary"], str) and recipe["summary"].strip()
    assert recipe["roles"] and all(isinstance(r, str) for r in recipe["roles"])
    assert recipe["plugins"] == []
    SpecifierSet(recipe["requires"]["core"])
    assert set(recipe["requires"]) == {"core"}


@pytest.mark.parametrize("folder", RECIPES, ids=IDS)
def test_template_and_entrypoint_exist(folder: Path) -> None:
    recipe = load_recipe(folder)
    template = folder / recipe["template"]
    assert template.is_dir()
    assert (template / "README.md").is_file()
    assert (template / "config.yaml").is_file()
    entry = recipe["entrypoint"]
    assert {"kind", "value"} <= set(entry) <= {"kind", "value", "experiment_override", "flags"}
    assert entry["kind"] in {"module", "file", "experiment"}
    # the flags the entrypoint takes: the template's parser knows each of them
    assert all(re.fullmatch(r"--[a-z][a-z0-9-]*", f) for f in entry.get("flags", [])), entry
    if entry["kind"] == "experiment" and entry.get("flags"):
        script = (template / entry["value"]).read_text(encoding="utf-8")
        for flag in entry["flags"]:
            assert f'"{flag}"' in script or _parsed_by_support(script, flag), flag
    if "experiment_override" in entry:  # an experiment file that wins over the framework's entry
        assert entry["kind"] != "experiment" and re.fullmatch(r"[A-Za-z0-9_.-]+\.py", entry["experiment_override"])
    if entry["kind"] == "file":  # a file of the framework, under the root every runtime names
        assert not entry["value"].startswith("/") and ".." not in entry["value"]
        assert all(v.get("root", "").startswith("/") for v in recipe["runtime"]["versions"].values())
    if entry["kind"] == "experiment":
        assert (template / entry["value"]).is_file()
    if entry["kind"] == "module":
        assert re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*", entry["value"])


def _parsed_by_support(script: str, flag: str) -> bool:
    """A TRL template parses its arguments in tuneplane.lifecycle.trl_support (TrainingRun)."""
    from tuneplane.lifecycle import trl_support

    return "TrainingRun" in script and f'"{flag}"' in Path(trl_support.__file__).read_text(encoding="utf-8")


@pytest.mark.parametrize("folder", RECIPES, ids=IDS)
def test_lifecycle_scripts_exist_and_have_resources(folder: Path) -> None:
    recipe = load_recipe(folder)
    lifecycle, resources = recipe["lifecycle"], recipe["lifecycle_resources"]
    assert set(lifecycle) <= {"export", "eval"}
    assert set(resources) == set(lifecycle)
    for operation, script in lifecycle.items():
        assert (folder / recipe["template"] / script).is_file(), operation
        assert isinstance(resources[operation], int) and not isinstance(resources[operation], bool)
        assert resources[operation] >= 0


@pytest.mark.parametrize("folder", RECIPES, ids=IDS)
def test_adapter_options(folder: Path) -> None:
    recipe = load_recipe(folder)
    options = recipe["adapter_options"]
    assert set(options) == ADAPTER_KEYS
    assert options["observability"] in {"platform", "external"}
    assert options["orchestrator"] in {"", "process-group", "ray"}
    assert options["launcher"] in {"", "torchrun", "accelerate", "python-module"}
    assert isinstance(options["config_mode"], str) and options["config_mode"]
    assert isinstance(options["topology"], dict)
    assert set(options["bindings"]) <= INPUTS
    assert set(options["required_inputs"]) <= INPUTS
    config = template_config(folder)
    for source, path in options["bindings"].items():
        found, value = lookup(config, path)
        assert found and value == "", f"binding {source} -> {path} must sit empty in config.yaml"
    for path in options["platform_owned"]:
        assert not lookup(config, path)[0], f"{path} is owned by the platform but set in config.yaml"


@pytest.mark.parametrize("folder", RECIPES, ids=IDS)
def test_metrics_artifacts_runtime(folder: Path) -> None:
    recipe = load_recipe(folder)
    metrics = recipe["metrics"]
    assert {"primary", "aliases"} <= set(metrics) <= {"primary", "aliases", "native"}
    for native in metrics.get("native", []):
        assert set(native) == {"format", "path"} and native["format"] in {"tensorboard", "jsonl"}
        assert not native["path"].startswith("/") and ".." not in native["path"]
    assert all(isinstance(m, str) for m in metrics["primary"])
    assert all(isinstance(k, str) and isinstance(v, str) for k, v in metrics["aliases"].items())
    artifacts = recipe["artifacts"]
    assert set(artifacts) == ARTIFACT_KEYS
    assert artifacts["version"] == "tuneplane/artifacts/v1"
    for kind in ("checkpoints", "logs", "exports", "evaluations"):
        assert all(isinstance(g, str) and not g.startswith("/") and ".." not in g for g in artifacts[kind])
    runtime = recipe["runtime"]
    assert set(runtime) == {"default_version", "versions"}
    for entry in runtime["versions"].values():
        assert set(entry) <= {"runtime_id", "requires", "image", "root", "deprecated"}
        assert isinstance(entry["runtime_id"], str) and entry["runtime_id"]
        assert isinstance(entry["requires"], str)
        image = entry.get("image")
        if image is not None:  # a tag, and any digest written out in full
            assert IMAGE.fullmatch(image)
            assert ":" in image.split("/")[-1] or "@sha256:" in image
    if recipe["framework"] == "custom":
        assert runtime == {"default_version": "user-managed", "versions": {}}
    else:
        assert runtime["default_version"] in runtime["versions"]
        assert not runtime["versions"][runtime["default_version"]].get("deprecated", False)


@pytest.mark.parametrize("folder", RECIPES, ids=IDS)
def test_params_land_on_template_config(folder: Path) -> None:
    """A param with a default sits at its path in config.yaml with that value; one without is absent.

    No default means "unset: the framework's own behaviour applies" (a symmetric clip, no top-k, the
    epoch count instead of a step cap), so the template leaves the key out rather than writing null.
    """
    recipe = load_recipe(folder)
    config = template_config(folder)
    for name, spec in recipe["params"].items():
        assert set(spec) <= PARAM_KEYS, name
        assert {"type", "path", "doc", "group"} <= set(spec), name
        kind = spec["type"]
        assert kind in PY_TYPES, name
        found, value = lookup(config, spec["path"])
        if "default" not in spec:
            assert not found, f"{name}: {spec['path']} is in config.yaml but the param declares no default"
            assert not spec.get("required", False), f"{name}: a required param needs a value in config.yaml"
            continue
        if "when" in spec:  # a switch: a bool parameter of the recipe
            assert recipe["params"][spec["when"]]["type"] == "bool", name
        assert found, f"{name}: {spec['path']} is not in config.yaml"
        assert is_type(value, kind), f"{name}: {value!r} is not {kind}"
        assert spec["default"] == value and type(spec["default"]) is type(value), name


@pytest.mark.parametrize("folder", RECIPES, ids=IDS)
def test_param_bounds_and_choices(folder: Path) -> None:
    recipe = load_recipe(folder)
    for name, spec in recipe["params"].items():
        kind, default = spec["type"], spec.get("default")
        if default is not None:
            assert is_type(default, kind), name
        if kind == "enum":
            choices = spec["choices"]
            assert choices and all(isinstance(c, str) for c in choices), f"{name}: choices must be strings"
            assert len(set(choices)) == len(choices)
            assert default is None or default in choices, name
        else:
            assert "choices" not in spec, name
        if "min" in spec or "max" in spec:
            assert kind in {"int", "float"}, name
        low, high = spec.get("min"), spec.get("max")
        if low is not None and high is not None:
            assert low <= high, name
        if default is not None and low is not None:
            assert default > low if spec.get("exclusive_min") else default >= low, name
        if default is not None and high is not None:
            assert default <= high, name
        assert isinstance(spec.get("required", False), bool)


def test_custom_recipe_is_the_bare_escape_hatch() -> None:
    recipe = load_recipe(CATALOG / "custom" / "custom")
    assert recipe["entrypoint"] == {"kind": "experiment", "value": "train.sh"}
    assert recipe["adapter_options"]["observability"] == "external"
    assert recipe["params"] == {} and recipe["lifecycle"] == {} and recipe["lifecycle_resources"] == {}
    assert recipe["metrics"] == {"primary": [], "aliases": {}}


def test_catalog_has_no_bytecode() -> None:
    leftovers = [p for p in CATALOG.rglob("*") if p.name == "__pycache__" or p.suffix in {".pyc", ".pyo"}]
    assert leftovers == []


def test_template_python_compiles() -> None:
    for path in CATALOG.glob("*/*/template/*.py"):
        compile(path.read_text(encoding="utf-8"), str(path), "exec")


# --- custom scaffold -----------------------------------------------------------------------------

TRAIN_SH = CATALOG / "custom" / "custom" / "template" / "train.sh"


def contract_env(tmp_path: Path) -> dict[str, str]:
    exp = tmp_path / "work" / "experiments" / "my-trainer"
    exp.mkdir(parents=True)
    out = tmp_path / "out"
    out.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith("TUNEPLANE_")}
    env.update(
        {
            "TUNEPLANE_WORK_DIR": str(tmp_path / "work"),
            "TUNEPLANE_EXP_DIR": str(exp),
            "TUNEPLANE_OUT_DIR": str(out),
            "TUNEPLANE_FRAMEWORK": "custom",
            "TUNEPLANE_RECIPE": "custom",
            "TUNEPLANE_CLUSTER_NUM_NODES": "1",
            "TUNEPLANE_CLUSTER_GPUS_PER_NODE": "0",
        }
    )
    return env


@pytest.mark.skipif(shutil.which("bash") is None, reason="bash is not installed")
def test_unedited_custom_scaffold_fails_fast_with_the_known_message(tmp_path: Path) -> None:
    text = TRAIN_SH.read_text(encoding="utf-8")
    assert text.startswith("#!/usr/bin/env bash\n") and "set -euo pipefail" in text
    result = subprocess.run(
        ["bash", str(TRAIN_SH)],
        env=contract_env(tmp_path),
        cwd=tmp_path / "work",
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert result.returncode == 1  # the guide: "replace the scaffold's exit 1 with a launch"
    assert "no training command yet" in result.stderr
    assert "experiments/my-trainer/train.sh" in result.stderr


@pytest.mark.skipif(shutil.which("bash") is None, reason="bash is not installed")
@pytest.mark.parametrize("missing", REQUIRED_ENV)
def test_custom_scaffold_names_a_missing_contract_variable(tmp_path: Path, missing: str) -> None:
    env = contract_env(tmp_path)
    del env[missing]
    result = subprocess.run(["bash", str(TRAIN_SH)], env=env, capture_output=True, text=True, timeout=30)
    assert result.returncode == 1  # bash's `${VAR:?}`; the message, not the code, tells the two apart
    assert missing in result.stderr
    assert "no training command yet" not in result.stderr


# --- reward functions ---------------------------------------------------------------------------


def test_trl_grpo_rewards_score_final_answers() -> None:
    rewards = load_module(CATALOG / "trl" / "grpo" / "template" / "rewards.py", "catalog_trl_rewards")
    completions = [
        "7 + 5 = 12",
        "so the answer is \\boxed{12}.",
        "it is 13",
        "no idea",
        [{"role": "assistant", "content": "The total is 1,200."}],
    ]
    answers = ["12", "12", "12", "12", "1200"]
    assert rewards.accuracy_reward(completions, answer=answers) == [1.0, 1.0, 0.0, 0.0, 1.0]
    assert rewards.format_reward(completions) == [1.0, 1.0, 1.0, 0.0, 1.0]
    assert rewards.accuracy_reward(["12"]) == [None]  # no answer column: not applicable
    assert len(rewards.REWARD_FUNCTIONS) == len(
        load_yaml(CATALOG / "trl" / "grpo" / "template" / "config.yaml")["reward_weights"]
    )


def test_verl_reward_scores_final_answers() -> None:
    reward = load_module(CATALOG / "verl" / "grpo" / "template" / "reward.py", "catalog_verl_reward")
    assert reward.compute_score("gsm8k", "... \\boxed{42}", "42") == 1.0
    assert reward.compute_score("gsm8k", "the answer is 41", "#### 42") == 0.0
    assert reward.compute_score("gsm8k", "forty-two", "42") == 0.0


def test_closed_configs_pass_through_only_keys_the_framework_knows() -> None:
    """Every pass-through key of a closed TRL recipe is a field of the TRL config class it names, or a
    key the template's train.py reads itself; checked against the TRL that is installed."""
    import dataclasses
    import importlib

    pytest.importorskip("trl", reason="TRL is not installed")
    from tuneplane.lifecycle.trl_support import SCRIPT_KEYS

    for folder in RECIPES:
        recipe = load_yaml(folder / "recipe.yaml")
        config = recipe.get("config") or {}
        if config.get("mode") != "closed" or not str(config.get("target", "")).startswith("trl."):
            continue
        cls = getattr(importlib.import_module("trl"), config["target"].split(".", 1)[1])
        fields = {f.name for f in dataclasses.fields(cls)}
        unknown = set(config["passthrough"]) - fields - set(SCRIPT_KEYS)
        assert not unknown, (recipe["name"], sorted(unknown))


# --- MaxRL advantage scaling (nemo-rl/maxrl) ------------------------------------------------------


def test_maxrl_scales_group_baselined_advantages_by_the_group_mean() -> None:
    torch = pytest.importorskip("torch", reason="torch is not installed")
    run = load_module(CATALOG / "nemo-rl" / "maxrl" / "template" / "run.py", "catalog_nemo_maxrl")
    prompts = torch.tensor([[7, 1], [7, 1], [9, 2], [9, 2], [5, 5], [5, 5]])
    rewards = torch.tensor([1.0, 0.0, 1.0, 1.0, 0.0, 0.0])
    baselined = (rewards - torch.tensor([0.5, 0.5, 1.0, 1.0, 0.0, 0.0])).unsqueeze(-1).expand(6, 3)
    scaled = run.mean_scaled(baselined, prompts, rewards)
    # pass rate 0.5 doubles the advantage; all-correct and all-wrong groups stay at zero
    assert torch.allclose(scaled[:, 0], torch.tensor([1.0, -1.0, 0.0, 0.0, 0.0, 0.0]), atol=1e-4)
    assert scaled.shape == (6, 3) and torch.equal(baselined[:, 0], rewards - torch.tensor([0.5, 0.5, 1, 1, 0, 0]))
