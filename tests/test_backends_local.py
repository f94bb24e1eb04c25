"""The local backend: the run's commit as a job package, the environment contract, a supervised process
group (timeout and cancel kill all of it), the log, artifacts with realpath containment, GPUs, adoption."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from support.local import with_run
from support.render import CONTRACT_REQUIRED
from support.repos import git, request
from support.wait import until, wait_until

from tuneplane.author.scaffold import new_experiment
from tuneplane.backends.base import RunsHere, SubmitRequest
from tuneplane.backends.factory import local_backend
from tuneplane.backends.local import (
    CANCEL,
    DB,
    LOG,
    STATE,
    LocalBackend,
    collect_artifacts,
    read_state,
    supervise,
)
from tuneplane.ingest.store import MetricStore
from tuneplane.lab.load import load_lab
from tuneplane.runs.prepare import backend_request, prepare

CONTRACT = (
    *CONTRACT_REQUIRED,
    "TUNEPLANE_JOB_ENABLED",
    "TUNEPLANE_JOB_ENDPOINT",
    "TUNEPLANE_JOB_RUN_ID",
    "TUNEPLANE_JOB_TOKEN",
    "TUNEPLANE_RUN_ID",
    "TUNEPLANE_RUN_DIR",
    "TUNEPLANE_STORAGE_ROOT",
    "TUNEPLANE_EXTERNAL_OBSERVABILITY_URL",
)
_counter = iter(range(1, 10_000))


@pytest.fixture
def storage() -> Path:
    return Path(os.environ["TUNEPLANE_STORAGE_ROOT"])


@pytest.fixture
def exp(lab: Path) -> Path:
    new_experiment(load_lab(lab), "demo", "custom/custom", None)
    return lab


def job(root: Path, script: str, *, commit: bool = True, **spec_changes: object) -> SubmitRequest:
    """Commit `script` as the trainer and build the run's LocalRun (spec fields overridden)."""
    (root / "experiments/demo/train.sh").write_text("#!/usr/bin/env bash\nset -eu\n" + script)
    if commit:
        git(root, "add", "-A")
        git(root, "commit", "-q", "-m", "trainer")
    lab = load_lab(root)
    req = request("demo", f"20250107-000000-{next(_counter):06x}", "local")
    run = prepare(lab, req, commit=git(root, "rev-parse", "HEAD"), dirty=False)
    return with_run(backend_request(root, lab, run), **spec_changes)


def wait(backend: LocalBackend, ref, phases=("Succeeded", "Failed", "Cancelled"), timeout: float = 30):  # type: ignore[no-untyped-def]
    last = []  # the latest observation, for the message

    def ended():  # type: ignore[no-untyped-def]
        last[:] = [backend.observe(ref)]
        return last[0] if last[0].phase in phases else None

    return wait_until(ended, timeout, message=lambda: f"still {last[0].phase}: {last[0].message}")


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with open(f"/proc/{pid}/stat") as fh:  # a zombie is dead for our purpose
        return fh.read().split(") ")[1][0] != "Z"


def test_runs_the_commit_not_the_working_tree(exp: Path, storage: Path) -> None:
    submit = job(exp, 'echo "trainer v1"\n')
    (exp / "experiments/demo/train.sh").write_text('echo "trainer v2 (uncommitted)"\n')
    backend = LocalBackend(storage)

    ref, obs = backend.run(submit)

    run_dir = backend.run_dir(ref)
    log = (run_dir / LOG).read_text().splitlines()
    assert obs.phase == "Succeeded" and obs.exit_code == 0
    assert log[0].startswith("[tuneplane] ") and "launching `bash " in log[0] and "through tuneplane.launcher" in log[0]
    assert "trainer v1" in log and "trainer v2 (uncommitted)" not in "\n".join(log)
    work = run_dir / "work"
    assert json.loads((work / ".tuneplane/jobspec.json").read_text())["launch"]["argv"][0] == "bash"
    assert not (work / "runs").exists() and not (work / "status").exists()
    assert ref.run_dir == str(storage / "runs" / run_dir.parent.parent.name / "demo" / run_dir.name)
    assert ref.namespace == ""  # a Kubernetes namespace only


