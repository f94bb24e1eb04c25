"""The project as a new user and CI see it: README commands, CI script, workflows, the installed wheel."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import venv
from pathlib import Path

import jsonschema
import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]


def _readme_commands() -> list[str]:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    blocks = re.findall(r"```(?:bash|console|sh)\n(.*?)```", text, flags=re.S)
    return [line.strip() for line in blocks[0].splitlines() if line.strip() and not line.startswith("#")]


def test_readme_starts_with_the_two_commands():
    head = "\n".join((ROOT / "README.md").read_text(encoding="utf-8").splitlines()[:25])
    commands = _readme_commands()
    assert len(commands) == 2, commands
    assert commands[0] in head and commands[1] in head
    assert "quickstart" in commands[0] and "pytest" in commands[1]


def test_ci_runs_the_readme_test_command():
    assert _readme_commands()[1] in (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    assert os.access(ROOT / ".ci" / "run", os.X_OK)


def _workflow_schema() -> dict:
    import check_jsonschema

    path = Path(check_jsonschema.__file__).parent / "builtin_schemas" / "vendor" / "github-workflows.json"
    return json.loads(path.read_text(encoding="utf-8"))


def _check_workflow(text: str) -> dict:
    data = yaml.safe_load(text)
    # YAML 1.1 reads the key `on` as True; GitHub (and the schema) mean the string "on"
    if True in data:
        data["on"] = data.pop(True)
    jsonschema.Draft7Validator(_workflow_schema()).validate(data)
    return data


def test_project_ci_workflow_is_schema_valid():
    data = _check_workflow((ROOT / ".github" / "workflows" / "ci.yml").read_text(encoding="utf-8"))
    steps = data["jobs"]["test"]["steps"]
    assert any("bash .ci/run" in s.get("run", "") for s in steps)


def test_lab_workflow_is_schema_valid_and_queues_bot_runs():
    from tuneplane.author.scaffold import lab_files

    data = _check_workflow(lab_files("demo")[".github/workflows/tuneplane.yml"])
    assert set(data["on"]) >= {"pull_request", "push", "schedule"}
    check_runs = " ".join(s.get("run", "") for s in data["jobs"]["check"]["steps"])
    assert "tp validate --changed" in check_runs and "--format github" in check_runs
    assert "tp render --changed --diff" in check_runs and "GITHUB_STEP_SUMMARY" in check_runs
    for job, command in (("reconcile", "tp bot reconcile --push"), ("sync", "tp bot sync --push")):
        assert data["jobs"][job]["concurrency"] == {"group": "tuneplane-bot", "cancel-in-progress": False}
        assert any(command in s.get("run", "") for s in data["jobs"][job]["steps"])


def test_pre_commit_hook_definitions():
    hooks = yaml.safe_load((ROOT / ".pre-commit-hooks.yaml").read_text(encoding="utf-8"))
    assert hooks[0]["id"] == "tp-validate" and hooks[0]["entry"] == "tp validate"
    assert hooks[0]["language"] == "python" and hooks[0]["pass_filenames"] is True
    from tuneplane.author.scaffold import lab_files
    from tuneplane.author.toolsource import ToolSource

    released = ToolSource("tuneplane @ git+https://git.example.org/tp@v0.5.0", "x", "https://git.example.org/tp",
                          "v0.5.0")
    config = yaml.safe_load(lab_files("demo", tool=released)[".pre-commit-config.yaml"])
    assert config["repos"] == [{"repo": "https://git.example.org/tp", "rev": "v0.5.0",
                                "hooks": [{"id": "tp-validate"}]}]
    indexed = yaml.safe_load(lab_files("demo", tool=ToolSource("tuneplane==0.5.0", "x"))[".pre-commit-config.yaml"])
    hook = indexed["repos"][0]["hooks"][0]
    assert indexed["repos"][0]["repo"] == "local" and hook["entry"] == "tp validate"
    assert hook["language"] == "python" and hook["additional_dependencies"] == ["tuneplane==0.5.0"]
    unknown = yaml.safe_load(lab_files("demo", tool=ToolSource("", "x"))[".pre-commit-config.yaml"])
    assert unknown["repos"][0]["hooks"][0]["language"] == "system"


@pytest.mark.slow
def test_wheel_installs_into_a_fresh_venv_and_runs(tmp_path):
    """schemas/, catalog/ and templates/ must ship inside the wheel; tp runs from the venv alone."""
    dist = tmp_path / "dist"
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(dist),
                    str(ROOT)], check=True, capture_output=True)
    wheel = next(dist.glob("tuneplane-*.whl"))
    import zipfile

    names = zipfile.ZipFile(wheel).namelist()
    assert "tuneplane/_data/catalog/custom/custom/recipe.yaml" in names
    assert "tuneplane/_data/schemas/recipe.schema.json" in names
    assert "tuneplane/_data/templates/lab/tuneplane.yaml.j2" in names
    assert not [n for n in names if "__pycache__" in n or n.endswith(".pyc")]
    env_dir = tmp_path / "venv"
    venv.create(env_dir, with_pip=True)
    py = env_dir / "bin" / "python"
    subprocess.run([str(py), "-m", "pip", "install", "-q", str(wheel)], check=True, capture_output=True)
    tp = env_dir / "bin" / "tp"
    lab = tmp_path / "lab"
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    run = lambda *a, cwd=tmp_path: subprocess.run([str(tp), *a], cwd=cwd, env=env, capture_output=True, text=True)  # noqa: E731
    assert run("--version").stdout.strip().startswith("tp ")
    assert run("init", str(lab), "--no-git").returncode == 0
    assert run("new", "exp", "--method", "custom/custom", cwd=lab).returncode == 0
    result = run("validate", cwd=lab)
    assert result.returncode == 0, result.stdout + result.stderr
    where = subprocess.run([str(py), "-c", "import tuneplane; print(tuneplane.__file__)"], env=env,
                           capture_output=True, text=True, cwd=tmp_path).stdout
    assert str(env_dir) in where, f"tp ran from {where}, not from the venv"
