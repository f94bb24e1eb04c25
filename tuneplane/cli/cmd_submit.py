"""`tp submit EXP --profile P …`: check, write and commit a run request; `--local` runs it here."""

from __future__ import annotations

from typing import Annotated

import typer

from tuneplane.cli.completion import experiment_names
from tuneplane.cli.options import Branch, Local, Push, Remote, Timeout
from tuneplane.cli.say import say
from tuneplane.errors import UsageError


def register(app: typer.Typer) -> None:
    app.command("submit", help="Check a run, write runs/EXP/<run-id>.yaml and commit it; --local runs it here.")(submit)


def submit(
    experiment: Annotated[
        str,
        typer.Argument(help="The experiment to run (a folder under experiments/).", autocompletion=experiment_names),
    ],
    profile: Annotated[str, typer.Option("--profile", "-p", help="NAME or NAME:TOTAL_GPUS from tuneplane.yaml.")],
    image: Annotated[str, typer.Option("--image", help="Container image (custom recipes need one).")] = "",
    observability_url: Annotated[
        str, typer.Option("--observability-url", help="Your tracking URL (external observability).")
    ] = "",
    sets: Annotated[list[str] | None, typer.Option("--set", help="Hyperparameter override KEY=VALUE.")] = None,
    model: Annotated[str, typer.Option("--model", help="Model to start from (hub id or storage path).")] = "",
    train_data: Annotated[str, typer.Option("--train-data", help="Training data set.")] = "",
    validation_data: Annotated[str, typer.Option("--validation-data", help="Validation data set.")] = "",
    timeout: Timeout = "",
    message: Annotated[str, typer.Option("--message", "-m", help="Why this run: kept in the request.")] = "",
    push: Push = False,
    local: Local = False,
    detach: Annotated[
        bool,
        typer.Option("--detach", help="With --local: start the run and return; it records its status when it ends."),
    ] = False,
    allow_dirty: Annotated[bool, typer.Option("--allow-dirty", help="Submit despite uncommitted changes.")] = False,
    remote: Remote = None,
    branch: Branch = None,
) -> None:
    # lazy: tp builds only the invoked command, so only it pays for these
    from tuneplane.cli.outcome import require_success, show_outcome
    from tuneplane.lab.runs import new_run_id
    from tuneplane.runs.requests import TypedFlags, read_request
    from tuneplane.runs.submit import SubmitOptions
    from tuneplane.runs.submit import submit as do_submit

    typed = TypedFlags(
        experiment, profile, image, observability_url, sets or [], model, train_data, validation_data, timeout, message
    )
    request = read_request(typed, run_id=new_run_id(), command="submit")
    if detach and not local:
        raise UsageError("--detach runs a local run in the background", hint="add --local")
    opts = SubmitOptions(push=push, local=local, detach=detach, allow_dirty=allow_dirty, remote=remote, branch=branch)
    result = do_submit(request, opts, echo=lambda line: say.line(f"  │ {line}"), notify=say.line)
    if detach:
        say.line(f"run {result.key.run_id} runs in the background; its status is committed when it ends")
        return
    if result.status is not None:
        show_outcome(result.status, result.status_commit)
    if not local and not result.pushed:
        say.line("next: push it (or open a pull request); the bot submits it once merged")
    if result.status is not None:
        require_success(result.status)
