"""Would this run request be admitted? Every refusal of CONTRACT §7–8 that needs no cluster. Pure.

`tp validate` reports these as Problems on the run request file; `resolve` raises the first of them,
so `tp submit`, `tp render` and the bot refuse with the same words.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from typing import Literal

from tuneplane.check.images import (
    ImageError,
    allowed_registries,
    allowlist_variable,
    check_allowed,
    check_digest_policy,
    parse_image,
)
from tuneplane.check.kube import MAX_ANNOTATIONS_BYTES, text_bytes
from tuneplane.check.params import check_value, get_path, is_missing, resolve_name, unknown_name_message
from tuneplane.check.shapes import ShapeError, parse_profile
from tuneplane.lab.yamlio import escape
from tuneplane.models.lab import LabFile
from tuneplane.models.recipe import Param, Recipe
from tuneplane.models.run import RunRequest
from tuneplane.runtime.patterns import lazy_pattern
from tuneplane.runtime.records import FrozenRecord

FULL_SHA = lazy_pattern(r"[0-9a-f]{40}\Z")
SHORT_SHA = lazy_pattern(r"[0-9a-f]{4,39}\Z")
CLI_FLAG = {"model": "--model", "train_data": "--train-data", "validation_data": "--validation-data"}
EXTERNAL_NEEDS_URL = "custom external observability requires spec.framework.observability_url"


class Refusal(FrozenRecord):
    pointer: str  # JSON pointer into the run request
    rule: str
    message: str
    hint: str = ""
    severity: Literal["error", "warning"] = "error"


def check_request(
    lab: LabFile,
    recipe: Recipe,
    req: RunRequest,
    env: dict[str, str] | None = None,
    *,
    plugin_params: Mapping[str, Param] | None = None,
    plugins_locked: bool = False,
) -> list[Refusal]:
    """Every refusal of `req`; `plugin_params` are what the experiment's locked plugins declare."""
    env = dict(os.environ) if env is None else env
    out: list[Refusal] = []
    out += _operation(recipe, req)
    out += _profile(lab, req)
    out += _image(lab, recipe, req, env)
    out += _observability(recipe, req)
    out += _hyperparams(recipe, req, plugin_params or {}, plugins_locked)
    out += _inputs(recipe, req)
    out += check_commit(req.commit)
    out += _finite_values(req, {r.pointer for r in out if r.severity == "error"})
    out += _annotation_sizes(req)
    return out


# ── what the request hands the cluster verbatim: the pin, the values, the annotations ──────────────


def check_commit(commit: str) -> list[Refusal]:
    """A pin is a full commit id: 40 lower-case hex digits. Anything else either moves (`HEAD~1`, a
    branch) or is not a commit at all (a line break would end the batch script's comment and start a
    directive); a short id still names one commit today, so it is only warned about."""
    if not commit or FULL_SHA().match(commit):
        return []
    fix = "write the full 40-digit id: `git rev-parse --verify '{}^{{commit}}'` prints it"
    if SHORT_SHA().match(commit):
        return [
            Refusal(
                "/commit",
                "run-commit",
                f"commit {commit!r} is an abbreviated commit id: it may name two commits once the lab grows",
                fix.format(commit),
                severity="warning",
            )
        ]
    shown = repr(commit) if len(commit) <= 60 else repr(commit[:60]) + "…"
    return [
        Refusal(
            "/commit",
            "run-commit",
            f"commit {shown} is not a commit id: a run is pinned to one full 40-digit commit id "
            "(a ref or an expression such as HEAD~1 moves)",
            fix.format("HEAD") + ", or leave `commit` empty for the commit the bot sees",
        )
    ]


def _finite_values(req: RunRequest, refused: set[str]) -> list[Refusal]:
    """NaN and infinities have no JSON spelling: the JobSpec and every config built from it would not parse.
    A key whose parameter check refused it already (`refused`, its pointer as `_hyperparams` writes it) is
    not said twice."""
    return [
        Refusal(
            f"/set/{escape(key)}",
            "run-set-value",
            f"--set {key}: {value!r} is not a finite number",
            "give a finite number, e.g. 0.001 or 1e-5",
        )
        for key, value in req.set.items()
        if isinstance(value, float) and not math.isfinite(value) and f"/set/{key}" not in refused
    ]


