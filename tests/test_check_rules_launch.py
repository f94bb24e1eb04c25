"""The guide's launch lines on a machine without GPUs, where `TUNEPLANE_CLUSTER_GPUS_PER_NODE` is 0.

Each of the guide's three lines either runs on the local backend or is refused by `tp submit` (and
by the bot) with the fix; `tp validate` and `tp submit` say what each launcher really does with 0
(checked against torch's `torchrun` and accelerate's `accelerate launch` in `test_what_*`).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from support.installed import needs
from support.repos import clone, git, make_remote, quiet, request, run_ids, seed_lab

from tuneplane.bot.entry import reconcile
from tuneplane.check.rules.launch import ACCELERATE, TORCHRUN, zero_counts
from tuneplane.lab.runs import RunKey, read_status, write_request

SUBMIT = ("--profile", "local", "--image", "python:3.12", "--observability-url", "https://track.example.org/p")
TRAIN_PY = """import json, os, sys
from tuneplane.report import log
print("rank", json.dumps({"rank": os.environ.get("RANK"), "world": os.environ.get("WORLD_SIZE")}))
print("args", json.dumps(sys.argv[1:]))
print("env", json.dumps([os.environ[f"TUNEPLANE_CLUSTER_{k}_PER_NODE"] for k in ("GPUS", "PROCS")]))
log({"train/loss": 1.0}, step=1)
"""
# the guide's three launch lines, as written there
PYTHON = """exec python "${TUNEPLANE_EXP_DIR}/train.py" \\
  --output-dir "${TUNEPLANE_OUT_DIR}" \\
  --config "${TUNEPLANE_EXP_DIR}/config.yaml"
"""
ACCELERATE_LINE = """exec accelerate launch \\
  --num_processes "${TUNEPLANE_CLUSTER_GPUS_PER_NODE}" \\
  "${TUNEPLANE_EXP_DIR}/train.py" \\
  --output_dir "${TUNEPLANE_OUT_DIR}" \\
  --config "${TUNEPLANE_EXP_DIR}/config.yaml"
"""
TORCHRUN_LINE = """exec torchrun \\
  --nproc_per_node "${TUNEPLANE_CLUSTER_GPUS_PER_NODE}" \\
  "${TUNEPLANE_EXP_DIR}/train.py" \\
  --output-dir "${TUNEPLANE_OUT_DIR}"
