"""A local run of another machine, its status pushed while it ran (`tp submit --local` on a laptop).

The bot cannot see that machine's run directory. It used to record the run `Failed (Lost)`, over the
status the laptop commits when the run ends; it now leaves the status as committed, keeps the run among
those it watches (its storage may only be out of sight for a while: a mount missing for one pass), and
takes the laptop's later status as it comes. A run directory removed on the bot's own machine
(the folders above it still there) is still reported lost. Real git, the real local backend.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from support.local import kill_job
from support.repos import BRANCH, clone, git, make_remote, quiet, seed_lab
from support.wait import wait_until

from tuneplane.backends.local.files import read_state
from tuneplane.bot.entry import reconcile, sync
from tuneplane.lab.runs import RunKey, mark_cancel, read_status, write_status
from tuneplane.models.run import BackendObject, RunStatus, Transition

RUN = "20250102-100000-00000a"


def _laptop_status(root: Path, storage: Path, phase: str) -> None:
    at = "2025-01-02T10:00:00Z"
    write_status(
        root,
        RunStatus(
            experiment="demo",
            run_id=RUN,
            method="custom/custom",
            profile="local",
            phase=phase,  # type: ignore[arg-type]
            submitted_at=at,
            started_at=at,
            finished_at=at if phase == "Succeeded" else None,
            backend=BackendObject(
                backend="local",
                kind="Process",
                name="demo-0123456789",
                run_dir=str(storage / "runs" / "alice" / "demo" / RUN),
                uid="abc",
            ),
            history=[Transition(phase="Running", at=at)]
            + ([Transition(phase=phase, at=at)] if phase != "Running" else []),  # type: ignore[arg-type]
        ),
    )
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", f"tp submit --local: {phase}")
    git(root, "push", "-q", "origin", f"HEAD:{BRANCH}")


def _started(bot: Path) -> Path:
    """After the bot's reconcile: the run's directory once its supervisor started the trainer."""
    status = read_status(bot, RunKey("demo", RUN))
    assert status.backend is not None
    run_dir = Path(status.backend.run_dir)
    wait_until(lambda: (read_state(run_dir) or {}).get("pgid"), 30, interval=0.1, message="the local run did not start")
    return run_dir


def _alive(pid: int) -> bool:
    """Whether `pid` runs (a zombie, ended and not yet reaped, does not)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False


def test_a_running_local_run_of_another_machine_is_left_to_that_machine(tmp_path: Path) -> None:
    remote = make_remote(tmp_path)
    laptop = seed_lab(remote, tmp_path / "laptop", {"demo": "echo hi\n"}, runs=[("demo", RUN)])
    elsewhere = tmp_path / "laptop-storage"  # not on the bot's machine
    _laptop_status(laptop, elsewhere, "Running")
    bot = clone(remote, tmp_path / "bot")
    lines: list[str] = []

    reconcile(bot, echo=quiet)
    sync(bot, echo=lines.append)

    assert read_status(bot, RunKey("demo", RUN)).phase == "Running"  # not "Failed (Lost)"
    assert any("another machine" in line for line in lines), lines
    git(bot, "push", "-q", "origin", f"HEAD:{BRANCH}")

    git(laptop, "pull", "-q", "--rebase", "origin", BRANCH)
    _laptop_status(laptop, elsewhere, "Succeeded")
    git(bot, "pull", "-q", "--rebase", "origin", BRANCH)
    sync(bot, echo=quiet)
    assert read_status(bot, RunKey("demo", RUN)).phase == "Succeeded"
    assert "1 succeeded" in (bot / "status/README.md").read_text()


def test_a_cancel_of_another_machines_local_run_is_left_to_that_machine(tmp_path: Path) -> None:
    """The bot cannot stop a process on a laptop: it must not record a cancel that did not happen."""
    remote = make_remote(tmp_path)
    laptop = seed_lab(remote, tmp_path / "laptop", {"demo": "echo hi\n"}, runs=[("demo", RUN)])
    _laptop_status(laptop, tmp_path / "laptop-storage", "Running")
    bot = clone(remote, tmp_path / "bot")
    reconcile(bot, echo=quiet)
    sync(bot, echo=quiet)
    mark_cancel(bot, RunKey("demo", RUN))
    git(bot, "commit", "-qam", "cancel it")
    lines: list[str] = []

    report = reconcile(bot, echo=lines.append)

    assert report.cancelled == [] and read_status(bot, RunKey("demo", RUN)).phase == "Running"
    assert any("tp job cancel" in line and "that machine" in line for line in lines), lines


def test_a_run_directory_removed_on_the_bots_own_machine_is_still_lost(tmp_path: Path) -> None:
    remote = make_remote(tmp_path)
    seed_lab(remote, tmp_path / "seed", {"demo": "sleep 30\n"}, runs=[("demo", RUN)])
    bot = clone(remote, tmp_path / "bot")
    reconcile(bot, echo=quiet)
    run_dir = _started(bot)
    state = read_state(run_dir) or {}
    kill_job(state)
    supervisor = int(state["supervisor_pid"])
    # it records the end, then leaves
    wait_until(lambda: not _alive(supervisor), 60, message="the run's supervisor did not leave")
    shutil.rmtree(run_dir)  # its parents stay: this machine's storage

    sync(bot, echo=quiet)

    after = read_status(bot, RunKey("demo", RUN))
    assert after.phase == "Failed" and after.reason == "Lost"


def test_a_run_whose_storage_is_out_of_sight_for_one_sync_is_still_watched(tmp_path: Path) -> None:
    """The bot's own local run, its storage gone for one pass (a mount missing, another runner): the
    next sync that sees it again records its end, and the bot is not idle while it runs."""
    from tuneplane.bot.idle import idle
    from tuneplane.bot.report import BotOptions

    stop, running = tmp_path / "stop", tmp_path / "running"
    remote = make_remote(tmp_path)
    train = f"touch {running}\nwhile [ ! -e {stop} ]; do sleep 0.1; done\n"
    seed_lab(remote, tmp_path / "seed", {"demo": train}, runs=[("demo", RUN)])
    bot = clone(remote, tmp_path / "bot")
    reconcile(bot, echo=quiet)
    run_dir = _started(bot)
    # the trainer itself, not only its supervisor: a launcher that starts with the storage gone finds
    # no job package and fails (ConfigError), as it must; this test hides the storage of a running job
    wait_until(running.exists, 30, interval=0.1, message="the trainer did not start")
    sync(bot, echo=quiet)
    assert read_status(bot, RunKey("demo", RUN)).phase == "Running"

    storage, hidden = run_dir.parent.parent, run_dir.parent.parent.with_name("hidden")
    storage.rename(hidden)
    try:
        sync(bot, echo=quiet)
    finally:
        hidden.rename(storage)
    assert read_status(bot, RunKey("demo", RUN)).phase == "Running"
    assert idle(bot, "sync", BotOptions()) is None  # still something to watch

    stop.touch()

    def ended() -> bool:
        sync(bot, echo=quiet)  # at once too: a look between the trainer's exit and its end is still Running
        return read_status(bot, RunKey("demo", RUN)).phase != "Running"

    wait_until(ended, 30, interval=0.3, message="the bot never recorded the run's end")
    assert read_status(bot, RunKey("demo", RUN)).phase == "Succeeded"