# Each free-text field the request copies into an annotation of every object it becomes; together they
# stay far below the API server's limit on all annotations of an object (check.kube.MAX_ANNOTATIONS_BYTES).
ANNOTATED = {"requested_by": 1024, "image": 4096, "observability_url": 4096}


def _annotation_sizes(req: RunRequest) -> list[Refusal]:
    out = []
    for field, limit in ANNOTATED.items():
        size = text_bytes(getattr(req, field))
        if size > limit:
            out.append(
                Refusal(
                    f"/{field}",
                    "run-annotation-size",
                    f"{field} is {size:,} bytes; at most {limit:,} are allowed: it becomes an annotation "
                    f"of the job, and the API server refuses objects whose annotations pass "
                    f"{MAX_ANNOTATIONS_BYTES:,} bytes",
                    f"shorten {field}",
                )
            )
    return out


def _operation(recipe: Recipe, req: RunRequest) -> list[Refusal]:
    if req.operation == "train" or req.operation in recipe.lifecycle:
        return []
    if recipe.framework == "custom":
        return [
            Refusal(
                "/operation",
                "run-operation",
                f"custom adapter refuses {req.operation}: custom/custom compiles only the train operation",
                "export or evaluate inside your own train.sh, writing under $TUNEPLANE_OUT_DIR",
            )
        ]
    return [
        Refusal(
            "/operation",
            "run-operation",
            f"{recipe.name} has no {req.operation} operation",
            f"operations of {recipe.name}: train{''.join(', ' + k for k in recipe.lifecycle)}",
        )
    ]


def _profile(lab: LabFile, req: RunRequest) -> list[Refusal]:
    try:
        parse_profile(req.profile, lab)
    except ShapeError as exc:
        return [Refusal("/profile", "run-profile", str(exc), exc.hint)]
    return []


def _image(lab: LabFile, recipe: Recipe, req: RunRequest, env: dict[str, str]) -> list[Refusal]:
    if not req.image:
        if recipe.user_managed:
            return [
                Refusal(
                    "/image",
                    "run-image",
                    f"{recipe.name} needs --image: it has no catalog image",
                    "pass --image registry/repository:tag (pin @sha256:… in production)",
                )
            ]
        return []
    try:
        ref = parse_image(req.image)
        check_allowed(ref, allowed_registries(env, lab.images.allowed_registries), allowlist_variable(env))
        check_digest_policy(ref, lab.images.require_digest)
    except ImageError as exc:
        return [Refusal("/image", "run-image", str(exc), exc.hint)]
    return []


def _observability(recipe: Recipe, req: RunRequest) -> list[Refusal]:
    mode = recipe.adapter_options.observability
    if mode == "external" and not req.observability_url:
        message = (
            EXTERNAL_NEEDS_URL
            if recipe.framework == "custom"
            else f"{recipe.framework} external observability requires spec.framework.observability_url"
        )
        return [
            Refusal(
                "/observability_url",
                "run-observability",
                message,
                "pass --observability-url with the dashboard your team uses (e.g. a wandb project URL)",
            )
        ]
    if mode == "platform" and req.observability_url:
        return [
            Refusal(
                "/observability_url",
                "run-observability",
                f"{recipe.name} uses platform observability: --observability-url is refused",
                "drop --observability-url; metrics from tuneplane.report reach the platform",
            )
        ]
    if req.observability_url and not req.observability_url.startswith(("https://", "http://")):
        return [
            Refusal(
                "/observability_url",
                "run-observability",
                f"observability URL {req.observability_url!r} is not an http(s) URL",
                "",
            )
        ]
    return []


def _hyperparams(
    recipe: Recipe, req: RunRequest, plugin_params: Mapping[str, Param], plugins_locked: bool
) -> list[Refusal]:
    out: list[Refusal] = []
    if not recipe.params and not plugin_params and not plugins_locked:
        return out  # custom: values land in spec.hyperparams unchecked (nothing reads them)
    for key, value in req.set.items():
        name = resolve_name(key, recipe)
        param = recipe.params[name] if name is not None else plugin_params.get(key)
        if param is not None:
            problem = check_value(param, value)
            if problem:
                out.append(Refusal(f"/set/{key}", "run-set", f"--set {key}: {problem}", param.doc))
        elif plugins_locked:
            out.append(
                Refusal(
                    f"/set/{key}",
                    "run-set-undeclared",
                    f"--set {key} is not a parameter of {recipe.name} nor declared by a locked plugin; "
                    "it reaches the plugins' install(params) unchecked",
                    "declare it under `params:` in the plugin's plugin.yaml so tp checks it",
                    severity="warning",
                )
            )
        else:
            message, hint = unknown_name_message(key, recipe)
            out.append(
                Refusal(
                    f"/set/{key}",
                    "run-set",
                    message,
                    hint + "; a key meant for an algorithm plugin "
                    "needs the plugin locked (`tp plugin lock`) and declared under `params:` in its "
                    "plugin.yaml",
                )
            )
    return out


