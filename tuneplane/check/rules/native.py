"""Rule `metrics-native-off`: the config turns off the framework logger the platform's metrics come from (a warning).

A recipe with `observability: platform` whose metrics come from the framework's own TensorBoard
files (verl) relies on the framework writing them: verl writes TensorBoard events only when
`trainer.logger` lists `tensorboard`. An experiment that sets its own list without it still trains,
but its status, `tp job metrics`, its chart and the dashboard stay empty.
Passing: `trainer: {logger: [console, tensorboard]}` (or no `trainer.logger`: the template's list applies).
Failing: `trainer: {logger: [console, wandb]}` in a verl experiment → `metrics-native-off`.
"""

from __future__ import annotations

from collections.abc import Iterator

from tuneplane.check.params import config_pointer, get_path, is_missing
from tuneplane.check.rules.context import ExperimentContext
from tuneplane.problems import Problem, Severity

RULE = "metrics-native-off"
# framework → (the config key that lists its loggers, the logger that writes the declared native files)
SWITCHES = {"verl": ("trainer.logger", "tensorboard")}


def check(ctx: ExperimentContext) -> Iterator[Problem]:
    doc, recipe = ctx.config, ctx.recipe
    if doc is None or recipe is None or not isinstance(doc.data, dict) or recipe.framework not in SWITCHES:
        return
    if not any(out.format == "tensorboard" for out in recipe.metrics.native):
        return
    key, logger = SWITCHES[recipe.framework]
    value = get_path(doc.data, key)
    if is_missing(value) or value is None:
        return
    listed = [value] if isinstance(value, str) else value if isinstance(value, list) else None
    if listed is None or logger in [str(item).strip().lower() for item in listed]:
        return
    pointer = config_pointer(key)
    yield doc.problem(
        pointer,
        RULE,
        f"{key} has no {logger!r}: {recipe.framework} writes no TensorBoard events, so this "
        "run's metrics never reach its status, `tp job metrics`, its chart or the dashboard",
        hint=f"add {logger} to the list, e.g. `logger: [console, {logger}]`",
        severity=Severity.WARNING,
    )
