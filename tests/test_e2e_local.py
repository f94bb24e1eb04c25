"""End to end on one machine: tp init → tp new → a real trainer → tp submit --local → status in git.

The trainer is a small logistic regression (standard library only) that reports with tuneplane.report
and writes a checkpoint, as the README's quickstart does; a second trainer fails on purpose.
"""

from __future__ import annotations

import json
from pathlib import Path

from support.repos import git

TRAIN_PY = """
import json, math, os, random
from tuneplane import report

random.seed(0)
data = [(x, 1 if x > 0.2 else 0) for x in (random.uniform(-1, 1) for _ in range(200))]
w = b = 0.0
report.init(hparams={"lr": 0.5})
for epoch in range(6):
    loss = 0.0
    for x, y in data:
        p = 1 / (1 + math.exp(-(w * x + b)))
        w -= 0.5 * (p - y) * x
        b -= 0.5 * (p - y)
        loss -= y * math.log(p + 1e-9) + (1 - y) * math.log(1 - p + 1e-9)
    accuracy = sum((w * x + b > 0) == (y == 1) for x, y in data) / len(data)
    report.log({"loss": loss / len(data), "accuracy": accuracy}, step=epoch)
    print(f"epoch {epoch} loss {loss / len(data):.4f} accuracy {accuracy:.3f}", flush=True)
report.finish()
out = os.path.join(os.environ["TUNEPLANE_OUT_DIR"], "checkpoints")
os.makedirs(out, exist_ok=True)
with open(os.path.join(out, "step-6.json"), "w") as fh:
    json.dump({"w": w, "b": b}, fh)
"""
TRAIN_SH = '#!/usr/bin/env bash\nset -euo pipefail\nexec python "${TUNEPLANE_EXP_DIR}/train.py"\n'
FAILING_SH = """#!/usr/bin/env bash
set -eu
for i in $(seq 1 25); do echo "warming up $i"; done
echo "CUDA error: out of memory" >&2
exit 7
"""
SUBMIT = (
    "--profile",
    "local",
    "--image",
    "python:3.12",
    "--observability-url",
    "https://track.example.org/p",
)


def _experiment(tp, root: Path, name: str, files: dict[str, str]) -> None:
    assert tp("new", name, "--method", "custom/custom", cwd=root).code == 0
    for rel, text in files.items():
        (root / "experiments" / name / rel).write_text(text)
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", f"experiment {name}")


def test_a_local_run_ends_succeeded_with_metrics_artifacts_and_history(tmp_path: Path, tp, tp_subprocess) -> None:
    root = tmp_path / "lab"
    assert tp("init", root, "--name", "e2e").code == 0
    _experiment(tp, root, "logreg", {"train.py": TRAIN_PY, "train.sh": TRAIN_SH})

    result = tp_subprocess("submit", "logreg", *SUBMIT, "--set", "lr=0.5", "-m", "first try", "--local", cwd=root)

    assert result.code == 0, result.output
    assert "epoch 5 loss" in result.out and "Succeeded" in result.out
    [status_path] = (root / "status/logreg").glob("*.json")
    status = json.loads(status_path.read_text())
    assert status["phase"] == "Succeeded" and status["exit_code"] == 0
    assert [h["phase"] for h in status["history"]] == ["Submitted", "Running", "Succeeded"]
    # custom runs name keys by the HF convention: a bare key is a training metric
    assert set(status["metrics"]) == {"train/accuracy", "train/loss"} and status["metrics"]["train/accuracy"] > 0.9
    assert len(status["metric_history"]["train/loss"]) == 6
    assert status["artifacts"][0]["path"] == "checkpoints/step-6.json" and status["artifacts"][0]["step"] == 6
    assert Path(status["out_dir"], "checkpoints/step-6.json").is_file()
    run_id = status_path.stem
    request = (root / f"runs/logreg/{run_id}.yaml").read_text()
    assert request.startswith("# yaml-language-server: $schema=../../.tuneplane/schemas/run.schema.json\n")
    assert "lr: 0.5" in request and "message: first try" in request
    log = git(root, "log", "--format=%s", "-3").splitlines()
    assert log[0] == f"Status of run {run_id} of logreg: Succeeded"
    assert log[1] == f"Request run {run_id} of logreg (local)"
    assert git(root, "show", "--name-only", "--format=", "HEAD").split() == [
        "status/README.md",
        "status/index.json",  # no month page: the experiment page is the page of its newest month
        f"status/logreg/{run_id}.json",
        f"status/logreg/{run_id}.svg",
        "status/logreg/README.md",
    ]
    assert git(root, "status", "--porcelain") == ""
    dashboard = (root / "status/README.md").read_text()
    assert f"`{run_id}`" in dashboard and "✅ Succeeded" in dashboard and "| train/loss 0.0" in dashboard


