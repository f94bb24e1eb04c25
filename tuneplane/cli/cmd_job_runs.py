"""`tp job ls|status|logs|cancel`: look at runs and stop them (the `tp job` group is cmd_job's)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer

from tuneplane.cli.options import Context, Kubeconfig, Run
from tuneplane.cli.say import say
from tuneplane.errors import UsageError

if TYPE_CHECKING:
    from tuneplane.lab.runs import RunKey
    from tuneplane.models.run import Attempt, RunRequest, RunStatus

RECENT = 20


def register(job_app: typer.Typer) -> None:
    """Add `ls`, `status`, `logs` and `cancel` to the `tp job` group."""
    job_app.command("ls", help="List runs: the most recent, or --all.")(ls)
    job_app.command("status", help="Show a run's status: phase, times, provenance, metrics, artifacts.")(status)
    job_app.command("logs", help="Print a run's log (-f follows it).")(logs)
    job_app.command("cancel", help="Cancel a run: set `cancel: true` in its request and commit (--now: stop it).")(
        cancel
    )


def ls(
    exp: Annotated[str | None, typer.Option("--exp", help="Only this experiment.")] = None,
    all_runs: Annotated[bool, typer.Option("--all", help=f"Every run, not the {RECENT} most recent.")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON (see the JSON outputs reference).")] = False,
) -> None:
    # lazy: tp builds only the invoked command, so only it pays for these
    from tuneplane.cli.tables import table
    from tuneplane.runs.lookup import LS_COLUMNS, run_rows

    rows, older = run_rows(exp, None if all_runs else RECENT)
    if as_json:  # the same runs as the table, each keyed by its column's name in lower case
        say.json([dict(zip((c.lower() for c in LS_COLUMNS), row, strict=True)) for row in rows])
        return
    if not rows:
        say.line("no runs yet" + (f" of {exp}" if exp else "") + ": tp submit EXP --profile P")
        return
    say.line(table(LS_COLUMNS, rows))
    if older:
        say.line(f"… {older} older run(s): tp job ls --all")


def status(
    run: Run,
    as_json: Annotated[
        bool, typer.Option("--json", help="Print the status file as JSON (its schema: schemas/status.schema.json).")
    ] = False,
    refresh: Annotated[
        bool | None,
        typer.Option("--refresh/--no-refresh", help="Ask the backend for news (default: for local runs)."),
    ] = None,
    kubeconfig: Kubeconfig = None,
    context: Context = None,
) -> None:
    # lazy: tp builds only the invoked command, so only it pays for these
    from tuneplane.backends.factory import ClusterAccess
    from tuneplane.lab.runs import read_request, status_data
    from tuneplane.runs.lookup import current_status, located

    root, key, recorded = located(run)
    if recorded is None:
        request = read_request(root, key)
        if as_json:
            say.json(
                {
                    "experiment": key.experiment,
                    "run_id": key.run_id,
                    "submitted": False,
                    "request": request.model_dump(mode="json", by_alias=True),
                }
            )
        else:
            _not_submitted(key, request)
        return
    current = current_status(root, recorded, refresh, ClusterAccess(kubeconfig, context))
    if as_json:
        say.json(status_data(current))
        return
    for label, value in _status_lines(key, current):
        say.line(f"{label:<11}{value}")


def _not_submitted(key: RunKey, request: RunRequest) -> None:
    say.line(f"run {key.run_id} of {key.experiment}: requested, not submitted yet (no {key.status_rel})")
    say.line(f"  profile {request.profile}; requested by {request.requested_by or '?'} at {request.created_at}")
    say.line(
        "  the bot submits it once the request is merged"
        if not request.cancel
        else "  it is marked `cancel: true`: the bot will record it as cancelled"
    )


def _status_lines(key: RunKey, s: RunStatus) -> list[tuple[str, str]]:
    # lazy: tp builds only the invoked command, so only it pays for these
    from tuneplane.views.dashboard import duration_text, gpu_hours, sparkline

    p = s.provenance
    code = f", exit code {s.exit_code}" if s.exit_code is not None else ""
    reason = f" ({s.reason})" if s.reason else ""
    lines = [
        ("run", f"{s.run_id} of {s.experiment}"),
        ("phase", f"{s.phase}{reason}{code}"),
        ("method", f"{s.method or '?'} · {s.operation} · profile {s.profile}"),
        (
            "times",
            " · ".join(
                f"{n} {v}"
                for n, v in (
                    ("submitted", s.submitted_at),
                    ("started", s.started_at),
                    ("finished", s.finished_at),
                )
                if v
            )
            + (f" ({duration_text(s.started_at, s.finished_at)})" if s.finished_at and s.started_at else ""),
        ),
    ]
    if s.backend is not None:
        place = s.backend.namespace or s.backend.run_dir
        where = f" in {place}" if place else ""
        lines.append(("backend", f"{s.backend.backend}: {s.backend.kind} {s.backend.name}{where}"))
    if p.commit:
        lines.append(("commit", f"{p.commit[:12]}{' (dirty)' if p.dirty else ''} · recipe {p.recipe}"))
        lines.append(("jobspec", p.jobspec_digest))
    if p.image:
        lines.append(("image", p.image))
    if s.out_dir:
        lines.append(("outputs", s.out_dir))
    for name, value in metrics_in_order(s):
        lines.append(("metric", f"{name} = {value:.6g} {sparkline(s.metric_history.get(name, []))}".rstrip()))
    for art in s.artifacts:
        lines.append(("artifact", f"{art.kind}: {art.path} ({art.size_bytes} bytes)"))
    shown = len(s.attempts) > 1 or any(a.reason not in ("", "Completed") for a in s.attempts)
    for attempt in s.attempts if shown else []:  # one attempt that ran to its end says nothing more
        lines.append(("attempt", _attempt_text(attempt)))
    if any(a.gpu_seconds for a in s.attempts):
        lines.append(("GPU-hours", gpu_hours(sum(a.gpu_seconds for a in s.attempts))))
    if s.message:
        lines.append(("message", s.message.replace("\n", "\n" + " " * 11)))
    lines.append(("files", f"{key.request_rel} · {key.status_rel}"))
    return lines


def logs(
    run: Run,
    follow: Annotated[bool, typer.Option("--follow", "-f", help="Keep printing until the run ends.")] = False,
    tail: Annotated[int | None, typer.Option("--tail", help="Only the last N lines.")] = None,
    kubeconfig: Kubeconfig = None,
    context: Context = None,
) -> None:
    # lazy: tp builds only the invoked command, so only it pays for these
    from tuneplane.backends.base import BackendError
    from tuneplane.backends.factory import ClusterAccess
    from tuneplane.runs.lookup import backend_for, located
    from tuneplane.runs.observe import backend_ref

    root, key, current = located(run)
    ref = backend_ref(current) if current is not None else None
    if ref is None:
        raise UsageError(
            f"run {key} has not been submitted, so it has no log", hint=f"tp job status {key.run_id} says why"
        )
    try:
        backend = backend_for(root, ref.backend, ClusterAccess(kubeconfig, context))
        for line in backend.logs(ref, tail=tail, follow=follow):
            say.line(line)
    except BackendError as exc:
        raise UsageError(str(exc)) from None


def cancel(
    run: Run,
    now: Annotated[bool, typer.Option("--now", help="Also stop a local run at once.")] = False,
    push: Annotated[bool, typer.Option("--push", help="Push the commit (fetch, rebase, retry).")] = False,
) -> None:
    # lazy: tp builds only the invoked command, so only it pays for these
    from tuneplane.runs.cancel import cancel_run

    for line in cancel_run(run, now=now, push=push):
        say.line(line)


def _attempt_text(a: Attempt) -> str:
    """One attempt on one line: its number, how it ended, where, its GPU-hours, what the trainer said."""
    from tuneplane.views.dashboard import gpu_hours  # lazy: as in _status_lines

    parts = [str(a.number), a.reason or "under way"]
    if a.exit_code is not None:
        parts.append(f"exit code {a.exit_code}")
    if a.failed_node or a.failed_rank is not None:
        where = [f"node {a.failed_node}"] if a.failed_node else []
        parts.append(" ".join(where + ([f"rank {a.failed_rank}"] if a.failed_rank is not None else [])))
    if a.gpu_seconds:
        parts.append(f"{gpu_hours(a.gpu_seconds)} GPU-h")
    return " · ".join(parts) + (f": {a.message.splitlines()[0]}" if a.message.strip() else "")


def metrics_in_order(status: RunStatus) -> list[tuple[str, float]]:
    """A status's metrics in reading order: the recipe's primary metrics first, hardware last."""
    from tuneplane.views.runmetrics import vocabulary_of  # lazy: the catalog is read only when metrics are shown

    return [(name, status.metrics[name]) for name in vocabulary_of(status.method).order(status.metrics)]
