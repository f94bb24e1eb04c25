"""The lab's editor schema of a closed recipe's config.yaml: what check-jsonschema (and an editor)
underlines is what `tp validate` refuses.

A closed config (the TRL recipes: `SFTConfig(**config)` dies on a key it does not know) closes every
level of its schema, but for the keys `tp validate` lets through: pass-through keys (any value below
them), the keys the inputs bind, and the parameters of the lab's algorithm plugins. check-jsonschema
is a test dependency.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

CONFIG = "experiments/sft/config.yaml"
SCHEMA = ".tuneplane/schemas/config/trl/sft.schema.json"
PLUGIN_PARAMS = "params:\n  opsd.scale: {type: float, doc: How much, min: 0}\n"


def _check_jsonschema(lab: Path, config: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "check_jsonschema", "--schemafile", str(lab / SCHEMA), str(config)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def _config_with(lab: Path, extra: str) -> Path:
    config = lab / CONFIG
    config.write_text(config.read_text(encoding="utf-8") + extra, encoding="utf-8")
    return config


def _unknown_keys(tp: Any) -> list[str]:
    report = json.loads(tp("validate", "sft", "--format", "json").out)
    return [p["pointer"] for p in report["problems"] if p["rule"] == "config-unknown"]


@pytest.fixture()
def sft(lab: Path, tp: Any) -> Path:
    assert tp("new", "sft", "--method", "trl/sft").code == 0
    return lab


def test_the_scaffolded_config_passes_its_closed_schema(sft: Path) -> None:
    done = _check_jsonschema(sft, sft / CONFIG)
    assert done.returncode == 0, done.stdout + done.stderr


def test_a_typo_in_a_closed_config_is_underlined_as_validate_refuses_it(sft: Path, tp: Any) -> None:
    config = _config_with(sft, "learnig_rate: 1.0e-5\n")
    done = _check_jsonschema(sft, config)
    assert done.returncode == 1 and "learnig_rate" in done.stdout + done.stderr, done.stdout + done.stderr
    assert _unknown_keys(tp) == ["/learnig_rate"]


@pytest.mark.parametrize(
    "extra",
    ["adam_beta1: 0.9\n", "fsdp_config: {min_num_params: 0, backward_prefetch: backward_pre}\n"],
    ids=["pass-through key", "anything below a pass-through key"],
)
def test_pass_through_keys_stay_allowed(sft: Path, tp: Any, extra: str) -> None:
    done = _check_jsonschema(sft, _config_with(sft, extra))
    assert done.returncode == 0, done.stdout + done.stderr
    assert _unknown_keys(tp) == []


def test_a_locked_plugin_parameter_stays_out_of_a_closed_config_in_both(sft: Path, tp: Any) -> None:
    """A closed config goes to the trainer whole, so a plugin's key there would kill every run: the
    schema refuses it as `tp validate` does, before and after the plugin is locked (`--set` gives it)."""
    config = _config_with(sft, "opsd:\n  scale: 2.0\n")
    assert _check_jsonschema(sft, config).returncode == 1
    assert _unknown_keys(tp) == ["/opsd/scale"]
    assert tp("plugin", "new", "opsd").code == 0
    manifest = sft / "plugins" / "opsd" / "plugin.yaml"
    manifest.write_text(manifest.read_text(encoding="utf-8") + PLUGIN_PARAMS, encoding="utf-8")
    assert tp("plugin", "lock", "sft", "alice/opsd").code == 0
    assert _check_jsonschema(sft, config).returncode == 1
    assert _unknown_keys(tp) == ["/opsd/scale"]


def test_an_open_config_keeps_its_schema_open(lab: Path, tp: Any) -> None:
    """verl's config is open (Hydra takes the rest): a key beyond the parameters is not underlined."""
    assert tp("new", "rl", "--method", "verl/grpo").code == 0
    schema = json.loads((lab / ".tuneplane/schemas/config/verl/grpo.schema.json").read_text(encoding="utf-8"))
    assert "additionalProperties" not in json.dumps(schema)
