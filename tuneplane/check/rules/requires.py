"""Rule `config-rule`: the recipe's own cross-field rules (`rules:` in recipe.yaml) hold for the run.

A framework may need one key of a group set, or one set when another is (OpenRLHF's PPO dies with an
AttributeError at start when neither `reward.model_name_or_path` nor `reward.remote_url` is given; its
Ray trainer asserts that `--eval.dataset` comes with a remote reward or an agent). The recipe declares
each such rule, and this module is the one place they are evaluated, on the run's effective config: the
experiment's config.yaml, the parameters' defaults and `--set` values over it, then the bound inputs
(`--validation-data` lands on `eval.dataset`), as the job-side renderer lays them.

Passing: openrlhf/ppo with `reward: {model_name_or_path: OpenRLHF/Llama-3-8b-rm-700k}`.
Failing: openrlhf/ppo with `reward: {model_name_or_path: ""}` → `config-rule` (rule `reward-source`),
placed at `reward:` in config.yaml, with a hint naming the keys to set; openrlhf/grpo submitted with
`--validation-data` and no `reward.remote_url` → `config-rule` (rule `eval-needs-remote-reward`).
"""

from __future__ import annotations

import copy
from collections.abc import Iterator, Mapping

from tuneplane.check.params import config_pointer, get_path, is_missing, resolve_name
from tuneplane.check.rules.context import ExperimentContext
from tuneplane.lab.yamlio import Doc
from tuneplane.models.recipe import RULE_INPUTS, Recipe, RecipeRule
from tuneplane.problems import Problem, Severity
from tuneplane.runtime.records import FrozenRecord

RULE = "config-rule"
_INPUT_FLAGS = {name: "--" + name.replace("_", "-") for name in RULE_INPUTS}


class Broken(FrozenRecord):
    """A rule the effective config breaks: where to point in config.yaml, and what to say."""

    __slots__ = ("rule", "pointer", "message", "hint")
    _fields = __slots__
    rule: RecipeRule
    pointer: str
    message: str
    hint: str

    def __init__(self, rule: RecipeRule, pointer: str, message: str, hint: str) -> None:
        self._set(rule, pointer, message, hint)

    @property
    def severity(self) -> Severity:
        return Severity.WARNING if self.rule.severity == "warning" else Severity.ERROR


def effective_config(
    recipe: Recipe, config: object, values: Mapping[str, object] | None = None, inputs: Mapping[str, str] | None = None
) -> dict[str, object]:
    """config.yaml with the parameters' defaults where it sets nothing, then `values` (keyed by a
    parameter's name or dotted config path, as `--set` takes them), then each given input at its
    binding: what the framework is started with."""
    merged: dict[str, object] = copy.deepcopy(config) if isinstance(config, dict) else {}
    for param in recipe.params.values():
        current = get_path(merged, param.path)
        if (is_missing(current) or current is None) and param.default is not None:
            _set_path(merged, param.path, param.default)
    for key, value in (values or {}).items():
        name = resolve_name(key, recipe)
        _set_path(merged, recipe.params[name].path if name is not None else key, value)
    bindings = recipe.adapter_options.bindings
    for name, value in (inputs or {}).items():
        if value and name in bindings:
            _set_path(merged, bindings[name], value)
    return merged


def broken_rules(
    recipe: Recipe, effective: Mapping[str, object], inputs: Mapping[str, str] | None = None, written: object = None
) -> list[Broken]:
    """The recipe's rules `effective` breaks, in the recipe's order. `written` (config.yaml as parsed)
    chooses the place: the `when` key where the file sets it, else the first required key (its nearest
    ancestor in the file, when the file lacks it)."""
    out = []
    for rule in recipe.rules:
        if not _applies(recipe, rule, effective, inputs) or any(
            is_set(_value(recipe, key, effective, inputs)) for key in rule.require_any
        ):
            continue
        out.append(
            Broken(
                rule,
                _pointer(recipe, rule, written),
                f"{recipe.name} rule {rule.id!r}: {rule.message}",
                _hint(recipe, rule),
            )
        )
    return out


def is_set(value: object) -> bool:
    """Set: a value other than missing, null, empty text, an empty list or mapping, or false (a switch
    left off); the job-side renderer leaves all of those off the command line."""
    return not (is_missing(value) or value is None or value is False or value in ("", [], {}))


