"""`tp rerun RUN`: a new run request that reproduces an earlier run exactly (pinned to its commit)."""

from __future__ import annotations

from typing import Annotated

import typer

from tuneplane.cli.options import Branch, Local, Push, Remote, Run
from tuneplane.cli.say import say


def register(app: typer.Typer) -> None:
    app.command("rerun", help="Request a run again: same overrides, inputs, image and profile, at the same commit.")(
        rerun
    )


def rerun(
    run: Run,
    message: Annotated[str, typer.Option("--message", "-m", help="Why it runs again.")] = "",
    push: Push = False,
    local: Local = False,
    remote: Remote = None,
    branch: Branch = None,
) -> None:
    # lazy: tp builds only the invoked command, so only it pays for these
    from tuneplane.cli.outcome import require_success, show_outcome
    from tuneplane.runs.rerun import rerun as do_rerun

    done = do_rerun(
        run,
        local=local,
        push=push,
        message=message,
        remote=remote,
        branch=branch,
        echo=lambda line: say.line(f"  │ {line}"),
        notify=say.line,
    )
    result = done.result
    if done.same_job:
        say.line("  same job as the original (apart from run id and output paths)")
    else:
        say.note(
            "  note: the job differs from the original's (tool version or image default changed?); "
            "compare with `tp render`"
        )
    if result.status is not None:
        show_outcome(result.status, result.status_commit)
        require_success(result.status)
