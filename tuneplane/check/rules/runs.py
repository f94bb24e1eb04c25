"""Rule `run-*`: a run request under `runs/<exp>/<run-id>.yaml` would be admitted.

Passing: `profile: h200:16` on a profile with 8 GPUs per node and 2+ nodes, an allowed image.
Failing: `profile: h200:12` (not whole nodes), `image: registry.example.com.evil.io/x` (not allowed),
`set: {learning_rte: 1e-5}` (unknown), a trl request without `inputs.model` (required inputs), an
openrlhf/grpo request with `inputs.validation_data` and no remote reward (`config-rule`, the recipe's
own rule that `tp submit` applies too).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from tuneplane.check.admission import check_request
from tuneplane.check.rules.context import ExperimentContext
from tuneplane.check.rules.requires import request_problems
from tuneplane.lab.catalog import Catalog
from tuneplane.lab.load import Lab
from tuneplane.lab.modelparse import parse_model
from tuneplane.lab.yamlio import Doc
from tuneplane.models.run import RunRequest
from tuneplane.problems import Problem, Severity
from tuneplane.runtime.records import Record


class RunContext(Record):
    lab: Lab
    catalog: Catalog
    path: Path
    doc: Doc
    experiment: ExperimentContext


def check(ctx: RunContext) -> Iterator[Problem]:
    doc = ctx.doc
    if not isinstance(doc.data, dict):
        yield doc.problem("", "run-schema", "a run request must be a mapping", hint="see schemas/run.schema.json")
        return
    req, problems = parse_model(RunRequest, doc, "run-schema")
    yield from problems
    if req is None:
        return
    if req.experiment != ctx.path.parent.name:
        yield doc.problem(
            "/experiment",
            "run-schema",
            f"experiment {req.experiment!r} does not match the directory runs/{ctx.path.parent.name}/",
            hint="move the file or fix the field",
        )
    if req.run_id != ctx.path.stem:
        yield doc.problem(
            "/run_id",
            "run-schema",
            f"run_id {req.run_id!r} does not match the file name",
            hint=f"rename the file to {req.run_id}.yaml or fix the field",
        )
    exp = ctx.experiment
    if not exp.dir.is_dir():
        yield doc.problem(
            "/experiment", "run-experiment", f"no experiment {req.experiment!r} in this lab", hint="see `tp ls`"
        )
        return
    if exp.recipe is None:
        return  # the experiment's own problems already say why
    # lazy: the plugin tooling (packaging, the lock models) loads only when asked
    from tuneplane.check.plugin_locks import locked_plugin_params

    params, locked = locked_plugin_params(ctx.lab.root, exp.dir)
    for refusal in check_request(ctx.lab.config, exp.recipe, req, plugin_params=params, plugins_locked=locked):
        severity = Severity.WARNING if refusal.severity == "warning" else Severity.ERROR
        yield doc.problem(refusal.pointer, refusal.rule, refusal.message, hint=refusal.hint, severity=severity)
    if req.operation == "train" and exp.recipe.rules:
        yield from _recipe_rules(ctx, req)


def _recipe_rules(ctx: RunContext, req: RunRequest) -> Iterator[Problem]:
    """The recipe's rules that this request's `set` and `inputs` break (config.yaml's own are reported
    for the experiment), in the request file with the words `tp submit` refuses with."""
    exp, i = ctx.experiment, req.inputs
    assert exp.recipe is not None
    inputs = {"model": i.model, "train_data": i.train_data, "validation_data": i.validation_data}
    pointer = "/inputs" if any(inputs.values()) else "/set"
    for p in request_problems(exp.recipe, exp.config, f"{exp.rel}/config.yaml", dict(req.set), inputs):
        yield ctx.doc.problem(pointer, p.rule, p.message, hint=p.hint, severity=p.severity)
