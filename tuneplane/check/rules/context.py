"""What a rule sees: the lab, the catalog, one experiment with its parsed files."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from tuneplane.lab.catalog import Catalog
from tuneplane.lab.load import Lab
from tuneplane.lab.yamlio import Doc
from tuneplane.models.experiment import ExperimentManifest
from tuneplane.models.lock import RecipeLock
from tuneplane.models.recipe import Recipe
from tuneplane.problems import Problem


@dataclass
class ExperimentContext:
    lab: Lab
    catalog: Catalog
    name: str
    dir: Path
    lock: RecipeLock | None = None
    lock_doc: Doc | None = None
    recipe: Recipe | None = None  # the catalog recipe the lock names, when the catalog has it
    config: Doc | None = None
    manifest: ExperimentManifest | None = None  # experiment.yaml, when the experiment has one
    problems: list[Problem] = field(default_factory=list)

    @property
    def rel(self) -> str:
        return self.lab.experiment_rel(self.name)

    @property
    def method(self) -> str:
        return self.lock.recipe.name if self.lock else ""

    @property
    def framework(self) -> str:
        return self.lock.framework.kind if self.lock else ""
