"""The launcher's attempt record and resume point, run for real: `python -m tuneplane.launcher` with a run
directory, trainers that fail, are signalled, ask for the limit warning or write checkpoints."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from support.wait import wait_until
from test_launcher import EAGER_SOURCE, FIXTURES, TRAIN, make_plugin, plugin_lines, write_jobspec

from tuneplane.constants import CONFIG_ERROR_EXIT
from tuneplane.report.checkpoints import mark_complete, newest_complete
from tuneplane.runtime import attempts

# A wrapper that runs the real trainer with subprocess.check_call: its CalledProcessError is not the cause.
WRAPPER = """import subprocess, sys
print("wrapper: starting the trainer", flush=True)
subprocess.check_call([sys.executable, "trainer.py"])
"""
TRAINER_MISSING_DATA = """import sys
print("loading data", flush=True)
open("/nonexistent-dir/data.jsonl")
"""
SLEEPER = """import os, signal, sys, time
if sys.argv[1:] == ["asks"]:
    signal.signal(signal.SIGUSR1, lambda *_: open("warned", "w").write("yes"))
open("ready", "w").write("1")
print("sleeping", flush=True)
for _ in range(600):
    if os.path.exists("stop"):  # the rest of the step's TERM (see _stop): the shell in between waits for it
        break
    time.sleep(0.1)
"""
RESUME_ECHO = """import json, os
json.dump({"attempt": os.environ.get("TUNEPLANE_ATTEMPT"), "resume": os.environ.get("TUNEPLANE_RESUME_FROM")},
          open("seen.json", "w"))
