"""`models.backendkinds`: the one table of the backends' names and what each can do."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from tuneplane.models.backendkinds import BACKEND_KINDS, DEFAULT_BACKEND, backend_kind
from tuneplane.models.lab import Cluster


def test_cluster_backend_takes_the_names_of_the_table() -> None:
    """`cluster.backend` accepts the table's names, in its order in the schema, and refuses another with them."""
    assert Cluster.model_json_schema()["properties"]["backend"]["enum"] == list(BACKEND_KINDS)
    assert [Cluster(backend=name).backend for name in BACKEND_KINDS] == list(BACKEND_KINDS)
    assert Cluster().backend == DEFAULT_BACKEND
    with pytest.raises(ValidationError) as caught:
        Cluster(backend="pbs")
    assert all(repr(name) in str(caught.value) for name in BACKEND_KINDS)


def test_each_kind_says_what_the_stages_below_the_backends_ask() -> None:
    """One kind runs here; a kind that runs here or shares a filesystem needs a bot on a machine that
    stays; pods are reached from any runner; an unknown name is Kubernetes, as the factory makes it."""
    assert [kind.name for kind in BACKEND_KINDS.values() if kind.runs_here] == [DEFAULT_BACKEND]
    for kind in BACKEND_KINDS.values():
        assert bool(kind.bot_machine) == (kind.runs_here or kind.shared_filesystem), kind
        assert not (kind.runs_in_pods and kind.bot_machine), kind
    assert backend_kind("other") == backend_kind("kubernetes") and backend_kind("other").runs_in_pods
    assert backend_kind("slurm").shared_filesystem and backend_kind("slurm").rendered_suffix == ".sh"