"""


def _lab(lab: Path, tp: Any, launch: str) -> Path:
    assert tp("new", "byo", "--method", "custom/custom").code == 0
    train = lab / "experiments/byo/train.sh"
    head = train.read_text(encoding="utf-8").splitlines(keepends=True)[:-1]  # the scaffold but its last line
    train.write_text("".join(head) + launch, encoding="utf-8")
    (lab / "experiments/byo/train.py").write_text(TRAIN_PY, encoding="utf-8")
    git(lab, "add", "-A")
    git(lab, "commit", "-q", "-m", "byo")
    return train


def _printed(out: str, tag: str) -> list[Any]:
    return [json.loads(line.split(f"{tag} ", 1)[1]) for line in out.splitlines() if f"│ {tag} " in line]


def _launch_line_number(train: Path) -> int:
    lines = train.read_text(encoding="utf-8").splitlines()
    return next(n for n, line in enumerate(lines, 1) if line.startswith("exec "))


def test_the_guides_python_line_runs(lab: Path, tp: Any, tp_subprocess: Any) -> None:
    _lab(lab, tp, PYTHON)
    done = tp_subprocess("submit", "byo", *SUBMIT, "--local", cwd=lab, timeout=300)
    assert done.code == 0, done.output
    assert "Succeeded" in done.out and _printed(done.out, "rank") == [{"rank": None, "world": None}]
    assert _printed(done.out, "env") == [["0", "1"]]  # the GPU count stays the GPU count; processes: 1
    assert "warning" not in done.out


@pytest.mark.slow
def test_the_guides_accelerate_line_runs_one_process_and_submit_says_so(lab: Path, tp: Any, tp_subprocess: Any) -> None:
    needs("accelerate")
    train = _lab(lab, tp, ACCELERATE_LINE)
    done = tp_subprocess("submit", "byo", *SUBMIT, "--local", cwd=lab, timeout=300)
    assert done.code == 0, done.output
    assert _printed(done.out, "rank") == [{"rank": None, "world": None}]  # one plain process, as the lint says
    where = f"experiments/byo/train.sh:{_launch_line_number(train) + 1}:3: warning [launch-zero-procs]"
    assert where in done.out and "accelerate launch starts one plain process" in done.out
    assert "TUNEPLANE_CLUSTER_PROCS_PER_NODE" in done.out
    assert done.out.index(where) < done.out.index("wrote runs/byo/")  # said before anything is written


@pytest.mark.slow
def test_the_guides_torchrun_line_is_refused_at_submit_and_its_fix_runs(lab: Path, tp: Any, tp_subprocess: Any) -> None:
    needs("torch")
    train = _lab(lab, tp, TORCHRUN_LINE)
    head = git(lab, "rev-parse", "HEAD")
    refused = tp_subprocess("submit", "byo", *SUBMIT, "--local", cwd=lab)
    assert refused.code == 2 and "Traceback" not in refused.output
    line = _launch_line_number(train) + 1
    assert f"error: experiments/byo/train.sh:{line}:3: torchrun's --nproc_per_node" in refused.err
    assert "which is 0 on profile local" in refused.err and "AssertionError" in refused.err
    assert 'hint: pass "${TUNEPLANE_CLUSTER_PROCS_PER_NODE}" instead' in refused.err
    assert git(lab, "rev-parse", "HEAD") == head and not (lab / "runs/byo").exists()  # nothing written

    train.write_text(train.read_text(encoding="utf-8").replace("GPUS_PER_NODE", "PROCS_PER_NODE"), encoding="utf-8")
    git(lab, "commit", "-q", "-am", "the fix the refusal names")
    done = tp_subprocess("submit", "byo", *SUBMIT, "--local", cwd=lab, timeout=300)
    assert done.code == 0, done.output
    assert _printed(done.out, "rank") == [{"rank": "0", "world": "1"}]  # one torchrun worker on local


def test_the_bot_refuses_a_run_that_would_start_no_process(tmp_path: Path) -> None:
    remote = make_remote(tmp_path)
    [run_id] = run_ids(1)
    script = "#!/usr/bin/env bash\nset -eu\n" + TORCHRUN_LINE
    seed_lab(remote, tmp_path / "seed", {"demo": script}, runs=[("demo", run_id)])
    bot = clone(remote, tmp_path / "bot")

    report = reconcile(bot, echo=quiet)

    status = read_status(bot, RunKey("demo", run_id))
    assert len(report.refused) == 1 and status is not None and status.phase == "Failed"
    assert "experiments/demo/train.sh:4:3: torchrun's --nproc_per_node" in status.message
    assert "TUNEPLANE_CLUSTER_PROCS_PER_NODE" in status.message


# ── what the lint says, and that it is what the launchers do ───────────────────────────────────────


def test_each_launcher_is_named_with_what_it_does_with_zero() -> None:
    found = zero_counts(TORCHRUN_LINE + ACCELERATE_LINE, shell=True)
    assert [(f.line, f.col, f.flag, f.launcher) for f in found] == [
        (2, 3, "nproc_per_node", TORCHRUN),
        (6, 3, "num_processes", ACCELERATE),
    ]
    assert TORCHRUN.starts_nothing and not ACCELERATE.starts_nothing


@pytest.mark.parametrize(
    "line",
    [
        'exec torchrun --nproc_per_node "${TUNEPLANE_CLUSTER_PROCS_PER_NODE}" train.py',
        'exec torchrun --nproc_per_node "${TUNEPLANE_CLUSTER_PROCS_PER_NODE:-$TUNEPLANE_CLUSTER_GPUS_PER_NODE}" t.py',
        '# exec torchrun --nproc_per_node "$TUNEPLANE_CLUSTER_GPUS_PER_NODE" train.py',
    ],
    ids=["procs", "procs-with-the-upstream-fallback", "comment"],
)
def test_a_count_that_is_never_zero_is_not_flagged(line: str) -> None:
    assert zero_counts(line + "\n", shell=True) == []


def test_validate_names_what_each_launcher_does(lab: Path, tp: Any) -> None:
    _lab(lab, tp, TORCHRUN_LINE.replace("exec ", "") + ACCELERATE_LINE)
    result = tp("validate", "byo", "--format", "json")
    found = [p for p in json.loads(result.out)["problems"] if p["rule"] == "launch-zero-procs"]
    messages = [p["message"] for p in found]
    assert len(found) == 2 and all(p["severity"] == "warning" for p in found)
    assert "torchrun starts no process and stops on a bare AssertionError" in messages[0]
    assert "tp submit` refuses such a run" in messages[0]
    assert "accelerate launch starts one plain process, not distributed" in messages[1]
    assert "refuses" not in messages[1]


def _zero_launch(argv: list[str], tmp_path: Path) -> subprocess.CompletedProcess[str]:
    script = tmp_path / "t.py"
    script.write_text('import os\nprint("started", os.environ.get("WORLD_SIZE"))\n', encoding="utf-8")
    env = {"PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin", "HOME": str(tmp_path), "OMP_NUM_THREADS": "1"}
    return subprocess.run(
        [*argv, str(script)], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300, check=False
    )


@pytest.mark.slow
def test_what_torchrun_does_with_zero(tmp_path: Path) -> None:
    needs("torch")
    done = _zero_launch([sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "0"], tmp_path)
    assert done.returncode != 0 and "started" not in done.stdout
    assert done.stderr.rstrip().endswith("AssertionError")  # bare: nothing says why


@pytest.mark.slow
def test_what_accelerate_does_with_zero(tmp_path: Path) -> None:
    needs("accelerate")
    done = _zero_launch([sys.executable, "-m", "accelerate.commands.launch", "--num_processes", "0"], tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["started None"]  # one process, no distributed world


def test_validate_reports_a_run_request_the_bot_would_refuse(lab: Path, tp: Any) -> None:
    """The pull-request check says it before the merge, at the request's profile, with submit's words."""
    _lab(lab, tp, TORCHRUN_LINE)
    local, gpus = request("byo", "20260101-120000-aaaaaa"), request("byo", "20260101-120000-bbbbbb", "h200:8")
    for req in (local, gpus):
        write_request(lab, req)
    result = tp("validate", "--format", "json")
    found = [p for p in json.loads(result.out)["problems"] if p["rule"] == "launch-zero-procs"]
    errors = [(p["file"], p["line"], p["severity"]) for p in found if p["file"].startswith("runs/")]
    assert errors == [("runs/byo/20260101-120000-aaaaaa.yaml", 9, "error")] and result.code == 1
    message = next(p["message"] for p in found if p["file"].startswith("runs/"))
    assert message.startswith("experiments/byo/train.sh:39:3: torchrun's --nproc_per_node")