def check(ctx: ExperimentContext) -> Iterator[Problem]:
    """`tp validate EXP`: the rules on config.yaml and the parameters' defaults (no run request yet)."""
    doc, recipe = ctx.config, ctx.recipe
    if recipe is None or not recipe.rules or recipe.config.mode == "user":
        return
    data = doc.data if doc is not None else None
    if data is not None and not isinstance(data, dict):
        return  # config-root says so
    for b in broken_rules(recipe, effective_config(recipe, data), written=data):
        yield _problem(doc, f"{ctx.rel}/config.yaml", b)


def request_problems(
    recipe: Recipe, config: Doc | None, rel: str, values: Mapping[str, object], inputs: Mapping[str, str]
) -> list[Problem]:
    """The rules a run request breaks beyond what config.yaml alone breaks (`tp validate EXP` names
    those), placed in config.yaml: `tp render`/`tp submit` refuse with these words, and `tp validate`
    reports them for a run request file."""
    if not recipe.rules or recipe.config.mode == "user":
        return []
    data = config.data if config is not None and isinstance(config.data, dict) else None
    alone = {b.rule.id for b in broken_rules(recipe, effective_config(recipe, data), written=data)}
    run = broken_rules(recipe, effective_config(recipe, data, values, inputs), inputs, written=data)
    return [_problem(config, rel, b) for b in run if b.rule.id not in alone]


def config_problems(
    recipe: Recipe, config: Doc | None, rel: str, values: Mapping[str, object], inputs: Mapping[str, str]
) -> list[Problem]:
    """Every rule the run breaks (config.yaml, `--set`, inputs), placed in config.yaml."""
    if not recipe.rules or recipe.config.mode == "user":
        return []
    data = config.data if config is not None and isinstance(config.data, dict) else None
    return [
        _problem(config, rel, b)
        for b in broken_rules(recipe, effective_config(recipe, data, values, inputs), inputs, written=data)
    ]


def _problem(doc: Doc | None, rel: str, b: Broken) -> Problem:
    line, col = doc.where(b.pointer) if doc is not None else (0, 0)
    return Problem(rel, line, col, RULE, b.message, severity=b.severity, pointer=b.pointer, hint=b.hint)


def _applies(
    recipe: Recipe, rule: RecipeRule, effective: Mapping[str, object], inputs: Mapping[str, str] | None
) -> bool:
    when = rule.when
    if not when:
        return True
    if isinstance(when, str):
        return is_set(_value(recipe, when, effective, inputs))
    value = _value(recipe, when.key, effective, inputs)
    return not is_missing(value) and any(type(v) is type(value) and v == value for v in when.in_)


def _value(recipe: Recipe, key: str, effective: Mapping[str, object], inputs: Mapping[str, str] | None) -> object:
    """An input name reads the input (or its binding in the config); anything else is a config path."""
    if key in RULE_INPUTS:
        given = (inputs or {}).get(key)
        if given:
            return given
        bound = recipe.adapter_options.bindings.get(key)
        return get_path(effective, bound) if bound else None
    return get_path(effective, key)


def _path(recipe: Recipe, key: str) -> str:
    return recipe.adapter_options.bindings.get(key, "") if key in RULE_INPUTS else key


def _pointer(recipe: Recipe, rule: RecipeRule, written: object) -> str:
    when = rule.when if isinstance(rule.when, str) else rule.when.key if rule.when else ""
    when_path = _path(recipe, when) if when else ""
    if when_path and isinstance(written, dict) and not is_missing(get_path(written, when_path)):
        return config_pointer(when_path)
    first = next((p for p in (_path(recipe, k) for k in rule.require_any) if p), "")
    return config_pointer(first) if first else ""


def _hint(recipe: Recipe, rule: RecipeRule) -> str:
    """The rule's own hint, then the keys to set and where: a parameter also takes `--set NAME=...`."""
    by_path = {p.path: name for name, p in recipe.params.items()}
    keys = []
    for key in rule.require_any:
        if key in RULE_INPUTS:
            keys.append(_INPUT_FLAGS[key])
        else:
            keys.append(f"{key} (--set {by_path[key]}=...)" if key in by_path else key)
    what = keys[0] if len(keys) == 1 else "one of " + ", ".join(keys)
    where = f"set {what}{' in config.yaml' if any(k not in RULE_INPUTS for k in rule.require_any) else ''}"
    return f"{rule.hint.rstrip('.; ')}; {where}" if rule.hint else where


def _set_path(data: dict[str, object], dotted: str, value: object) -> None:
    node = data
    *parents, leaf = dotted.split(".")
    for part in parents:
        child = node.get(part)
        if not isinstance(child, dict):
            child = node[part] = {}
        node = child
    node[leaf] = value
