"""The backends a lab may name (`cluster.backend`, a run's recorded backend) and what each can do.

Outside `backends/`, the one place a backend's name is written: `Cluster.backend` takes its values from
`BACKEND_KINDS`, `backends.factory` makes each backend by its row, and every other stage asks a row's
capabilities (`backend_kind(name).runs_here`, …) instead of comparing names, so a new backend is a row
here and a package under `backends/`. Standard library only (records, not pydantic): `tp validate`
loads it.
"""

from typing import TYPE_CHECKING, Literal

from tuneplane.runtime.records import FrozenRecord


class BackendKind(FrozenRecord):
    """What the code around the backends may ask of one by its name."""

    __slots__ = ("name", "runs_here", "batch_script", "runs_in_pods", "shared_filesystem", "bot_machine")
    _fields = __slots__
    name: str
    # each run is a process group of this machine: stopped, read and recorded here, with no bot
    runs_here: bool
    # is sent one batch script that tp renders and checks before submitting, not manifests
    batch_script: bool
    # its jobs are pods: the bot reaches the API server with a kubeconfig from any CI runner, an
    # administrator applies the bot's RBAC and the storage once, a pod's loopback is the pod itself and an
    # init container (`cluster.init_image`) clones the lab
    runs_in_pods: bool
    # its jobs run on nodes sharing a filesystem: run directories go under `cluster.slurm.runs_root` and a
    # host job runs the Python environment `cluster.slurm.software` names there
    shared_filesystem: bool
    # where the lab's bot jobs must run (their runs or batch commands live there), for the workflow's
    # comment; empty: any CI runner
    bot_machine: str

    def __init__(
        self,
        name: str,
        *,
        runs_here: bool = False,
        batch_script: bool = False,
        runs_in_pods: bool = False,
        shared_filesystem: bool = False,
        bot_machine: str = "",
    ) -> None:
        self._set(name, runs_here, batch_script, runs_in_pods, shared_filesystem, bot_machine)

    @property
    def rendered_suffix(self) -> str:
        """The file suffix of what `tp render --output` writes for a run of this backend."""
        return ".sh" if self.batch_script else ".yaml"


LOCAL, KUBERNETES, SLURM = "local", "kubernetes", "slurm"
# in the order `tuneplane.yaml`'s schema lists them
BACKEND_KINDS = {
    kind.name: kind
    for kind in (
        BackendKind(LOCAL, runs_here=True, bot_machine="the machine that runs the jobs"),
        BackendKind(KUBERNETES, runs_in_pods=True),
        BackendKind(SLURM, batch_script=True, shared_filesystem=True, bot_machine="a machine where sbatch works"),
    )
}
# a new lab's, and a lab's that names none
DEFAULT_BACKEND = LOCAL

if TYPE_CHECKING:
    BackendName = str  # a type checker cannot read a Literal built at run time
else:
    BackendName = Literal[tuple(BACKEND_KINDS)]  # what `cluster.backend` takes, and its schema's enum


def backend_kind(name: str) -> BackendKind:
    """The kind of the backend called `name` (a run's recorded backend); any other name is Kubernetes,
    as `backends.factory.make_backend` makes it."""
    return BACKEND_KINDS.get(name, BACKEND_KINDS[KUBERNETES])
