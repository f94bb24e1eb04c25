"""`resolve`: experiment × recipe × run request × lab settings → JobSpec. Pure over the lab's files.

Every refusal happens here, before anything is written or submitted, in the same words `tp validate`
uses (the request-level ones come from `tuneplane.check.admission`). Resolving is split in two so that
rendering a thousand run requests reads each experiment, its lock and its plugins once:
`prepare_experiment` (per experiment) and `resolve_prepared` (per run request).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from pathlib import Path, PurePosixPath

from tuneplane import __version__
from tuneplane.check.admission import Refusal, check_algorithm_plugins, check_platform_owned, check_request
from tuneplane.check.admission import check_local_inputs as local_inputs
from tuneplane.check.images import ImageError, check_digest_policy, parse_image
from tuneplane.check.params import check_value, config_pointer, config_value, get_path, is_missing, resolve_name
from tuneplane.check.rules import config as config_rule
from tuneplane.check.rules import requires
from tuneplane.check.rules import settings as settings_rule
from tuneplane.check.rules.cluster import check_init_image
from tuneplane.check.shapes import Shape, ShapeError, parse_profile
from tuneplane.check.validate import load_experiment
from tuneplane.constants import STORAGE_ROOT_ENV, Scalar
from tuneplane.errors import UsageError
from tuneplane.lab import fs
from tuneplane.lab.catalog import Catalog, load_catalog
from tuneplane.lab.layout import dataset_variable
from tuneplane.lab.layout import plugin_dir as plugin_path
from tuneplane.lab.load import Lab, storage_user
from tuneplane.lab.locks import admit
from tuneplane.lab.modelparse import first_problem_error
from tuneplane.lab.yamlio import Doc, LoadFailed, parse_json
from tuneplane.models.backendkinds import BACKEND_KINDS, backend_kind
from tuneplane.models.base import RetryPolicy
from tuneplane.models.jobspec import (
    AdapterRef,
    ArtifactRef,
    DatasetRef,
    FrameworkRef,
    InputsRef,
    JobMeta,
    JobProvenance,
    JobSpec,
    JobSpecBody,
    LockedPluginRef,
    Paths,
    RecipeRef,
    Resources,
)
from tuneplane.models.lab import LabFile
from tuneplane.models.lock import RecipeLock
from tuneplane.models.recipe import NativeOutput, Param, Recipe, merge_native
from tuneplane.models.run import RunRequest
from tuneplane.plan.adapters.base import trainer_hyperparams
from tuneplane.plan.entrypoints import effective_entrypoint
from tuneplane.plan.names import object_name
from tuneplane.problems import Problem
from tuneplane.runtime.records import FrozenRecord, field

RUNTIME_IMAGES_ENV = "TUNEPLANE_RUNTIME_IMAGES"
_UNSAFE_SEGMENT = re.compile(r"[^A-Za-z0-9._-]+")


class PreparedExperiment(FrozenRecord):
    """What every run request of one experiment shares: the checked lock, recipe, config and plugins."""

    name: str
    dir: Path
    lock: RecipeLock
    recipe: Recipe
    config: object  # config.yaml as read: a mapping when well formed
    config_sha256: str
    plugins: tuple[LockedPluginRef, ...]
    base_hyperparams: dict[str, Scalar]  # config values at the param paths, then recipe defaults
    plugin_params: dict[str, Param] = field(default_factory=dict)  # declared by the locked plugins
    plugin_owners: dict[str, list[str]] = field(default_factory=dict)  # each declared key → who declares it
    native: tuple[NativeOutput, ...] = ()  # the collector's outputs: the recipe's and experiment.yaml's
    config_doc: Doc | None = None  # config.yaml with its positions, for the recipe's rules

    @property
    def plugins_locked(self) -> bool:
        """Algorithm plugins are locked: a `--set` key for one that declares nothing is let through."""
        return any(p.capability == "algorithm" for p in self.plugins)


def resolve(
    lab: Lab,
    experiment: str,
    request: RunRequest,
    *,
    commit: str,
    dirty: bool,
    allow_dirty: bool = False,
    catalog: Catalog | None = None,
    env: dict[str, str] | None = None,
    warnings: list[str] | None = None,
) -> JobSpec:
    """The JobSpec of `request`; raises UsageError with the first refusal and how to fix it."""
    prepared = prepare_experiment(lab, experiment, catalog or load_catalog())
    return resolve_prepared(
        lab, prepared, request, commit=commit, dirty=dirty, allow_dirty=allow_dirty, env=env, warnings=warnings
    )


# ── per experiment ──────────────────────────────────────────────────────────────────────────────────


def prepare_experiment(lab: Lab, experiment: str, catalog: Catalog) -> PreparedExperiment:
    """Load and check one experiment; UsageError on the first blocking problem."""
    _refuse_broken_lab(lab)
    ctx = load_experiment(lab, catalog, experiment)
    _raise_first(ctx.problems)
    if ctx.lock is None or ctx.lock_doc is None:
        raise UsageError(
            f"experiment {experiment!r} has no usable recipe.lock.json",
            hint=f"re-lock it with `tp recipe upgrade {experiment}`",
        )
    _raise_first(admit(ctx.lock, ctx.lock_doc, catalog, experiment))
    if ctx.recipe is None:
        raise UsageError(
            f"recipe {ctx.lock.recipe.name!r} of {experiment} is not in the catalog", hint="see `tp methods`"
        )
    recipe = ctx.recipe
    config = ctx.config.data if ctx.config is not None else None
    _raise_first([p for p in config_rule.check(ctx) if p.rule == "config-unknown"])  # a closed config
    effective_entrypoint(ctx.dir, ctx.lock, recipe)
    rel = lab.experiment_rel(experiment)
    _raise_refusals(check_platform_owned(recipe, config), f"{rel}/config.yaml")
    plugins, plugin_params, owners = _plugins(lab, ctx.dir, recipe)
    _raise_refusals(
        check_algorithm_plugins(recipe.framework, [(f"{p.id}@{p.version}", p.capability) for p in plugins]),
        f"{rel}/plugins.lock.json",
    )
    written = ctx.config.plain if ctx.config is not None else {}
    base = _base_hyperparams(recipe.params, config, rel, written) | _base_hyperparams(
        plugin_params, config, rel, written
    )
    native = merge_native(recipe.metrics.native, ctx.manifest.metrics.native if ctx.manifest else [])
    return PreparedExperiment(
        experiment,
        ctx.dir,
        ctx.lock,
        recipe,
        config,
        _config_digest(ctx.dir, ctx.lab.root),
        tuple(plugins),
        base,
        plugin_params,
        native=tuple(native),
        config_doc=ctx.config,
        plugin_owners=owners,
    )


def _refuse_broken_lab(lab: Lab) -> None:
    lab.require_settings()
    _raise_first(settings_rule.errors(lab))  # the cluster would refuse these values after the merge


def _raise_first(problems: list[Problem]) -> None:
    errors = [p for p in problems if p.is_error]
    if errors:
        raise first_problem_error(errors[:1])


def _raise_refusals(refusals: list[Refusal], where: str = "") -> None:
    if refusals:
        first = refusals[0]
        raise UsageError(f"{where}: {first.message}" if where else first.message, hint=first.hint)


def _config_digest(exp_dir: Path, root: Path) -> str:
    path = exp_dir / "config.yaml"
    if not fs.present(path):
        return ""
    try:
        raw = fs.read_bytes(path, fs.MAX_BYTES, root)
    except LoadFailed as exc:
        raise first_problem_error([exc.problem]) from None
    return "sha256:" + hashlib.sha256(raw).hexdigest()


def _base_hyperparams(params: dict[str, Param], config: object, rel: str, written: dict[str, str]) -> dict[str, Scalar]:
    """Config values at the param paths, read by their type (`check.params.config_value`), else the
    defaults; keyed by dotted config path (a plugin parameter's path is its name)."""
    values: dict[str, Scalar] = {}
    data = config if isinstance(config, dict) else {}
    for name, param in params.items():
        param = param if param.path else param.model_copy(update={"path": name})
        value = config_value(param, get_path(data, param.path), written.get(config_pointer(param.path)))
        if is_missing(value) or value is None:
            if param.default is not None:
                values[param.path] = _normalise(param.type, param.default)
            continue
        problem = check_value(param, value)
        if problem:
            raise UsageError(
                f"{rel}/config.yaml: {param.path}: {problem}",
                hint=param.doc or f"see `tp methods` for parameter {name}",
            )
        values[param.path] = _normalise(param.type, value)
    return values


def _normalise(kind: str, value: object) -> Scalar:
    """An int given for a float param becomes a float, so the job sees the type the recipe declares."""
    if kind == "float" and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if not isinstance(value, (bool, int, float, str)):
        raise UsageError(f"parameter value {value!r} is not a scalar")
    return value


def _plugins(
    lab: Lab, exp_dir: Path, recipe: Recipe
) -> tuple[list[LockedPluginRef], dict[str, Param], dict[str, list[str]]]:
    """Locked plugins with the fields of their plugin.yaml, the parameters the algorithm ones declare,
    and which of them declares each; the lock must verify against the lab."""
    lock_path = exp_dir / "plugins.lock.json"
    if not recipe.plugins and _no_plugins_locked(lock_path):
        return [], {}, {}  # the common case, without loading the plugin tooling
    # lazy: the plugin tooling loads only for experiments that lock plugins
    from tuneplane.check.plugin_dirs import load_plugin_manifest
    from tuneplane.check.plugin_locks import check_experiment_plugins, parse_plugins_lock

    _raise_first(check_experiment_plugins(lab.root, exp_dir, recipe.framework, list(recipe.plugins), __version__))
    lock, _ = parse_plugins_lock(fs.read_text(lock_path, fs.MAX_BYTES, lab.root), lab.rel(lock_path))
    refs: list[LockedPluginRef] = []
    params: dict[str, Param] = {}
    owners: dict[str, list[str]] = {}
    for entry in lock.plugins if lock else []:
        folder = plugin_path(lab.root, entry.name)
        manifest = load_plugin_manifest(folder)
        if manifest.capability == "algorithm":
            params.update({name: p.model_copy(update={"path": name}) for name, p in manifest.params.items()})
            for name in manifest.params:
                owners.setdefault(name, []).append(entry.ref)
        refs.append(
            LockedPluginRef(
                id=entry.id,
                name=entry.name,
                version=entry.version,
                digest=entry.digest,
                capability=manifest.capability,
                entrypoint=manifest.entrypoint or "",
                load=manifest.load,
                requires_core=manifest.requires.core,
                source=lab.rel(folder),
            )
        )
    return refs, params, owners


def _no_plugins_locked(lock_path: Path) -> bool:
    if not fs.present(lock_path):
        return True
    try:
        data = parse_json(fs.read_text(lock_path, fs.MAX_BYTES), lock_path.name).data
    except LoadFailed:
        return False  # let the full check name the problem
    return (
        isinstance(data, dict) and data.get("apiVersion") == "tuneplane/plugins-lock/v1" and data.get("plugins") == []
    )


# ── per run request ─────────────────────────────────────────────────────────────────────────────────


def resolve_prepared(
    lab: Lab,
    prepared: PreparedExperiment,
    request: RunRequest,
    *,
    commit: str,
    dirty: bool,
    allow_dirty: bool = False,
    env: dict[str, str] | None = None,
    warnings: list[str] | None = None,
) -> JobSpec:
    """The JobSpec; admitted-with-a-warning facts (a `--set` key no plugin declares) go to `warnings`."""
    env = dict(os.environ) if env is None else env
    recipe, settings = prepared.recipe, lab.config
    if request.experiment != prepared.name:
        raise UsageError(
            f"the run request names experiment {request.experiment!r}, not {prepared.name!r}",
            hint="fix `experiment:` in the run request or move it under runs/<experiment>/",
        )
    if dirty and not allow_dirty:
        raise UsageError(
            "the lab has uncommitted changes: the job would run a commit, not what you see",
            hint="commit them first (the job clones the commit), or pass --allow-dirty",
        )
    refusals = check_request(
        settings, recipe, request, env, plugin_params=prepared.plugin_params, plugins_locked=prepared.plugins_locked
    )
    _raise_refusals([r for r in refusals if r.severity == "error"])
    hyperparams, switched_off = _hyperparams(prepared, request)
    broken = _broken_rules(lab, prepared, request, hyperparams)
    _raise_first(broken)
    if warnings is not None:
        warnings += [f"{r.message} ({r.hint})" for r in refusals if r.severity == "warning"]
        warnings += [f"{p.location()}: {p.message} ({p.hint})" for p in broken]
        warnings += switched_off
    shape = _shape(lab, request, recipe)
    local = shape.local or backend_kind(settings.cluster.backend).runs_here
    if local and shape.nodes > 1:
        clusters = " or ".join(kind.name for kind in BACKEND_KINDS.values() if not kind.runs_here)
        raise UsageError(
            f"profile {request.profile} needs {shape.nodes} nodes, but this lab runs jobs on one "
            f"machine (cluster.backend: {settings.cluster.backend})",
            hint=f"ask for at most {shape.gpus_per_node} GPUs, or set cluster.backend: {clusters} in tuneplane.yaml",
        )
    if local:
        _raise_refusals(local_inputs(request))
    else:
        _check_init_image(settings)
    paths = _paths(lab, prepared.name, request.run_id, local, env)
    return JobSpec(
        metadata=JobMeta(
            name=object_name(prepared.name, request.run_id),
            experiment=prepared.name,
            run_id=request.run_id,
            lab=lab.name,
            user=_user(lab),
        ),
        spec=JobSpecBody(
            operation=request.operation,
            recipe=_recipe_ref(prepared, env if shape.local else {}),
            framework=_framework_ref(prepared, request),
            image=_image(lab, recipe, prepared.lock, request, env),
            hyperparams=hyperparams,
            plugin_params=plugin_routes(prepared, hyperparams),
            inputs=_inputs(request, paths.storage_root),
            resources=Resources(
                profile=shape.profile,
                nodes=shape.nodes,
                gpus_per_node=shape.gpus_per_node,
                local=local,
                procs_per_node=shape.procs_per_node,
            ),
            plugins=list(prepared.plugins),
            timeout_seconds=_time_limit(lab, request),
            retry=_retry(lab, request),
            paths=paths,
            shared_code=list(settings.shared_code),
            datasets=_datasets(lab, paths.storage_root, local),
        ),
        provenance=JobProvenance(
            commit=request.commit or commit,
            dirty=dirty,
            config_sha256=prepared.config_sha256,
            tool_version=__version__,
            requested_by=request.requested_by,
        ),
    )


def _shape(lab: Lab, request: RunRequest, recipe: Recipe) -> Shape:
    try:
        shape = parse_profile(request.profile, lab.config)
    except ShapeError as exc:
        raise UsageError(str(exc), hint=exc.hint) from None
    if request.operation == "train" or request.operation not in recipe.lifecycle_resources:
        return shape
    gpus = recipe.lifecycle_resources[request.operation]
    if gpus > shape.gpus_per_node and not shape.local:
        raise UsageError(
            f"{recipe.name} {request.operation} needs {gpus} GPU(s) on one node; "
            f"profile {shape.profile} has {shape.gpus_per_node} per node",
            hint="pick a profile with more GPUs per node",
        )
    return Shape(
        shape.profile,
        1,
        gpus if not shape.local else min(gpus, shape.gpus_per_node),
        shape.local,
        procs_per_node=shape.procs_per_node,
    )


def _recipe_ref(prepared: PreparedExperiment, local_env: dict[str, str]) -> RecipeRef:
    lock, recipe = prepared.lock, prepared.recipe
    kind, value = effective_entrypoint(prepared.dir, lock, recipe, local_env)
    opts = recipe.adapter_options
    return RecipeRef(
        name=recipe.name,
        version=lock.recipe.version,
        digest=lock.recipe.digest,
        manifest_digest=lock.recipe.manifest_digest,
        template_digest=lock.recipe.template_digest,
        entrypoint_kind=kind,
        entrypoint=value,
        entrypoint_flags=list(recipe.entrypoint.flags),
        plugins=list(recipe.plugins),
        observability=opts.observability,
        adapter=AdapterRef(
            launcher=opts.launcher,
            orchestrator=opts.orchestrator,
            config_mode=opts.config_mode,
            bindings=dict(opts.bindings),
            platform_owned=list(opts.platform_owned),
            required_inputs=list(opts.required_inputs),
            topology=_topology(opts.topology),
            lifecycle=dict(recipe.lifecycle),
            artifacts=_artifacts(recipe),
            native_metrics=[o.model_dump(exclude_none=True) for o in prepared.native],
        ),
    )


def _topology(topology: dict[str, object]) -> dict[str, str | int]:
    return {k: v for k, v in topology.items() if isinstance(v, (str, int)) and not isinstance(v, bool)}


def _artifacts(recipe: Recipe) -> list[ArtifactRef]:
    a = recipe.artifacts
    groups = (
        ("checkpoint", "checkpoints", a.checkpoints),
        ("log", "logs", a.logs),
        ("export", "exports", a.exports),
        ("evaluation", "evaluations", a.evaluations),
    )
    return [
        ArtifactRef(kind=kind, pattern=pattern, format=a.formats.get(key, ""))
        for kind, key, patterns in groups
        for pattern in patterns
    ]


def _framework_ref(prepared: PreparedExperiment, request: RunRequest) -> FrameworkRef:
    fw = prepared.lock.framework
    return FrameworkRef(
        kind=fw.kind, version=fw.version, runtime_id=fw.runtime_id, observability_url=request.observability_url
    )


def _hyperparams(prepared: PreparedExperiment, request: RunRequest) -> tuple[dict[str, Scalar], list[str]]:
    """Base values, then the request's `--set` (already checked by admission), keyed by config path,
    less the parameters whose switch (`when`) is off; and a warning for each such `--set`."""
    recipe = prepared.recipe
    if not recipe.params and not prepared.plugin_params:
        return dict(request.set), []  # custom: kept as written, nothing reads them
    values = dict(prepared.base_hyperparams)
    for key, value in request.set.items():
        name = resolve_name(key, recipe)
        param = recipe.params[name] if name is not None else prepared.plugin_params.get(key)
        # a key no parameter declares was admitted with a warning for the locked plugins: as given
        values[param.path if param else key] = _normalise(param.type, value) if param else value
    missing = [f"{name} ({p.path})" for name, p in recipe.params.items() if p.required and p.path not in values]
    if missing:
        raise UsageError(
            f"required parameter(s) not set: {', '.join(missing)}",
            hint="set them in config.yaml or pass --set NAME=VALUE",
        )
    off = _switched_off(recipe, values)
    given = {param.path: key for key in request.set if (param := _recipe_param(recipe, key)) is not None}
    warnings = [
        f"--set {given[path]} has no effect: {recipe.name} passes {path} only while "
        f"{recipe.params[switch].path} is true (--set {switch}=true to use it)"
        for path, switch in off.items()
        if path in given
    ]
    return {path: values[path] for path in sorted(values) if path not in off}, warnings


def _recipe_param(recipe: Recipe, key: str) -> Param | None:
    name = resolve_name(key, recipe)
    return recipe.params[name] if name is not None else None


def _switched_off(recipe: Recipe, values: dict[str, Scalar]) -> dict[str, str]:
    """The paths of the parameters whose switch (`when`: a bool parameter) is not on, to that switch:
    the entrypoint does not take them then (LoRA's rank with LoRA off is a key TRL's config refuses)."""
    return {
        param.path: param.when
        for param in recipe.params.values()
        if param.when and values.get(recipe.params[param.when].path) is not True
    }


def plugin_routes(prepared: PreparedExperiment, hyperparams: dict[str, Scalar]) -> dict[str, list[str]]:
    """The hyperparameters that are the locked algorithm plugins' alone, each to the plugins it is for:
    a key a plugin declares goes to that plugin, a key nothing declares (admitted with a warning) to
    every algorithm plugin. A recipe parameter's path is the trainer's, even when a plugin declares it."""
    algorithm = [f"{p.id}@{p.version}" for p in prepared.plugins if p.capability == "algorithm"]
    if not algorithm:
        return {}
    trainer = {p.path for p in prepared.recipe.params.values()}
    return {key: prepared.plugin_owners.get(key, algorithm) for key in hyperparams if key not in trainer}


def job_config(prepared: PreparedExperiment, spec: JobSpec) -> dict[str, object]:
    """config.yaml merged with the JobSpec's validated hyperparameters: what the job is started with,
    as the recipe's rules see it (`_broken_rules` checks the same merge)."""
    return requires.effective_config(prepared.recipe, prepared.config, trainer_hyperparams(spec))


def _broken_rules(
    lab: Lab, prepared: PreparedExperiment, request: RunRequest, hyperparams: dict[str, Scalar]
) -> list[Problem]:
    """The recipe's rules (`rules:` in recipe.yaml) on what the framework is started with."""
    if request.operation != "train":
        return []
    i = request.inputs
    inputs = {"model": i.model, "train_data": i.train_data, "validation_data": i.validation_data}
    return requires.config_problems(
        prepared.recipe, prepared.config_doc, f"{lab.experiment_rel(prepared.name)}/config.yaml", hyperparams, inputs
    )


def _inputs(request: RunRequest, storage_root: str) -> InputsRef:
    i = request.inputs
    return InputsRef(
        model=i.model,
        train_data=i.train_data,
        validation_data=i.validation_data,
        checkpoint=_storage_path(i.checkpoint, storage_root, "--checkpoint"),
        checkpoint_format=i.checkpoint_format,
        data=i.data,
    )


def _storage_path(value: str, storage_root: str, flag: str) -> str:
    """A checkpoint named relative to the storage root becomes absolute; `..` may not leave the root."""
    if not value:
        return ""
    pure = PurePosixPath(value)
    if ".." in pure.parts:
        raise UsageError(
            f"{flag} {value!r} may not contain '..'",
            hint="name it from the storage root, e.g. runs/<user>/<exp>/<run>/out/checkpoints/…",
        )
    return str(pure) if pure.is_absolute() else str(PurePosixPath(storage_root) / pure)


# ── image (CONTRACT §8) ─────────────────────────────────────────────────────────────────────────────


def _image(lab: Lab, recipe: Recipe, lock: RecipeLock, request: RunRequest, env: dict[str, str]) -> str:
    """`--image` → the lab's default → the runtime registry → the catalog pin."""
    runtime = recipe.runtime.versions.get(lock.framework.version)
    candidates = (
        (request.image, "--image"),
        (lab.config.images.defaults.get(recipe.framework, ""), f"images.defaults.{recipe.framework} in tuneplane.yaml"),
        (
            _registry(env).get(lock.framework.runtime_id, "") if lock.framework.runtime_id else "",
            f"{RUNTIME_IMAGES_ENV}[{lock.framework.runtime_id}]",
        ),
        (runtime.image if runtime else "", f"the catalog pin of {recipe.name} {lock.framework.version}"),
    )
    for image, source in candidates:
        if image:
            return _checked_image(lab, image, source)
    raise UsageError(
        f"no image for {recipe.name} (framework {recipe.framework} {lock.framework.version})",
        hint=f"pass --image, set images.defaults.{recipe.framework} in tuneplane.yaml, "
        f"or ask an administrator to add {lock.framework.runtime_id or recipe.framework} "
        f"to {RUNTIME_IMAGES_ENV}",
    )


def _registry(env: dict[str, str]) -> dict[str, str]:
    text = env.get(RUNTIME_IMAGES_ENV, "")
    if not text.strip():
        return {}
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise UsageError(
            f"{RUNTIME_IMAGES_ENV} is not valid JSON: {exc.msg}",
            hint='runtime id → image, e.g. {"trl-1.10.0": "registry/trl:1.10.0"}',
        ) from None
    if not isinstance(data, dict) or not all(isinstance(v, str) for v in data.values()):
        raise UsageError(
            f"{RUNTIME_IMAGES_ENV} must be a JSON object of runtime id → image",
            hint='for example {"trl-1.10.0": "registry/trl:1.10.0"}',
        )
    return data


def _check_init_image(settings: LabFile) -> None:
    """The checkout init container's image, checked as `tp validate` checks it (rule cluster-init-image)."""
    try:
        check_init_image(
            settings.cluster.init_image, settings.images.allowed_registries, settings.images.require_digest
        )
    except ImageError as exc:
        raise UsageError(f"cluster.init_image in tuneplane.yaml: {exc}", hint=exc.hint) from None


def _checked_image(lab: Lab, image: str, source: str) -> str:
    try:
        check_digest_policy(parse_image(image), lab.config.images.require_digest)
    except ImageError as exc:
        raise UsageError(f"{source}: {exc}", hint=exc.hint) from None
    return image


# ── paths ───────────────────────────────────────────────────────────────────────────────────────────


def _user(lab: Lab) -> str:
    """The storage user as one safe path segment: it names a directory on shared storage."""
    cleaned = _UNSAFE_SEGMENT.sub("-", storage_user(lab)).strip(".-")
    return cleaned or "user"


def storage_root(lab: Lab, local: bool, env: dict[str, str]) -> str:
    """The local root (lab setting, $TUNEPLANE_STORAGE_ROOT, per-user data dir) or the cluster root."""
    storage = lab.config.cluster.storage
    if not local:
        slurm = lab.config.cluster.slurm
        if backend_kind(lab.config.cluster.backend).shared_filesystem and slurm.runs_root:
            return slurm.runs_root.rstrip("/") or "/"
        return storage.root.rstrip("/") or "/"
    if storage.local_root:
        root = Path(os.path.expanduser(storage.local_root))
        return str(root if root.is_absolute() else (lab.root / root))
    if env.get(STORAGE_ROOT_ENV):
        return str(Path(os.path.expanduser(env[STORAGE_ROOT_ENV])).absolute())
    data_home = env.get("XDG_DATA_HOME") or os.path.join(env.get("HOME") or os.path.expanduser("~"), ".local", "share")
    return str(Path(data_home) / "tuneplane")


def _paths(lab: Lab, experiment: str, run_id: str, local: bool, env: dict[str, str]) -> Paths:
    root = storage_root(lab, local, env)
    run_dir = str(PurePosixPath(root) / "runs" / _user(lab) / experiment / run_id)
    work_dir = f"{run_dir}/work"
    return Paths(
        storage_root=root,
        run_dir=run_dir,
        work_dir=work_dir,
        exp_dir=f"{work_dir}/{lab.experiment_rel(experiment)}",
        out_dir=f"{run_dir}/out",
        hf_home=_local_hf_home(env) if local else "",
    )


def _local_hf_home(env: dict[str, str]) -> str:
    """On this machine the user's own Hugging Face cache: what a run downloads stays for the next."""
    if env.get("HF_HOME"):
        return str(Path(os.path.expanduser(env["HF_HOME"])).absolute())
    cache = env.get("XDG_CACHE_HOME") or os.path.join(env.get("HOME") or os.path.expanduser("~"), ".cache")
    return str(Path(cache) / "huggingface")


DATASET_MOUNT_ROOT = "/mnt/datasets"


def _datasets(lab: Lab, storage: str, local: bool) -> list[DatasetRef]:
    """Each lab data set where this run finds it: on the storage, on its own volume, or on this machine."""

    out = []
    for name, ds in sorted(lab.config.datasets.items()):
        claim, where = "", ""
        if local and ds.local_path:
            path = Path(os.path.expanduser(ds.local_path))
            where = str(path if path.is_absolute() else lab.root / path)
        elif ds.path:
            where = str(PurePosixPath(storage) / ds.path)
        elif not local:
            where, claim = f"{DATASET_MOUNT_ROOT}/{name}", ds.volume
        if where:  # a volume with no local_path cannot reach a job on this machine
            out.append(
                DatasetRef(name=name, variable=dataset_variable(name), dir=where, claim=claim, read_only=ds.read_only)
            )
    return out


def _retry(lab: Lab, request: RunRequest) -> RetryPolicy:
    """The most specific retry policy: the run request's, its profile's, else the lab's."""
    profile = lab.config.profiles.get(request.profile.partition(":")[0])
    return request.retry or (profile.retry if profile is not None else None) or lab.config.retry


def _time_limit(lab: Lab, request: RunRequest) -> int | None:
    """The run request's `timeout`, else its profile's `time_limit`: the one bound every engine enforces."""
    if request.timeout is not None:
        return request.timeout
    profile = lab.config.profiles.get(request.profile.partition(":")[0])
    return profile.time_limit if profile is not None else None
