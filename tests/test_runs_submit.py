"""`tp submit`, `tp rerun` and the `tp job` commands on a real lab in git."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import typer
from support.labs import new_lab
from support.repos import BRANCH, git, make_remote, remote_files, set_backend
from support.wait import wait_until
from typer.testing import CliRunner

from tuneplane.author.scaffold import new_experiment
from tuneplane.bot.entry import BotOptions, reconcile
from tuneplane.cli.cmd_job_runs import register as register_job_commands
from tuneplane.errors import UsageError
from tuneplane.lab.load import load_lab
from tuneplane.lab.runs import RunKey, new_run_id, read_request, read_status, write_status
from tuneplane.models.run import RunRequest
from tuneplane.runs.cancel import cancel_run
from tuneplane.runs.requests import new_request
from tuneplane.runs.rerun import rerun
from tuneplane.runs.submit import SubmitOptions, submit

TRAIN = '#!/usr/bin/env bash\nset -eu\necho "trainer version 1 lr=$(cat "$TUNEPLANE_EXP_DIR/lr" 2>/dev/null)"\n'
BASE = {
    "experiment": "demo",
    "profile": "local",
    "image": "python:3.12",
    "observability_url": "https://track.example.org/p",
}


@pytest.fixture
def exp(lab: Path) -> Path:
    new_experiment(load_lab(lab), "demo", "custom/custom", None)
    (lab / "experiments/demo/train.sh").write_text(TRAIN)
    git(lab, "add", "-A")
    git(lab, "commit", "-q", "-m", "demo")
    return lab


def request(**changes: object) -> RunRequest:
    """A request of the demo experiment, as `tp submit demo` makes it."""
    return new_request(command="submit", run_id=new_run_id(), **{**BASE, **changes})


HERE = SubmitOptions(local=True)


def quiet(_line: str) -> None:
    pass


def job_cli(root: Path, *args: str) -> tuple[int, str, BaseException | None]:
    app = typer.Typer()
    job = typer.Typer()
    register_job_commands(job)
    app.add_typer(job, name="job")
    result = CliRunner().invoke(app, ["job", *args], catch_exceptions=True)
    return result.exit_code, result.output, result.exception


def test_job_status_json_lists_metrics_in_reading_order(exp: Path) -> None:
    """Primary first, hardware last, as the status file keeps them (not alphabetical: hw/* first)."""
    run_id = submit(request(message="x"), HERE, exp, echo=quiet).key.run_id
    status = read_status(exp, RunKey("demo", run_id))
    assert status is not None
    order = {"validation/accuracy": 0.9, "train/loss": 0.1, "hw/gpu_util": 99.0}
    write_status(exp, status.model_copy(update={"metrics": order}))
    shown = json.loads(job_cli(exp, "status", run_id, "--json")[1])
    assert list(shown["metrics"]) == list(order)
    assert [k for k in shown if k != "metrics"] == sorted(k for k in shown if k != "metrics")


def test_submit_commits_only_the_request(exp: Path) -> None:
    (exp / "notes.txt").write_text("work in progress")
    git(exp, "add", "notes.txt")

    result = submit(request(set={"lr": 0.1}, timeout=600, message="baseline"), SubmitOptions(), exp)

    assert git(exp, "show", "--name-only", "--format=%s", "HEAD").splitlines() == [
        f"Request run {result.key.run_id} of demo (local)",
        "",
        result.key.request_rel,
    ]
    assert git(exp, "diff", "--cached", "--name-only") == "notes.txt"
    req = read_request(exp, result.key)
    assert (req.set, req.timeout, req.message, req.cancel) == ({"lr": 0.1}, 600, "baseline", False)
    assert req.requested_by  # from git config, else $USER
    assert result.status is None and read_status(exp, result.key) is None


def test_submit_stamps_who_and_when_only_where_the_request_leaves_them_empty(exp: Path) -> None:
    given = read_request(exp, submit(request(requested_by="Ada", created_at="then"), SubmitOptions(), exp).key)
    stamped = read_request(exp, submit(request(), SubmitOptions(), exp).key)
    assert (given.requested_by, given.created_at) == ("Ada", "then")
    assert stamped.requested_by and stamped.created_at


def test_uncommitted_trainer_changes_are_refused_unless_allowed(exp: Path) -> None:
    (exp / "experiments/demo/train.sh").write_text(TRAIN.replace("version 1", "version 2"))
    with pytest.raises(UsageError, match="uncommitted changes"):
        submit(request(), SubmitOptions(), exp)

    result = submit(request(), SubmitOptions(local=True, allow_dirty=True), exp, echo=quiet)

    assert result.status.phase == "Succeeded" and result.status.provenance.dirty is True
    log = Path(result.status.out_dir).parent / "run.log"
    assert "trainer version 1" in log.read_text()  # the commit ran, not the edited working tree


def test_render_refusals_surface_at_submit(exp: Path) -> None:
    set_backend(exp, "kubernetes")
    (exp / "tuneplane.yaml").write_text(
        (exp / "tuneplane.yaml").read_text().replace('url: "https://git.example.org/team/lab.git"', 'url: ""')
    )
    git(exp, "commit", "-q", "-am", "cluster lab")
    with pytest.raises(UsageError, match=r"cluster.repo.url is not set"):
        submit(request(profile="h200:8"), SubmitOptions(), exp)
    with pytest.raises(UsageError, match="16 GPUs do not fill|do not fill whole h200 nodes"):
        submit(request(profile="h200:12"), SubmitOptions(), exp)
    assert not (exp / "runs/demo").exists()


def test_push_publishes_request_and_status(exp: Path, tmp_path: Path) -> None:
    remote = make_remote(tmp_path)
    git(exp, "remote", "add", "origin", str(remote))
    git(exp, "push", "-q", "origin", f"HEAD:{BRANCH}")

    result = submit(request(), SubmitOptions(local=True, push=True), exp, echo=quiet)

    assert result.pushed
    files = remote_files(remote, ".")
    assert result.key.request_rel in files and result.key.status_rel in files
    assert "status/README.md" not in files and "status/index.json" not in files  # the bot's, rendered by its next run


def test_rerun_reproduces_the_original_at_its_commit(exp: Path) -> None:
    (exp / "experiments/demo/lr").write_text("0.1")
    git(exp, "add", "-A")
    git(exp, "commit", "-q", "-m", "lr file")
    first = submit(request(set={"lr": 0.1}, inputs={"model": "m1"}), HERE, exp, echo=quiet)
    (exp / "experiments/demo/train.sh").write_text(TRAIN.replace("version 1", "version 2"))
    git(exp, "commit", "-q", "-am", "trainer v2")

    again = rerun(first.key.run_id, exp, local=True, echo=quiet)

    new = read_request(exp, again.result.key)
    old = read_request(exp, first.key)
    assert (new.set, new.inputs, new.profile, new.image, new.observability_url) == (
        old.set,
        old.inputs,
        old.profile,
        old.image,
        old.observability_url,
    )
    assert new.commit == first.status.provenance.commit and new.rerun_of == first.key.run_id
    assert again.same_job
    status = again.result.status
    assert status.phase == "Succeeded" and status.provenance.commit == new.commit
    assert "trainer version 1 lr=0.1" in (Path(status.out_dir).parent / "run.log").read_text()


def test_cancel_marks_the_request_once(exp: Path) -> None:
    result = submit(request(), SubmitOptions(), exp)

    said = cancel_run(result.key.run_id, exp)
    again = cancel_run(result.key.run_id, exp)

    assert said[0].startswith(f"marked {result.key.request_rel} `cancel: true`")
    assert "already says `cancel: true`" in again[0]
    assert read_request(exp, result.key).cancel is True
    assert git(exp, "log", "-1", "--format=%s") == f"Cancel run {result.key.run_id} of demo"


def test_cancel_now_stops_a_local_run(exp: Path, tmp_path: Path) -> None:
    (exp / "experiments/demo/train.sh").write_text("#!/usr/bin/env bash\necho started\nsleep 300\n")
    git(exp, "commit", "-q", "-am", "slow trainer")
    result = submit(request(), SubmitOptions(), exp)
    reconcile(exp, BotOptions(), echo=quiet)  # the bot starts it detached on this machine
    run_dir = Path(read_status(exp, result.key).out_dir).parent
    wait_until(lambda: "started" in (run_dir / "run.log").read_text(), 20, message="the run did not start")

    said = cancel_run(result.key.run_id, exp, now=True)

    assert said[-1].startswith("stopped: Cancelled")
    status = read_status(exp, result.key)
    assert status.phase == "Cancelled" and json.loads((run_dir / "state.json").read_text())["phase"] == "Cancelled"
    with pytest.raises(UsageError, match="already ended"):
        cancel_run(result.key.run_id, exp)


def test_job_commands_show_runs_status_and_logs(exp: Path) -> None:
    done = submit(request(message="x"), HERE, exp, echo=quiet)
    waiting = submit(request(), SubmitOptions(), exp)
    run_id = done.key.run_id

    code, listed, _ = job_cli(exp, "ls")
    assert code == 0 and run_id in listed and "Succeeded" in listed and "(not submitted)" in listed
    assert job_cli(exp, "ls", "--exp", "other")[1].startswith("no runs yet of other")

    code, shown, _ = job_cli(exp, "status", run_id)
    assert code == 0 and "Succeeded, exit code 0" in shown and f"runs/demo/{run_id}.yaml" in shown
    assert json.loads(job_cli(exp, "status", run_id, "--json")[1])["phase"] == "Succeeded"
    assert "requested, not submitted yet" in job_cli(exp, "status", waiting.key.run_id)[1]

    code, log, _ = job_cli(exp, "logs", run_id, "--tail", "1")
    assert code == 0 and log.strip() == "trainer version 1 lr="
    code, _, error = job_cli(exp, "logs", waiting.key.run_id)
    assert isinstance(error, UsageError) and "has not been submitted" in error.message


def test_a_lab_without_commits_is_refused(tmp_path: Path) -> None:
    new_lab(tmp_path / "lab", "x", use_git=False)
    git(tmp_path / "lab", "init", "-q")
    with pytest.raises(UsageError, match="no commits yet"):
        submit(request(), SubmitOptions(), tmp_path / "lab")
    assert RunKey("demo", "x")  # the key type is importable without a lab
