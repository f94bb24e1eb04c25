"""Plugin parameters: `params:` in plugin.yaml (the shape of a recipe's), checked by `--set` and handed
to the plugin's `install(params)` in the job.

A real local job: a pytorch/image-classification experiment (torchrun, one CPU process) locks an
algorithm plugin (kept in a group folder, plugins/examples/opsd/) whose install writes the params it
was given under the out dir.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
from conftest import write_tree
from support.repos import git

PLUGIN_YAML = """schema: tuneplane/plugin/v1
name: opsd
version: 1.2.0
capability: algorithm
entrypoint: opsd_patch:install
load: eager
params:
  opsd.scale: {type: float, doc: "Multiplies the advantages.", default: 1.0, min: 0}
  opsd.mode: {type: enum, choices: [token, sequence], doc: "Where the patch applies."}
"""
PATCH_PY = """import json, os


def install(params):
    seen = {k: v for k, v in params.items() if k.startswith("opsd.")}
    with open(os.path.join(os.environ["TUNEPLANE_OUT_DIR"], "plugin-params.json"), "w") as fh:
        json.dump(seen, fh)
"""
TRAIN_PY = "print('training')\n"
SUBMIT = ("--profile", "local", "--image", "python:3.12")


@pytest.fixture()
def plugin_lab(lab: Path, tp: Any) -> Path:
    assert tp("new", "cls", "--method", "pytorch/image-classification", cwd=lab).code == 0
    (lab / "experiments" / "cls" / "train.py").write_text(TRAIN_PY, encoding="utf-8")
    # in a group folder, as labs keep their example plugins: the job package must still carry it
    write_tree(lab, {"plugins/examples/opsd/plugin.yaml": PLUGIN_YAML, "plugins/examples/opsd/opsd_patch.py": PATCH_PY})
    locked = tp("plugin", "lock", "cls", "alice/opsd", cwd=lab)
    assert locked.code == 0, locked.output
    git(lab, "add", "-A")
    git(lab, "commit", "-q", "-m", "plugin")
    return lab


def _seen(name: str = "cls") -> dict[str, Any]:
    storage = Path(os.environ["TUNEPLANE_STORAGE_ROOT"])
    [path] = storage.glob(f"runs/*/{name}/*/out/plugin-params.json")
    return dict(json.loads(path.read_text(encoding="utf-8")))


def test_declared_plugin_params_validate(plugin_lab: Path, tp: Any) -> None:
    result = tp("plugin", "validate", plugin_lab / "plugins" / "examples" / "opsd", cwd=plugin_lab)
    assert result.code == 0, result.output
    assert tp("validate", "cls", cwd=plugin_lab).code == 0


def test_set_value_of_a_declared_plugin_param_reaches_install(plugin_lab: Path, tp_subprocess: Any) -> None:
    result = tp_subprocess(
        "submit", "cls", *SUBMIT, "--set", "opsd.scale=2", "--set", "opsd.mode=token", "--local", cwd=plugin_lab
    )
    assert result.code == 0, result.output
    assert _seen() == {"opsd.scale": 2.0, "opsd.mode": "token"}


def test_plugin_param_default_reaches_install(plugin_lab: Path, tp_subprocess: Any) -> None:
    result = tp_subprocess("submit", "cls", *SUBMIT, "--local", cwd=plugin_lab)
    assert result.code == 0, result.output
    assert _seen() == {"opsd.scale": 1.0}


@pytest.mark.parametrize(
    ("assignment", "needle"),
    [
        ("opsd.scale=-1", "minimum"),
        ("opsd.scale=fast", "number"),
        ("opsd.mode=word", "token, sequence"),
    ],
)
def test_set_checks_a_key_a_locked_plugin_declares(plugin_lab: Path, tp: Any, assignment: str, needle: str) -> None:
    result = tp("submit", "cls", *SUBMIT, "--set", assignment, cwd=plugin_lab)
    assert result.code != 0 and "Traceback" not in result.output
    assert assignment.split("=")[0] in result.output and needle in result.output


def test_undeclared_key_with_plugins_locked_is_accepted_with_a_warning(plugin_lab: Path, tp_subprocess: Any) -> None:
    result = tp_subprocess("submit", "cls", *SUBMIT, "--set", "opsd.beta=3", "--local", cwd=plugin_lab)
    assert result.code == 0, result.output
    assert "warning: --set opsd.beta" in result.output and "params:" in result.output
    assert _seen()["opsd.beta"] == 3


def test_render_warns_of_an_undeclared_key_as_submit_does(plugin_lab: Path, tp: Any) -> None:
    rendered = tp("render", "cls", *SUBMIT, "--set", "opsd.beta=3", cwd=plugin_lab)
    submitted = tp("submit", "cls", *SUBMIT, "--set", "opsd.beta=3", cwd=plugin_lab)
    assert rendered.code == 0 and submitted.code == 0, rendered.output + submitted.output
    warnings = [line for line in submitted.out.splitlines() if line.startswith("warning: --set opsd.beta")]
    assert len(warnings) == 1
    assert [line for line in rendered.err.splitlines() if line.startswith("warning: ")] == warnings
    assert "warning" not in rendered.out  # the rendered text stays what a job gets


def test_a_pull_requests_diff_warns_once_of_the_changed_request(plugin_lab: Path, tp: Any) -> None:
    """`render --changed --diff` renders the base version too; a warning is about what would run."""
    assert tp("submit", "cls", *SUBMIT, "--set", "opsd.beta=3", cwd=plugin_lab).code == 0
    (request,) = (plugin_lab / "runs" / "cls").glob("*.yaml")
    request.write_text(request.read_text(encoding="utf-8").replace("opsd.beta: 3", "opsd.beta: 4"), encoding="utf-8")
    git(plugin_lab, "commit", "-qam", "another beta")
    diff = tp("render", "--changed", "--diff", "--base", "HEAD~1", cwd=plugin_lab)
    assert diff.code == 0, diff.output
    assert "opsd.beta" in diff.out
    warnings = [line for line in diff.err.splitlines() if line.startswith("warning: ")]
    assert len(warnings) == 1 and "opsd.beta" in warnings[0], diff.err


def test_undeclared_key_without_plugins_is_refused_naming_plugin_params(lab: Path, tp: Any) -> None:
    assert tp("new", "cls", "--method", "pytorch/image-classification", cwd=lab).code == 0
    git(lab, "add", "-A")
    git(lab, "commit", "-q", "-m", "exp")
    result = tp("submit", "cls", *SUBMIT, "--set", "opsd.scale=2", cwd=lab)
    assert result.code != 0 and "unknown hyperparameter 'opsd.scale'" in result.output
    assert "plugin" in result.output and "params:" in result.output


def test_run_request_with_a_plugin_param_validates(plugin_lab: Path, tp: Any) -> None:
    run = "20250101-120000-abc123"
    write_tree(
        plugin_lab,
        {
            f"runs/cls/{run}.yaml": (
                f"experiment: cls\nrun_id: {run}\nprofile: local\nimage: python:3.12\nset: {{opsd.scale: -2}}\n"
            )
        },
    )
    result = tp("validate", "--format", "json", cwd=plugin_lab)
    problems = json.loads(result.out)["problems"]
    errors = [(p["file"], p["rule"]) for p in problems if p["severity"] == "error"]
    assert errors == [(f"runs/cls/{run}.yaml", "run-set")]


@pytest.mark.parametrize(
    ("params", "needle"),
    [
        ("params:\n  opsd.mode: {type: enum}\n", "choices"),
        ("params:\n  opsd.scale: {type: float, minimum: 0}\n", "minimum"),
        ("params:\n  'bad name': {type: int}\n", "bad name"),
    ],
)
def test_bad_plugin_params_are_placed_errors(plugin_lab: Path, tp: Any, params: str, needle: str) -> None:
    manifest = plugin_lab / "plugins" / "examples" / "opsd" / "plugin.yaml"
    text = manifest.read_text(encoding="utf-8")
    manifest.write_text(text[: text.index("params:")] + params, encoding="utf-8")
    result = tp("plugin", "validate", manifest.parent, cwd=plugin_lab)
    assert result.code == 1 and needle in result.output and "plugin.yaml:" in result.output
