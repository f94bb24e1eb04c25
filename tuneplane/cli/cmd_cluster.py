"""`tp cluster rbac|storage|sdk|ingest`: what an administrator applies once so the bot may run this lab's jobs
(docs/operators.md walks through it)."""

from __future__ import annotations

import re
from typing import Annotated

import typer

from tuneplane.cli.say import say
from tuneplane.errors import UsageError

DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")  # a namespace's, and this ServiceAccount's

HELP = "What the cluster needs for this lab (YAML for kubectl apply -f -): rbac, storage, sdk, ingest."
NAMESPACE_HELP = "Namespace; default the lab's cluster.namespace."
cluster_app = typer.Typer(help=HELP, no_args_is_help=True)


def register(app: typer.Typer) -> None:
    app.add_typer(cluster_app, name="cluster")


@cluster_app.command(
    "rbac",
    help="Print the bot's ServiceAccount, Role and RoleBinding (YAML for kubectl apply -f -): exactly the "
    "requests the Kubernetes backend makes, in the lab's namespace (cluster.namespace).",
)
def rbac(
    namespace: Annotated[str | None, typer.Option("--namespace", "-n", help=NAMESPACE_HELP)] = None,
    service_account: Annotated[
        str, typer.Option("--service-account", help="Name of the ServiceAccount, Role and RoleBinding.")
    ] = "tuneplane-bot",
) -> None:
    # lazy: tp builds only the invoked command, so only it pays for these
    from tuneplane.backends.kubernetes.rbac import to_yaml
    from tuneplane.lab.load import open_lab

    _check_names(("--service-account", service_account), ("--namespace", namespace))
    say.text(to_yaml(namespace or open_lab().config.cluster.namespace, service_account))


@cluster_app.command(
    "storage",
    help="Print the PersistentVolumeClaim every job mounts at cluster.storage.root (cluster.storage.pvc, "
    "ReadWriteMany); tp init --backend kubernetes writes the same to cluster/storage-pvc.yaml.",
)
def storage(
    namespace: Annotated[str | None, typer.Option("--namespace", "-n", help=NAMESPACE_HELP)] = None,
    size: Annotated[str, typer.Option("--size", help="Capacity to request: outputs and checkpoints of every run.")] = (
        "1Ti"
    ),
    storage_class: Annotated[
        str, typer.Option("--storage-class", help="A StorageClass that offers ReadWriteMany; default the cluster's.")
    ] = "",
) -> None:
    from tuneplane.lab.load import open_lab  # lazy: as above

    _check_names(("--namespace", namespace))
    cluster = open_lab().config.cluster
    say.text(storage_yaml(namespace or cluster.namespace, cluster.storage.pvc, size, storage_class))


def storage_yaml(namespace: str, pvc: str, size: str = "1Ti", storage_class: str = "") -> str:
    """The storage PVC with its comments (tp init writes it for a new Kubernetes lab)."""
    from tuneplane.backends.kubernetes import operator  # lazy: as above

    operator.check_quantities(size=size)
    head = [
        f"The storage every job of this lab mounts (cluster.storage.pvc) in namespace {namespace}; "
        "`tp cluster storage` prints it again.",
        f"Apply once, as an administrator: kubectl apply -f {operator.STORAGE_FILE}",
        f"ReadWriteMany: a run's pods on several nodes share it. Check: kubectl -n {namespace} get pvc {pvc} (Bound)",
    ]
    return operator.to_yaml(operator.checked([operator.storage_pvc(namespace, pvc, size, storage_class)]), head)


@cluster_app.command(
    "sdk",
    help="Print a Job that installs this tp's job side (tool.requirement, no dependencies) into "
    "<cluster.storage.root>/sdk/<version> on the storage volume, where jobs whose image lacks tuneplane take it from.",
)
def sdk(
    namespace: Annotated[str | None, typer.Option("--namespace", "-n", help=NAMESPACE_HELP)] = None,
    image: Annotated[str, typer.Option("--image", help="An image with python, pip and git.")] = "python:3.12",
) -> None:
    from tuneplane.backends.kubernetes import operator  # lazy: as above
    from tuneplane.lab.load import open_lab

    _check_names(("--namespace", namespace))
    config = open_lab().config
    cluster, tool = config.cluster, config.tool
    if not tool.requirement.strip():
        raise UsageError(
            "tool.requirement in tuneplane.yaml is empty: the Job would not know what to install",
            hint="write how tp is installed there first (tp validate's tool-requirement hint shows the forms)",
        )
    namespace = namespace or cluster.namespace
    job = operator.sdk_job(
        namespace, cluster.storage.pvc, cluster.storage.root, tool.requirement, tool.index_url, image
    )
    head = [
        f"Installs {tool.requirement} into {operator.sdk_root(cluster.storage.root)} on volume "
        f"{cluster.storage.pvc} (namespace {namespace}).",
        "Apply once per tp version, as an administrator: tp cluster sdk | kubectl apply -f -",
        f"Check: kubectl -n {namespace} logs job/{job['metadata']['name']}",
    ]
    say.text(operator.to_yaml(operator.checked([job]), head))


@cluster_app.command(
    "ingest",
    help="Print the metrics receiver (tp ingest serve): its volume, Deployment and Service, reading its key "
    "from the Secret cluster.ingest.secret names.",
)
def ingest(
    image: Annotated[str, typer.Option("--image", help="An image with this tp installed (it runs `tp ingest serve`).")],
    namespace: Annotated[str | None, typer.Option("--namespace", "-n", help=NAMESPACE_HELP)] = None,
    name: Annotated[
        str, typer.Option("--name", help="Name of the Deployment, Service and volume.")
    ] = "tuneplane-ingest",
    port: Annotated[int, typer.Option("--port", min=1, max=65535, help="Port of the Service and the receiver.")] = 8765,
    size: Annotated[str, typer.Option("--size", help="Capacity of the receiver's SQLite volume.")] = "10Gi",
    memory: Annotated[str, typer.Option("--memory", help="Memory request and limit.")] = "1Gi",
    cpu: Annotated[str, typer.Option("--cpu", help="CPU request.")] = "500m",
) -> None:
    from tuneplane.backends.kubernetes import operator  # lazy: as above
    from tuneplane.lab.load import open_lab

    _check_names(("--namespace", namespace), ("--name", name))
    operator.check_quantities(size=size, memory=memory, cpu=cpu)
    cluster = open_lab().config.cluster
    namespace = namespace or cluster.namespace
    docs = operator.ingest_manifests(
        namespace, image, cluster.ingest.secret, name=name, port=port, storage=size, cpu=cpu, memory=memory
    )
    endpoint = f"http://{name}.{namespace}.svc:{port}"
    head = [
        f"The metrics receiver of this lab in namespace {namespace}: `tp cluster ingest` prints it again.",
        "Apply once, as an administrator: tp cluster ingest --image IMAGE | kubectl apply -f -",
        f"It reads its key from Secret {cluster.ingest.secret} (key {operator.INGEST_SECRET_KEY}); jobs reach it "
        f"at cluster.ingest.endpoint: {endpoint}",
    ]
    say.text(operator.to_yaml(operator.checked(docs), head))


def _check_names(*named: tuple[str, str | None]) -> None:
    for what, value in named:
        if value is not None and not DNS_LABEL.fullmatch(value):
            raise UsageError(
                f"{what} {value!r} is not a Kubernetes name",
                hint="use at most 63 lower-case letters, digits and '-', starting and ending with a letter or digit",
            )
