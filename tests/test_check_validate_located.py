"""Input that used to end `tp validate` (and its neighbours) in "internal error" (exit 3) gets a located
message and exit 1 or 2, and a file of another lab is never answered with "no problems"."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from support.labs import new_lab

RUN_ID = "20260101-120000-abcdef"
HUGE = "9" * 5000


def write(root: Path, rel: str, text: str) -> Path:
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


@pytest.fixture()
def byo(lab: Path, tp: Any) -> Path:
    assert tp("new", "byo", "--method", "custom/custom").code == 0
    return lab


def no_crash(result: Any) -> None:
    assert result.code in (1, 2), result.output
    assert "internal error" not in result.output and "Traceback" not in result.output


@pytest.mark.parametrize("where", ["run", "lock", "config"])
def test_an_integer_past_4300_digits_is_a_located_problem(byo: Path, tp_subprocess: Any, where: str) -> None:
    if where == "run":
        rel = write(
            byo,
            f"runs/byo/{RUN_ID}.yaml",
            "apiVersion: tuneplane/run/v1\nkind: RunRequest\n"
            f"experiment: byo\nrun_id: {RUN_ID}\nprofile: h200\ntimeout: {HUGE}\n",
        ).relative_to(byo)
        line = 6
    elif where == "lock":
        path = byo / "experiments/byo/recipe.lock.json"
        path.write_text(path.read_text(encoding="utf-8").replace("{", '{"big": ' + HUGE + ",", 1), encoding="utf-8")
        rel, line = path.relative_to(byo), 1
    else:
        rel = write(
            byo, "experiments/byo/experiment.yaml", f"apiVersion: tuneplane/experiment/v1\nx: {HUGE}\n"
        ).relative_to(byo)
        line = 2
    result = tp_subprocess("validate", cwd=byo)
    no_crash(result)
    assert f"{rel}:{line}:" in result.out and "number-too-long" in result.out


def test_an_integer_past_4300_digits_in_tuneplane_yaml_is_located(byo: Path, tp_subprocess: Any) -> None:
    path = byo / "tuneplane.yaml"
    path.write_text(path.read_text(encoding="utf-8") + f"x_big: {HUGE}\n", encoding="utf-8")
    for args in (("validate",), ("render", "byo", "--profile", "h200")):
        result = tp_subprocess(*args, cwd=byo)
        no_crash(result)
        assert "tuneplane.yaml:" in result.output and "5,000 digits" in result.output


def test_a_deleted_working_directory_is_said_so(byo: Path, tmp_path: Path) -> None:
    gone = tmp_path / "gone"
    script = f'cd "{gone}" && rmdir "{gone}" && exec "{sys.executable}" -m tuneplane "$@"'
    for args in (["validate"], ["ls"]):
        gone.mkdir()
        done = subprocess.run(
            ["sh", "-c", script, "sh", *args], capture_output=True, text=True, timeout=120, check=False
        )
        assert done.returncode == 2 and "internal error" not in done.stderr, done.stderr
        assert "current directory no longer exists" in done.stderr


def test_a_plugin_tree_past_path_max_is_a_problem(byo: Path, tp_subprocess: Any) -> None:
    write(
        byo,
        "plugins/deep/plugin.yaml",
        "schema: tuneplane/plugin/v1\nname: deep\nversion: 0.1.0\n"
        "capability: algorithm\nentrypoint: deep.algo:install\n",
    )
    write(byo, "plugins/deep/deep/__init__.py", "")
    write(byo, "plugins/deep/deep/algo.py", "def install(ctx):\n    pass\n")
    fd = os.open(byo / "plugins/deep", os.O_RDONLY)
    try:
        for _ in range(30):  # each level made relative to the one above: no single path passes the limit
            os.mkdir("d" * 200, dir_fd=fd)
            inner = os.open("d" * 200, os.O_RDONLY, dir_fd=fd)
            os.close(fd)
            fd = inner
    finally:
        os.close(fd)
    result = tp_subprocess("validate", cwd=byo)
    no_crash(result)
    assert "plugin-entry" in result.out and "bytes long" in result.out


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads every folder")
def test_an_unreadable_experiment_folder_is_a_problem(byo: Path, tp_subprocess: Any) -> None:
    folder = byo / "experiments/byo"
    folder.chmod(0)
    try:
        result = tp_subprocess("validate", cwd=byo)
    finally:
        folder.chmod(0o755)
    no_crash(result)
    assert "experiments/byo: error [experiment-unreadable]" in result.out


def test_a_file_of_another_lab_is_not_answered_with_no_problems(byo: Path, tmp_path: Path, tp_subprocess: Any) -> None:
    other = tmp_path / "other-lab"
    new_lab(other, "other", tool_requirement="tuneplane==0.5.0", experiments={"sft": "trl/sft"})
    config = other / "experiments/sft/config.yaml"
    config.write_text(config.read_text(encoding="utf-8") + "learning_rate: [\n", encoding="utf-8")
    result = tp_subprocess("validate", "../other-lab/experiments/sft/config.yaml", cwd=byo)
    assert result.code == 2 and "no problems" not in result.output
    assert f"belongs to the lab at {other}" in result.err and f"cd {other}" in result.err


def test_a_set_value_past_4300_digits_is_refused_by_name(byo: Path, tp_subprocess: Any) -> None:
    result = tp_subprocess(
        "render",
        "byo",
        "--profile",
        "h200",
        "--set",
        f"x={HUGE}",
        "--image",
        "registry.example.com/x:1",
        "--observability-url",
        "https://wandb.example.org/x",
        "--allow-dirty",
        cwd=byo,
    )
    no_crash(result)
    assert "--set x: a number of 5,000 digits" in result.err
