"""A local run of another machine, its status pushed while it ran (`tp submit --local` on a laptop).

The bot cannot see that machine's run directory. It used to record the run `Failed (Lost)`, over the
status the laptop commits when the run ends; it now leaves the status as committed and stops watching
it, and takes the laptop's later status as it comes. A run directory removed on the bot's own machine
(the folders above it still there) is still reported lost. Real git, the real local backend.
"""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path

from helpers_git import BRANCH, clone, git, make_remote, quiet, seed_lab

from tuneplane.gitops.bot import reconcile, sync
from tuneplane.lab.runs import RunKey, read_status, write_status
from tuneplane.models.run import BackendObject, RunStatus, Transition

RUN = "20250102-100000-00000a"


def _laptop_status(root: Path, storage: Path, phase: str) -> None:
    at = "2025-01-02T10:00:00Z"
    write_status(root, RunStatus(
        experiment="demo", run_id=RUN, method="custom/custom", profile="local", phase=phase,  # type: ignore[arg-type]
        submitted_at=at, started_at=at, finished_at=at if phase == "Succeeded" else None,
        backend=BackendObject(backend="local", kind="Process", name="demo-0123456789",
                              namespace=str(storage / "runs" / "alice" / "demo" / RUN), uid="abc"),
        history=[Transition(phase="Running", at=at)] + ([Transition(phase=phase, at=at)] if phase != "Running" else []),  # type: ignore[arg-type]
    ))
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", f"tp submit --local: {phase}")
    git(root, "push", "-q", "origin", f"HEAD:{BRANCH}")


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


def test_a_run_directory_removed_on_the_bots_own_machine_is_still_lost(tmp_path: Path) -> None:
    remote = make_remote(tmp_path)
    seed_lab(remote, tmp_path / "seed", {"demo": "sleep 30\n"}, runs=[("demo", RUN)])
    bot = clone(remote, tmp_path / "bot")
    reconcile(bot, echo=quiet)
    status = read_status(bot, RunKey("demo", RUN))
    assert status.backend is not None
    run_dir = Path(status.backend.namespace)
    from tuneplane.backends.local.files import read_state

    deadline = time.monotonic() + 30
    while not (read_state(run_dir) or {}).get("pgid"):  # the supervisor started the trainer
        assert time.monotonic() < deadline, "the local run did not start"
        time.sleep(0.1)
    try:
        os.killpg(int((read_state(run_dir) or {})["pgid"]), 9)
    except ProcessLookupError:
        pass
    shutil.rmtree(run_dir)  # its parents stay: this machine's storage

    sync(bot, echo=quiet)

    after = read_status(bot, RunKey("demo", RUN))
    assert after.phase == "Failed" and after.reason == "Lost"