"""


def _env(work: Path, run_dir: Path, **extra: str) -> dict[str, str]:
    run_dir.mkdir(exist_ok=True)  # every backend makes it before the launcher starts
    env = dict(
        os.environ,
        TUNEPLANE_WORK_DIR=str(work),
        TUNEPLANE_RUN_DIR=str(run_dir),
        TUNEPLANE_OUT_DIR=str(run_dir / "out"),
        TUNEPLANE_NODE_RANK="1",
        PYTHONPATH=os.pathsep.join([str(FIXTURES), os.environ.get("PYTHONPATH", "")]),
    )
    env.update(extra)  # may name the node rank: the job's plugin lines are node 0's
    for name in ("TUNEPLANE_ATTEMPT", "TUNEPLANE_RESUME_FROM", "TUNEPLANE_TERMINATION_LOG", "TUNEPLANE_JOB_TOKEN"):
        if name not in extra:
            env.pop(name, None)
    return env


def _run(work: Path, run_dir: Path, one_log: bool = False, **extra: str) -> subprocess.CompletedProcess[str]:
    """The launcher to its end; `one_log`: its stderr into its stdout, as a Slurm step or a local run has."""
    return subprocess.run(
        [sys.executable, "-m", "tuneplane.launcher"],
        cwd=work,
        env=_env(work, run_dir, **extra),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT if one_log else subprocess.PIPE,
        text=True,
        timeout=120,
    )


def _record(run_dir: Path, attempt: int = 1, rank: int = 1) -> dict[str, Any]:
    found = attempts.read_all(run_dir)
    return next(r for r in found[attempt] if r["node_rank"] == rank)


def test_the_trainers_own_error_is_recorded_not_the_wrappers(tmp_path: Path) -> None:
    work, run_dir = tmp_path / "work", tmp_path / "run"
    work.mkdir()
    (work / "wrapper.py").write_text(WRAPPER)
    (work / "trainer.py").write_text(TRAINER_MISSING_DATA)
    write_jobspec(work, [], [sys.executable, "wrapper.py"])
    done = _run(work, run_dir, TUNEPLANE_ATTEMPT="2")
    assert done.returncode == 1, done.stderr
    assert "CalledProcessError" in done.stderr  # what a person sees in the log is untouched
    record = _record(run_dir, attempt=2)
    assert record["exit_code"] == 1 and "signal" not in record, record
    assert record["error"].startswith("FileNotFoundError: [Errno 2]"), record
    assert record["error"].endswith("'/nonexistent-dir/data.jsonl'"), record
    assert "loading data" in record["log_tail"] and record["node_rank"] == 1 and record["node"]
    assert record["started_at"] <= record["finished_at"]


def test_a_signal_is_recorded_as_the_signal_and_passed_on(tmp_path: Path) -> None:
    work, run_dir = tmp_path / "work", tmp_path / "run"
    work.mkdir()
    (work / "sleeper.py").write_text(SLEEPER)
    write_jobspec(work, [], ["bash", "-c", f"exec {sys.executable} sleeper.py"])
    proc = subprocess.Popen(
        [sys.executable, "-m", "tuneplane.launcher"],
        cwd=work,
        env=_env(work, run_dir),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    _wait_for(work / "ready")
    assert _record(run_dir).keys() >= {"attempt", "started_at"}  # the start record is there while it runs
    assert "finished_at" not in _record(run_dir)
    proc.send_signal(signal.SIGTERM)
    proc.communicate(timeout=60)
    assert proc.returncode == 143
    record = _record(run_dir)
    assert (record["exit_code"], record["signal"]) == (143, 15), record
    assert "sleeping" in record["log_tail"]


def test_a_wrapper_that_turns_the_signal_into_its_own_exit_is_still_ended_by_the_signal(tmp_path: Path) -> None:
    """torchrun and accelerate catch the engine's TERM, stop their ranks and exit 1: the attempt was
    ended by the signal all the same, and says so as a shell would, 128 + 15."""
    work, run_dir = tmp_path / "work", tmp_path / "run"
    work.mkdir()
    (work / "wrapper.py").write_text(
        "import signal, sys, time\n"
        "signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))\n"
        "open('ready', 'w').write('1')\n"
        "time.sleep(60)\n"
    )
    write_jobspec(work, [], [sys.executable, "wrapper.py"])
    proc = subprocess.Popen([sys.executable, "-m", "tuneplane.launcher"], cwd=work, env=_env(work, run_dir), text=True)
    _wait_for(work / "ready")
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=60) == 143
    assert (_record(run_dir)["exit_code"], _record(run_dir)["signal"]) == (143, 15)


def _stop(proc: subprocess.Popen[str], work: Path) -> None:
    """TERM the launcher, as an engine ends a step. The engine signals every process of the step; here
    only the launcher is, and it passes TERM to its child, a shell that waits for its own child before it
    acts on it: that one is told to stop by a file instead of sleeping out its minute."""
    proc.send_signal(signal.SIGTERM)
    (work / "stop").touch()
    proc.communicate(timeout=60)


def test_the_limit_warning_reaches_only_a_trainer_that_asked(tmp_path: Path) -> None:
    for asks in (True, False):
        work, run_dir = tmp_path / f"work-{asks}", tmp_path / f"run-{asks}"
        work.mkdir()
        (work / "sleeper.py").write_text(SLEEPER)
        write_jobspec(work, [], ["bash", "-c", f"{sys.executable} sleeper.py {'asks' if asks else 'no'}; exit $?"])
        proc = subprocess.Popen(
            [sys.executable, "-m", "tuneplane.launcher"],
            cwd=work,
            env=_env(work, run_dir),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        _wait_for(work / "ready")
        proc.send_signal(signal.SIGUSR1)
        if asks:
            _wait_for(work / "warned")
        else:
            time.sleep(1)
            assert proc.poll() is None, "a trainer that did not ask was killed by the warning"
        assert not (work / "warned").exists() or asks
        _stop(proc, work)
        assert _record(run_dir)["signal"] == 15


def test_resume_from_the_newest_complete_checkpoint(tmp_path: Path) -> None:
    work, run_dir = tmp_path / "work", tmp_path / "run"
    work.mkdir()
    (work / "echo.py").write_text(RESUME_ECHO)
    write_jobspec(work, [], [sys.executable, "echo.py"])
    assert _run(work, run_dir).returncode == 0
    assert json.loads((work / "seen.json").read_text()) == {"attempt": "1", "resume": None}

    ckpts = run_dir / "out" / "checkpoints"
    (ckpts / "checkpoint-200").mkdir(parents=True)
    (ckpts / "checkpoint-200" / "trainer_state.json").write_text("{}")
    (ckpts / "checkpoint-300").mkdir()  # killed while saving: no trainer_state.json
    done = _run(work, run_dir, TUNEPLANE_ATTEMPT="2")
    assert done.returncode == 0, done.stderr
    assert json.loads((work / "seen.json").read_text()) == {"attempt": "2", "resume": str(ckpts / "checkpoint-200")}
    assert f"resumes from {ckpts / 'checkpoint-200'}" in done.stdout


def test_the_completeness_markers_of_each_framework(tmp_path: Path) -> None:
    out = tmp_path / "out"
    ckpts = out / "checkpoints"
    assert newest_complete(out) is None
    (ckpts / "global_step_40").mkdir(parents=True)
    (ckpts / "global_step_50").mkdir()
    (ckpts / "latest_checkpointed_iteration.txt").write_text("40\n")  # 50 was being written
    assert newest_complete(out) == ckpts / "global_step_40"
    (ckpts / "step_45").mkdir()
    (ckpts / "step_45" / "training_info.json").write_text("{}")
    assert newest_complete(out) == ckpts / "step_45"
    (ckpts / "mine").mkdir()
    assert newest_complete(out) == ckpts / "step_45"
    mark_complete(ckpts / "mine", 60)
    assert newest_complete(out) == ckpts / "mine"
    (ckpts / "step_70").mkdir()  # NeMo-RL folder without its training info: incomplete
    assert newest_complete(out) == ckpts / "mine"


def test_the_termination_message_is_the_compact_end_record_within_the_limit(tmp_path: Path) -> None:
    work, run_dir = tmp_path / "work", tmp_path / "run"
    work.mkdir()
    (work / "noisy.py").write_text("for i in range(400):\n    print('x' * 300, i)\nraise RuntimeError('boom')\n")
    write_jobspec(work, [], [sys.executable, "noisy.py"])
    message = tmp_path / "termination-log"
    # one log for both streams: only then is the order of the last lines the trainer's own (two pipes are
    # read by two threads, and a loaded machine may interleave them)
    done = _run(work, run_dir, one_log=True, TUNEPLANE_TERMINATION_LOG=str(message))
    assert done.returncode == 1
    text = message.read_text()
    assert len(text.encode()) <= attempts.TERMINATION_LIMIT and "\n" not in text.strip()
    record = attempts.decode(text)
    assert record is not None and record["error"] == "RuntimeError: boom" and record["exit_code"] == 1
    assert record["log_tail"] and record["log_tail"][-1] == "RuntimeError: boom"


def test_a_refusal_keeps_its_one_line_message_and_is_recorded(tmp_path: Path) -> None:
    work, run_dir = tmp_path / "work", tmp_path / "run"
    work.mkdir()
    plugin = make_plugin(work, "opsd-patch", EAGER_SOURCE)
    plugin["digest"] = "sha256:" + "0" * 64
    write_jobspec(work, [plugin], TRAIN)
    message = tmp_path / "termination-log"
    done = _run(work, run_dir, TUNEPLANE_TERMINATION_LOG=str(message))
    assert done.returncode == CONFIG_ERROR_EXIT
    assert message.read_text().startswith("tuneplane-launch: error: plugin alice/opsd-patch@1.2.0")
    record = _record(run_dir)
    assert record["exit_code"] == CONFIG_ERROR_EXIT and "digest" in record["error"]


def test_plugins_are_installed_once_in_the_watched_trainer(tmp_path: Path) -> None:
    work, run_dir = tmp_path / "work", tmp_path / "run"
    work.mkdir()
    plugin = make_plugin(work, "opsd-patch", EAGER_SOURCE)
    write_jobspec(work, [plugin], TRAIN)
    done = _run(work, run_dir, TUNEPLANE_NODE_RANK="0")
    assert done.returncode == 0, done.stderr
    assert plugin_lines(done) == ["plugin  : alice/opsd-patch@1.2.0 applied in entrypoint process"]
    result = json.loads((work / "result.json").read_text())
    assert result["patch_calls"] == 1, result
    assert _record(run_dir, rank=0)["exit_code"] == 0


def _wait_for(path: Path, timeout: float = 30) -> None:
    wait_until(path.exists, timeout, message=f"{path} never appeared")


def test_the_engines_warning_file_reaches_only_catchers(tmp_path: Path) -> None:
    """Slurm's batch script writes a file when the warning comes; each launcher passes it on as SIGUSR1."""
    for asks in (True, False):
        work, run_dir = tmp_path / f"work-{asks}", tmp_path / f"run-{asks}"
        work.mkdir()
        (work / "sleeper.py").write_text(SLEEPER)
        write_jobspec(work, [], ["bash", "-c", f"{sys.executable} sleeper.py {'asks' if asks else 'no'}; exit $?"])
        warning = tmp_path / f"warning-{asks}"
        proc = subprocess.Popen(
            [sys.executable, "-m", "tuneplane.launcher"],
            cwd=work,
            env=_env(work, run_dir, TUNEPLANE_LIMIT_WARNING_FILE=str(warning)),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        _wait_for(work / "ready")
        warning.write_text("now")
        if asks:
            _wait_for(work / "warned")
        else:
            time.sleep(2.5)  # more than the launcher's poll
            assert proc.poll() is None and not (work / "warned").exists()
        _stop(proc, work)
        assert _record(run_dir)["signal"] == 15


def test_a_watched_shell_trainer_still_names_the_plugins_it_skips(tmp_path: Path) -> None:
    work, run_dir = tmp_path / "work", tmp_path / "run"
    work.mkdir()
    other = make_plugin(work, "env-tool", EAGER_SOURCE, capability="environment")
    write_jobspec(work, [other], ["bash", "-c", "echo trained"])
    done = _run(work, run_dir, TUNEPLANE_NODE_RANK="0")
    assert done.returncode == 0, done.stderr
    assert [line for line in plugin_lines(done) if "skipped" in line] == [
        "plugin  : alice/env-tool@1.2.0 skipped (capability environment is not loaded in the entrypoint process)"
    ]
    assert "trained" in done.stdout and _record(run_dir, rank=0)["exit_code"] == 0


def test_a_warning_that_came_before_the_handler_is_delivered_once_it_is_installed(tmp_path: Path) -> None:
    work, run_dir = tmp_path / "work", tmp_path / "run"
    work.mkdir()
    (work / "late.py").write_text("import os, signal, sys, time\ntime.sleep(1.5)\n" + SLEEPER.split("\n", 1)[1])
    write_jobspec(work, [], [sys.executable, "late.py", "asks"])
    warning = tmp_path / "warning"
    warning.write_text("early")  # Slurm may signal up to a minute early: before the trainer is ready
    proc = subprocess.Popen(
        [sys.executable, "-m", "tuneplane.launcher"],
        cwd=work,
        env=_env(work, run_dir, TUNEPLANE_LIMIT_WARNING_FILE=str(warning)),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    _wait_for(work / "warned")
    proc.send_signal(signal.SIGTERM)
    proc.communicate(timeout=60)


def test_a_pod_replaced_with_the_first_attempts_environment_is_the_next_attempt(tmp_path: Path) -> None:
    """A Kubernetes Job replaces an evicted pod from the same template: TUNEPLANE_ATTEMPT is unset (or
    says 1) again, yet this is attempt 2: it says so, resumes, and leaves attempt 1's record as it was."""
    work, run_dir = tmp_path / "work", tmp_path / "run"
    work.mkdir()
    (work / "echo.py").write_text(RESUME_ECHO + "raise SystemExit(3)\n")
    write_jobspec(work, [], [sys.executable, "echo.py"])
    assert _run(work, run_dir).returncode == 3
    ckpts = run_dir / "out" / "checkpoints"
    (ckpts / "checkpoint-20").mkdir(parents=True)
    (ckpts / "checkpoint-20" / "trainer_state.json").write_text("{}")

    (work / "echo.py").write_text(RESUME_ECHO)
    done = _run(work, run_dir)
    assert done.returncode == 0, done.stderr
    assert json.loads((work / "seen.json").read_text()) == {"attempt": "2", "resume": str(ckpts / "checkpoint-20")}
    assert f"launcher: attempt 2 resumes from {ckpts / 'checkpoint-20'}" in done.stdout
    assert (_record(run_dir, 1)["exit_code"], _record(run_dir, 2)["exit_code"]) == (3, 0)
    # another node rank's records are its own: its first attempt is still 1
    assert _run(work, run_dir, TUNEPLANE_NODE_RANK="0").returncode == 0
    assert _record(run_dir, 1, rank=0)["exit_code"] == 0


def test_in_a_pod_the_end_record_is_the_containers_termination_message(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The kubelet gives the container a termination message file and no variable names it: the record
    goes there, where the backend reads the trainer's error, signal and log tail from the API."""
    from tuneplane.runtime import pinned
    from tuneplane.runtime.supervise import JobAttempt, Outcome

    kubelets = tmp_path / "termination-log"
    kubelets.write_text("")
    monkeypatch.setattr(pinned, "K8S_TERMINATION_LOG", str(kubelets))
    monkeypatch.delenv("TUNEPLANE_TERMINATION_LOG", raising=False)
    JobAttempt(tmp_path / "run", 2, 0, "gpu-7").end(Outcome(143, 15, ["step 40 loss 1.25"], []))
    record = attempts.decode(kubelets.read_text())
    assert record is not None and (record["attempt"], record["exit_code"], record["signal"]) == (2, 143, 15)
    assert record["log_tail"] == ["step 40 loss 1.25"] and record["node"] == "gpu-7"
