"""`tp bot reconcile|sync`: what CI runs on merge (submit, cancel) and on a schedule (refresh status)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer

if TYPE_CHECKING:
    from pathlib import Path

    from tuneplane.bot import BotReport

bot_app = typer.Typer(
    name="bot",
    help="The CI bot: submit merged run requests and write status back into git.",
    no_args_is_help=True,
)

Push = Annotated[bool, typer.Option("--push", help="Push the status commit (fetch, rebase, retry).")]
Remote = Annotated[str | None, typer.Option("--remote", help="Remote to sync with (default origin).")]
Branch = Annotated[
    str | None, typer.Option("--branch", help="Branch to sync with (default the current one).")
]
Kubeconfig = Annotated[
    str | None, typer.Option("--kubeconfig", help="Kubeconfig file (default $KUBECONFIG).")
]
Context = Annotated[str | None, typer.Option("--context", help="Kubeconfig context.")]
InCluster = Annotated[bool, typer.Option("--in-cluster", help="Use the pod's service account.")]


def register(app: typer.Typer) -> None:
    app.add_typer(bot_app)


@bot_app.command(
    "reconcile", help="Submit run requests that have no status, cancel those marked `cancel: true`."
)
def reconcile(
    push: Push = False,
    remote: Remote = None,
    branch: Branch = None,
    kubeconfig: Kubeconfig = None,
    context: Context = None,
    in_cluster: InCluster = False,
) -> None:
    from tuneplane.bot import BotOptions
    from tuneplane.bot import reconcile as run_reconcile

    opts = BotOptions(
        push=push, remote=remote, branch=branch, kubeconfig=kubeconfig, context=context, in_cluster=in_cluster
    )
    _report(run_reconcile(_root(), opts, echo=typer.echo))


@bot_app.command("sync", help="Refresh unfinished runs from their backend and the metrics ingest.")
def sync(
    push: Push = False,
    remote: Remote = None,
    branch: Branch = None,
    kubeconfig: Kubeconfig = None,
    context: Context = None,
    in_cluster: InCluster = False,
) -> None:
    from tuneplane.bot import BotOptions
    from tuneplane.bot import sync as run_sync

    opts = BotOptions(
        push=push, remote=remote, branch=branch, kubeconfig=kubeconfig, context=context, in_cluster=in_cluster
    )
    _report(run_sync(_root(), opts, echo=typer.echo))


def _root() -> Path:
    from tuneplane.load import find_lab_root

    return find_lab_root()


def _report(report: BotReport) -> None:
    from tuneplane.errors import TunePlaneError

    if not report.changed and not report.pushed:
        typer.echo("nothing to do: every run request has its status")
    for line in report.errors:
        typer.echo(f"error: {line}", err=True)
    if report.waiting or report.errors:
        failed = TunePlaneError(
            f"{len(report.waiting) + len(report.errors)} run(s) need attention (their status files say why)",
            hint="the bot retries runs it could not submit on its next run",
        )
        failed.exit_code = 1
        raise failed
