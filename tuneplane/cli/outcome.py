"""How a run that tp ran here ended, said the same by `tp submit --local`, `tp rerun --local`, `tp export
--local` and `tp eval --local`: a few lines, then exit 1 unless it succeeded."""

from __future__ import annotations

from typing import TYPE_CHECKING

from tuneplane.cli.cmd_job_runs import metrics_in_order
from tuneplane.cli.say import say
from tuneplane.constants import SUCCEEDED
from tuneplane.errors import RunFailed

if TYPE_CHECKING:
    from tuneplane.models.run import RunStatus


def show_outcome(status: RunStatus, commit: str | None) -> None:
    """A few lines on how a run ended: phase, where the outputs and the status file are."""
    # lazy: tp builds only the invoked command, so only it pays for these
    from tuneplane.lab.runs import RunKey
    from tuneplane.views.dashboard import sparkline

    key = RunKey(status.experiment, status.run_id)
    code = f", exit code {status.exit_code}" if status.exit_code is not None else ""
    say.line(f"run {key.run_id}: {status.phase}{code}")
    if status.phase != SUCCEEDED and status.message:
        say.line("  " + status.message.replace("\n", "\n  "))
    for name, value in metrics_in_order(status):
        say.line(f"  {name} = {value:.6g} {sparkline(status.metric_history.get(name, []))}".rstrip())
    if status.artifacts:
        say.line(f"  artifacts: {', '.join(a.path for a in status.artifacts)}")
    if status.out_dir:
        say.line(f"  outputs: {status.out_dir}")
    where = f" (committed {commit[:12]})" if commit else ""
    say.line(f"status: {key.status_rel}{where}")


def require_success(status: RunStatus, what: str = "run") -> None:
    """Exit 1 (RunFailed) unless the run succeeded, pointing at its log."""
    if status.phase != SUCCEEDED:
        raise RunFailed(f"{what} {status.run_id} ended {status.phase}", hint=f"tp job logs {status.run_id}")
