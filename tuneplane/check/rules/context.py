"""What a rule sees: the lab, the catalog, one experiment with its parsed files."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from tuneplane.lab.catalog import Catalog
from tuneplane.lab.load import Lab
from tuneplane.lab.yamlio import Doc
from tuneplane.models.experiment import ExperimentManifest
from tuneplane.models.lock import RecipeLock
from tuneplane.models.recipe import Recipe
from tuneplane.problems import Problem
from tuneplane.runtime.records import Record


class ExperimentContext(Record):
    __slots__ = (
        "lab",
        "catalog",
        "name",
        "dir",
        "lock",
        "lock_doc",
        "recipe",
        "config",
        "manifest",
        "problems",
        "shell_check",
    )
    _fields = __slots__

    def __init__(
        self,
        lab: Lab,
        catalog: Catalog,
        name: str,
        dir: Path,
        lock: RecipeLock | None = None,
        lock_doc: Doc | None = None,
        recipe: Recipe | None = None,
        config: Doc | None = None,
        manifest: ExperimentManifest | None = None,
        problems: list[Problem] | None = None,
        shell_check: Callable[[Path], tuple[int, str] | None] | None = None,
    ) -> None:
        self.lab = lab
        self.catalog = catalog
        self.name = name
        self.dir = dir
        self.lock = lock
        self.lock_doc = lock_doc
        self.recipe = recipe  # the catalog recipe the lock names, when the catalog has it
        self.config = config
        self.manifest = manifest  # experiment.yaml, when the experiment has one
        self.problems: list[Problem] = [] if problems is None else problems
        # `bash -n` as a function (lab.shellsyntax): the check stages start no process themselves
        self.shell_check = shell_check

    @property
    def rel(self) -> str:
        return self.lab.experiment_rel(self.name)

    @property
    def method(self) -> str:
        return self.lock.recipe.name if self.lock else ""

    @property
    def framework(self) -> str:
        return self.lock.framework.kind if self.lock else ""
