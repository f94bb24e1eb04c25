"""A custom job's log starts with the person's own launch line (their train.sh's `exec`), on the local
backend (the supervisor writes it) and wherever the launcher starts the job (a pod, a Slurm step)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from support.repos import git

from tuneplane.runtime.launchline import SHOWN_ENV, launch_line, own_launch_line, shell_commands

SUBMIT = ("--profile", "local", "--image", "python:3.12", "--observability-url", "https://track.example.org/p")
SCRIPT = """#!/usr/bin/env bash
# exec python not-this.py   (a comment)
set -euo pipefail
exec > >(tee -a "${TUNEPLANE_OUT_DIR}/train.log") 2>&1
exec python "${TUNEPLANE_EXP_DIR}/train.py" \\
  --output-dir "${TUNEPLANE_OUT_DIR}"  # where checkpoints go
echo never
"""
OWN = 'exec python "${TUNEPLANE_EXP_DIR}/train.py" --output-dir "${TUNEPLANE_OUT_DIR}"'


def test_the_launch_is_the_first_exec_that_starts_a_program() -> None:
    assert launch_line(SCRIPT) == (5, OWN)
    assert launch_line("python train.py\n") is None  # no exec: nothing to name as the launch
    assert launch_line("exec 2>&1\nexec {fd}<in\n") is None


def test_commands_join_continuations_and_drop_comments() -> None:
    assert shell_commands("a \\\n  b # c\n\n# d\ne\n") == [(1, "a b"), (5, "e")]


def test_only_a_script_in_the_job_package_is_named(tmp_path: Path) -> None:
    script = tmp_path / "work/experiments/byo/train.sh"
    script.parent.mkdir(parents=True)
    script.write_text(SCRIPT, encoding="utf-8")
    work = str(tmp_path / "work")
    assert own_launch_line(["bash", str(script)], work) == f"experiments/byo/train.sh:5: {OWN}"
    assert own_launch_line(["bash", str(script)], str(tmp_path / "elsewhere")) is None
    assert own_launch_line(["torchrun", str(script)], work) is None


def test_the_launcher_starts_the_log_with_it_once(tmp_path: Path) -> None:
    """As in a pod: the launcher runs `bash <script>` and prints the launch line before its output."""
    work = tmp_path / "work"
    script = work / "experiments/byo/train.sh"
    script.parent.mkdir(parents=True)
    script.write_text('#!/usr/bin/env bash\nexec echo "trainer says hi"\n', encoding="utf-8")
    spec = {"apiVersion": "tuneplane/v1", "kind": "TrainingJob", "spec": {"plugins": []}}
    spec["launch"] = {"argv": ["bash", str(script)], "mode": "direct", "cwd": "", "in_process": False}
    (work / ".tuneplane").mkdir()
    (work / ".tuneplane/jobspec.json").write_text(json.dumps(spec), encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if k != SHOWN_ENV} | {"TUNEPLANE_WORK_DIR": str(work)}

    def launch(**extra: str) -> list[str]:
        done = subprocess.run(
            [sys.executable, "-m", "tuneplane.launcher"],
            cwd=work,
            env=env | extra,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert done.returncode == 0, done.stderr
        return done.stdout.splitlines()

    assert launch() == ['experiments/byo/train.sh:2: exec echo "trainer says hi"', "trainer says hi"]
    assert launch(**{SHOWN_ENV: "1"}) == ["trainer says hi"]  # a backend already wrote it


def test_a_local_runs_log_starts_with_the_own_launch_line(lab: Path, tp: Any, tp_subprocess: Any) -> None:
    assert tp("new", "byo", "--method", "custom/custom").code == 0
    train = lab / "experiments/byo/train.sh"
    head = train.read_text(encoding="utf-8").splitlines(keepends=True)[:-1]
    train.write_text("".join(head) + SCRIPT.split("\n", 3)[3], encoding="utf-8")
    (lab / "experiments/byo/train.py").write_text(
        "from tuneplane.report import log\nprint('trainer output')\nlog({'train/loss': 1.0}, step=1)\n",
        encoding="utf-8",
    )
    git(lab, "add", "-A")
    git(lab, "commit", "-q", "-m", "byo")
    done = tp_subprocess("submit", "byo", *SUBMIT, "--local", cwd=lab, timeout=300)
    assert done.code == 0, done.output
    [run_id] = [p.stem for p in (lab / "runs/byo").glob("*.yaml")]

    logs = tp_subprocess("job", "logs", run_id, cwd=lab)

    lines = logs.out.splitlines()
    number = len(head) + 2  # after the scaffold's head and the exec that only redirects
    assert lines[0] == f"experiments/byo/train.sh:{number}: {OWN}", logs.output
    assert lines[1].startswith("[tuneplane] ") and "launching `bash " in lines[1]
    assert lines.count(lines[0]) == 1 and "trainer output" in lines[2:]
