"""`tp submit EXP --profile P …`: check, write and commit a run request; `--local` runs it here."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer

from tuneplane.cli.job_commands import metrics_in_order
from tuneplane.cli.options import Branch, Local, Push, Remote, Timeout
from tuneplane.errors import UsageError

if TYPE_CHECKING:
    from tuneplane.models.run import RunStatus


def register(app: typer.Typer) -> None:
    app.command(
        "submit", help="Check a run, write runs/EXP/<run-id>.yaml and commit it; --local runs it here."
    )(submit)


def submit(
    experiment: Annotated[str, typer.Argument(help="The experiment to run (a folder under experiments/).")],
    profile: Annotated[
        str, typer.Option("--profile", "-p", help="NAME or NAME:TOTAL_GPUS from tuneplane.yaml.")
    ],
    image: Annotated[str, typer.Option("--image", help="Container image (custom recipes need one).")] = "",
    observability_url: Annotated[
        str, typer.Option("--observability-url", help="Your tracking URL (external observability).")
    ] = "",
    sets: Annotated[
        list[str] | None, typer.Option("--set", help="Hyperparameter override KEY=VALUE.")
    ] = None,
    model: Annotated[str, typer.Option("--model", help="Model to start from (hub id or storage path).")] = "",
    train_data: Annotated[str, typer.Option("--train-data", help="Training data set.")] = "",
    validation_data: Annotated[str, typer.Option("--validation-data", help="Validation data set.")] = "",
    timeout: Timeout = "",
    message: Annotated[str, typer.Option("--message", "-m", help="Why this run: kept in the request.")] = "",
    push: Push = False,
    local: Local = False,
    detach: Annotated[bool, typer.Option(
        "--detach", help="With --local: start the run and return; it records its status when it ends.")] = False,
    allow_dirty: Annotated[
        bool, typer.Option("--allow-dirty", help="Submit despite uncommitted changes.")
    ] = False,
    remote: Remote = None,
    branch: Branch = None,
) -> None:
    # lazy: tp builds only the invoked command, so only it pays for these
    from tuneplane.errors import RunFailed
    from tuneplane.gitops.requests import TypedFlags, read_flags
    from tuneplane.gitops.submit import SubmitOptions
    from tuneplane.gitops.submit import submit as do_submit

    typed = TypedFlags(experiment, profile, image, observability_url, sets or [], model, train_data,
                       validation_data, timeout, message)
    opts = SubmitOptions.of(
        read_flags(typed),
        push=push,
        local=local,
        detach=detach,
        allow_dirty=allow_dirty,
        remote=remote,
        branch=branch,
    )
    if detach and not local:
        raise UsageError("--detach runs a local run in the background", hint="add --local")
    result = do_submit(opts, echo=lambda line: typer.echo(f"  │ {line}"), notify=typer.echo)
    if detach:
        typer.echo(f"run {result.key.run_id} runs in the background; its status is committed when it ends")
        return
    if result.status is not None:
        show_outcome(result.status, result.status_commit)
    if not local and not result.pushed:
        typer.echo("next: push it (or open a pull request); the bot submits it once merged")
    if result.status is not None and result.status.phase != "Succeeded":
        raise RunFailed(
            f"run {result.key.run_id} ended {result.status.phase}", hint=f"tp job logs {result.key.run_id}"
        )


def show_outcome(status: RunStatus, commit: str | None) -> None:
    """A few lines on how a run ended: phase, where the outputs and the status file are."""
    # lazy: tp builds only the invoked command, so only it pays for these
    from tuneplane.gitops.dashboard import sparkline
    from tuneplane.lab.runs import RunKey

    key = RunKey(status.experiment, status.run_id)
    code = f", exit code {status.exit_code}" if status.exit_code is not None else ""
    typer.echo(f"run {key.run_id}: {status.phase}{code}")
    if status.phase != "Succeeded" and status.message:
        typer.echo("  " + status.message.replace("\n", "\n  "))
    for name, value in metrics_in_order(status):
        typer.echo(f"  {name} = {value:.6g} {sparkline(status.metric_history.get(name, []))}".rstrip())
    if status.artifacts:
        typer.echo(f"  artifacts: {', '.join(a.path for a in status.artifacts)}")
    if status.out_dir:
        typer.echo(f"  outputs: {status.out_dir}")
    where = f" (committed {commit[:12]})" if commit else ""
    typer.echo(f"status: {key.status_rel}{where}")
