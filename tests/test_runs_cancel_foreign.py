"""`tp job cancel` of a local run stops that run's own directory only: a status that names another
run's directory (copied from it, or edited) is refused, and nothing there is signalled or written."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest
from support.repos import request

from tuneplane.errors import UsageError
from tuneplane.lab.runs import RunKey, write_request, write_status
from tuneplane.models.run import BackendObject, RunStatus
from tuneplane.runs.cancel import cancel_run

RUN = "20250103-100000-0000ff"


def test_a_status_naming_another_runs_directory_is_never_stopped(
    demo_lab: Path, tmp_path: Path, git: Callable[..., str]
) -> None:
    victim = tmp_path / "storage" / "runs" / "bob" / "other" / "20250101-000000-000001"
    victim.mkdir(parents=True)
    bystander = subprocess.Popen(["sleep", "60"], start_new_session=True)
    (victim / "state.json").write_text(json.dumps({"pgid": bystander.pid, "supervisor_pid": bystander.pid}))
    try:
        write_request(demo_lab, request("demo", RUN))
        write_status(
            demo_lab,
            RunStatus(
                experiment="demo",
                run_id=RUN,
                phase="Running",  # type: ignore[arg-type]
                backend=BackendObject(backend="local", kind="Process", name="x", run_dir=str(victim), uid="u"),
            ),
        )
        git(demo_lab, "add", "-A")
        git(demo_lab, "commit", "-q", "-m", "a run, and a status copied from another")

        with pytest.raises(UsageError, match="not the run directory of demo/"):
            cancel_run(RUN, demo_lab)

        assert bystander.poll() is None
        assert sorted(p.name for p in victim.iterdir()) == ["state.json"]
        assert "cancel: true" not in (demo_lab / RunKey("demo", RUN).request_rel).read_text()  # nothing marked
        assert git(demo_lab, "log", "-1", "--format=%s").strip() == "a run, and a status copied from another"
    finally:
        bystander.kill()
        bystander.wait()
