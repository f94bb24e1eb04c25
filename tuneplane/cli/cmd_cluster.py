"""`tp cluster rbac`: what an administrator applies so the bot may run this lab's jobs."""

from __future__ import annotations

import re
from typing import Annotated

import typer

from tuneplane.cli.say import say
from tuneplane.errors import UsageError

DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")  # a namespace's, and this ServiceAccount's

HELP = "What the cluster needs for this lab: `tp cluster rbac` prints the bot's Role, RoleBinding and ServiceAccount."
cluster_app = typer.Typer(help=HELP, no_args_is_help=True)


def register(app: typer.Typer) -> None:
    app.add_typer(cluster_app, name="cluster")


@cluster_app.command(
    "rbac",
    help="Print the bot's ServiceAccount, Role and RoleBinding (YAML for kubectl apply -f -): exactly the "
    "requests the Kubernetes backend makes, in the lab's namespace (cluster.namespace).",
)
def rbac(
    namespace: Annotated[
        str | None, typer.Option("--namespace", "-n", help="Namespace; default the lab's cluster.namespace.")
    ] = None,
    service_account: Annotated[
        str, typer.Option("--service-account", help="Name of the ServiceAccount, Role and RoleBinding.")
    ] = "tuneplane-bot",
) -> None:
    # lazy: tp builds only the invoked command, so only it pays for these
    from tuneplane.backends.kubernetes.rbac import to_yaml
    from tuneplane.lab.load import open_lab

    for what, value in (("--service-account", service_account), ("--namespace", namespace)):
        if value is not None and not DNS_LABEL.fullmatch(value):
            raise UsageError(
                f"{what} {value!r} is not a Kubernetes name",
                hint="use at most 63 lower-case letters, digits and '-', starting and ending with a letter or digit",
            )
    say.text(to_yaml(namespace or open_lab().config.cluster.namespace, service_account))
