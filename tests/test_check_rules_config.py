"""config.yaml against its recipe: closed configs refuse unknown keys, open ones allow them, and a
custom experiment's config.yaml is the user's own file that tp never parses.

A closed config (the TRL recipes: `SFTConfig(**config)` dies on a key TRL does not know) accepts a key
that is a parameter or a pass-through key the recipe declares for its framework; anything else is an
error placed at its line with a "did you mean" hint. An open config (Hydra-composed frameworks) keeps
unknown keys with no error.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from conftest import REPO_ROOT
from support.repos import git
from support.yamlfiles import load_yaml


def _problems(result: Any) -> list[dict[str, Any]]:
    assert "Traceback" not in result.output, result.output
    return list(json.loads(result.out)["problems"])


def _config(lab: Path, exp: str, extra: str) -> int:
    path = lab / "experiments" / exp / "config.yaml"
    text = path.read_text(encoding="utf-8")
    path.write_text(text + extra, encoding="utf-8")
    return text.count("\n") + 1  # the line the first extra key lands on


TRL_METHODS = sorted(f"trl/{p.parent.name}" for p in (REPO_ROOT / "catalog" / "trl").glob("*/recipe.yaml"))


@pytest.mark.parametrize("method", TRL_METHODS)
def test_trl_scaffold_config_is_closed_and_clean(lab: Path, tp: Any, method: str) -> None:
    assert tp("new", "exp", "--method", method, cwd=lab).code == 0
    result = tp("validate", "exp", "--format", "json", cwd=lab)
    assert [p for p in _problems(result) if p["rule"].startswith("config-")] == []


@pytest.mark.parametrize(
    ("key", "hint"),
    [
        ("bogus_key: 1\n", ""),
        ("learnin_rate_typo_zz: 1.0e-5\n", "did you mean 'learning_rate'"),
    ],
)
@pytest.mark.parametrize("method", ["trl/sft", "trl/grpo"])
def test_unknown_key_in_a_closed_config_is_a_located_error(
    lab: Path, tp: Any, method: str, key: str, hint: str
) -> None:
    assert tp("new", "exp", "--method", method, cwd=lab).code == 0
    line = _config(lab, "exp", key)
    result = tp("validate", "exp", "--format", "json", cwd=lab)
    assert result.code == 1
    [problem] = [p for p in _problems(result) if p["rule"] == "config-unknown"]
    name = key.split(":")[0]
    assert problem["severity"] == "error" and problem["line"] == line and problem["col"] == 1
    assert problem["file"] == "experiments/exp/config.yaml" and name in problem["message"]
    assert hint in problem["hint"] and problem["hint"]
    # submit refuses it too, in the same words
    submit = tp(
        "submit",
        "exp",
        "--profile",
        "local",
        "--model",
        "m",
        "--train-data",
        "t",
        "--validation-data",
        "v",
        "--image",
        "x/y:1",
        cwd=lab,
    )
    assert submit.code != 0 and name in submit.output


def test_declared_pass_through_keys_of_the_framework_are_accepted(lab: Path, tp: Any) -> None:
    assert tp("new", "exp", "--method", "trl/sft", cwd=lab).code == 0
    _config(lab, "exp", "save_strategy: epoch\nreport_to: none\ndataloader_num_workers: 2\n")
    result = tp("validate", "exp", "--format", "json", cwd=lab)
    assert [p for p in _problems(result) if p["rule"].startswith("config-")] == []


def test_an_open_config_keeps_unknown_keys(lab: Path, tp: Any) -> None:
    assert tp("new", "exp", "--method", "verl/grpo", cwd=lab).code == 0
    _config(lab, "exp", "my_own_section:\n  anything: 1\n")
    result = tp("validate", "exp", "--format", "json", cwd=lab)
    assert [p for p in _problems(result) if p["severity"] == "error"] == []


@pytest.mark.parametrize(
    ("extra", "refused"),
    [("lr: 0.1\n", ["/lr"]), ("extra:\n  data_dir: /data/images\n", [])],
    ids=["a key train.py does not read", "keys of your own under extra"],
)
def test_the_pytorch_config_is_closed_as_its_train_py_is(lab: Path, tp: Any, extra: str, refused: list[str]) -> None:
    """The template's train.py reads exactly the parameters: what it would refuse at run time, validate refuses."""
    assert tp("new", "cls", "--method", "pytorch/image-classification", cwd=lab).code == 0
    path = lab / "experiments" / "cls" / "config.yaml"
    path.write_text(path.read_text(encoding="utf-8").replace("extra: {}\n", "") + extra, encoding="utf-8")
    problems = _problems(tp("validate", "cls", "--format", "json", cwd=lab))
    assert [p["pointer"] for p in problems if p["rule"] == "config-unknown" and p["severity"] == "error"] == refused


