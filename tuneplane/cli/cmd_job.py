"""`tp job`: look at runs and control them. The group's commands live in `cmd_job_runs` (ls, status,
logs, cancel) and `cmd_job_metrics` (metrics, compare)."""

from __future__ import annotations

import typer

from tuneplane.cli import cmd_job_metrics, cmd_job_runs


def register(app: typer.Typer) -> None:
    job_app = typer.Typer(
        name="job",
        help="Inspect and control runs: ls, status, logs, cancel, metrics, compare.",
        no_args_is_help=True,
        add_completion=False,
    )
    cmd_job_runs.register(job_app)
    cmd_job_metrics.register(job_app)
    app.add_typer(job_app, name="job")
