"""`tp export` and `tp eval`: the lifecycle operations of catalog recipes, compiled and rendered.

    tp export EXP --checkpoint runs/<user>/<exp>/<run>/out/checkpoints/final [--checkpoint-format F]
    tp eval EXP --checkpoint … --data data/test.jsonl [--dry-run]
    tp export EXP --checkpoint RUN --local      # run it here, against a run's outputs
`--dry-run` prints the launch command as one shell-quoted line instead of the manifests, under the run
id and folder a run started now would get. `--local` writes the request and runs the operation on this
machine like `tp submit --local`. `--checkpoint` may name a run (id, prefix, EXP/RUN): its out dir.
custom/custom has neither operation: its train.sh does what it wants and the adapter refuses both.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from tuneplane.cli.options import Timeout
from tuneplane.cli.say import say
from tuneplane.constants import RenderFormat


def register(app: typer.Typer) -> None:
    app.command("export", help="Render the job that exports a checkpoint, for example to Hugging Face format.")(export)
    app.command("eval", help="Render the job that evaluates a checkpoint on held-out data.")(evaluate)


Checkpoint = Annotated[str, typer.Option("--checkpoint", help="Checkpoint path (absolute, or under the storage root).")]
Profile = Annotated[str, typer.Option("--profile", "-p", help="NAME[:GPUS]; default the lab's first.")]
DryRun = Annotated[bool, typer.Option("--dry-run", help="Print the launch command only.")]
Local = Annotated[bool, typer.Option("--local", help="Run the operation on this machine and commit its status.")]
Output = Annotated[Path | None, typer.Option("--output", "-o", help="Write the manifests into DIR.")]
Fmt = Annotated[RenderFormat, typer.Option("--format", "-f", help="yaml or json.")]


def export(
    experiment: Annotated[str, typer.Argument(help="The experiment whose recipe exports.")],
    checkpoint: Checkpoint,
    checkpoint_format: Annotated[str, typer.Option("--checkpoint-format", help="Format of the checkpoint.")] = "",
    profile: Profile = "",
    timeout: Timeout = "",
    dry_run: DryRun = False,
    local: Local = False,
    output: Output = None,
    fmt: Fmt = RenderFormat.yaml,
) -> None:
    inputs = {"checkpoint": checkpoint, "checkpoint_format": checkpoint_format}
    run_lifecycle("export", experiment, profile, inputs, dry_run, output, fmt, local, timeout)


def evaluate(
    experiment: Annotated[str, typer.Argument(help="The experiment whose recipe evaluates.")],
    checkpoint: Checkpoint,
    data: Annotated[str, typer.Option("--data", help="Evaluation data set.")] = "",
    profile: Profile = "",
    timeout: Timeout = "",
    dry_run: DryRun = False,
    local: Local = False,
    output: Output = None,
    fmt: Fmt = RenderFormat.yaml,
) -> None:
    inputs = {"checkpoint": checkpoint, "data": data}
    run_lifecycle("eval", experiment, profile, inputs, dry_run, output, fmt, local, timeout)


def run_lifecycle(
    operation: str,
    experiment: str,
    profile: str,
    inputs: dict[str, str],
    dry_run: bool,
    output: Path | None,
    fmt: RenderFormat,
    local: bool = False,
    timeout: str = "",
) -> None:
    # lazy: rendering loads the pipeline
    import shlex

    from tuneplane.cli.outcome import require_success, show_outcome
    from tuneplane.runs.operations import OperationOptions, run_operation
    from tuneplane.runs.requests import parse_duration

    opts = OperationOptions(
        operation, experiment, profile, inputs, dry_run, local, output, fmt, parse_duration(timeout)
    )
    done = run_operation(opts, out=say.text, note=say.note, echo=lambda line: say.line(f"  │ {line}"), notify=say.line)
    if done.argv is not None:
        say.line(shlex.join(done.argv))
        say.note(f"run folder: {done.run_dir}")
    result = done.submitted
    if result is not None and result.status is not None:
        show_outcome(result.status, result.status_commit)
        require_success(result.status, f"{operation} run")
