"""`experiments/<exp>/experiment.yaml`: what an experiment adds to its recipe (optional file).

Today that is the native metric outputs its own code writes (`metrics.native`), for a custom trainer
or a script the recipe knows nothing about. The job's collector reads the recipe's outputs and these
(`tuneplane.models.recipe.merge_native`: the experiment extends the list; on the same path it wins).
"""

from typing import Literal

from pydantic import Field

from tuneplane.models.base import Strict, defaults_of, empty_list
from tuneplane.models.recipe import NativeOutput

EXPERIMENT_API = "tuneplane/experiment/v1"
EXPERIMENT_FILE = "experiment.yaml"


class ExperimentMetrics(Strict):
    native: list[NativeOutput] = Field(
        default_factory=empty_list,
        max_length=64,
        description="Native metric files under the out dir the collector sends, beside the recipe's "
        "(same path: this entry replaces the recipe's). See docs/reference/collector.md.",
    )


class ExperimentManifest(Strict):
    """experiment.yaml: settings of one experiment that its recipe does not fix."""

    api_version: Literal["tuneplane/experiment/v1"] = Field(alias="apiVersion")
    metrics: ExperimentMetrics = Field(default_factory=defaults_of(ExperimentMetrics))
