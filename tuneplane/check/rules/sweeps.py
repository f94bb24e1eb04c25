"""Rule `sweep-*`: a sweep file `sweeps/<name>.yaml` is well formed and its run requests are its expansion.

`sweep-schema` (the file's fields), `sweep-experiment` (the experiment exists), `sweep-params` (each
swept or fixed parameter is one the recipe declares, with values it accepts: the words `tp submit
--set` refuses with, at the value), `sweep-trials` (no more trials than `max_trials`) and
`sweep-requests` (each trial has its request under `runs/<exp>/`, saying what the sweep says; a
request naming the sweep that no trial is).

Passing: `grid: {lr: [1.0e-05, 3.0e-05], seed: [0, 1, 2]}`, `max_trials: 64`, and the six requests
`tp sweep` wrote. Failing: `grid: {learning_rte: [0.1]}` on a recipe that declares `learning_rate`
(unknown), `max_trials: 4` for six trials, a trial's request edited to `set: {lr: 0.5}`.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

from tuneplane.check.admission import check_request
from tuneplane.check.rules.context import ExperimentContext
from tuneplane.errors import UsageError
from tuneplane.lab.load import Lab
from tuneplane.lab.modelparse import parse_model
from tuneplane.lab.runs import RUNS_DIR, RunKey, parse_request
from tuneplane.lab.yamlio import Doc, LoadFailed, load_yaml
from tuneplane.models.run import RunRequest
from tuneplane.models.sweep import Sweep, Trial, expand, trial_count
from tuneplane.problems import Problem, Severity
from tuneplane.runtime.records import Record

# the request fields a sweep decides, each compared with what the sweep says
_COMPARED = ("experiment", "profile", "image", "observability_url", "set", "inputs", "timeout", "sweep", "rerun_of")


class SweepContext(Record):
    lab: Lab
    path: Path
    doc: Doc
    experiment: ExperimentContext


def check(ctx: SweepContext) -> Iterator[Problem]:
    doc = ctx.doc
    if not isinstance(doc.data, dict):
        yield doc.problem("", "sweep-schema", "a sweep must be a mapping", hint="see schemas/sweep.schema.json")
        return
    sweep, problems = parse_model(Sweep, doc, "sweep-schema")
    yield from problems
    if sweep is None:
        return
    if sweep.name != ctx.path.stem:
        yield doc.problem(
            "/name",
            "sweep-schema",
            f"name {sweep.name!r} does not match the file name",
            hint=f"rename the file to {sweep.name}.yaml or fix the field",
        )
    count = trial_count(sweep)
    if count > sweep.max_trials:
        yield doc.problem(
            "/max_trials",
            "sweep-trials",
            f"the sweep has {count} trials, over its cap of {sweep.max_trials}",
            hint="sample fewer (`sample: {count: N}`) or raise max_trials",
        )
        return  # its requests would be checked by the thousand
    exp = ctx.experiment
    if not exp.dir.is_dir():
        yield doc.problem(
            "/experiment", "sweep-experiment", f"no experiment {sweep.experiment!r} in this lab", hint="see `tp ls`"
        )
        return
    trials = expand(sweep)
    if exp.recipe is not None:
        yield from _params(ctx, sweep, trials)
    yield from _requests(ctx, sweep, trials)


def expected_request(sweep: Sweep, trial: Trial) -> RunRequest:
    """What the sweep says of a trial's request (the fields in `_COMPARED`), as a request."""
    return RunRequest.model_validate(
        {
            "experiment": sweep.experiment,
            "run_id": trial.run_id,
            "profile": sweep.profile,
            "image": sweep.image,
            "observability_url": sweep.observability_url,
            "set": {**sweep.set, **trial.params},
            "inputs": sweep.inputs,
            "timeout": sweep.timeout,
            "sweep": sweep.name,
            "rerun_of": trial.rerun_of,
        }
    )


