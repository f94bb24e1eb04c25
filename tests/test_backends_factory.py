"""`backends.factory`: the one place a Backend is made, and cheap to import."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

from support.package import nodes, package_trees

PKG = Path(__file__).resolve().parents[1] / "tuneplane"


def test_backends_are_made_only_by_the_factory() -> None:
    """Outside each engine's own package, no module constructs a `…Backend` itself."""
    made = []
    for rel, tree in package_trees().items():
        if rel.startswith("backends/"):
            continue
        for node in nodes(tree):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name | ast.Attribute):
                name = node.func.id if isinstance(node.func, ast.Name) else node.func.attr
                if name.endswith("Backend") and name[0].isupper():
                    made.append(f"{rel}:{node.lineno}: {ast.unparse(node)}")
    assert not made, "make it through tuneplane.backends.factory:\n" + "\n".join(made)


def test_importing_the_factory_loads_no_engine_and_no_pipeline() -> None:
    """`tp job ls` asks the factory for a run's backend: importing it must not load the pipeline."""
    code = (
        "import sys, tuneplane.backends.factory; "
        "print(sorted(m for m in ('tuneplane.plan.resolve', 'tuneplane.backends.local', "
        "'tuneplane.backends.kubernetes', 'tuneplane.backends.slurm', 'kubernetes', 'jinja2') "
        "if m in sys.modules))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert done.stdout.strip() == "[]", done.stdout + done.stderr


def test_each_backend_kind_answers_for_its_backend() -> None:
    """What runs/ and bot/ ask by a run's recorded backend: only this machine's runs are handled here,
    only a batch-script backend is rendered to `.sh`, and an unknown name is Kubernetes, as made."""
    from tuneplane.backends.factory import backend_kind

    assert [backend_kind(n).runs_here for n in ("local", "slurm", "kubernetes", "other")] == [True, False, False, False]
    assert [backend_kind(n).rendered_suffix for n in ("slurm", "kubernetes")] == [".sh", ".yaml"]
    assert backend_kind("other").name == "kubernetes"


def test_the_factory_makes_the_kinds_of_the_one_table() -> None:
    """The factory asks the kinds' table below it (no copy of its own), and each engine is named in it."""
    from tuneplane.backends import factory
    from tuneplane.backends.kubernetes.backend import KubernetesBackend
    from tuneplane.backends.local.backend import LocalBackend
    from tuneplane.backends.slurm import SlurmBackend
    from tuneplane.models import backendkinds

    assert factory.BACKEND_KINDS is backendkinds.BACKEND_KINDS and factory.backend_kind is backendkinds.backend_kind
    assert sorted(b.name for b in (LocalBackend, KubernetesBackend, SlurmBackend)) == sorted(factory.BACKEND_KINDS)


def test_a_lab_sends_cluster_runs_to_its_cluster_backend() -> None:
    """`cluster.backend: slurm` sends cluster runs to Slurm; `local` and `kubernetes` to Kubernetes (a
    `local` lab's cluster profiles are still rendered for Kubernetes); a local run stays here."""
    from types import SimpleNamespace
    from typing import Any

    from tuneplane.backends.factory import backend_name

    def lab(backend: str) -> Any:
        return SimpleNamespace(config=SimpleNamespace(cluster=SimpleNamespace(backend=backend)))

    assert [backend_name(lab(b), local=False) for b in ("slurm", "kubernetes", "local")] == [
        "slurm",
        "kubernetes",
        "kubernetes",
    ]
    assert backend_name(lab("slurm"), local=True) == "local"


def test_slurm_declares_that_it_requeues() -> None:
    """The bot watches an ended Slurm run for a while (Slurm requeues after a node failure): a declared
    capability, not a `getattr`."""
    from tuneplane.backends.base import Requeues
    from tuneplane.backends.local.backend import LocalBackend
    from tuneplane.backends.slurm import SlurmBackend

    assert isinstance(SlurmBackend(), Requeues) and SlurmBackend().requeues
    assert not isinstance(LocalBackend(PKG), Requeues)


def test_a_backend_whose_kind_runs_here_is_the_run_service_s_runs_here() -> None:
    """The run service starts, stops and records a run of this machine through `RunsHere`, for the backend
    whose kind says `runs_here`; a cluster backend declares neither."""
    from tuneplane.backends.base import RunsHere
    from tuneplane.backends.factory import backend_kind
    from tuneplane.backends.local.backend import LocalBackend
    from tuneplane.backends.slurm import SlurmBackend

    assert isinstance(LocalBackend(PKG), RunsHere) and backend_kind(LocalBackend.name).runs_here
    assert not isinstance(SlurmBackend(), RunsHere) and not backend_kind(SlurmBackend.name).runs_here
