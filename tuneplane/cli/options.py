"""Options several commands share, declared once so their names and help never drift apart."""

from __future__ import annotations

from typing import Annotated

import typer

from tuneplane.cli.completion import run_ids

Run = Annotated[
    str, typer.Argument(help="RUN_ID, EXP/RUN_ID, or a unique prefix or suffix of a run id.", autocompletion=run_ids)
]
Push = Annotated[bool, typer.Option("--push", help="Push the commit (fetch, rebase, retry).")]
Remote = Annotated[str | None, typer.Option("--remote", help="Remote to push to and sync with (default origin).")]
Branch = Annotated[str | None, typer.Option("--branch", help="Branch to push to (default the current one).")]
Local = Annotated[bool, typer.Option("--local", help="Run it now on this machine and commit its status.")]
Kubeconfig = Annotated[str | None, typer.Option("--kubeconfig", help="Kubeconfig file (default $KUBECONFIG).")]
Context = Annotated[str | None, typer.Option("--context", help="Kubeconfig context.")]
InCluster = Annotated[bool, typer.Option("--in-cluster", help="Use the pod's service account.")]
Timeout = Annotated[str, typer.Option("--timeout", help="Stop the job after this long: 3600, 90m, 12h.")]
