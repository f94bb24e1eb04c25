"""`tp bot reconcile|sync`: what CI runs on merge (submit, cancel) and on a schedule (refresh status);
`tp bot pr-status`: what the workflow then writes into the merged pull requests' plan comments."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer

from tuneplane.cli.say import say

if TYPE_CHECKING:
    from pathlib import Path

    from tuneplane.bot.report import BotReport

bot_app = typer.Typer(
    name="bot",
    help="The CI bot: submit merged run requests and write status back into git.",
    no_args_is_help=True,
)

from tuneplane.cli.options import Branch, Context, InCluster, Kubeconfig, Push, Remote  # noqa: E402
from tuneplane.constants import EXIT_PROBLEMS  # noqa: E402
from tuneplane.errors import TunePlaneError  # noqa: E402

PullRequests = Annotated[
    str | None,
    typer.Option(
        "--pull-requests",
        envvar="TUNEPLANE_PULL_REQUESTS",
        help='JSON file {"<commit>": {"number": N, "login": "author"}}: the pull request that merged each '
        "commit, as the workflow asked GitHub; each new run records whom it is submitted for.",
    ),
]


def register(app: typer.Typer) -> None:
    app.add_typer(bot_app)


@bot_app.command("reconcile", help="Submit run requests that have no status, cancel those marked `cancel: true`.")
def reconcile(
    push: Push = False,
    remote: Remote = None,
    branch: Branch = None,
    kubeconfig: Kubeconfig = None,
    context: Context = None,
    in_cluster: InCluster = False,
    pull_requests: PullRequests = None,
) -> None:
    _run("reconcile", push, remote, branch, kubeconfig, context, in_cluster, pull_requests)


@bot_app.command("sync", help="Refresh unfinished runs from their backend and the metrics ingest.")
def sync(
    push: Push = False,
    remote: Remote = None,
    branch: Branch = None,
    kubeconfig: Kubeconfig = None,
    context: Context = None,
    in_cluster: InCluster = False,
) -> None:
    _run("sync", push, remote, branch, kubeconfig, context, in_cluster)


@bot_app.command(
    "pr-status",
    help="Print the runs' section of each merged pull request's plan comment whose runs changed since a "
    "commit, for the workflow to write (tp makes no call to GitHub).",
)
def pr_status(
    since: Annotated[
        str, typer.Option("--since", help="The commit the bot run started from (the workflow's $GITHUB_SHA).")
    ],
    json_: Annotated[
        bool, typer.Option("--json", help='[{"pull_request": N, "section": "..."}], for the workflow.')
    ] = False,
) -> None:
    # lazy: tp builds only the invoked command, so only it pays for these
    from tuneplane.bot.pulls import sections
    from tuneplane.lab.gitrepo import GitRepo

    repo = GitRepo(_root())
    found = sections(repo, repo.verify_commit(since, "--since"))
    if json_:
        say.json([{"pull_request": s.pull_request, "section": s.body} for s in found])
        return
    for s in found:
        say.line(f"pull request #{s.pull_request}:")
        say.text(s.body)
    if not found:
        say.line("no merged pull request's runs changed")


def _run(
    kind: str,
    push: bool,
    remote: str | None,
    branch: str | None,
    kubeconfig: str | None,
    context: str | None,
    in_cluster: bool,
    pull_requests: str | None = None,
) -> None:
    """Ask `bot.idle` once; only a pass with work imports the pipeline and runs it (`bot.entry` would
    ask again, so the pass is called directly)."""
    # lazy: tp builds only the invoked command, so only it pays for these
    from tuneplane.bot.idle import idle
    from tuneplane.bot.report import BotOptions

    root = _root()
    opts = BotOptions(
        push=push,
        remote=remote,
        branch=branch,
        kubeconfig=kubeconfig,
        context=context,
        in_cluster=in_cluster,
        pull_requests=pull_requests,
    )
    report = idle(root, kind, opts)
    if report is None:
        # lazy: the pipeline, only for a pass with work
        from importlib import import_module

        report = getattr(import_module(f"tuneplane.bot.{kind}"), kind)(root, opts, None, say.line)
    _report(report)


def _root() -> Path:
    # lazy: tp builds only the invoked command, so only it pays for these
    from tuneplane.lab.fs import find_lab_root

    return find_lab_root()


def _report(report: BotReport) -> None:
    # lazy: tp builds only the invoked command, so only it pays for these
    from tuneplane.bot.report import IDLE_MESSAGE

    if not report.changed and not report.pushed:
        say.line(IDLE_MESSAGE)
    for line in report.errors:
        say.error(line)
    if report.waiting or report.errors:
        failed = TunePlaneError(
            f"{len(report.waiting) + len(report.errors)} run(s) need attention (each is named above, with why)",
            hint="the bot retries runs it could not submit on its next run",
        )
        failed.exit_code = EXIT_PROBLEMS
        raise failed
