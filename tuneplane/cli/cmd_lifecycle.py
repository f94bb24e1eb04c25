"""`tp export` and `tp eval`: the lifecycle operations of catalog recipes, compiled and rendered.

    tp export EXP --checkpoint runs/<user>/<exp>/<run>/out/checkpoints/final [--checkpoint-format F]
    tp eval EXP --checkpoint … --data data/test.jsonl [--dry-run]
`--dry-run` prints the launch command as one shell-quoted line instead of the manifests. custom/custom
has neither operation: its train.sh does what it wants and the adapter refuses both.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from tuneplane.constants import PREVIEW_RUN_ID, RenderFormat


def register(app: typer.Typer) -> None:
    app.command("export", help="Render the job that exports a checkpoint, for example to Hugging Face format.")(
        export)
    app.command("eval", help="Render the job that evaluates a checkpoint on held-out data.")(evaluate)


Checkpoint = Annotated[str, typer.Option("--checkpoint",
                                         help="Checkpoint path (absolute, or under the storage root).")]
Profile = Annotated[str, typer.Option("--profile", "-p", help="NAME[:GPUS]; default the lab's first.")]
DryRun = Annotated[bool, typer.Option("--dry-run", help="Print the launch command only.")]
Output = Annotated[Path | None, typer.Option("--output", "-o", help="Write the manifests into DIR.")]
Fmt = Annotated[RenderFormat, typer.Option("--format", "-f", help="yaml or json.")]


def export(
    experiment: Annotated[str, typer.Argument(help="The experiment whose recipe exports.")],
    checkpoint: Checkpoint,
    checkpoint_format: Annotated[str, typer.Option("--checkpoint-format",
                                                   help="Format of the checkpoint.")] = "",
    profile: Profile = "",
    dry_run: DryRun = False,
    output: Output = None,
    fmt: Fmt = RenderFormat.yaml,
) -> None:
    inputs = {"checkpoint": checkpoint, "checkpoint_format": checkpoint_format}
    run_lifecycle("export", experiment, profile, inputs, dry_run, output, fmt)


def evaluate(
    experiment: Annotated[str, typer.Argument(help="The experiment whose recipe evaluates.")],
    checkpoint: Checkpoint,
    data: Annotated[str, typer.Option("--data", help="Evaluation data set.")] = "",
    profile: Profile = "",
    dry_run: DryRun = False,
    output: Output = None,
    fmt: Fmt = RenderFormat.yaml,
) -> None:
    run_lifecycle("eval", experiment, profile, {"checkpoint": checkpoint, "data": data}, dry_run, output, fmt)


def run_lifecycle(operation: str, experiment: str, profile: str, inputs: dict[str, str], dry_run: bool,
                  output: Path | None, fmt: RenderFormat) -> None:
    # lazy: rendering loads the pipeline
    import shlex

    from tuneplane.gitops.rendering import RenderContext, RenderOptions
    from tuneplane.gitops.requests import RunFlags, request_from_flags

    options = RenderOptions(targets=[experiment], output=output, fmt=fmt, allow_dirty=dry_run)
    context = RenderContext.open(options, out=lambda text: typer.echo(text, nl=False),
                                 note=lambda line: typer.echo(line, err=True))
    chosen = profile or next(iter(context.lab.config.profiles), "")
    flags = RunFlags(experiment, chosen, operation=operation, inputs=inputs)
    request = request_from_flags(flags, run_id=PREVIEW_RUN_ID, command=operation)
    rendered = context.render_request(request)
    if dry_run:
        typer.echo(shlex.join(rendered.plan.argv))
        return
    context.emit(request, rendered, experiment, single=True)
