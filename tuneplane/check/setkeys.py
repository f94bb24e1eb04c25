"""The parameters an experiment's `--set` keys may name, so the command line reads each value by its type.

`tp render` and `tp submit` parse `--set` before they resolve the run: they ask here which keys the
experiment's recipe and its locked algorithm plugins declare (`check.params.parse_sets` then reads
`eval_strategy=no` as the text an enum parameter expects, not as false). An experiment that does not
load declares nothing here; resolving the run then refuses it with the reason.
"""

from __future__ import annotations

from tuneplane.check.params import set_keys
from tuneplane.check.plugin_locks import locked_plugin_params
from tuneplane.check.validate import load_experiment
from tuneplane.errors import UsageError
from tuneplane.lab.catalog import Catalog
from tuneplane.lab.load import Lab
from tuneplane.lab.yamlio import LoadFailed
from tuneplane.models.recipe import Param


def experiment_set_keys(lab: Lab, catalog: Catalog, experiment: str) -> dict[str, Param]:
    """`check.params.set_keys` of `experiment`'s recipe and locked plugins; empty when it does not load."""
    try:
        ctx = load_experiment(lab, catalog, experiment)
        if ctx.recipe is None:
            return {}
        return set_keys(ctx.recipe, locked_plugin_params(lab.root, ctx.dir)[0])
    except (UsageError, LoadFailed, OSError):
        return {}