def test_a_failing_trainer_ends_failed_with_its_exit_code_and_last_lines(tmp_path: Path, tp, tp_subprocess) -> None:
    root = tmp_path / "lab"
    assert tp("init", root, "--name", "e2e").code == 0
    _experiment(tp, root, "broken", {"train.sh": FAILING_SH})

    result = tp_subprocess("submit", "broken", *SUBMIT, "--local", cwd=root)

    assert result.code == 1, result.output
    assert "error: run" in result.err and "ended Failed" in result.err and "Traceback" not in result.output
    [status_path] = (root / "status/broken").glob("*.json")
    status = json.loads(status_path.read_text())
    assert status["phase"] == "Failed" and status["exit_code"] == 7 and status["reason"] == "Error"
    assert "CUDA error: out of memory" in status["message"] and "warming up 25" in status["message"]
    assert "warming up 5\n" not in status["message"]
    assert git(root, "log", "-1", "--format=%s") == f"Status of run {status_path.stem} of broken: Failed"


def test_refusals_surface_before_anything_is_written(tmp_path: Path, tp) -> None:
    root = tmp_path / "lab"
    assert tp("init", root, "--name", "e2e").code == 0
    _experiment(tp, root, "logreg", {"train.py": TRAIN_PY, "train.sh": TRAIN_SH})
    head = git(root, "rev-parse", "HEAD")

    no_url = tp("submit", "logreg", "--profile", "local", "--image", "python:3.12", cwd=root)
    bad_profile = tp(
        "submit",
        "logreg",
        "--profile",
        "locl",
        "--image",
        "x:1",
        "--observability-url",
        "https://t.example.org",
        cwd=root,
    )

    assert no_url.code == 2 and "custom external observability requires" in no_url.err
    assert (
        bad_profile.code == 2
        and "unknown profile 'locl'" in bad_profile.err
        and "did you mean 'local'" in bad_profile.err
    )
    assert git(root, "rev-parse", "HEAD") == head and not (root / "runs/logreg").exists()


def test_the_quickstart_script_ends_with_a_committed_success(tmp_path: Path) -> None:
    import os
    import subprocess
    import sys

    script = Path(__file__).resolve().parents[1] / "examples" / "quickstart.sh"
    env = dict(os.environ, PATH=os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", ""))

    done = subprocess.run(
        ["bash", str(script), str(tmp_path / "qs")],
        capture_output=True,
        text=True,
        env=env,
        timeout=180,
        check=False,
    )

    assert done.returncode == 0, done.stdout + done.stderr
    assert "[6/6] Where everything is" in done.stdout and "epoch 12/12" in done.stdout
    lab = tmp_path / "qs" / "lab"
    [status_path] = (lab / "status/logreg").glob("*.json")
    assert json.loads(status_path.read_text())["phase"] == "Succeeded"
    assert git(lab, "log", "-1", "--format=%s") == f"Status of run {status_path.stem} of logreg: Succeeded"
    assert git(lab, "status", "--porcelain") == ""
