"""Rule `config-*`: config.yaml values fit the recipe's params.

Passing: `learning_rate: 2.0e-5` for a float param with `min: 0`.
Failing: `learning_rate: "fast"` → `config-type`; `num_generations: 0` with `min: 2` → `config-range`;
`lr_scheduler_type: cosin` → `config-choice`; `learning_rte: 1.0e-5` → `config-unknown` (did you mean
`learning_rate`?). In a closed config (`config: {mode: closed}` in the recipe, the TRL recipes: TRL
builds `SFTConfig(**config)` and dies on a key it does not know) every key must be a parameter, a
declared pass-through key or a platform-owned key, and `bogus_key: 1` is an error (so is a locked
plugin's parameter: pass it with `--set`); in an open config
only a near-miss of a parameter is reported, as a warning (other keys reach the framework).
"""

from __future__ import annotations

from collections.abc import Iterator

from tuneplane.check.params import (
    Misfit,
    config_pointer,
    config_value,
    get_path,
    is_missing,
    leaf_paths,
    value_misfit,
)
from tuneplane.check.rules.context import ExperimentContext
from tuneplane.lab.yamlio import Doc, escape
from tuneplane.problems import Problem, Severity, close_matches, did_you_mean

# the rule of each kind of value that does not fit its parameter
RULES = {Misfit.TYPE: "config-type", Misfit.RANGE: "config-range", Misfit.CHOICE: "config-choice"}


def check(ctx: ExperimentContext) -> Iterator[Problem]:
    doc, recipe = ctx.config, ctx.recipe
    if doc is None or recipe is None or not recipe.params:
        return  # custom: config.yaml is the user's own and nothing reads it
    if not isinstance(doc.data, dict):
        yield doc.problem(
            "",
            "config-root",
            "config.yaml must be a mapping of keys to values",
            hint="start the file with `key: value` lines",
        )
        return
    yield from _platform_owned(ctx, doc)
    known_paths = {p.path for p in recipe.params.values()}
    if recipe.config.mode == "closed":
        # lazy: the plugin tooling (packaging, the lock models) loads only when asked
        from tuneplane.check.plugin_locks import locked_plugin_params

        yield from _closed(ctx, doc, known_paths, set(locked_plugin_params(ctx.lab.root, ctx.dir)[0]))
        known_paths = set()
    for name, param in sorted(recipe.params.items()):
        pointer = config_pointer(param.path)
        value = config_value(param, get_path(doc.data, param.path), doc.plain.get(pointer))
        if is_missing(value) or value is None:  # `key: null` means "not set": the default applies
            if param.required:
                yield doc.problem(
                    "",
                    "config-required",
                    f"required parameter {name!r} ({param.path}) is not set",
                    hint=f"add `{param.path}: <{param.type}>` or pass --set {name}=...",
                )
            continue
        misfit = value_misfit(param, value)
        if misfit is not None:
            kind, message = misfit
            yield doc.problem(pointer, RULES[kind], f"{param.path}: {message}", hint=_param_hint(name, param))
    yield from _unknown_keys(ctx, doc, known_paths)


def _platform_owned(ctx: ExperimentContext, doc: Doc) -> Iterator[Problem]:
    """The keys the platform sets from the run: the same refusal `resolve` raises, here on the key."""
    assert ctx.recipe is not None
    owned = ctx.recipe.adapter_options.platform_owned
    if not any(not is_missing(get_path(doc.data, key)) for key in owned):
        return
    # lazy: the request checks load only when a config sets an owned key
    from tuneplane.check.admission import check_platform_owned, owned_keys_set

    for key, refusal in zip(
        owned_keys_set(ctx.recipe, doc.data), check_platform_owned(ctx.recipe, doc.data), strict=True
    ):
        yield doc.problem(config_pointer(key), "config-platform-owned", refusal.message, hint=refusal.hint)


def _closed(ctx: ExperimentContext, doc: Doc, params: set[str], plugin_params: set[str]) -> Iterator[Problem]:
    """Every key a parameter, pass-through or platform key. A locked plugin's parameter is refused too:
    the trainer builds its config from the whole file, and a plugin's key reaches only install(params)."""
    recipe = ctx.recipe
    assert recipe is not None
    options = recipe.adapter_options
    known = params | set(recipe.config.passthrough) | set(options.platform_owned) | set(options.bindings.values())
    target = recipe.config.target or recipe.framework
    for path in leaf_paths(doc.data):
        if path in known or any(path.startswith(k + ".") for k in known):
            continue
        pointer = "/" + "/".join(escape(p) for p in path.split("."))
        if path in plugin_params:
            yield doc.problem(
                pointer,
                "config-unknown",
                f"{path!r} is a locked plugin's parameter, not a key {target} knows: the job builds the "
                "config from this whole file and would fail",
                hint=f"remove it and pass it with --set {path}=…, or set its default in the plugin's plugin.yaml",
            )
            continue
        near = sorted(params) if close_matches(path, sorted(params), n=1) else sorted(known)  # a param first
        yield doc.problem(
            pointer,
            "config-unknown",
            f"{path!r} is not a key {target} knows: the job would fail when it builds the config",
            hint=did_you_mean(path, near, then=f"remove it, or see `tp methods {ctx.method}` for the parameters"),
        )


def _param_hint(name: str, param: object) -> str:
    doc = getattr(param, "doc", "")
    return f"parameter {name}: {doc}" if doc else f"see `tp methods` for parameter {name}"


def _unknown_keys(ctx: ExperimentContext, doc: Doc, known_paths: set[str]) -> Iterator[Problem]:
    """A key that is not a param path but is one typo away from one is almost surely a typo."""
    data = doc.data
    for path in leaf_paths(data):
        if path in known_paths or any(k.startswith(path + ".") or path.startswith(k + ".") for k in known_paths):
            continue
        hint = did_you_mean(path, sorted(known_paths), cutoff=0.85)
        if hint:
            pointer = "/" + "/".join(escape(p) for p in path.split("."))
            yield doc.problem(
                pointer,
                "config-unknown",
                f"{path!r} is not a parameter of {ctx.method}",
                hint=hint,
                severity=Severity.WARNING,
            )
