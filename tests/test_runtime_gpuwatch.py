"""The GPU watchdog: a run whose processes occupy more GPUs than `TUNEPLANE_CLUSTER_GPUS_PER_NODE` grants
is warned in its job log and its status, or stopped with reason `GpuOveruse` when the lab says so; within
the grant, or where nvidia-smi is missing, fails or hangs, the run goes on as if there were no watchdog.

The tests put a stand-in `nvidia-smi` on PATH that reports the pids a trainer wrote (its "ranks") as
holding GPUs, and run the real launcher under the local backend's real supervisor. The trainer waits
until the stand-in has been asked twice after its ranks started (a full sample of them), so nothing
depends on timing; every wait is bounded.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import stat
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from support.local import local_run
from support.repos import git, request

from tuneplane.author.scaffold import new_experiment
from tuneplane.backends.base import SubmitRequest
from tuneplane.backends.local import LOG, LocalBackend
from tuneplane.constants import ATTEMPT_REASONS, GPU_WATCHDOG_ENV
from tuneplane.lab.load import load_lab
from tuneplane.runs.prepare import backend_request
from tuneplane.runs.prepare import prepare as prepare_run
from tuneplane.runtime import attempts, gpuwatch

# ── a stand-in nvidia-smi ────────────────────────────────────────────────────────────────────────────

# Answers the two queries the watchdog makes: each pid in $DIR/pids/* holds GPU (i mod GPUS), and a
# process of someone else holds GPU 0 too; every compute-apps query is counted in $DIR/queries first.
FAKE_SMI = """#!/bin/sh
dir=DIR
gpus=GPUS
case "$1" in
  --query-compute-apps=*)
    echo compute-apps >> "$dir/queries"
    BEHAVIOUR
    i=0
    for f in "$dir"/pids/*; do
      [ -f "$f" ] || continue
      echo "$(cat "$f"), GPU-fake-$((i % gpus)), 1024"
      i=$((i + 1))
    done
    echo "4194304, GPU-fake-0, 77"
    ;;
  --query-gpu=*)
    i=0
    while [ "$i" -lt "$gpus" ]; do echo "$i, GPU-fake-$i"; i=$((i + 1)); done
    ;;
  *) echo "unexpected arguments: $*" >&2; exit 64 ;;
esac
"""
HANGS = 'echo $$ > "$dir/hung-pid"; exec sleep 120'
FAILS = 'echo "NVIDIA-SMI has failed because it could not communicate with the NVIDIA driver" >&2; exit 9'

# Four "ranks" (sleeps) each write their pid; then the trainer waits for two more samples and ends.
FOUR_RANKS = """mkdir -p DIR/pids
for r in 0 1 2 3; do sleep 60 & echo $! > DIR/pids/$r; done
asked() { cat DIR/queries 2>/dev/null | grep -c compute-apps || true; }
before=$(asked)
tries=0
until [ "$(asked)" -ge $((before + 2)) ]; do
  tries=$((tries + 1)); [ "$tries" -lt 600 ] || { echo "never sampled" >&2; exit 3; }
  sleep 0.1
done
WHEN_SAMPLED
"""
ENDS = 'kill $(cat DIR/pids/*)\necho "trained"'
WAITS = "wait"  # stopped by the watchdog, or by the ranks' own end (a failure)


def fake_smi(folder: Path, gpus: int, behaviour: str = "") -> Path:
    """A bin folder whose `nvidia-smi` reports the pids under `folder`/pids on `gpus` GPUs."""
    bin_dir = folder / "bin"
    bin_dir.mkdir(parents=True)
    text = FAKE_SMI.replace("DIR", shlex.quote(str(folder))).replace("GPUS", str(gpus))
    tool = bin_dir / "nvidia-smi"
    tool.write_text(text.replace("BEHAVIOUR", behaviour), encoding="utf-8")
    tool.chmod(tool.stat().st_mode | stat.S_IXUSR)
    return bin_dir


def four_ranks(folder: Path, then: str) -> str:
    return FOUR_RANKS.replace("WHEN_SAMPLED", then).replace("DIR", shlex.quote(str(folder)))


def with_lab_settings(root: Path, policy: str | None) -> None:
    """A local profile of four GPUs (`gpus`) and, unless None, the lab's `cluster.gpu_watchdog`."""
    path = root / "tuneplane.yaml"
    text = path.read_text(encoding="utf-8")
    text = text.replace(
        "profiles:\n", "profiles:\n  gpus:\n    local: true\n    gpus_per_node: 4\n    max_nodes: 1\n", 1
    )
    if policy is not None:
        text = re.sub(r"(?m)^  gpu_watchdog: .*\n", "", text)  # `tp init` writes the default
        text = text.replace("\ncluster:\n", f"\ncluster:\n  gpu_watchdog: {policy}\n", 1)
    path.write_text(text, encoding="utf-8")


@pytest.fixture
def watched(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """This machine has four (pretend) GPUs, the watchdog samples every second; the stand-in's folder."""
    monkeypatch.setenv("TUNEPLANE_LOCAL_GPUS", "0,1,2,3")
    monkeypatch.setenv(gpuwatch.INTERVAL_ENV, "1")
    monkeypatch.setenv("TUNEPLANE_LOCAL_KILL_GRACE", "1")
    folder = tmp_path / "smi"
    folder.mkdir()
    return folder


def use_tool(monkeypatch: pytest.MonkeyPatch, bin_dir: Path) -> None:
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")


# ── end to end: `tp submit --local`, its job log and its status file ──────────────────────────────


def _submit(root: Path, profile: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tuneplane", "submit", "demo", "--profile", profile, "--local"]
        + ["--image", "python:3.12", "--observability-url", "https://track.example.org/p"],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )


def _status(root: Path) -> dict[str, object]:
    (path,) = sorted((root / "status" / "demo").glob("*.json"))
    return json.loads(path.read_text(encoding="utf-8"))  # type: ignore[no-any-return]


def _job_log(root: Path, status: dict[str, object]) -> str:
    logs = subprocess.run(
        [sys.executable, "-m", "tuneplane", "job", "logs", str(status["run_id"])],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert logs.returncode == 0, logs.stdout + logs.stderr
    return logs.stdout


def _lab_with_trainer(lab: Path, policy: str | None, script: str) -> Path:
    with_lab_settings(lab, policy)
    new_experiment(load_lab(lab), "demo", "custom/custom", None)
    (lab / "experiments/demo/train.sh").write_text("#!/usr/bin/env bash\nset -eu\n" + script, encoding="utf-8")
    git(lab, "add", "-A")
    git(lab, "commit", "-q", "-m", "a trainer that starts four ranks")
    return lab


def test_four_ranks_on_a_one_gpu_grant_are_warned_in_the_log_and_the_status(
    lab: Path, watched: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    use_tool(monkeypatch, fake_smi(watched, gpus=4))
    root = _lab_with_trainer(lab, None, four_ranks(watched, ENDS))  # the lab keeps the default: warn

    done = _submit(root, "gpus:1")

    assert done.returncode == 0, done.stdout + done.stderr
    status = _status(root)
    assert status["phase"] == "Succeeded"
    (attempt,) = status["attempts"]  # type: ignore[misc]
    assert attempt["reason"] == "Completed"
    assert attempt["message"].startswith(
        "GPU watchdog: the run's processes occupy 4 GPUs on this node (0, 1, 2, 3; 4 processes)"
    )
    assert "but it was granted 1 (TUNEPLANE_CLUSTER_GPUS_PER_NODE=1)" in attempt["message"]
    assert status["message"] == attempt["message"]  # the run's own message says it too
    log = _job_log(root, status)
    (line,) = [line for line in log.splitlines() if "gpu watchdog" in line]  # said once, not every sample
    assert line.startswith("tuneplane-launch: gpu watchdog: warning: the run's processes occupy 4 GPUs")
    assert "trained" in log


def test_the_labs_stop_policy_ends_the_run_with_reason_gpu_overuse(
    lab: Path, watched: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    use_tool(monkeypatch, fake_smi(watched, gpus=4))
    root = _lab_with_trainer(lab, "stop", four_ranks(watched, WAITS))

    done = _submit(root, "gpus:1")

    assert done.returncode != 0, done.stdout + done.stderr
    status = _status(root)
    assert (status["phase"], status["reason"]) == ("Failed", "GpuOveruse")
    (attempt,) = status["attempts"]  # type: ignore[misc]
    assert attempt["reason"] == "GpuOveruse" and attempt["signal"] == 15 and attempt["exit_code"] == 143
    assert attempt["message"].startswith("GPU watchdog: the run's processes occupy 4 GPUs")
    assert attempt["message"].endswith("; stopped (cluster.gpu_watchdog: stop)")
    log = _job_log(root, status)
    assert "tuneplane-launch: gpu watchdog: error: the run's processes occupy 4 GPUs" in log
    for pid_file in (watched / "pids").iterdir():  # every rank was stopped, not only the trainer's shell
        assert not gpuwatch.alive(int(pid_file.read_text()))


# ── the backend's view: within the grant, and a tool that fails or hangs ──────────────────────────


def _job(root: Path, policy: str | None, script: str, profile: str) -> SubmitRequest:
    _lab_with_trainer(root, policy, script)
    lab = load_lab(root)
    run = prepare_run(
        lab, request("demo", "20250107-000000-00000a", profile), commit=git(root, "rev-parse", "HEAD"), dirty=False
    )
    return backend_request(root, lab, run)


@pytest.fixture
def storage() -> Path:
    return Path(os.environ["TUNEPLANE_STORAGE_ROOT"])


def test_ranks_that_share_the_granted_gpu_are_not_warned(
    lab: Path, storage: Path, watched: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    use_tool(monkeypatch, fake_smi(watched, gpus=1))  # four processes, all on one GPU: within a grant of 1
    backend = LocalBackend(storage)

    ref, obs = backend.run(_job(lab, "stop", four_ranks(watched, ENDS), "gpus:1"))

    (attempt,) = obs.attempts
    assert (obs.phase, attempt.reason, attempt.message) == ("Succeeded", "Completed", "")
    assert "gpu watchdog" not in (backend.run_dir(ref) / LOG).read_text()


@pytest.mark.parametrize("behaviour", [FAILS, HANGS], ids=["fails", "hangs"])
def test_a_failing_or_hung_nvidia_smi_leaves_the_run_alone(
    lab: Path, storage: Path, watched: Path, monkeypatch: pytest.MonkeyPatch, behaviour: str
) -> None:
    use_tool(monkeypatch, fake_smi(watched, gpus=4, behaviour=behaviour))
    backend = LocalBackend(storage)
    # the trainer ends once the tool was asked (a hung one is asked once: its query is still under way)
    waits_for = 1 if behaviour == HANGS else 2
    script = four_ranks(watched, ENDS).replace("$((before + 2))", f"$((before + {waits_for}))")

    ref, obs = backend.run(_job(lab, "stop", script, "gpus:1"))

    (attempt,) = obs.attempts
    assert (obs.phase, attempt.reason, attempt.message) == ("Succeeded", "Completed", ""), obs.message
    log = (backend.run_dir(ref) / LOG).read_text()
    assert "trained" in log and "occupy" not in log
    if behaviour == HANGS:  # the hung query went with the trainer, and left nothing running
        assert not gpuwatch.alive(int((watched / "hung-pid").read_text()))


# ── the parts ────────────────────────────────────────────────────────────────────────────────────────


def test_only_the_trees_own_processes_count() -> None:
    rows = [
        ["101", "GPU-a", "1024"],
        ["102", "GPU-b", "[N/A]"],
        ["999", "GPU-c", "10"],  # someone else's
        ["No running processes found"],
        ["103", "[Not Supported]", "5"],
    ]
    assert gpuwatch.occupied(rows, {101, 102, 103}) == {"GPU-a", "GPU-b"}
    assert gpuwatch.gpu_names([["0", "GPU-a"], ["10", "GPU-b"], ["2", "GPU-c"]], {"GPU-a", "GPU-b", "GPU-z"}) == [
        "0",
        "10",
        "GPU-z",
    ]


def test_the_process_tree_is_the_trainer_and_its_descendants(tmp_path: Path) -> None:
    child = subprocess.Popen(["bash", "-c", "sleep 30 & echo $!; wait"], stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout is not None
        grandchild = int(child.stdout.readline())
        tree = gpuwatch.process_tree(child.pid)
        assert tree[0] == child.pid and grandchild in tree and os.getpid() not in tree
        assert gpuwatch.descends_from(grandchild, child.pid) and gpuwatch.descends_from(child.pid, child.pid)
        assert not gpuwatch.descends_from(os.getpid(), child.pid) and not gpuwatch.descends_from(4194304, child.pid)
    finally:
        stop = gpuwatch.TreeStop(child.pid, grace=30)
        stop()
        child.wait(timeout=30)
        stop.finish()
    assert child.returncode == -15 and not gpuwatch.alive(grandchild)


def test_the_watchdog_is_off_without_the_tool_a_grant_or_the_labs_consent(tmp_path: Path) -> None:
    bin_dir = fake_smi(tmp_path, gpus=1)
    env = {"PATH": str(bin_dir), "TUNEPLANE_CLUSTER_GPUS_PER_NODE": "2"}
    assert gpuwatch.Settings.from_env(env) == gpuwatch.Settings("warn", 2, gpuwatch.DEFAULT_INTERVAL)
    assert gpuwatch.Settings.from_env({**env, GPU_WATCHDOG_ENV: "stop", gpuwatch.INTERVAL_ENV: "0.01"}) == (
        gpuwatch.Settings("stop", 2, 1.0)  # the interval has a floor: sampling stays cheap
    )
    assert gpuwatch.Settings.from_env({**env, gpuwatch.INTERVAL_ENV: "1e9"}).interval == 600.0  # type: ignore[union-attr]
    assert gpuwatch.Settings.from_env({**env, "PATH": str(tmp_path)}) is None  # a CPU machine: no nvidia-smi
    assert gpuwatch.Settings.from_env({**env, GPU_WATCHDOG_ENV: "off"}) is None
    assert gpuwatch.Settings.from_env({"PATH": str(bin_dir)}) is None  # outside a job: no grant


def test_an_unknown_policy_is_said_and_read_as_warn(capsys: pytest.CaptureFixture[str]) -> None:
    assert gpuwatch.policy_of("Stop") == "stop"
    assert gpuwatch.policy_of("kill") == "warn"
    assert "TUNEPLANE_GPU_WATCHDOG='kill' is not one of warn, stop, off" in capsys.readouterr().err


def test_the_record_keeps_the_finding_and_only_a_known_reason() -> None:
    kept = attempts.clean({"attempt": 1, "warning": "x" * 900, "reason": "GpuOveruse"})
    assert kept["reason"] == "GpuOveruse" and len(kept["warning"]) == attempts.LINE_LIMIT
    assert "reason" not in attempts.clean({"attempt": 1, "reason": "Whatever"})
    assert "GpuOveruse" in ATTEMPT_REASONS
    assert attempts.said({"error": "OSError: disk full", "warning": "w"}) == "OSError: disk full\nGPU watchdog: w"
    assert attempts.said({"error": "GPU watchdog: w; stopped", "warning": "w; stopped"}) == "GPU watchdog: w; stopped"


@pytest.mark.parametrize(("policy", "expected"), [(None, None), ("warn", None), ("stop", "stop"), ("off", "off")])
def test_the_labs_policy_reaches_the_job_environment(lab: Path, policy: str | None, expected: str | None) -> None:
    submit = _job(lab, policy, "echo fine\n", "gpus:1")

    env = local_run(submit).env
    assert env.get(GPU_WATCHDOG_ENV) == expected  # the default is the launcher's own: jobs stay as they were


def test_a_cluster_job_gets_the_labs_policy_on_kubernetes_and_slurm(tmp_path: Path) -> None:
    from support.render import CLUSTER_SETTINGS, build, env_values, main_container, make_lab, pod_templates
    from support.render import request as render_request

    from tuneplane.render.slurm import render_batch

    settings = CLUSTER_SETTINGS.replace("\ncluster:\n", "\ncluster:\n  gpu_watchdog: stop\n", 1)
    lab = make_lab(tmp_path / "lab", {"demo": "custom/custom"}, settings=settings)
    spec, plan, docs = build(
        lab, render_request("demo", image="registry.example.com/t:1", observability_url="https://o")
    )

    assert {env_values(main_container(t)).get(GPU_WATCHDOG_ENV) for t in pod_templates(docs[0])} == {"stop"}
    assert f"{GPU_WATCHDOG_ENV}=stop" in render_batch(spec, plan, lab.config).script


def test_a_query_that_does_not_answer_is_killed_and_the_watchdog_goes_off(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    use_tool(monkeypatch, fake_smi(tmp_path, gpus=1, behaviour=HANGS))
    watchdog = gpuwatch.Watchdog(os.getpid(), gpuwatch.Settings("stop", 0, 1.0), lambda: None, gpuwatch.Tool(0.5))

    watchdog.watch(threading.Event())  # returns: the first query hangs, and nothing is asked again

    assert not gpuwatch.alive(int((tmp_path / "hung-pid").read_text()))
    assert (tmp_path / "queries").read_text().count("compute-apps") == 1
    assert "nvidia-smi did not answer within 0.5 s; the watchdog is off for the rest of this run" in (
        capsys.readouterr().err
    )
    assert not watchdog.stopped and watchdog.finding == ""