def test_the_job_sees_the_contract_and_its_token_stays_secret(exp: Path, storage: Path) -> None:
    submit = job(exp, 'env > "$TUNEPLANE_OUT_DIR/env.txt"\necho "token=$TUNEPLANE_JOB_TOKEN"\npwd\n')
    backend = LocalBackend(storage)

    ref, obs = backend.run(submit)

    run_dir = backend.run_dir(ref)
    env = dict(line.split("=", 1) for line in (run_dir / "out/env.txt").read_text().splitlines() if "=" in line)
    assert all(env.get(k) for k in CONTRACT), [k for k in CONTRACT if not env.get(k)]
    assert env["TUNEPLANE_WORK_DIR"] == str(run_dir / "work") and env["TUNEPLANE_OUT_DIR"] == str(run_dir / "out")
    assert env["TUNEPLANE_EXP_DIR"] == str(run_dir / "work/experiments/demo")
    assert env["TUNEPLANE_FRAMEWORK"] == env["TUNEPLANE_RECIPE"] == "custom"
    assert env["TUNEPLANE_JOB_ENABLED"] == "1" and env["TUNEPLANE_JOB_ENDPOINT"].startswith("http://127.0.0.1:")
    assert env["CUDA_VISIBLE_DEVICES"] == "" and env["TUNEPLANE_CLUSTER_GPUS_PER_NODE"] == "0"
    token = env["TUNEPLANE_JOB_TOKEN"]
    log = (run_dir / LOG).read_text()
    assert "token=[redacted]" in log and str(run_dir / "work") in log
    for path in (
        run_dir / LOG,
        run_dir / STATE,
        run_dir / "launch.json",
        run_dir / "work/.tuneplane/jobspec.json",
    ):
        assert token not in path.read_text(), path
    assert obs.phase == "Succeeded"


def test_the_run_service_reaches_a_run_of_this_machine_as_a_backend_that_runs_here(exp: Path) -> None:
    """`runs/` sees the local backend only as the factory makes it, a `RunsHere`: which run a directory
    holds, whether a supervisor has it now, and its metrics with their times from the run's own store."""
    backend = local_backend(load_lab(exp))
    assert isinstance(backend, RunsHere)
    req = job(exp, "true\n")
    run_dir, ref = backend.prepare(req)
    assert backend.run_key(run_dir) == ("demo", req.run_id)
    assert not backend.supervised(run_dir)  # prepared, not started
    store = MetricStore(run_dir / DB)
    store.add_points(req.run_id, [("loss", step, 1 / (step + 2), 100.0 + step) for step in range(2)])
    store.close()
    assert backend.timed_metrics(ref, ["loss", "eval/loss"]) == {
        "loss": [(0, 0.5, 100.0), (1, 1 / 3, 101.0)],
        "eval/loss": [],
    }


def test_a_failure_reports_its_exit_code_and_last_lines(exp: Path, storage: Path) -> None:
    submit = job(exp, 'for i in $(seq 1 30); do echo "line $i"; done\nexit 3\n')

    _, obs = LocalBackend(storage).run(submit)

    assert obs.phase == "Failed" and obs.reason == "Error" and obs.exit_code == 3
    assert obs.message.startswith("exited with code 3; last lines:")
    assert "line 30" in obs.message and "line 11" in obs.message and "line 10\n" not in obs.message


def test_a_silent_failure_says_it_printed_nothing(exp: Path, storage: Path) -> None:
    submit = job(exp, "exit 4\n")

    _, obs = LocalBackend(storage).run(submit)

    assert (obs.phase, obs.exit_code) == ("Failed", 4)
    assert obs.message == "exited with code 4; it printed nothing"  # not an introduction to no lines