def test_recipes_say_whether_their_config_is_closed() -> None:
    modes = {}
    for path in sorted((REPO_ROOT / "catalog").glob("*/*/recipe.yaml")):
        data = load_yaml(path)
        modes[data["name"]] = (data.get("config") or {}).get("mode")
    assert all(mode == "closed" for name, mode in modes.items() if name.startswith("trl/")), modes
    assert modes["custom/custom"] == "user", modes
    assert modes["pytorch/image-classification"] == "closed", modes  # its train.py refuses other keys
    assert all(mode in ("open", "closed", "user") for mode in modes.values()), modes


# ── custom: config.yaml is the user's own ─────────────────────────────────────────────────────────

TEMPLATED = "model: {{ name }}\nsteps: {{ steps | default(10) }}\n"
TRAIN_SH = '#!/usr/bin/env bash\nset -euo pipefail\necho "trained"\n'


@pytest.mark.parametrize("text", [TEMPLATED, "a: 1\nb: c: d\n", "\x00\xff not even text"])
def test_custom_config_is_never_parsed(lab: Path, tp: Any, tp_subprocess: Any, text: str) -> None:
    assert tp("new", "mine", "--method", "custom/custom", cwd=lab).code == 0
    exp = lab / "experiments" / "mine"
    (exp / "config.yaml").write_text(text, encoding="utf-8")
    (exp / "train.sh").write_text(TRAIN_SH, encoding="utf-8")
    git(lab, "add", "-A")
    git(lab, "commit", "-q", "-m", "templated config")
    result = tp("validate", "mine", "--format", "json", cwd=lab)
    assert [p for p in _problems(result) if p["severity"] == "error"] == []
    assert not [p for p in _problems(result) if p["file"].endswith("config.yaml")]
    submit = tp_subprocess(
        "submit",
        "mine",
        "--profile",
        "local",
        "--image",
        "python:3.12",
        "--observability-url",
        "https://track.example.org/p",
        "--local",
        cwd=lab,
    )
    assert submit.code == 0, submit.output
    assert "Succeeded" in submit.output


def _set_keys(lab: Path, exp: str, values: dict[str, str]) -> None:
    """Each key of config.yaml set to its text (written anew where the scaffold leaves it out)."""
    path = lab / "experiments" / exp / "config.yaml"
    lines = [ln for ln in path.read_text(encoding="utf-8").splitlines() if ln.split(":")[0] not in values]
    path.write_text("\n".join([*lines, *(f"{k}: {v}" for k, v in values.items())]) + "\n", encoding="utf-8")


def test_the_rule_id_follows_the_kind_of_misfit_not_the_words_of_its_message(lab: Path, tp: Any) -> None:
    """A value whose own text is "maximum" is of the wrong type or not a choice, not out of range."""
    assert tp("new", "exp", "--method", "trl/sft", cwd=lab).code == 0
    _set_keys(lab, "exp", {"learning_rate": "maximum", "lr_scheduler_type": "minimum", "weight_decay": "2.0"})
    result = tp("validate", "exp", "--format", "json", cwd=lab)
    rules = {p["pointer"]: p["rule"] for p in _problems(result) if p["rule"].startswith("config-")}
    assert rules == {
        "/learning_rate": "config-type",
        "/lr_scheduler_type": "config-choice",
        "/weight_decay": "config-range",
    }, rules
