"""The project as a new user and CI see it: README commands, CI script, workflows, the installed wheel."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import jsonschema
import pytest
import yaml
from support.repos import copy_work_tree, git

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


def test_the_readmes_lab_block_runs_as_written(tmp_path: Path) -> None:
    """A new user pastes "A lab in six commands" into a shell: it ends with a Succeeded local run."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    block = re.search(r"## A lab in \w+ commands\n\n```bash\n(.*?)```", text, flags=re.S)
    assert block is not None, "README.md has no 'A lab in … commands' bash block"
    bin_dir = Path(sys.executable).parent
    env = {
        **os.environ,
        "PATH": os.pathsep.join([str(bin_dir), os.environ.get("PATH", "")]),
        "TUNEPLANE_STORAGE_ROOT": str(tmp_path / "storage"),
        "TUNEPLANE_TOOL_REQUIREMENT": "tuneplane==0.5.0",
    }
    script = "set -euo pipefail\n" + block.group(1)
    done = subprocess.run(["bash", "-c", script], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "Succeeded" in done.stdout, done.stdout
    assert (tmp_path / "my-lab" / "status" / "my-exp").is_dir()


def test_the_readmes_lab_block_runs_on_a_fresh_machine(tmp_path: Path) -> None:
    """The README's lab block on a fresh machine: no git identity, no global git config, no TUNEPLANE_*
    setting, an empty HOME; only this interpreter's `tp` and the system's git on PATH."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    block = re.search(r"## A lab in \w+ commands\n\n```bash\n(.*?)```", text, flags=re.S)
    assert block is not None
    home = tmp_path / "home"
    home.mkdir()
    keep = ("PATH", "LANG", "LC_ALL", "TMPDIR", "SYSTEMROOT")
    env = {k: v for k, v in os.environ.items() if k in keep}
    env |= {
        "HOME": str(home),
        "PATH": os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "/usr/bin:/bin")]),
        "GIT_CONFIG_NOSYSTEM": "1",
        "XDG_CONFIG_HOME": str(home / ".config"),
        "XDG_DATA_HOME": str(home / ".local" / "share"),
        "XDG_CACHE_HOME": str(home / ".cache"),
        "XDG_STATE_HOME": str(home / ".local" / "state"),
    }
    script = "set -euo pipefail\n" + block.group(1)
    done = subprocess.run(["bash", "-c", script], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "Succeeded" in done.stdout, done.stdout
    assert "Traceback" not in done.stdout + done.stderr


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

    released = ToolSource(
        "tuneplane @ git+https://git.example.org/tp@v0.5.0", "x", "https://git.example.org/tp", "v0.5.0"
    )
    config = yaml.safe_load(lab_files("demo", tool=released)[".pre-commit-config.yaml"])
    assert config["repos"][0] == {
        "repo": "https://git.example.org/tp",
        "rev": "v0.5.0",
        "hooks": [{"id": "tp-validate"}],
    }
    assert [h["id"] for h in config["repos"][1]["hooks"]] == ["ruff-check"]  # the lab's own Python
    indexed = yaml.safe_load(lab_files("demo", tool=ToolSource("tuneplane==0.5.0", "x"))[".pre-commit-config.yaml"])
    hook = indexed["repos"][0]["hooks"][0]
    assert indexed["repos"][0]["repo"] == "local" and hook["entry"] == "tp validate"
    assert hook["language"] == "python" and hook["additional_dependencies"] == ["tuneplane==0.5.0"]
    unknown = yaml.safe_load(lab_files("demo", tool=ToolSource("", "x"))[".pre-commit-config.yaml"])
    assert unknown["repos"][0]["hooks"][0]["language"] == "system"


@pytest.fixture(scope="module")
def wheel(tmp_path_factory):
    """The project's wheel, built once per module for the tests that install it, from a private copy of the
    tree: setuptools builds in the source's own `build/` and `*.egg-info`, and two workers building the
    checkout at once (this module's and test_project_pythons') break each other's build."""
    dist = tmp_path_factory.mktemp("dist")
    source = tmp_path_factory.mktemp("source") / "tuneplane"
    copy_work_tree(ROOT, source)
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(dist), str(source)],
        check=True,
        capture_output=True,
        timeout=300,
    )
    return next(dist.glob("tuneplane-*.whl"))


