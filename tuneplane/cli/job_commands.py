"""`tp job ls|status|logs|cancel`: look at runs and stop them. The `tp job` group adds these commands."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from tuneplane.cli.options import Context, Kubeconfig, Run
from tuneplane.constants import TERMINAL

if TYPE_CHECKING:
    from tuneplane.lab.runs import RunKey
    from tuneplane.models.run import RunStatus

RECENT = 20


def register_job_commands(job_app: typer.Typer) -> None:
    job_app.command("ls", help="List runs: the most recent, or --all.")(ls)
    job_app.command("status", help="Show a run's status: phase, times, provenance, metrics, artifacts.")(
        status
    )
    job_app.command("logs", help="Print a run's log (-f follows it).")(logs)
    job_app.command(
        "cancel", help="Cancel a run: set `cancel: true` in its request and commit (--now: stop it)."
    )(cancel)


def ls(
    exp: Annotated[str | None, typer.Option("--exp", help="Only this experiment.")] = None,
    all_runs: Annotated[
        bool, typer.Option("--all", help=f"Every run, not the {RECENT} most recent.")
    ] = False,
) -> None:
    # lazy: tp builds only the invoked command, so only it pays for these
    from tuneplane.cli.tables import table
    from tuneplane.lab.load import open_lab
    from tuneplane.lab.runs import request_keys, status_keys

    root = open_lab().root
    keys = sorted(
        set(request_keys(root)) | set(status_keys(root)), key=lambda k: (k.run_id, k.experiment), reverse=True
    )
    keys = [k for k in keys if exp is None or k.experiment == exp]
    shown = keys if all_runs else keys[:RECENT]
    rows = [_ls_row(root, key) for key in shown]
    if not rows:
        typer.echo("no runs yet" + (f" of {exp}" if exp else "") + ": tp submit EXP --profile P")
        return
    typer.echo(table(["RUN", "EXPERIMENT", "PHASE", "PROFILE", "STARTED", "DURATION", "METRIC"], rows))
    if len(keys) > len(shown):
        typer.echo(f"… {len(keys) - len(shown)} older run(s): tp job ls --all")


def _ls_row(root: Path, key: Any) -> list[str]:
    # lazy: tp builds only the invoked command, so only it pays for these
    import json

    from tuneplane.gitops.dashboard import duration_text, metric_cell, short_time

    try:
        data = json.loads((root / key.status_rel).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        data = None
    if not isinstance(data, dict):
        return [
            key.run_id,
            key.experiment,
            "(not submitted)" if data is None else "(unreadable)",
            "",
            "",
            "",
            "",
        ]
    data = _live(data)
    phase = str(data.get("phase", "")) + (
        f" ({data['reason']})" if data.get("reason") and data.get("phase") != "Succeeded" else ""
    )
    return [
        key.run_id,
        key.experiment,
        phase,
        str(data.get("profile", "")),
        short_time(data.get("started_at")),
        duration_text(data.get("started_at"), data.get("finished_at")),
        metric_cell(data),
    ]


def _live(data: dict[str, Any]) -> dict[str, Any]:
    """A local run still in progress, as its run directory says now (its status file is from the start)."""
    backend = data.get("backend") or {}
    if data.get("phase") in TERMINAL or not isinstance(backend, dict):
        return data
    if backend.get("backend") != "local" or not os.path.isdir(str(backend.get("namespace", ""))):
        return data
    # lazy: only a listing with a local run still going loads the backend
    from tuneplane.backends.base import BackendRef
    from tuneplane.backends.factory import run_dir_backend

    ref = BackendRef(backend="local", kind=str(backend.get("kind", "")), name=str(backend.get("name", "")),
                     namespace=str(backend["namespace"]), uid=str(backend.get("uid", "")))
    obs = run_dir_backend(Path(str(backend["namespace"]))).observe(ref)
    return {**data, "phase": obs.phase, "reason": obs.reason, "started_at": obs.started_at or data.get("started_at")}


def status(
    run: Run,
    as_json: Annotated[bool, typer.Option("--json", help="Print the status file as JSON.")] = False,
    refresh: Annotated[
        bool | None,
        typer.Option("--refresh/--no-refresh", help="Ask the backend for news (default: for local runs)."),
    ] = None,
    kubeconfig: Kubeconfig = None,
    context: Context = None,
) -> None:
    # lazy: tp builds only the invoked command, so only it pays for these
    import json

    from tuneplane.lab.runs import read_request

    root, key, current = _located(run)
    if current is None:
        _not_submitted(root, key, read_request)
        return
    live = refresh if refresh is not None else _here(current)
    if live and current.phase not in TERMINAL and current.backend is not None:
        current = _refreshed(root, current, kubeconfig, context)
    if as_json:
        typer.echo(json.dumps(current.model_dump(mode="json", by_alias=True), indent=2, sort_keys=True))
        return
    for label, value in _status_lines(key, current):
        typer.echo(f"{label:<11}{value}")


def _located(run: str) -> tuple[Path, RunKey, RunStatus | None]:
    """The lab, the run a reference names (id, prefix or EXP/RUN) and its status (None: not submitted)."""
    # lazy: tp builds only the invoked command, so only it pays for these
    from tuneplane.lab.load import open_lab
    from tuneplane.lab.runs import find_run, read_status

    root = open_lab().root
    key = find_run(root, run)
    return root, key, read_status(root, key)


def _here(current: RunStatus) -> bool:
    """A local run whose directory is on this machine: cheap and safe to look at live."""
    # lazy: tp builds only the invoked command, so only it pays for these
    import os

    backend = current.backend
    return backend is not None and backend.backend == "local" and os.path.isdir(backend.namespace)


def _not_submitted(root: Path, key: Any, read_request: Any) -> None:
    request = read_request(root, key)
    typer.echo(f"run {key.run_id} of {key.experiment}: requested, not submitted yet (no {key.status_rel})")
    typer.echo(
        f"  profile {request.profile}; requested by {request.requested_by or '?'} at {request.created_at}"
    )
    typer.echo(
        "  the bot submits it once the request is merged"
        if not request.cancel
        else "  it is marked `cancel: true`: the bot will record it as cancelled"
    )


def _refreshed(root: Path, current: RunStatus, kubeconfig: str | None, context: str | None) -> RunStatus:
    """The status as the backend sees it now (not written: the bot owns status files)."""
    # lazy: tp builds only the invoked command, so only it pays for these
    from tuneplane.constants import utc_now
    from tuneplane.gitops.observe import backend_ref, observe_run, with_metrics

    ref = backend_ref(current)
    assert ref is not None
    backend = _backend_for(root, ref.backend, kubeconfig, context)
    fresh = observe_run(backend, current, utc_now())
    if hasattr(backend, "metrics"):
        # lazy: tp builds only the invoked command, so only it pays for these
        from tuneplane.gitops.observe import vocabulary_of

        summary, series = backend.metrics(ref)
        if summary:
            vocab = vocabulary_of(current.method)
            fresh = with_metrics(fresh, summary, series, list(vocab.primary), vocab)
    return fresh


def _status_lines(key: Any, s: RunStatus) -> list[tuple[str, str]]:
    # lazy: tp builds only the invoked command, so only it pays for these
    from tuneplane.gitops.dashboard import duration_text, sparkline

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
        where = f" in {s.backend.namespace}" if s.backend.namespace else ""
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
    from tuneplane.errors import UsageError
    from tuneplane.gitops.observe import backend_ref

    root, key, current = _located(run)
    ref = backend_ref(current) if current is not None else None
    if ref is None:
        raise UsageError(
            f"run {key} has not been submitted, so it has no log", hint=f"tp job status {key.run_id} says why"
        )
    try:
        for line in _backend_for(root, ref.backend, kubeconfig, context).logs(ref, tail=tail, follow=follow):
            typer.echo(line)
    except BackendError as exc:
        raise UsageError(str(exc)) from None


def cancel(
    run: Run,
    now: Annotated[bool, typer.Option("--now", help="Also stop a local run at once.")] = False,
    push: Annotated[bool, typer.Option("--push", help="Push the commit (fetch, rebase, retry).")] = False,
) -> None:
    # lazy: tp builds only the invoked command, so only it pays for these
    from tuneplane.gitops.cancel import cancel_run

    for line in cancel_run(run, now=now, push=push):
        typer.echo(line)


def _backend_for(root: Path, name: str, kubeconfig: str | None, context: str | None) -> Any:
    # lazy: tp builds only the invoked command, so only it pays for these
    from tuneplane.gitops.bot import Backends, BotOptions
    from tuneplane.lab.load import open_lab

    return Backends(open_lab(root), BotOptions(kubeconfig=kubeconfig, context=context)).get(name)


def metrics_in_order(status: RunStatus) -> list[tuple[str, float]]:
    """A status's metrics in reading order: the recipe's primary metrics first, hardware last."""
    from tuneplane.gitops.observe import vocabulary_of  # lazy: the catalog is read only when metrics are shown

    return [(name, status.metrics[name]) for name in vocabulary_of(status.method).order(status.metrics)]