def _params(ctx: SweepContext, sweep: Sweep, trials: list[Trial]) -> Iterator[Problem]:
    """Each trial's request checked as `tp submit` checks one; each refusal once, at the sweep's own value."""
    from tuneplane.check.plugin_locks import locked_plugin_params  # lazy: as in the run rule

    exp = ctx.experiment
    assert exp.recipe is not None
    params, locked = locked_plugin_params(ctx.lab.root, exp.dir)
    seen: set[tuple[str, str]] = set()
    for trial in trials:
        if trial.rerun:
            continue  # a rerun asks for what its trial asked
        req = expected_request(sweep, trial)
        for refusal in check_request(ctx.lab.config, exp.recipe, req, plugin_params=params, plugins_locked=locked):
            pointer = _sweep_pointer(sweep, trial, refusal.pointer)
            if (pointer, refusal.message) in seen:
                continue
            seen.add((pointer, refusal.message))
            severity = Severity.WARNING if refusal.severity == "warning" else Severity.ERROR
            rule = "sweep-params" if refusal.pointer.startswith("/set") else refusal.rule
            yield ctx.doc.problem(pointer, rule, refusal.message, hint=refusal.hint, severity=severity)


def _sweep_pointer(sweep: Sweep, trial: Trial, pointer: str) -> str:
    """A request's pointer as the sweep's: `/set/lr` is `/grid/lr/<index of the trial's value>` when swept."""
    if not pointer.startswith("/set/"):
        return pointer if pointer in ("/profile", "/image", "/observability_url", "/timeout") else ""
    key = pointer.removeprefix("/set/").split("/", 1)[0].replace("~1", "/").replace("~0", "~")
    if key not in sweep.grid:
        return pointer
    value = trial.params[key]
    index = next(i for i, v in enumerate(sweep.grid[key]) if v == value and type(v) is type(value))
    return f"/grid/{key.replace('~', '~0').replace('/', '~1')}/{index}"


def _requests(ctx: SweepContext, sweep: Sweep, trials: list[Trial]) -> Iterator[Problem]:
    root = ctx.lab.root
    expected = {t.run_id: t for t in trials}
    for trial in trials:
        key = RunKey(sweep.experiment, trial.run_id)
        found = _request(root, key)
        if found is None:
            yield ctx.doc.problem(
                "/grid" if not trial.rerun else "/reruns",
                "sweep-requests",
                f"trial {trial.index + 1} ({_show(trial.params)}) has no request {key.request_rel}",
                hint=f"`tp sweep extend {sweep.name}` writes the requests the sweep lacks",
            )
            continue
        request, doc = found
        want = expected_request(sweep, trial)
        for name in _COMPARED:
            have, should = getattr(request, name), getattr(want, name)
            if _plain(have) != _plain(should):
                yield doc.problem(
                    f"/{name}",
                    "sweep-requests",
                    f"{name} is {_plain(have)!r}, but trial {trial.index + 1} of sweep {sweep.name} "
                    f"says {_plain(should)!r}",
                    hint=f"write it as the sweep says, or change the sweep ({ctx.doc.rel})",
                )
    yield from _strays(ctx, sweep, expected)


def _strays(ctx: SweepContext, sweep: Sweep, expected: dict[str, Trial]) -> Iterator[Problem]:
    """Requests that name the sweep but are none of its trials."""
    folder = ctx.lab.root / RUNS_DIR / sweep.experiment
    if not folder.is_dir():
        return
    for path in sorted(folder.glob("*.yaml")):
        if path.stem in expected:
            continue
        found = _request(ctx.lab.root, RunKey(sweep.experiment, path.stem))
        if found is not None and found[0].sweep == sweep.name:
            yield found[1].problem(
                "/sweep",
                "sweep-requests",
                f"this request names sweep {sweep.name!r}, but none of its trials has run id {path.stem}",
                hint="remove it, or the `sweep:` line if it is a run of its own",
            )


def _request(root: Path, key: RunKey) -> tuple[RunRequest, Doc] | None:
    """The request and its document; None when missing or broken (the run rule reports a broken one)."""
    path = root / key.request_rel
    if not path.is_file():
        return None
    try:
        doc = load_yaml(path, key.request_rel, root=root)
        return parse_request(doc.text, key.request_rel), doc
    except (LoadFailed, UsageError):  # a broken request is the run rule's to report
        return None


def _plain(value: Any) -> Any:
    return value.model_dump(mode="json") if hasattr(value, "model_dump") else value


def _show(params: dict[str, Any]) -> str:
    return ", ".join(f"{k}={v}" for k, v in params.items())
