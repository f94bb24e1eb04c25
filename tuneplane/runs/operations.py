"""`tp export` and `tp eval`: a lifecycle operation of a catalog recipe as a run request, rendered for
review, shown as its launch command (`dry_run`), or run on this machine (`local`, as `tp submit --local`).

`--checkpoint` may name a run (id, prefix, EXP/RUN): it stands for that run's out dir.
"""

from __future__ import annotations

from pathlib import Path

from tuneplane.constants import RenderFormat
from tuneplane.errors import UsageError
from tuneplane.lab.runs import find_run, new_run_id, read_status
from tuneplane.runs.requests import new_request, requester
from tuneplane.runs.review import RenderContext, RenderOptions
from tuneplane.runs.submit import SubmitOptions, SubmitResult, submit
from tuneplane.runtime.records import FrozenRecord, field
from tuneplane.runtime.reporter import Echo


class OperationOptions(FrozenRecord):
    """What `tp export` / `tp eval` were asked."""

    operation: str
    experiment: str
    profile: str = ""  # empty: the lab's first profile
    inputs: dict[str, str] = field(default_factory=dict)
    dry_run: bool = False
    local: bool = False
    output: Path | None = None
    fmt: RenderFormat = RenderFormat.yaml
    timeout: int | None = None  # seconds, as `tp submit --timeout`: the job's time limit on every backend


class OperationOutcome(FrozenRecord):
    argv: list[str] | None = None  # dry run: the launch command
    run_dir: str = ""  # dry run: the folder a run started now would get
    submitted: SubmitResult | None = None  # local: the run and its status


def run_operation(opts: OperationOptions, out: Echo, note: Echo, echo: Echo, notify: Echo) -> OperationOutcome:
    """Render the operation's job (to `out`, or into `opts.output`), or run it here. Raises UsageError."""
    options = RenderOptions(targets=[opts.experiment], output=opts.output, fmt=opts.fmt, allow_dirty=opts.dry_run)
    context = RenderContext.open(options, out=out, note=note)
    profile = opts.profile or next(iter(context.lab.config.profiles), "")
    inputs = {**opts.inputs, "checkpoint": checkpoint_path(context.lab.root, opts.inputs.get("checkpoint", ""))}
    request = new_request(
        command=opts.operation,
        experiment=opts.experiment,
        run_id=new_run_id(),
        operation=opts.operation,
        profile=profile,
        inputs=inputs,
        timeout=opts.timeout,
        requested_by=requester(context.repo),
    )
    if opts.local and not opts.dry_run:
        return OperationOutcome(submitted=submit(request, SubmitOptions(local=True), echo=echo, notify=notify))
    rendered = context.render_request(request)
    if opts.dry_run:
        return OperationOutcome(argv=list(rendered.plan.argv), run_dir=rendered.spec.spec.paths.run_dir)
    context.emit(request, rendered, opts.experiment, single=True)
    return OperationOutcome()


def checkpoint_path(root: Path, text: str) -> str:
    """A run reference (id, prefix, EXP/RUN) stands for that run's out dir; anything else is a path."""
    if not text or "/" in text and Path(text).exists():
        return text
    try:
        status = read_status(root, find_run(root, text))
    except UsageError:
        return text
    return status.out_dir if status is not None and status.out_dir else text
