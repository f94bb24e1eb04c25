"""What every FrameworkAdapter shares: the protocol, the checks all frameworks make, argv helpers. Pure.

An adapter turns a JobSpec (train, export or eval) into a LaunchPlan with the framework's own launch
conventions; it reads nothing but the JobSpec, so the same plan comes out on a laptop and in the bot.
"""

from __future__ import annotations

import json
import re
from typing import Protocol

from tuneplane.constants import Scalar
from tuneplane.errors import UsageError
from tuneplane.models.jobspec import JobSpec
from tuneplane.plan.environment import secret_env, spec_to_env
from tuneplane.plan.launchplan import ArtifactGlob, LaunchMode, LaunchPlan

PYTHON = "python3"
LAUNCHER_MODULE = "tuneplane.launcher"
CLI_FLAG = {"model": "--model", "train_data": "--train-data", "validation_data": "--validation-data"}
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029]")


class FrameworkAdapter(Protocol):
    """One framework: which operations it compiles and how."""

    name: str

    def compile(self, spec: JobSpec) -> LaunchPlan:
        """The LaunchPlan of `spec.spec.operation`; UsageError when the framework cannot run it."""
        ...


# ── paths and values ────────────────────────────────────────────────────────────────────────────────


def exp_path(spec: JobSpec, relative: str) -> str:
    """An experiment file's absolute path in the job (resolve checked it stays inside)."""
    return f"{spec.spec.paths.exp_dir}/{relative}"


def config_path(spec: JobSpec) -> str:
    return exp_path(spec, "config.yaml")


def out(spec: JobSpec, *parts: str) -> str:
    return "/".join([spec.spec.paths.out_dir, *parts])


def trainer_hyperparams(spec: JobSpec) -> dict[str, Scalar]:
    """The validated hyperparameters the trainer takes: all but the algorithm plugins' own
    (`spec.plugin_params`), which reach only their install(params)."""
    mine = spec.spec.plugin_params
    return {path: value for path, value in spec.spec.hyperparams.items() if path not in mine}


