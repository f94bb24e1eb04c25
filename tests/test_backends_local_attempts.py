"""The local backend's attempts: each one reported with its reason, exit code, signal and the trainer's
own last error; the next attempt of a run started in place, once; a run of another machine told apart
from one of this machine whose supervisor died; and a cancel that cannot reach a run says so."""

from __future__ import annotations

import json
import os
import subprocess
import threading
from pathlib import Path

import pytest
from support.local import kill_recorded, local_run, with_run
from support.repos import git, request
from support.wait import wait_until

from tuneplane.author.scaffold import new_experiment
from tuneplane.backends.base import BackendError, BackendRef, NotReachable, SubmitRequest
from tuneplane.backends.local import LOG, STATE, LocalBackend, read_state, supervise, supervisor_alive
from tuneplane.constants import utc_now
from tuneplane.lab.load import load_lab
from tuneplane.models.run import RunStatus
from tuneplane.runs.observe import apply_observation
from tuneplane.runs.prepare import backend_request
from tuneplane.runs.prepare import prepare as prepare_run
from tuneplane.runtime.attempts import write as write_record

_counter = iter(range(1, 10_000))

# A trainer started by a wrapper, as `accelerate launch` starts one: the trainer dies on a missing file,
# then the wrapper's CalledProcessError is the log's last traceback.
WRAPPED = {
    "experiments/demo/trainer.py": "open('data.jsonl')\n",
    "experiments/demo/wrapper.py": (
        "import subprocess, sys\nsubprocess.run([sys.executable, '-m', 'trainer'], check=True, cwd=sys.path[0])\n"
    ),
}


@pytest.fixture
def storage() -> Path:
    return Path(os.environ["TUNEPLANE_STORAGE_ROOT"])


@pytest.fixture
def exp(lab: Path) -> Path:
    new_experiment(load_lab(lab), "demo", "custom/custom", None)
    return lab


def job(root: Path, script: str, files: dict[str, str] | None = None, **spec_changes: object) -> SubmitRequest:
    """Commit `script` as the trainer (and `files` beside it) and build the run's LocalRun."""
    (root / "experiments/demo/train.sh").write_text("#!/usr/bin/env bash\nset -eu\n" + script)
    for rel, text in (files or {}).items():
        (root / rel).write_text(text)
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "trainer")
    lab = load_lab(root)
    req = request("demo", f"20250107-000000-{next(_counter):06x}", "local")
    run = prepare_run(lab, req, commit=git(root, "rev-parse", "HEAD"), dirty=False)
    return with_run(backend_request(root, lab, run), **spec_changes)


def wait(
    backend: LocalBackend,
    ref: BackendRef,
    phases: tuple[str, ...] = ("Succeeded", "Failed", "Cancelled"),
    timeout: float = 60,
):  # type: ignore[no-untyped-def]
    last = []  # the latest observation, for the message

    def ended():  # type: ignore[no-untyped-def]
        last[:] = [backend.observe(ref)]
        return last[0] if last[0].phase in phases else None

    return wait_until(ended, timeout, message=lambda: f"still {last[0].phase}: {last[0].message}")


def wait_for(check, timeout: float = 30) -> None:  # type: ignore[no-untyped-def]
    wait_until(check, timeout)


def edit_state(run_dir: Path, **changes: object) -> None:
    state = json.loads((run_dir / STATE).read_text())
    state.update(changes)
    (run_dir / STATE).write_text(json.dumps(state))


def tree(path: Path) -> list[str]:
    return sorted(str(p.relative_to(path)) for p in path.rglob("*"))


# ── every attempt reported ───────────────────────────────────────────────────────────────────────


def test_the_message_is_the_trainers_own_error_not_its_wrappers(exp: Path, storage: Path) -> None:
    submit = job(exp, 'cd "$TUNEPLANE_EXP_DIR"\npython wrapper.py\n', WRAPPED)

    ref, obs = LocalBackend(storage).run(submit)

    log = (LocalBackend(storage).run_dir(ref) / LOG).read_text()
    assert "subprocess.CalledProcessError" in log  # the wrapper's traceback is the log's last
    (attempt,) = obs.attempts
    assert attempt.reason == "Error" and attempt.exit_code == 1 and attempt.number == 1
    assert attempt.message.startswith("FileNotFoundError: [Errno 2] No such file or directory: 'data.jsonl'")
    assert obs.message.split("\n", 1)[0] == f"exited with code 1 ({attempt.message}); last lines:"
    assert any("CalledProcessError" in line for line in attempt.log_tail)
    assert attempt.started_at and attempt.finished_at and attempt.gpus == 0 and attempt.where