def venv_with(env_dir: Path, wheel: Path, *pip_args: str, python: str = sys.executable) -> Path:
    """A venv of `python` without the machine's packages, holding `wheel` (and what `pip_args` let pip add);
    its Python. This suite's pip installs into it (`pip --python`): the venv needs no pip of its own, and
    nothing is compiled ahead (`--no-compile`: each test process compiles only what it imports)."""
    subprocess.run([python, "-m", "venv", "--without-pip", str(env_dir)], check=True, capture_output=True, timeout=300)
    py = env_dir / "bin" / "python"
    install = [sys.executable, "-m", "pip", "--python", str(py), "install", "-q", "--no-compile", *pip_args]
    done = subprocess.run([*install, str(wheel)], capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, f"pip install of the wheel into {env_dir}: {done.stderr[-3000:]}"
    return py


@pytest.mark.slow
def test_wheel_installs_into_a_fresh_venv_and_runs(tmp_path, wheel):
    """schemas/, catalog/ and templates/ must ship inside the wheel; tp runs from the venv alone."""
    import zipfile

    names = zipfile.ZipFile(wheel).namelist()
    assert "tuneplane/_data/catalog/custom/custom/recipe.yaml" in names
    assert "tuneplane/_data/schemas/recipe.schema.json" in names
    assert "tuneplane/_data/templates/lab/tuneplane.yaml.j2" in names
    assert not [n for n in names if "__pycache__" in n or n.endswith(".pyc")]
    shipped = git(ROOT, "ls-files", "catalog", "templates", "schemas").split()
    assert len(shipped) > 100 and not [rel for rel in shipped if f"tuneplane/_data/{rel}" not in names]
    env_dir = tmp_path / "venv"
    py = venv_with(env_dir, wheel)  # with its dependencies, as a new user's `pip install tuneplane`
    tp = env_dir / "bin" / "tp"
    lab = tmp_path / "lab"
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    run = lambda *a, cwd=tmp_path: subprocess.run([str(tp), *a], cwd=cwd, env=env, capture_output=True, text=True)  # noqa: E731
    assert run("--version").stdout.strip().startswith("tp ")
    assert run("init", str(lab), "--no-git").returncode == 0
    assert run("new", "exp", "--method", "custom/custom", cwd=lab).returncode == 0
    result = run("validate", cwd=lab)
    assert result.returncode == 0, result.stdout + result.stderr
    where = subprocess.run(
        [str(py), "-c", "import tuneplane; print(tuneplane.__file__)"],
        env=env,
        capture_output=True,
        text=True,
        cwd=tmp_path,
    ).stdout
    assert str(env_dir) in where, f"tp ran from {where}, not from the venv"


# What a training image holds: the wheel alone, no dependency, no site-packages of the machine.
JOB_SIDE_CALLS = {
    "import tuneplane.report": ["-c", "import tuneplane.report as r; r.init(); r.log({'loss': 1.0}); r.finish()"],
    "install_deferred": ["-c", "from tuneplane.plugins import install_deferred; print(install_deferred.__name__)"],
    "launcher --help": ["-m", "tuneplane.launcher", "--help"],
    "collector --help": ["-m", "tuneplane.collector", "--help"],
    "every job-side module": [
        "-c",
        "import importlib, pkgutil, tuneplane\n"
        "for pkg in ('report', 'lifecycle', 'runtime', 'collector', 'metrics'):\n"
        "    mod = importlib.import_module('tuneplane.' + pkg)\n"
        "    for info in pkgutil.walk_packages(mod.__path__, mod.__name__ + '.'):\n"
        "        importlib.import_module(info.name)\n"
        "import tuneplane.launcher, tuneplane.plugins, tuneplane.constants",
    ],
}


@pytest.fixture(scope="module")
def bare_venv(tmp_path_factory, wheel):
    """A venv without the machine's packages holding the wheel installed without its dependencies."""
    env_dir = tmp_path_factory.mktemp("bare") / "venv"
    py = venv_with(env_dir, wheel, "--no-deps", "--no-index")
    missing = subprocess.run([str(py), "-c", "import pydantic"], capture_output=True, timeout=60)
    assert missing.returncode != 0, "the bare venv must not see pydantic"
    return env_dir


def _bare_env():
    return {
        k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME") and not k.startswith("TUNEPLANE_")
    }


@pytest.mark.slow
@pytest.mark.parametrize("call", list(JOB_SIDE_CALLS))
def test_the_job_side_runs_from_the_wheel_with_the_standard_library_only(bare_venv, tmp_path, call):
    done = subprocess.run(
        [str(bare_venv / "bin" / "python"), *JOB_SIDE_CALLS[call]],
        cwd=tmp_path,
        env=_bare_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stdout + done.stderr


@pytest.mark.slow
def test_tuneplane_launch_runs_from_the_wheel_with_the_standard_library_only(bare_venv, tmp_path):
    done = subprocess.run(
        [str(bare_venv / "bin" / "tuneplane-launch"), "--help"],
        cwd=tmp_path,
        env=_bare_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0 and "tuneplane-launch" in done.stdout, done.stdout + done.stderr


@pytest.mark.slow
@pytest.mark.parametrize("args", [["--help"], ["validate"], ["init", "lab"]])
def test_tp_without_its_dependencies_says_what_to_install(bare_venv, tmp_path, args):
    """An image with the wheel alone has no pydantic or Typer: tp says so, not 'a bug in tp'."""
    done = subprocess.run(
        [str(bare_venv / "bin" / "tp"), *args],
        cwd=tmp_path,
        env=_bare_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 1, done.stdout + done.stderr
    assert "Traceback" not in done.stderr and "bug" not in done.stderr, done.stderr
    first = done.stderr.splitlines()[0]
    assert first.startswith("error: tp needs the Python package '") and "pip install" in done.stderr, done.stderr
    assert not (tmp_path / "lab").exists()
