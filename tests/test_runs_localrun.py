"""Local runs are first-class runs: watched, followed and stopped from another terminal.

Every test drives `tp` as real processes: one `tp submit --local` (foreground or `--detach`) and,
beside it, the commands a second terminal would type. The trainer is a bash loop that reports a metric
through `tuneplane.report` and waits for a file the test writes, so nothing depends on timing; every
wait is bounded.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from support.installed import needs
from support.labs import new_lab
from support.repos import git
from support.wait import wait_until

SUBMIT = ("--profile", "local", "--image", "python:3.12", "--observability-url", "https://track.example.org/p")
# Reports step i as `loss`, prints a line per step, and ends when the test's stop file exists.
LOOP_SH = """#!/usr/bin/env bash
set -euo pipefail
stop=STOP_FILE
for i in $(seq 1 3000); do
  python -c "from tuneplane import report; report.init(); report.log({'loss': 1.0 / $i}, step=$i); report.finish()"
  echo "step $i"
  if [ -e "$stop" ]; then echo "done after $i"; exit 0; fi
  sleep 0.1
done
"""


def _until(what: str, check: Callable[[], Any], timeout: float = 60) -> Any:
    """`check()` once it is true; polled every 0.2 s, as most polls start a `tp`."""
    return wait_until(check, timeout, 0.2, f"timed out waiting for {what}")


def _tp(*args: Any, cwd: Path, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tuneplane", *map(str, args)],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def _popen(*args: Any, cwd: Path) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "tuneplane", *map(str, args)],
        cwd=cwd,
        text=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )


@pytest.fixture()
def looping_lab(tmp_path: Path, tp: Any) -> Iterator[Path]:
    root = tmp_path / "lab"
    new_lab(root, "watch")
    assert tp("new", "loop", "--method", "custom/custom", cwd=root).code == 0
    stop = shlex.quote(str(tmp_path / "stop-file"))
    (root / "experiments" / "loop" / "train.sh").write_text(LOOP_SH.replace("STOP_FILE", stop), encoding="utf-8")
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "a trainer that loops until told to stop")
    yield root
    (tmp_path / "stop-file").touch()  # whatever happened, let a leftover trainer end


def _run_id(root: Path) -> str:
    found = sorted((root / "status" / "loop").glob("*.json"))
    return found[0].stem if found else ""


def _kill(proc: subprocess.Popen[str]) -> str:
    if proc.poll() is None:
        os.killpg(proc.pid, 9)
    out, _ = proc.communicate(timeout=30)
    return out


def test_a_foreground_local_run_is_watched_followed_and_cancelled_from_another_terminal(
    looping_lab: Path, tmp_path: Path
) -> None:
    root = looping_lab
    submit = _popen("submit", "loop", *SUBMIT, "--local", cwd=root)
    follower: subprocess.Popen[str] | None = None
    try:
        run_id = _until("the run to be registered", lambda: _run_id(root))
        listed = _until(
            "tp job ls to show it Running",
            lambda: (r := _tp("job", "ls", cwd=root)).returncode == 0 and "Running" in r.stdout and r,
        )
        assert run_id in listed.stdout and "(not submitted)" not in listed.stdout

        status = _until(
            "a live metric in tp job status",
            lambda: (r := _tp("job", "status", run_id[:14], cwd=root)) and "loss" in r.stdout and r,
        )
        assert "Running" in status.stdout and "requested, not submitted" not in status.stdout
        metrics = _tp("job", "metrics", f"loop/{run_id[:12]}", cwd=root)
        assert metrics.returncode == 0 and "loss" in metrics.stdout, metrics.stdout + metrics.stderr

        follower = _popen("job", "logs", "-f", run_id, cwd=root)
        assert follower.stdout is not None
        _until("the follower to print job lines", lambda: "step" in follower.stdout.readline())

        cancel = _tp("job", "cancel", run_id, cwd=root)
        assert cancel.returncode == 0, cancel.stdout + cancel.stderr
        assert "Cancelled" in cancel.stdout

        out, _ = submit.communicate(timeout=60)
        assert submit.returncode == 1 and "Cancelled" in out, out
        rest, _ = follower.communicate(timeout=30)  # the follower ends with the run
        assert follower.returncode == 0
    finally:
        _kill(submit)
        if follower is not None:
            _kill(follower)
    final = json.loads((root / "status" / "loop" / f"{run_id}.json").read_text(encoding="utf-8"))
    assert final["phase"] == "Cancelled" and final["reason"] == "Cancelled"
    # the owner commits the end first; the canceller then records `cancel: true` in the request
    assert git(root, "log", "-2", "--format=%s").splitlines() == [
        f"Cancel run {run_id} of loop",
        f"Status of run {run_id} of loop: Cancelled",
    ]
    assert git(root, "status", "--porcelain") == ""
    assert "done after" not in (Path(final["out_dir"]).parent / "run.log").read_text(encoding="utf-8")


def test_a_detached_local_run_returns_at_once_and_records_its_end(looping_lab: Path, tmp_path: Path) -> None:
    root = looping_lab
    started = _tp("submit", "loop", *SUBMIT, "--local", "--detach", cwd=root)
    assert started.returncode == 0, started.stdout + started.stderr
    run_id = _run_id(root)
    assert run_id and f"tp job logs -f {run_id}" in started.stdout and f"tp job status {run_id}" in started.stdout
    _until("the detached run to be Running", lambda: "Running" in _tp("job", "status", run_id, cwd=root).stdout)
    (tmp_path / "stop-file").touch()

    def ended() -> dict[str, Any] | None:
        data = json.loads((root / "status" / "loop" / f"{run_id}.json").read_text(encoding="utf-8"))
        return data if data["phase"] in ("Succeeded", "Failed", "Cancelled") else None

    final = _until("the detached run to end", ended)
    assert final["phase"] == "Succeeded" and final["metrics"]["train/loss"] > 0  # `loss`, by its canonical name
    _until(
        "its status commit",
        lambda: git(root, "log", "-1", "--format=%s") == f"Status of run {run_id} of loop: Succeeded",
    )
    logs = _tp("job", "logs", run_id, cwd=root)
    assert "done after" in logs.stdout


def test_status_files_and_requests_name_their_schema_inside_the_lab(looping_lab: Path, tmp_path: Path) -> None:
    root = looping_lab
    (tmp_path / "stop-file").touch()
    done = _tp("submit", "loop", *SUBMIT, "--local", cwd=root, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    run_id = _run_id(root)
    status_path = root / "status" / "loop" / f"{run_id}.json"
    schema = json.loads(status_path.read_text(encoding="utf-8"))["$schema"]
    assert (status_path.parent / schema).resolve() == (root / ".tuneplane" / "schemas" / "status.schema.json")
    request = root / "runs" / "loop" / f"{run_id}.yaml"
    first = request.read_text(encoding="utf-8").splitlines()[0]
    ref = first.removeprefix("# yaml-language-server: $schema=")
    assert (request.parent / ref).resolve() == (root / ".tuneplane" / "schemas" / "run.schema.json")
    assert _tp("job", "status", run_id, "--json", cwd=root).returncode == 0
    assert _tp("validate", cwd=root).returncode == 0


@pytest.mark.parametrize("form", ["full", "prefix", "exp/run", "path"])
def test_every_job_command_takes_every_run_reference(looping_lab: Path, tmp_path: Path, form: str) -> None:
    root = looping_lab
    (tmp_path / "stop-file").touch()
    assert _tp("submit", "loop", *SUBMIT, "--local", cwd=root, timeout=120).returncode == 0
    run_id = _run_id(root)
    ref = {"full": run_id, "prefix": run_id[:13], "exp/run": f"loop/{run_id}", "path": f"runs/loop/{run_id}.yaml"}[form]
    for argv in (("status", ref), ("logs", ref), ("metrics", ref)):
        done = _tp("job", *argv, cwd=root)
        assert done.returncode == 0, (argv, done.stdout + done.stderr)
    assert "loss" in _tp("job", "metrics", ref, cwd=root).stdout
    cancel = _tp("job", "cancel", ref, cwd=root)
    assert cancel.returncode == 2 and "already ended" in cancel.stderr


def test_quickstart_prints_how_to_watch_from_another_terminal(tmp_path: Path) -> None:
    script = Path(__file__).resolve().parents[1] / "examples" / "quickstart.sh"
    done = subprocess.run(
        ["bash", str(script), str(tmp_path / "qs")],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "Succeeded" in done.stdout.splitlines()[-1] or "Succeeded" in done.stdout[-400:]
    assert "another terminal" in done.stdout and "tp job logs -f" in done.stdout


@pytest.mark.slow
def test_local_2_trains_image_classification_on_two_cpu_ranks(tmp_path: Path, tp: Any) -> None:
    needs("torch")
    root = tmp_path / "lab"
    new_lab(root, "cpu")
    assert tp("new", "cls", "--method", "pytorch/image-classification", cwd=root).code == 0
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "image classification")
    small = ("epochs=1", "synthetic_train_samples=256", "synthetic_val_samples=64", "batch_size=32", "log_interval=1")
    done = _tp(
        "submit",
        "cls",
        "--profile",
        "local:2",
        "--image",
        "pytorch/pytorch:2.13.0",
        *(a for kv in small for a in ("--set", kv)),
        "--local",
        cwd=root,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "--nproc_per_node 2" in done.stdout and "(GPUs none)" in done.stdout
    finished = [
        json.loads(line.split("│ ", 1)[1]) for line in done.stdout.splitlines() if '"event": "finished"' in line
    ]
    assert finished and finished[0]["world_size"] == 2
    assert finished[0]["steps"] == 4  # 256 samples over 2 ranks of 32 per step: half the steps of one rank
    status = json.loads(next((root / "status" / "cls").glob("*.json")).read_text(encoding="utf-8"))
    assert status["phase"] == "Succeeded" and "validation/accuracy" in status["metrics"]


def test_a_cpu_launch_line_gets_its_process_count(tmp_path: Path, tp: Any) -> None:
    """The seed's `--nproc_per_node "$TUNEPLANE_CLUSTER_GPUS_PER_NODE"` starts 0 on a CPU profile: warned."""
    root = tmp_path / "lab"
    new_lab(root, "seed")
    assert tp("new", "ddp", "--method", "custom/custom", cwd=root).code == 0
    train = root / "experiments" / "ddp" / "train.sh"
    train.write_text(
        "#!/usr/bin/env bash\nset -euo pipefail\nexec torchrun --nproc_per_node "
        '"$TUNEPLANE_CLUSTER_GPUS_PER_NODE" "$TUNEPLANE_EXP_DIR/train.py"\n',
        encoding="utf-8",
    )
    warned = tp("validate", "ddp", cwd=root)
    assert warned.code == 0 and "launch-zero-procs" in warned.out and "train.sh:3:" in warned.out
    assert "TUNEPLANE_CLUSTER_PROCS_PER_NODE" in warned.out and "local" in warned.out
    train.write_text(train.read_text(encoding="utf-8").replace("GPUS_PER_NODE", "PROCS_PER_NODE"), encoding="utf-8")
    assert "launch-zero-procs" not in tp("validate", "ddp", cwd=root).out


