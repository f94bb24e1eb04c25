"""Every catalog parameter and template key is one the framework itself defines.

TRL: each trl template key is a field of its TRL config class (installed here) or a key train.py
reads itself. OpenRLHF and ms-swift are checked against their own parsers in
tests/test_catalog_framework_parsers.py; ms-swift's Megatron arguments cannot be imported without
Megatron-Core and Transformer Engine (CUDA), so every flag the job-side renderer produces for a
Megatron recipe is checked here against the flag names of its argument definitions
(tests/data/framework_flags.json: names only, copied from ms-swift v4.5.2).
"""

from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path
from typing import Any

import pytest
import yaml
from support.yamlfiles import load_yaml

from tuneplane.lifecycle.cli_flags import build_flags, leaves

CATALOG = Path(__file__).resolve().parents[1] / "catalog"
FLAGS = json.loads((Path(__file__).parent / "data" / "framework_flags.json").read_text())
SCRIPT_KEYS = {
    "model_name_or_path",
    "dataset_train_path",
    "dataset_eval_path",
    "use_peft",
    "lora_r",
    "lora_alpha",
    "lora_dropout",
    "lora_target_modules",
    "judge_model_name_or_path",
    "judge_max_length",
}
TRL_CONFIG = {
    "sft": "SFTConfig",
    "dpo": "DPOConfig",
    "kto": "KTOConfig",
    "rm": "RewardConfig",
    "rloo": "RLOOConfig",
    "grpo": "GRPOConfig",
    "grpo-judge": "GRPOConfig",
    "opsd": "DistillationConfig",
}


def recipe(method: str) -> dict[str, Any]:
    # libyaml's loader: pytest parametrizes from these files while collecting, on every worker
    return yaml.load(
        (CATALOG / method / "recipe.yaml").read_text(), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    )


def config(method: str) -> dict[str, Any]:
    return load_yaml(CATALOG / method / "template" / "config.yaml") or {}


@pytest.mark.parametrize("method", sorted(TRL_CONFIG))
def test_trl_keys_are_fields_of_the_trl_config_class(method: str) -> None:
    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
    trl = pytest.importorskip("trl", reason="TRL is not installed")
    fields = {f.name for f in dataclasses.fields(getattr(trl, TRL_CONFIG[method]))}
    keys = set(config(f"trl/{method}")) | {p["path"] for p in recipe(f"trl/{method}")["params"].values()}
    unknown = sorted(keys - fields - SCRIPT_KEYS)
    assert unknown == [], f"trl/{method}: not {TRL_CONFIG[method]} fields: {unknown}"


def _flag_names(argv: list[str]) -> list[str]:
    return [a[2:] for a in argv if a.startswith("--")]


CLI = sorted(
    p.parent.relative_to(CATALOG).as_posix()
    for p in CATALOG.glob("ms-swift/*/recipe.yaml")
    if "_megatron" in recipe(p.parent.relative_to(CATALOG).as_posix())["entrypoint"]["value"]
)


def test_the_megatron_recipes_are_all_checked() -> None:
    assert len(CLI) == 4, CLI  # megatron-sft, -dpo, -gkd, -grpo


@pytest.mark.parametrize("method", CLI)
def test_rendered_flags_are_the_frameworks_own(method: str) -> None:
    r = recipe(method)
    style = "flat"
    known = set(FLAGS[_flag_list(method, r)])
    params = {p["path"]: p.get("default", 1) for p in r["params"].values()}
    owned = {k: "x" for k in r["adapter_options"]["platform_owned"]}
    bound = {v: "x" for v in r["adapter_options"]["bindings"].values()}
    argv = build_flags(config(method), params, {**bound, **owned}, style)
    unknown = sorted(set(_flag_names(argv)) - known)
    assert unknown == [], f"{method}: flags the framework does not define: {unknown}"
    assert set(params) <= set(_flag_names(argv)) | {k for k, v in params.items() if v is False}


def _flag_list(method: str, r: dict[str, Any]) -> str:
    assert "_megatron" in r["entrypoint"]["value"], method
    return "ms-swift-megatron"


def test_renderer_writes_switches_and_lists_as_the_frameworks_parse_them() -> None:
    cfg = {"a": {"b": True, "c": False, "d": [1, 2]}, "e": "", "f": None}
    assert build_flags(cfg, {"a.x": 3}, {"out": "/o"}, "dotted") == [
        "--a.b",
        "--a.d",
        "1",
        "2",
        "--a.x",
        "3",
        "--out",
        "/o",
    ]
    assert build_flags({"g": True, "h": False}, {}, {}, "flat") == ["--g", "true", "--h", "false"]
    assert leaves({"a": {"b": {}}}) == [("a.b", {})]
