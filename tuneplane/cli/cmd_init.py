"""`tp init [DIR]`: create a lab."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from tuneplane.cli.say import say
from tuneplane.constants import TOOL_REQUIREMENT_ENV
from tuneplane.errors import UsageError
from tuneplane.models.backendkinds import BACKEND_KINDS, DEFAULT_BACKEND

*_FIRST, _LAST = BACKEND_KINDS


def register(app: typer.Typer) -> None:
    app.command("init", help="Create a lab: tuneplane.yaml, folders, CI workflow, pre-commit hook, git.")(init)


def init(
    directory: Annotated[Path, typer.Argument(help="Where to create the lab.")] = Path("."),
    name: Annotated[str | None, typer.Option("--name", help="Lab name; default the directory name.")] = None,
    no_git: Annotated[bool, typer.Option("--no-git", help="Do not run git init or commit.")] = False,
    yes: Annotated[bool, typer.Option("--yes", "-y", help="Do not ask before using a non-empty directory.")] = False,
    backend: Annotated[
        str,
        typer.Option(
            "--backend",
            help=f"Where runs go: {', '.join(_FIRST)} or {_LAST} (slurm adds a commented cluster.slurm section).",
        ),
    ] = DEFAULT_BACKEND,
    tool_requirement: Annotated[
        str | None,
        typer.Option(
            "--tool-requirement",
            envvar=TOOL_REQUIREMENT_ENV,
            help="How CI installs tp (tool.requirement): 'tuneplane @ git+URL@TAG', a wheel's URL, or "
            "tuneplane==VERSION from your team's index (PyPI's tuneplane is another project); default: how "
            "this tp was installed.",
        ),
    ] = None,
    runner: Annotated[
        str,
        typer.Option(
            "--runner",
            help="Self-hosted runner label of the bot jobs of a local or Slurm lab (their runs need a "
            "machine that stays).",
        ),
    ] = "tuneplane",
    push_identity: Annotated[
        str,
        typer.Option(
            "--push-identity",
            help="How the bot jobs push status commits: deploy-key (secret TUNEPLANE_DEPLOY_KEY), github-app "
            "(secrets TUNEPLANE_APP_CLIENT_ID and TUNEPLANE_APP_PRIVATE_KEY) or github-token (no setup, "
            "but refused by a branch protection that requires pull requests).",
        ),
    ] = "deploy-key",  # the scaffold's PUSH_IDENTITIES[0], which says why
) -> None:
    # lazy: tp builds only the invoked command, so only it pays for these
    import sys

    from tuneplane.author.scaffold import init_lab
    from tuneplane.author.toolsource import explicit_source

    tool = None
    if tool_requirement is not None:
        try:
            tool = explicit_source(tool_requirement)
        except ValueError as exc:
            raise UsageError(
                f"--tool-requirement {tool_requirement!r}: {exc}",
                hint="for example 'tuneplane @ git+https://HOST/OWNER/REPO@v0.5.0' or a wheel's URL",
            ) from None

    if not yes and sys.stdin.isatty() and directory.is_dir() and any(directory.iterdir()):
        typer.confirm(f"{directory} is not empty; create the lab here (existing files are kept)?", abort=True)
    kind = BACKEND_KINDS.get(backend)  # an unknown one is refused by init_lab, with the choices
    cluster = _cluster_files() if kind is not None and kind.runs_in_pods else {}
    result = init_lab(
        directory,
        name,
        use_git=not no_git,
        backend=backend,
        tool=tool,
        runner=runner,
        extra=cluster,
        push_identity=push_identity,
    )
    say.line(f"created lab {result.name!r} in {result.root}")
    for rel in result.files:
        if not rel.endswith(".gitkeep") and not rel.startswith(".tuneplane/"):
            say.line(f"  {rel}")
    if any(rel.startswith(".tuneplane/schemas/") for rel in result.files):
        say.line("  .tuneplane/schemas/ (for editors: every file names its schema there)")
    if result.commit:
        say.line(f"  committed {result.commit[:12]}")
    if cluster:
        say.line(f"the cluster's side is in {', '.join(cluster)}: an administrator applies it once (docs/operators.md)")
    say.line(f"the bot pushes as {push_identity}: {_identity_setup(push_identity)}")
    say.line("next: tp new my-exp --method custom/custom   (see `tp methods`)")


def _cluster_files() -> dict[str, str]:
    """The bot's ServiceAccount, Role and RoleBinding, and the storage every job mounts, in a new lab's
    namespace (tp cluster rbac and tp cluster storage print them again, for another namespace or size)."""
    # lazy: only a Kubernetes lab pays for the backend's declarations
    from tuneplane.backends.kubernetes.operator import STORAGE_FILE
    from tuneplane.backends.kubernetes.rbac import RBAC_FILE, to_yaml
    from tuneplane.cli.cmd_cluster import storage_yaml
    from tuneplane.models.lab import Cluster, Storage

    namespace = str(Cluster.model_fields["namespace"].default)
    pvc = str(Storage.model_fields["pvc"].default)
    return {RBAC_FILE: to_yaml(namespace), STORAGE_FILE: storage_yaml(namespace, pvc)}


def _identity_setup(push_identity: str) -> str:
    """What a person does once on GitHub for the identity (docs/gitops.md has the steps)."""
    if push_identity == "deploy-key":
        return "add a deploy key with write access and its private key as secret TUNEPLANE_DEPLOY_KEY"
    if push_identity == "github-app":
        return "install the lab's GitHub App; set secrets TUNEPLANE_APP_CLIENT_ID and TUNEPLANE_APP_PRIVATE_KEY"
    return "nothing to set up; a branch protection that requires pull requests refuses its pushes"