def _inputs(recipe: Recipe, req: RunRequest) -> list[Refusal]:
    if req.operation != "train":
        return _lifecycle_inputs(recipe, req)
    missing = [CLI_FLAG[k] for k in recipe.adapter_options.required_inputs if not getattr(req.inputs, k)]
    if not missing:
        return []
    return [
        Refusal(
            "/inputs",
            "run-inputs",
            f"The {recipe.framework} recipe requires explicit: {' '.join(missing)}",
            "pass them to tp submit (a hub id or a path under the storage root)",
        )
    ]


def _lifecycle_inputs(recipe: Recipe, req: RunRequest) -> list[Refusal]:
    if req.operation in recipe.lifecycle and not req.inputs.checkpoint:
        return [
            Refusal(
                "/inputs/checkpoint",
                "run-inputs",
                f"{req.operation} needs --checkpoint",
                "name a checkpoint directory of an earlier run, e.g. runs/<user>/<exp>/<run>/out/checkpoints/step-100",
            )
        ]
    return []


# ── a run on this machine ──────────────────────────────────────────────────────────────────────────

LOCAL_INPUTS = {
    "model": "--model",
    "train_data": "--train-data",
    "validation_data": "--validation-data",
    "data": "--data",
}


def check_local_inputs(req: RunRequest) -> list[Refusal]:
    """A run on this machine reads its inputs from this machine's disk: an input written as a path (absolute
    or from `~`) must be there before the request is committed, not 20 seconds into the job. Anything
    else may be a hub id, which the job resolves itself."""
    out = []
    for field, flag in LOCAL_INPUTS.items():
        value: str = getattr(req.inputs, field)
        if not value.startswith(("/", "~")):
            continue
        path = os.path.expanduser(value)
        if not os.path.exists(path):
            out.append(
                Refusal(
                    f"/inputs/{field}",
                    "run-local-input",
                    f"{flag} {value}: no such file or folder on this machine",
                    "the run starts here and reads it from this path: fix the path, or create it first",
                )
            )
    return out


# ── adapter refusals: what the experiment itself sets (config.yaml, plugins) ───────────────────────

NO_ALGORITHM_PLUGINS = frozenset({"custom", "evalkit"})


def check_platform_owned(recipe: Recipe, config: object) -> list[Refusal]:
    """Config keys the platform sets from the run (output dirs, topology) must not be set by the user."""
    return [
        Refusal(
            "/experiment",
            "run-platform-owned",
            f"config.yaml sets {key}, a key the platform owns for {recipe.name}",
            f"remove {key} from config.yaml: the platform sets it from the run "
            f"(owned keys: {', '.join(recipe.adapter_options.platform_owned)})",
        )
        for key in owned_keys_set(recipe, config)
    ]


def owned_keys_set(recipe: Recipe, config: object) -> list[str]:
    """The platform-owned keys `config` sets, in the recipe's order."""
    if not isinstance(config, dict):
        return []
    return [key for key in recipe.adapter_options.platform_owned if not is_missing(get_path(config, key))]


def check_algorithm_plugins(framework: str, plugins: list[tuple[str, str]]) -> list[Refusal]:
    """`plugins` = (reference, capability) pairs; custom and evalkit never run algorithm plugins."""
    if framework not in NO_ALGORITHM_PLUGINS:
        return []
    return [
        Refusal(
            "/experiment",
            "run-plugins",
            f"{ref} is an algorithm plugin; the {framework} adapter refuses algorithm plugins "
            "(its entrypoint does not start through the algorithm bridge)",
            "remove it from plugins.lock.json, or use a catalog framework that supports plugins",
        )
        for ref, capability in plugins
        if capability == "algorithm"
    ]