def overrides_json(spec: JobSpec) -> str:
    """The trainer's hyperparameters (dotted config path → value) as one compact JSON argument."""
    return json.dumps(trainer_hyperparams(spec), sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def entry_flags(spec: JobSpec, flags: list[tuple[str, str]]) -> list[str]:
    """`flags` as arguments, less those the entrypoint does not accept (the recipe's
    `entrypoint.flags`; none declared: all). A lab's own train.py parses its arguments strictly: a
    flag it never had (`--logging-dir`) would stop the run before it starts."""
    accepted = spec.spec.recipe.entrypoint_flags
    return [arg for flag, value in flags if not accepted or flag in accepted for arg in (flag, value)]


def hydra_value(value: object) -> str:
    """A value in Hydra's override grammar, written as JSON (strings quoted, lists as lists)."""
    if isinstance(value, str) and _CONTROL.search(value):
        raise UsageError(
            f"value {value!r} contains a control character, which a Hydra override cannot carry",
            hint="remove newlines and tabs from the value",
        )
    return json.dumps(value, ensure_ascii=False)


def python_entry(spec: JobSpec, kind: str, value: str) -> list[str]:
    """`-m module`, the framework's file in the image (already absolute), or the experiment's file."""
    if kind == "module":
        return ["-m", value]
    return [value] if kind == "file" else [exp_path(spec, value)]


def processes_per_node(spec: JobSpec) -> int:
    """One process per GPU, at least one; a CPU run (`local:N`) asks for its own count."""
    res = spec.spec.resources
    return res.procs_per_node or max(1, res.gpus_per_node)


# ── the plan ───────────────────────────────────────────────────────────────────────────────────────


def make_plan(
    spec: JobSpec,
    argv: list[str],
    *,
    mode: LaunchMode = "direct",
    in_process: bool = False,
    procs_per_node: int = 1,
    extra_env: dict[str, str] | None = None,
) -> LaunchPlan:
    env = spec_to_env(spec)
    env.update(extra_env or {})
    return LaunchPlan(
        argv=argv,
        cwd=spec.spec.paths.work_dir,
        env=env,
        mode=mode,
        nodes=spec.spec.resources.nodes,
        procs_per_node=procs_per_node,
        secret_env=secret_env(ingest_bound=True),
        artifacts=artifacts(spec),
        in_process=in_process,
    )


def artifacts(spec: JobSpec) -> list[ArtifactGlob]:
    """The recipe's artifact globs that this operation produces."""
    wanted = {"train": {"checkpoint", "log"}, "export": {"export", "log"}, "eval": {"evaluation", "log"}}
    kinds = (
        wanted[spec.spec.operation]
        if spec.spec.recipe.name != "custom/custom"
        else {"checkpoint", "log", "export", "evaluation"}
    )
    return [ArtifactGlob(a.kind, a.pattern, a.format) for a in spec.spec.recipe.adapter.artifacts if a.kind in kinds]


# ── checks every framework makes ────────────────────────────────────────────────────────────────────


def check_common(spec: JobSpec, adapter: str, no_algorithm_plugins: bool = False) -> None:
    """The refusals of CONTRACT §7 that hold for any framework, from the JobSpec alone."""
    _check_operation(spec, adapter)
    _check_observability(spec, adapter)
    if no_algorithm_plugins:
        _check_no_algorithm_plugins(spec, adapter)
    if spec.spec.operation == "train":
        _check_inputs(spec)
        _check_gpus(spec)


def _check_operation(spec: JobSpec, adapter: str) -> None:
    op = spec.spec.operation
    if op == "train" or op in spec.spec.recipe.adapter.lifecycle:
        return
    if adapter == "custom":
        raise UsageError(
            f"custom adapter refuses {op}: custom/custom compiles only the train operation",
            hint="export or evaluate inside your own train.sh, writing under $TUNEPLANE_OUT_DIR",
        )
    known = ", ".join(["train", *spec.spec.recipe.adapter.lifecycle])
    raise UsageError(
        f"the {adapter} adapter has no {op} operation for {spec.spec.recipe.name}",
        hint=f"operations of {spec.spec.recipe.name}: {known}",
    )


def _check_observability(spec: JobSpec, adapter: str) -> None:
    url = spec.spec.framework.observability_url
    if spec.spec.recipe.observability == "external" and not url:
        raise UsageError(
            f"{adapter} external observability requires spec.framework.observability_url",
            hint="pass --observability-url with the dashboard your team uses",
        )
    if spec.spec.recipe.observability == "platform" and url:
        raise UsageError(
            f"{spec.spec.recipe.name} uses platform observability: --observability-url is refused",
            hint="drop --observability-url; metrics from tuneplane.report reach the platform",
        )


def _check_no_algorithm_plugins(spec: JobSpec, adapter: str) -> None:
    for plugin in spec.spec.plugins:
        if plugin.capability == "algorithm":
            raise UsageError(
                f"{plugin.id}@{plugin.version} is an algorithm plugin; the {adapter} adapter "
                "refuses algorithm plugins (its entrypoint does not start through the algorithm "
                "bridge)",
                hint="remove it from plugins.lock.json",
            )


def _check_inputs(spec: JobSpec) -> None:
    required = spec.spec.recipe.adapter.required_inputs
    missing = [CLI_FLAG.get(k, k) for k in required if not getattr(spec.spec.inputs, k, "")]
    if missing:
        raise UsageError(
            f"The {spec.spec.framework.kind} recipe requires explicit: {' '.join(missing)}",
            hint="pass them to tp submit (a hub id or a path under the storage root)",
        )


def _check_gpus(spec: JobSpec) -> None:
    needed = spec.spec.recipe.adapter.topology.get("min_gpus", 0)
    have = spec.spec.resources.gpus_per_node
    if cpu_smoke_test(spec):
        return  # allowed on this machine's CPUs, with a warning at submit: slow, but it shows the job works
    if isinstance(needed, int) and have < needed:
        raise UsageError(
            f"{spec.spec.recipe.name} needs at least {needed} GPU(s) per node; "
            f"profile {spec.spec.resources.profile} gives {have}",
            hint="pick a GPU profile, e.g. --profile <gpu-profile>:1",
        )


# Frameworks built for GPUs: they run on a CPU-only local profile (their recipes allow 0 GPUs so a
# smoke test works on a laptop), but slowly, and the person is told so.
GPU_FRAMEWORKS = frozenset({"trl", "evalkit", "verl", "nemo-rl", "ms-swift", "openrlhf"})


def cpu_smoke_test(spec: JobSpec) -> bool:
    """A GPU recipe asked to run on a local profile without GPUs: a CPU smoke test."""
    needed = spec.spec.recipe.adapter.topology.get("min_gpus", 0)
    res = spec.spec.resources
    gpu_recipe = spec.spec.framework.kind in GPU_FRAMEWORKS or (isinstance(needed, int) and needed > 0)
    return res.local and res.gpus_per_node == 0 and gpu_recipe


def require_value(value: str, message: str, hint: str) -> str:
    if not value:
        raise UsageError(message, hint=hint)
    return value
