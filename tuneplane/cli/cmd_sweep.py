"""`tp sweep EXP --grid KEY=V1,V2 …`: a sweep file and one run request per trial, in one commit.

`tp sweep extend|cancel|rerun|show NAME` change or show a sweep; each change is one commit.
"""

from __future__ import annotations

from typing import Annotated

import typer

from tuneplane.cli.options import Branch, Push, Remote, Timeout
from tuneplane.cli.say import say

Grid = Annotated[list[str] | None, typer.Option("--grid", "-g", help="A swept parameter KEY=V1,V2,… (repeatable).")]
Name = Annotated[str, typer.Argument(help="The sweep's name (sweeps/NAME.yaml).")]
SUBCOMMANDS = ("extend", "cancel", "rerun", "show")


def register(app: typer.Typer) -> None:
    app.command(
        "sweep",
        help="Sweep an experiment over parameter values: sweeps/NAME.yaml and one run request "
        "per trial, in one commit. `tp sweep extend|cancel|rerun|show NAME` change or show one.",
        context_settings={"allow_interspersed_args": True},
    )(sweep)


def sweep(
    experiment: Annotated[
        str, typer.Argument(help="The experiment to sweep; or extend|cancel|rerun|show followed by the sweep's NAME.")
    ],
    name_arg: Annotated[str, typer.Argument(metavar="[NAME]", help="The sweep, after extend|cancel|rerun|show.")] = "",
    grid: Grid = None,
    sample: Annotated[int | None, typer.Option("--sample", help="Run N combinations drawn at random.")] = None,
    seed: Annotated[int, typer.Option("--seed", help="Seed of --sample: the same seed draws the same trials.")] = 0,
    name: Annotated[str, typer.Option("--name", help="Name the sweep (default: EXP-<digest of its settings>).")] = "",
    max_trials: Annotated[int, typer.Option("--max-trials", help="Refuse a sweep of more trials than this.")] = 64,
    failed: Annotated[bool, typer.Option("--failed", help="rerun: the trials whose newest run failed.")] = False,
    profile: Annotated[str, typer.Option("--profile", "-p", help="NAME or NAME:TOTAL_GPUS from tuneplane.yaml.")] = "",
    image: Annotated[str, typer.Option("--image", help="Container image (custom recipes need one).")] = "",
    observability_url: Annotated[str, typer.Option("--observability-url", help="Your tracking URL.")] = "",
    sets: Annotated[list[str] | None, typer.Option("--set", help="Override every trial shares KEY=VALUE.")] = None,
    model: Annotated[str, typer.Option("--model", help="Model to start from (hub id or storage path).")] = "",
    train_data: Annotated[str, typer.Option("--train-data", help="Training data set.")] = "",
    validation_data: Annotated[str, typer.Option("--validation-data", help="Validation data set.")] = "",
    timeout: Timeout = "",
    message: Annotated[str, typer.Option("--message", "-m", help="Why this sweep: kept in the sweep file.")] = "",
    push: Push = False,
    remote: Remote = None,
    branch: Branch = None,
) -> None:
    """Write sweeps/NAME.yaml and a run request per trial; running it again adds nothing."""
    # lazy: tp builds only the invoked command, so only it pays for these
    from tuneplane.errors import UsageError
    from tuneplane.runs import sweep as sweeps

    if experiment in SUBCOMMANDS:
        if not name_arg:
            raise UsageError(f"tp sweep {experiment} needs the sweep's NAME", hint=f"tp sweep {experiment} NAME")
        if experiment == "show":
            _show(name_arg)
            return
        if experiment == "extend":
            result = sweeps.extend_sweep(name_arg, grid or [], push=push, remote=remote, branch=branch, say=say.line)
        elif experiment == "cancel":
            result = sweeps.cancel_sweep(name_arg, push=push, remote=remote, branch=branch)
        else:
            if not failed:
                raise UsageError("tp sweep rerun reruns the failed trials", hint=f"tp sweep rerun {name_arg} --failed")
            result = sweeps.rerun_failed(name_arg, push=push, remote=remote, branch=branch, say=say.line)
        _report(experiment, result)
        return
    if name_arg:
        raise UsageError(f"unexpected argument {name_arg!r}", hint="name the sweep with --name NAME")
    if not profile:
        raise UsageError("tp sweep EXP needs --profile", hint="for example --profile local")
    from tuneplane.runs.requests import TypedFlags  # lazy: as above

    typed = TypedFlags(
        experiment, profile, image, observability_url, sets or [], model, train_data, validation_data, timeout, message
    )
    opts = sweeps.SweepOptions(
        typed,
        name=name,
        grid=tuple(grid or ()),
        sample=sample,
        seed=seed,
        max_trials=max_trials,
        push=push,
        remote=remote,
        branch=branch,
    )
    _report("create", sweeps.create_sweep(opts, say=say.line))


def _report(verb: str, result: object) -> None:
    from tuneplane.runs.sweep import SweepResult  # lazy: as above

    assert isinstance(result, SweepResult)
    name = result.sweep.name
    if result.commit is None:
        say.line(
            f"sweep {name}: nothing to {'add' if verb in ('create', 'extend') else verb} ({len(result.trials)} runs)"
        )
    elif verb == "cancel":
        say.line(f"sweep {name}: marked {len(result.written)} requests `cancel: true` (committed {result.commit[:12]})")
    say.line(f"sweep {name}: {len(result.trials)} runs; `tp sweep show {name}` lists them")
    if result.commit is not None and not result.pushed:
        say.line("next: push it (or open a pull request); the bot runs it once merged")


def _show(name: str) -> None:
    from tuneplane.lab.load import open_lab  # lazy: as above
    from tuneplane.views.sweep import sweep_table

    say.text(sweep_table(open_lab().root, name))