@pytest.mark.parametrize(
    ("script", "spec", "phase", "reason", "exit_code", "sig"),
    [
        ("echo fine\n", {}, "Succeeded", "Completed", 0, None),
        ("exit 78\n", {}, "Failed", "ConfigError", 78, None),
        ("echo started\nsleep 300\n", {"timeout": 1}, "Failed", "Timeout", 143, 15),
        ("echo started\nkill -KILL $$\n", {}, "Failed", "Signal", 137, 9),
    ],
    ids=["completed", "config-error", "timeout", "signal"],
)
def test_each_end_has_its_reason_from_the_one_vocabulary(
    exp: Path,
    storage: Path,
    monkeypatch: pytest.MonkeyPatch,
    script: str,
    spec: dict[str, object],
    phase: str,
    reason: str,
    exit_code: int | None,
    sig: int | None,
) -> None:
    monkeypatch.setenv("TUNEPLANE_LOCAL_KILL_GRACE", "0.5")

    _, obs = LocalBackend(storage).run(job(exp, script, **spec))

    (attempt,) = obs.attempts
    assert (obs.phase, attempt.reason) == (phase, reason), obs.message
    if exit_code is not None:
        assert attempt.exit_code == exit_code
    assert attempt.signal == sig


def test_an_attempt_counts_the_gpus_it_held(exp: Path, storage: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TUNEPLANE_LOCAL_GPUS", "0,1,2")

    _, obs = LocalBackend(storage).run(job(exp, 'echo "visible=$CUDA_VISIBLE_DEVICES"\n', gpus=2))

    assert [(a.reason, a.gpus) for a in obs.attempts] == [("Completed", 2)]


def test_a_cancelled_attempt_says_cancelled(exp: Path, storage: Path) -> None:
    backend = LocalBackend(storage)
    ref = backend.submit(job(exp, "echo started\nsleep 300\n"))
    wait(backend, ref, ("Running",))

    backend.cancel(ref)

    obs = wait(backend, ref)
    assert obs.phase == "Cancelled" and [a.reason for a in obs.attempts] == ["Cancelled"]


def test_the_launchers_attempt_record_is_what_the_backend_reports(exp: Path, storage: Path) -> None:
    # The launcher writes the attempt's record from what the trainer itself printed: the backend reports
    # that record (its node, its times, the trainer's own last exception line), not the supervisor's view.
    submit = job(
        exp,
        'echo "epoch 1"\necho "Traceback (most recent call last):" >&2\n'
        'echo "ValueError: learning rate must be positive" >&2\nexit 1\n',
    )

    _, obs = LocalBackend(storage).run(submit)

    (attempt,) = obs.attempts
    run_dir = Path(local_run(submit).run_dir)
    record = json.loads((run_dir / "attempts" / "1-0.json").read_text())
    assert record["error"] == "ValueError: learning rate must be positive" and record["exit_code"] == 1
    assert attempt.message == record["error"] and attempt.reason == "Error" and attempt.exit_code == 1
    assert attempt.where == (record["node"],) and attempt.started_at == record["started_at"]


def test_records_alone_and_state_alone_both_read_right(exp: Path, storage: Path) -> None:
    backend = LocalBackend(storage)
    ref, _ = backend.run(
        job(exp, 'echo "Traceback (most recent call last):"\necho "  File x"\necho "OSError: disk full"\nexit 2\n')
    )
    run_dir = backend.run_dir(ref)
    state = read_state(run_dir)
    assert state is not None
    # A run of an earlier tp: no attempts in its state, no records: the run-level state and its log.
    edit_state(run_dir, attempts=None)
    (legacy,) = backend.observe(ref).attempts
    assert (legacy.reason, legacy.exit_code, legacy.message) == ("Error", 2, "OSError: disk full")
    # A record, written by hand, of an attempt killed by a signal the supervisor never saw.
    write_record(
        run_dir,
        {
            "attempt": 1,
            "node_rank": 0,
            "started_at": "2026-01-01T00:00:00Z",
            "finished_at": "2026-01-01T00:00:09Z",
            "exit_code": 143,
            "signal": 15,
            "error": "killed by SIGTERM",
        },
    )
    edit_state(run_dir, attempts=state["attempts"])
    (recorded,) = backend.observe(ref).attempts
    assert (recorded.reason, recorded.exit_code, recorded.signal) == ("Signal", 143, 15)
    assert recorded.message == "killed by SIGTERM"


def test_a_run_between_its_trainers_exit_and_its_supervisors_record_is_still_running(exp: Path, storage: Path) -> None:
    # The launcher writes its end record the moment the trainer exits; the supervisor records the run's
    # end a moment later (the collector's last pass, artifacts). A look in between once read as an
    # attempt ended under a running object, that is an engine requeue: the status said Pending.
    backend = LocalBackend(storage)
    ref = backend.submit(job(exp, "sleep 300\n"))
    running = wait(backend, ref, ("Running",))
    run_dir = backend.run_dir(ref)
    (started,) = running.attempts
    write_record(
        run_dir,
        {
            "attempt": 1,
            "node_rank": 0,
            "node": started.where[0] if started.where else "here",
            "started_at": started.started_at or "2026-01-01T00:00:00Z",
            "finished_at": "2026-01-01T00:00:09Z",
            "exit_code": 0,
        },
    )
    try:
        seen = backend.observe(ref)
        (attempt,) = seen.attempts
        assert (seen.phase, attempt.reason, attempt.finished_at) == ("Running", None, None)
        status = RunStatus(experiment="demo", run_id="r", method="custom/custom", profile="local", phase="Running")
        assert apply_observation(status, seen, utc_now()).phase == "Running"
    finally:
        backend.cancel(ref)
    assert wait(backend, ref).phase == "Cancelled"  # the supervisor's word decides the end


# ── the next attempt ─────────────────────────────────────────────────────────────────────────────

NEXT = (
    'echo "attempt=$TUNEPLANE_ATTEMPT"\n'
    'echo "start $TUNEPLANE_ATTEMPT" >> "$TUNEPLANE_OUT_DIR/starts"\n'
    'ls "$TUNEPLANE_OUT_DIR/checkpoints" 2>/dev/null || true\n'
    'if [ "$TUNEPLANE_ATTEMPT" = 1 ]; then mkdir -p "$TUNEPLANE_OUT_DIR/checkpoints/step-5"; exit 3; fi\n'
    "sleep 0.3\n"
)


def test_the_next_attempt_runs_in_the_same_run_dir_and_keeps_the_earlier_log(exp: Path, storage: Path) -> None:
    backend = LocalBackend(storage)
    first_submit = job(exp, NEXT)
    ref = backend.submit(first_submit)
    assert wait(backend, ref).phase == "Failed"

    again = backend.submit(first_submit.replace(attempt=2))
    obs = wait(backend, again)

    run_dir = backend.run_dir(ref)
    assert again == ref and obs.phase == "Succeeded"
    assert "attempt=1" in (run_dir / LOG).read_text() and "step-5" not in (run_dir / LOG).read_text()
    second = (run_dir / "run.2.log").read_text()
    assert "attempt=2" in second and "step-5" in second  # the first attempt's checkpoint is there
    assert [(a.number, a.reason, a.exit_code) for a in obs.attempts] == [(1, "Error", 3), (2, "Completed", 0)]
    assert [line for line in backend.logs(ref) if not line.startswith("[tuneplane]")][0] == "attempt=2"


def test_two_submits_of_one_attempt_start_it_once(exp: Path, storage: Path) -> None:
    backend = LocalBackend(storage)
    first_submit = job(exp, NEXT)
    ref = backend.submit(first_submit)
    wait(backend, ref)
    refs: list[BackendRef] = []
    racers = [
        threading.Thread(target=lambda: refs.append(backend.submit(first_submit.replace(attempt=2)))) for _ in range(3)
    ]

    for racer in racers:
        racer.start()
    for racer in racers:
        racer.join()
    wait(backend, ref)
    run_dir = backend.run_dir(ref)
    wait_for(lambda: not supervisor_alive(run_dir))

    assert refs == [ref] * 3
    assert supervise(run_dir)["phase"] == "Succeeded"  # a late supervisor of attempt 2 does nothing
    assert (run_dir / "out/starts").read_text().splitlines() == ["start 1", "start 2"]
    assert backend.submit(first_submit) == ref  # an older attempt's submit adopts, starts nothing
    assert (run_dir / "out/starts").read_text().splitlines() == ["start 1", "start 2"]


def test_the_next_attempt_waits_for_the_current_one_to_end(exp: Path, storage: Path) -> None:
    backend = LocalBackend(storage)
    first_submit = job(exp, "sleep 300\n")
    ref = backend.submit(first_submit)
    wait(backend, ref, ("Running",))

    with pytest.raises(BackendError, match="attempt 2 cannot start while attempt 1 has not ended"):
        backend.submit(first_submit.replace(attempt=2))
    backend.cancel(ref)
    assert wait(backend, ref).phase == "Cancelled"


# ── heartbeat, and whose run it is ───────────────────────────────────────────────────────────────


def test_the_supervisor_beats_while_it_lives(exp: Path, storage: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TUNEPLANE_LOCAL_HEARTBEAT", "0.2")
    backend = LocalBackend(storage)
    ref = backend.submit(job(exp, "sleep 300\n"))
    wait(backend, ref, ("Running",))
    first = backend.heartbeat(ref)
    assert first is not None and first["attempt"] == 1 and first["pid"] != os.getpid()

    wait_for(lambda: (backend.heartbeat(ref) or {}).get("at") != first["at"])  # beats go on

    assert backend.observe(ref).heartbeat_at == (backend.heartbeat(ref) or {}).get("at")
    backend.cancel(ref)
    wait(backend, ref)


def test_another_machines_run_is_unknown_and_this_machines_dead_one_is_lost(exp: Path, storage: Path) -> None:
    backend = LocalBackend(storage)
    ref = backend.submit(job(exp, "sleep 300\n"))
    wait(backend, ref, ("Running",))
    run_dir = backend.run_dir(ref)
    state = read_state(run_dir) or {}
    beat = backend.heartbeat(ref)
    assert beat is not None
    # This machine's run whose supervisor was killed (and its job with it), as by a restart:
    kill_recorded(state)
    wait_for(lambda: not supervisor_alive(run_dir))
    lost = backend.observe(ref)
    assert (lost.phase, lost.reason, lost.attempts[-1].reason) == ("Failed", "Lost", "Lost")
    assert "supervisor stopped" in lost.message

    # The same run dir seen from here while another machine supervises it (shared storage):
    edit_state(run_dir, host="gpu-box-7", machine="another-boot-id")
    far = backend.observe(ref)

    assert (far.phase, far.reason) == ("Unknown", "NoHeartbeat")
    assert "supervised on gpu-box-7" in far.message and "last heartbeat was" in far.message
    assert far.heartbeat_at == beat["at"] and far.attempts[-1].reason is None

    # This machine's host name with another boot id: this machine restarted, its supervisor is gone.
    edit_state(run_dir, host=beat["host"])
    assert backend.observe(ref).reason == "Lost"


def test_a_run_dir_on_storage_that_is_not_here_is_unknown(storage: Path, tmp_path: Path) -> None:
    gone = tmp_path / "runner-disk/runs/ci/demo/r1"
    ref = BackendRef(backend="local", kind="Process", name="r1", run_dir=str(gone))

    obs = LocalBackend(storage).observe(ref)

    assert (obs.phase, obs.reason) == ("Unknown", "NoHeartbeat") and not (tmp_path / "runner-disk").exists()


# ── cancel of what this machine cannot reach ─────────────────────────────────────────────────────


def test_cancelling_a_run_dir_that_is_not_here_says_so_and_writes_nothing(storage: Path, tmp_path: Path) -> None:
    gone = tmp_path / "runner-disk/runs/ci/demo/r1"
    ref = BackendRef(backend="local", kind="Process", name="r1", run_dir=str(gone))

    with pytest.raises(NotReachable, match=r"does not exist on this machine, so nothing was stopped") as caught:
        LocalBackend(storage).cancel(ref)

    assert "tp job cancel" in str(caught.value) and not (tmp_path / "runner-disk").exists()
    assert supervisor_alive(gone) is False and not (tmp_path / "runner-disk").exists()


def test_cancel_writes_nothing_into_a_folder_the_backend_did_not_make(storage: Path, tmp_path: Path) -> None:
    theirs = tmp_path / "someone-elses"
    theirs.mkdir()
    (theirs / "notes.txt").write_text("mine")
    link = storage / "runs/u/demo/r2"
    link.parent.mkdir(parents=True)
    link.symlink_to(theirs)
    (storage / "runs/u/other").symlink_to(theirs, target_is_directory=True)
    (theirs / "r3").mkdir()
    (theirs / "r3/.tuneplane-local-run").touch()  # a marker does not make a folder outside the root ours
    through = storage / "runs/u/other/r3"
    backend = LocalBackend(storage)

    for where, why in (
        (theirs, "has no .tuneplane-local-run marker"),
        (link, "is a symbolic link"),
        (through, "leads out of the storage root"),
    ):
        with pytest.raises(NotReachable, match=why):
            backend.cancel(BackendRef(backend="local", kind="Process", name="r2", run_dir=str(where)))

    assert tree(theirs) == ["notes.txt", "r3", "r3/.tuneplane-local-run"]


def test_a_storage_root_that_does_not_exist_yet_leads_nowhere_out(tmp_path: Path) -> None:
    from tuneplane.backends.local.files import leads_out

    root = tmp_path / "storage"  # a first run on a fresh machine: nothing of the root exists yet
    assert leads_out(root / "runs/u/demo/r1", root) is False
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    root.mkdir()
    (root / "runs").symlink_to(outside, target_is_directory=True)
    assert leads_out(root / "runs/u/demo/r1", root) is True


def test_submit_refuses_a_folder_the_backend_did_not_make(exp: Path, storage: Path) -> None:
    submit = job(exp, "echo never\n")
    run_dir = Path(local_run(submit).run_dir)
    run_dir.mkdir(parents=True)
    (run_dir / "notes.txt").write_text("mine")

    with pytest.raises(BackendError, match="the local backend writes only into run directories it made"):
        LocalBackend(storage).submit(submit)

    assert tree(run_dir) == ["notes.txt"]


def test_cancelling_another_machines_run_asks_it_and_says_who_can_stop_it(exp: Path, storage: Path) -> None:
    backend = LocalBackend(storage)
    ref, _ = backend.run(job(exp, "echo ok\n"))
    run_dir = backend.run_dir(ref)
    edit_state(run_dir, phase="Running", finished_at=None, host="gpu-box-7", machine="another-boot-id")

    with pytest.raises(NotReachable, match="its supervisor runs on gpu-box-7") as caught:
        backend.cancel(ref)

    assert "wrote its stop request" in str(caught.value) and (run_dir / "cancel").exists()
    assert read_state(run_dir)["phase"] == "Running"  # nothing here can say how it ended


def test_tp_job_cancel_of_a_run_whose_runner_is_gone_is_no_internal_error(
    exp: Path,
    storage: Path,
    tmp_path: Path,
    tp,  # type: ignore[no-untyped-def]
) -> None:
    # The bot on a CI runner submitted the run and recorded it `Submitted`; then the runner went away.
    from tuneplane.lab.runs import write_request, write_status
    from tuneplane.runs.status import submitted_status

    submit = job(exp, "sleep 300\n")
    lab = load_lab(exp)
    req = request("demo", submit.run_id, "local")
    run = prepare_run(lab, req, commit=git(exp, "rev-parse", "HEAD"), dirty=False)
    backend = LocalBackend(storage)
    ref = backend.submit(submit)
    wait(backend, ref, ("Running",))
    write_request(exp, req)
    write_status(exp, submitted_status(req, run.spec, ref, "2026-01-01T00:00:00Z"))
    git(exp, "add", "-A")
    git(exp, "commit", "-q", "-m", "bot: submitted")
    state = read_state(backend.run_dir(ref)) or {}
    kill_recorded(state)
    storage.rename(tmp_path / "runner-disk-gone")  # the runner's disk, with the run dir, is gone

    result = tp("job", "cancel", submit.run_id, cwd=exp)

    assert result.code == 1 and "internal error" not in result.output, result.output
    assert "does not exist on this machine, so nothing was stopped" in result.output
    assert not storage.exists()  # nothing was made where the run dir was


def test_a_recorded_group_number_now_used_by_another_process_is_never_signalled(exp: Path, storage: Path) -> None:
    """Process ids are reused (pid_max is 32768 on many machines): a cancel that finds no supervisor
    kills the group the run recorded only while that group is still the run's."""
    backend = LocalBackend(storage)
    ref = backend.submit(job(exp, "sleep 300\n"))
    wait(backend, ref, ("Running",))
    run_dir = backend.run_dir(ref)
    state = read_state(run_dir) or {}
    kill_recorded(state)
    wait_for(lambda: not supervisor_alive(run_dir))
    # The run's group number now names a stranger's group, as after the number was handed out again.
    bystander = subprocess.Popen(["sleep", "60"], start_new_session=True)
    try:
        raw = json.loads((run_dir / STATE).read_text())
        (run_dir / STATE).write_text(json.dumps({**raw, "pgid": bystander.pid, "pid": bystander.pid}))
        backend.cancel(ref)
        assert bystander.poll() is None, "the cancel killed a process group that was no longer the run's"
        assert (read_state(run_dir) or {})["phase"] == "Cancelled"
    finally:
        bystander.kill()
        bystander.wait()