def test_export_runs_here_against_a_local_runs_outputs(looping_lab: Path, tmp_path: Path, tp: Any) -> None:
    root = looping_lab
    (tmp_path / "stop-file").touch()
    assert _tp("submit", "loop", *SUBMIT, "--local", cwd=root, timeout=120).returncode == 0
    source = json.loads(next((root / "status" / "loop").glob("*.json")).read_text(encoding="utf-8"))
    assert tp("new", "sft", "--method", "trl/sft", cwd=root).code == 0
    text = (
        (root / "tuneplane.yaml")
        .read_text(encoding="utf-8")
        .replace("  defaults: {}", '  defaults: {trl: "ghcr.io/acme/trl:1"}', 1)
    )
    (root / "tuneplane.yaml").write_text(text, encoding="utf-8")
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "a TRL experiment")
    ref = f"loop/{source['run_id'][:12]}"
    dry = _tp("export", "sft", "--checkpoint", ref, "--dry-run", cwd=root)
    assert dry.returncode == 0 and f"--checkpoint {source['out_dir']}" in dry.stdout
    assert "00000000-000000-000000" not in dry.stdout + dry.stderr and "run folder: " in dry.stderr
    here = _tp("export", "sft", "--checkpoint", ref, "--local", cwd=root, timeout=300)
    statuses = [json.loads(p.read_text(encoding="utf-8")) for p in (root / "status" / "sft").glob("*.json")]
    assert [s["operation"] for s in statuses] == ["export"], here.stdout + here.stderr
    log = (Path(statuses[0]["out_dir"]).parent / "run.log").read_text(encoding="utf-8")
    assert "export.py" in log and source["out_dir"] in log  # it ran here, on that run's outputs
    assert "runs on CPU" in here.stdout  # a GPU recipe on the local profile: warned
