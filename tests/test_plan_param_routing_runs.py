"""The plugin guide's example trains for real with `--set opsd.scale=2`, and a lab's own TRL train.py runs.

The guide's plugin (its plugin.yaml as printed, or with `opsd.scale` declared under `params:`) is
locked by a PyTorch template experiment and by a TRL SFT experiment; `tp submit --local` trains each
to Succeeded on CPU and the plugin's install(params) sees 2.0, while the trainers, which refuse a key
they do not know, never get it. A TRL-style train.py of the lab's own (strict argparse, the config
handed whole to `SFTConfig`) runs too: no `--logging-dir`, no LoRA keys while LoRA is off.
Tiny models and data are built in the tests (the TRL ones by test_catalog_trl_runs' fixture).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from conftest import write_tree
from support.repos import git
from test_catalog_trl_runs import TINY, _require, assets  # noqa: F401 - `assets` is a fixture used here

GUIDE_PLUGIN = """schema: tuneplane/plugin/v1
name: opsd-patch
version: 1.2.0
capability: algorithm
entrypoint: patch:install
load: eager
"""
DECLARED_PLUGIN = GUIDE_PLUGIN + "params:\n  opsd.scale: {type: float, doc: Scales the advantages., default: 1.0}\n"
# The guide's install, reading the same key; it records what it saw instead of patching NeMo-RL.
PATCH_PY = """import json, os


def install(params):
    scale = float(params.get("opsd.scale", 1.0))
    with open(os.path.join(os.environ["TUNEPLANE_OUT_DIR"], "opsd-scale.json"), "w") as fh:
        json.dump(scale, fh)
"""
PYTORCH_TINY = {"epochs": 1, "synthetic_train_samples": 64, "synthetic_val_samples": 32, "batch_size": 32}
LAB_TRAIN_PY = """import argparse, json, os

import yaml
from trl import SFTConfig

parser = argparse.ArgumentParser()
for flag in ("--config", "--model", "--train-data", "--validation-data", "--output-dir", "--overrides-json"):
    parser.add_argument(flag)
args = parser.parse_args()  # an unknown flag ends the run here, as the lab's own script does
with open(args.config) as fh:
    config = yaml.safe_load(fh) or {}
config.update(json.loads(args.overrides_json))
SFTConfig(output_dir=os.path.join(args.output_dir, "checkpoints"), **config)  # refuses a key it does not know
with open(os.path.join(args.output_dir, "keys.json"), "w") as fh:
    json.dump(sorted(config), fh)
"""
LAB_CONFIG = "learning_rate: 1.0e-4\nlogging_steps: 1\nreport_to: none\n"


def _submit(lab: Path, tp_subprocess: Any, name: str, sets: dict[str, Any], *extra: str) -> Path:
    args = ["submit", name, "--profile", "local", "--local", *extra]
    for key, value in sets.items():
        args += ["--set", f"{key}={str(value).lower() if isinstance(value, bool) else value}"]
    result = tp_subprocess(*args, cwd=lab, timeout=600)
    assert result.code == 0, result.output[-4000:]
    [status_path] = (lab / "status" / name).glob("*.json")
    status = json.loads(status_path.read_text())
    assert status["phase"] == "Succeeded" and status["exit_code"] == 0, status
    return Path(status["out_dir"])


def _experiment(lab: Path, tp: Any, name: str, method: str, plugin: str | None, files: dict[str, str]) -> None:
    assert tp("new", name, "--method", method, cwd=lab).code == 0
    write_tree(lab, {f"experiments/{name}/{path}": text for path, text in files.items()})
    if plugin is not None:
        write_tree(lab, {"plugins/opsd-patch/plugin.yaml": plugin, "plugins/opsd-patch/patch.py": PATCH_PY})
        locked = tp("plugin", "lock", name, "alice/opsd-patch", cwd=lab)
        assert locked.code == 0, locked.output
    git(lab, "add", "-A")
    git(lab, "commit", "-q", "-m", f"experiment {name}")


def _tiny_trl(method: str = "sft") -> dict[str, Any]:
    import yaml

    recipe = Path(__file__).resolve().parents[1] / "catalog" / "trl" / method / "recipe.yaml"
    params = yaml.safe_load(recipe.read_text())["params"]
    return {key: value for key, value in TINY.items() if key in params}


def _trl_inputs(built: Path) -> list[str]:
    data = str(built / "sft.jsonl")
    return ["--model", str(built / "model"), "--train-data", data, "--validation-data", data]


@pytest.mark.slow
def test_the_guides_plugin_trains_with_the_pytorch_template(lab: Path, tp: Any, tp_subprocess: Any) -> None:
    """The plugin.yaml as the guide prints it (the key undeclared); the declared form with `--set` is the
    TRL test's, and the declared default the next test's: one training each."""
    _require("torch")
    _experiment(lab, tp, "cls", "pytorch/image-classification", GUIDE_PLUGIN, {})
    out = _submit(lab, tp_subprocess, "cls", {**PYTORCH_TINY, "opsd.scale": 2}, "--image", "python:3.12")
    assert json.loads((out / "opsd-scale.json").read_text()) == 2.0
    assert (out / "checkpoints" / "epoch-1").is_dir()


@pytest.mark.slow
def test_a_declared_plugin_default_trains_without_set(lab: Path, tp: Any, tp_subprocess: Any) -> None:
    """With the key declared, every run used to fail even without `--set`: its default reached the trainer."""
    _require("torch")
    _experiment(lab, tp, "cls", "pytorch/image-classification", DECLARED_PLUGIN, {})
    out = _submit(lab, tp_subprocess, "cls", PYTORCH_TINY, "--image", "python:3.12")
    assert json.loads((out / "opsd-scale.json").read_text()) == 1.0


@pytest.mark.slow
def test_the_guides_plugin_trains_with_trl_sft(assets: Path, lab: Path, tp: Any, tp_subprocess: Any) -> None:  # noqa: F811
    _experiment(lab, tp, "sft", "trl/sft", DECLARED_PLUGIN, {})
    out = _submit(lab, tp_subprocess, "sft", {**_tiny_trl(), "opsd.scale": 2}, *_trl_inputs(assets))
    assert json.loads((out / "opsd-scale.json").read_text()) == 2.0
    assert (out / "checkpoints" / "final" / "config.json").is_file()


@pytest.mark.slow
def test_a_labs_own_trl_entrypoint_with_a_strict_argparse_runs(
    assets: Path,  # noqa: F811
    lab: Path,
    tp: Any,
    tp_subprocess: Any,
) -> None:
    _experiment(lab, tp, "own", "trl/sft", None, {"train.py": LAB_TRAIN_PY, "config.yaml": LAB_CONFIG})
    out = _submit(lab, tp_subprocess, "own", {"bf16": False}, *_trl_inputs(assets))
    keys = json.loads((out / "keys.json").read_text())
    assert "learning_rate" in keys and not {"use_peft", "lora_r", "lora_alpha"} & set(keys)
