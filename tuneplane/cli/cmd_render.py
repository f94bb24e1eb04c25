"""`tp render`: the exact Kubernetes manifests a run request becomes; `--changed --diff` for pull requests.

tp render EXP --profile h200:16 [--set k=v …]   a run that has not been requested yet
tp render runs/EXP/RUN.yaml                     a run request as written
tp render --all -o DIR                          every run request of the lab, one file each
tp render --changed --diff [--base REF]         a Markdown comment: rendered diff per changed request
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from tuneplane.cli.collector import PausedWhileLoading
from tuneplane.cli.options import Timeout
from tuneplane.cli.say import say
from tuneplane.constants import EXIT_PROBLEMS, PREVIEW_RUN_ID, RenderFormat


def register(app: typer.Typer) -> None:
    app.command(
        "render", help="Show the Kubernetes manifests or Slurm batch script a run request becomes (or their diff)."
    )(render)


def render(
    targets: Annotated[list[str] | None, typer.Argument(help="EXP, or run request files runs/EXP/RUN.yaml.")] = None,
    profile: Annotated[str, typer.Option("--profile", "-p", help="NAME or NAME:TOTAL_GPUS (with EXP).")] = "",
    sets: Annotated[list[str] | None, typer.Option("--set", help="Hyperparameter KEY=VALUE (with EXP).")] = None,
    image: Annotated[str, typer.Option("--image", help="Container image (with EXP).")] = "",
    observability_url: Annotated[str, typer.Option("--observability-url", help="Tracking URL (with EXP).")] = "",
    model: Annotated[str, typer.Option("--model", help="Model input (with EXP).")] = "",
    train_data: Annotated[str, typer.Option("--train-data", help="Training data (with EXP).")] = "",
    validation_data: Annotated[str, typer.Option("--validation-data", help="Validation data (with EXP).")] = "",
    timeout: Timeout = "",
    run_id: Annotated[str, typer.Option("--run-id", help="Run id to render EXP under.")] = PREVIEW_RUN_ID,
    output: Annotated[Path | None, typer.Option("--output", "-o", help="Write one file per run into DIR.")] = None,
    fmt: Annotated[RenderFormat, typer.Option("--format", "-f", help="yaml or json.")] = RenderFormat.yaml,
    allow_dirty: Annotated[
        bool, typer.Option("--allow-dirty", help="Render uncommitted changes without a note.")
    ] = False,
    all_: Annotated[bool, typer.Option("--all", help="Every run request of the lab.")] = False,
    changed: Annotated[bool, typer.Option("--changed", help="Run requests changed since --base.")] = False,
    diff: Annotated[bool, typer.Option("--diff", help="With --changed: a Markdown diff against --base.")] = False,
    base: Annotated[str | None, typer.Option("--base", help="Git ref for --changed (default: merge base).")] = None,
) -> None:
    with PausedWhileLoading("tuneplane.runs.review"):
        # lazy: resolve, render and pydantic are only paid when rendering
        from tuneplane.runs import review
        from tuneplane.runs.requests import TypedFlags

    run = TypedFlags(
        "", profile, image, observability_url, tuple(sets or ()), model, train_data, validation_data, timeout
    )
    opts = review.RenderOptions(
        targets=targets or [],
        run=run,
        run_id=run_id,
        output=output,
        fmt=fmt,
        allow_dirty=allow_dirty,
        all=all_,
        changed=changed,
        diff=diff,
        base=base,
    )
    refused = review.run_render(opts, out=say.text, note=say.note)
    if refused:
        raise typer.Exit(EXIT_PROBLEMS)