def test_a_launcher_refusal_is_a_configuration_error(exp: Path, storage: Path) -> None:
    submit = job(exp, "exit 78\n")

    _, obs = LocalBackend(storage).run(submit)

    assert (obs.phase, obs.reason, obs.exit_code) == ("Failed", "ConfigError", 78)


def test_the_timeout_kills_the_whole_process_group(exp: Path, storage: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TUNEPLANE_LOCAL_KILL_GRACE", "0.5")
    submit = job(exp, 'sleep 300 &\necho $! > "$TUNEPLANE_OUT_DIR/bg.pid"\necho started\nwait\n', timeout=3)
    backend = LocalBackend(storage)

    ref, obs = backend.run(submit)

    assert obs.phase == "Failed" and obs.reason == "DeadlineExceeded"
    assert "timeout of 3 s" in obs.message and "started" in obs.message
    assert not alive(int((backend.run_dir(ref) / "out/bg.pid").read_text()))


def test_a_detached_run_can_be_cancelled(exp: Path, storage: Path) -> None:
    submit = job(exp, 'sleep 300 &\necho $! > "$TUNEPLANE_OUT_DIR/bg.pid"\necho started\nwait\n')
    backend = LocalBackend(storage)
    ref = backend.submit(submit)
    wait(backend, ref, phases=("Running",))
    pid_file = backend.run_dir(ref) / "out/bg.pid"
    wait_until(pid_file.exists, 10, message=f"{pid_file} never appeared")

    backend.cancel(ref)

    obs = wait(backend, ref)
    assert obs.phase == "Cancelled" and (backend.run_dir(ref) / CANCEL).exists()
    assert not alive(int(pid_file.read_text()))


def test_submitting_twice_adopts_the_run(exp: Path, storage: Path, tmp_path: Path) -> None:
    counter = tmp_path / "starts"
    submit = job(exp, f'echo start >> "{counter}"\nsleep 0.5\n')
    backend = LocalBackend(storage)

    first = backend.submit(submit)
    second = backend.submit(submit)
    wait(backend, first)
    third = backend.submit(submit)

    assert first == second == third
    assert counter.read_text().splitlines() == ["start"]
    assert supervise(backend.run_dir(first))["phase"] == "Succeeded"  # a late supervisor does nothing
    assert counter.read_text().splitlines() == ["start"]


def test_artifacts_stay_inside_the_out_dir(exp: Path, storage: Path, tmp_path: Path) -> None:
    outside = tmp_path / "secret.txt"
    outside.write_text("not yours")
    submit = job(
        exp,
        f"""cd "$TUNEPLANE_OUT_DIR"
mkdir -p checkpoints/step-10 eval
printf 12345 > checkpoints/step-10/model.bin
ln -s "{outside}" checkpoints/escape
ln -s "{tmp_path}" checkpoints/escape-dir
echo "log line" > logs
echo '{{"acc": 1}}' > eval/report.json
""",
    )
    backend = LocalBackend(storage)

    ref, obs = backend.run(submit)

    listed = json.loads((backend.run_dir(ref) / "out/artifacts.json").read_text())
    assert listed["version"] == "tuneplane/artifacts/v1"
    assert listed["artifacts"] == [
        {
            "kind": "checkpoint",
            "path": "checkpoints/step-10",
            "format": "directory",
            "size_bytes": 5,
            "step": 10,
        },
        {"kind": "log", "path": "logs", "format": "file", "size_bytes": 9},
        {"kind": "evaluation", "path": "eval/report.json", "format": "json", "size_bytes": 11},
    ]
    assert backend.artifacts(ref) == listed["artifacts"] and obs.phase == "Succeeded"


def test_artifacts_of_a_directory_count_only_files_inside(tmp_path: Path) -> None:
    out = tmp_path / "out"
    (out / "hf_export").mkdir(parents=True)
    (out / "hf_export/a.safetensors").write_bytes(b"x" * 7)
    (tmp_path / "big").write_bytes(b"y" * 1000)
    (out / "hf_export/link").symlink_to(tmp_path / "big")

    found = collect_artifacts(out, [{"kind": "export", "pattern": "hf_export", "format": "hf"}])

    assert found == [{"kind": "export", "path": "hf_export", "format": "hf", "size_bytes": 7}]


def test_only_the_allotted_gpus_are_visible(exp: Path, storage: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TUNEPLANE_LOCAL_GPUS", "0,1,2")
    backend = LocalBackend(storage)

    ref, obs = backend.run(job(exp, 'echo "visible=$CUDA_VISIBLE_DEVICES"\n', gpus=2))
    _, too_many = backend.run(job(exp, "echo never\n", gpus=4))

    assert "visible=0,1" in (backend.run_dir(ref) / LOG).read_text() and obs.phase == "Succeeded"
    assert too_many.phase == "Failed" and too_many.reason == "Unschedulable"
    assert "needs 4 GPU(s); this machine has 3" in too_many.message


def test_a_run_waits_for_busy_gpus(exp: Path, storage: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TUNEPLANE_LOCAL_GPUS", "0,1,2")
    backend = LocalBackend(storage)
    first = backend.submit(job(exp, 'echo "first=$CUDA_VISIBLE_DEVICES"\nsleep 1.5\n', gpus=2))
    wait(backend, first, phases=("Running",))

    second = backend.submit(job(exp, 'echo "second=$CUDA_VISIBLE_DEVICES"\n', gpus=2))
    wait(backend, second, phases=("Pending",))
    waiting = until(
        lambda: backend.observe(second),
        lambda seen: seen.reason == "WaitingForGPUs" or backend.observe(first).phase != "Running",
        10,
        "the second run never waited for GPUs while the first ran",
        every=0.05,
    )

    assert waiting.reason == "WaitingForGPUs" and "other local runs hold them" in waiting.message
    assert wait(backend, second).phase == "Succeeded"
    assert "first=0,1" in (backend.run_dir(first) / LOG).read_text()
    assert "second=0,1" in (backend.run_dir(second) / LOG).read_text()


def test_a_run_whose_supervisor_died_is_reported_lost(exp: Path, storage: Path) -> None:
    backend = LocalBackend(storage)
    ref, _ = backend.run(job(exp, "echo ok\n"))
    state_path = backend.run_dir(ref) / STATE
    state = json.loads(state_path.read_text())
    state.update(phase="Running", finished_at=None)
    state_path.write_text(json.dumps(state))

    obs = backend.observe(ref)

    assert obs.phase == "Failed" and obs.reason == "Lost" and "supervisor stopped" in obs.message


def test_logs_tail_and_follow(exp: Path, storage: Path) -> None:
    backend = LocalBackend(storage)
    ref = backend.submit(job(exp, 'for i in 1 2 3; do echo "step $i"; sleep 0.2; done\n'))

    followed = list(backend.logs(ref, follow=True))
    tail = list(backend.logs(ref, tail=2))

    assert followed[0].startswith("[tuneplane]") and followed[1:] == ["step 1", "step 2", "step 3"]
    assert tail == ["step 2", "step 3"]
    assert read_state(backend.run_dir(ref))["phase"] == "Succeeded"


def test_a_run_folder_out_of_sight_is_never_made_again_by_its_supervisor(tmp_path: Path) -> None:
    """A mount gone for a while: the heartbeat and the state are not written into a new, empty folder on
    the disk beneath (it would hide the run's real folder once the mount is back, or block its return)."""
    from tuneplane.backends.local.files import beat, update_state

    run_dir = tmp_path / "storage" / "runs" / "user" / "r1"
    run_dir.mkdir(parents=True)
    beat(run_dir, 1)
    assert (run_dir / "heartbeat").is_file()
    (tmp_path / "storage").rename(tmp_path / "hidden")

    beat(run_dir, 1)
    with pytest.raises(FileNotFoundError):
        update_state(run_dir, phase="Succeeded")

    assert not (tmp_path / "storage").exists()
    (tmp_path / "hidden").rename(tmp_path / "storage")  # the mount back: nothing in its way
    assert (run_dir / "heartbeat").is_file()
