"""The environment contract (CONTRACT §6): what a job's process sees, in one fixed order. Pure.

Every backend builds the job's environment from here, so a train script finds the same variables on
a laptop and on the cluster. Secrets are never values: `TUNEPLANE_JOB_TOKEN` and `HF_TOKEN` are named
in the LaunchPlan's `secret_env` and reach the process from a Secret (cluster) or memory (local).
"""

from __future__ import annotations

import json

from tuneplane import __version__
from tuneplane.constants import (
    GPU_WATCHDOG_DEFAULT,
    GPU_WATCHDOG_ENV,
    GPUS_PER_NODE_ENV,
    HF_TOKEN,
    JOB_ENABLED,
    JOB_ENDPOINT,
    JOB_RUN_ID,
    JOB_TOKEN,
    METRICS_NATIVE_ENV,
    MONITOR_INTERVAL_ENV,
    NUM_NODES_ENV,
    OUT_DIR_ENV,
    PROCS_PER_NODE_ENV,
    RUN_DIR_ENV,
    STORAGE_ROOT_ENV,
    WORK_DIR_ENV,
)
from tuneplane.models.jobspec import JobSpec

MONITOR_INTERVAL = "10"
# Keys of the per-run Secret `<object name>-tokens` the secret variables come from.
SECRET_KEYS = {JOB_TOKEN: "job-token", HF_TOKEN: "hf-token"}
# Shared caches live on the storage volume on a cluster; locally the user's own cache is kept.
HF_CACHE_DIR = "cache/huggingface"


def spec_to_env(spec: JobSpec, *, ingest_endpoint: str = "") -> dict[str, str]:
    """Every non-secret variable of the contract, always in the same order."""
    body, paths = spec.spec, spec.spec.paths
    env = {
        WORK_DIR_ENV: paths.work_dir,
        "TUNEPLANE_EXP_DIR": paths.exp_dir,
        OUT_DIR_ENV: paths.out_dir,
        "TUNEPLANE_FRAMEWORK": body.framework.kind,
        "TUNEPLANE_RECIPE": recipe_variable(spec),
        NUM_NODES_ENV: str(body.resources.nodes),
        GPUS_PER_NODE_ENV: str(body.resources.gpus_per_node),
        "TUNEPLANE_CLUSTER_PROFILE": body.resources.profile,
        # what launch lines should start per node: the GPU count, or a CPU run's own (never 0)
        PROCS_PER_NODE_ENV: str(body.resources.procs_per_node or max(1, body.resources.gpus_per_node)),
        JOB_ENABLED: "1" if ingest_endpoint else "0",
    }
    if ingest_endpoint:
        env[JOB_ENDPOINT] = ingest_endpoint
        env[JOB_RUN_ID] = spec.metadata.run_id
    env.update(
        {
            "TUNEPLANE_RUN_ID": spec.metadata.run_id,
            RUN_DIR_ENV: paths.run_dir,
            STORAGE_ROOT_ENV: paths.storage_root,
            "TUNEPLANE_FRAMEWORK_VERSION": body.framework.version,
            "TUNEPLANE_RUNTIME_ID": body.framework.runtime_id,
            "TUNEPLANE_RECIPE_VERSION": body.recipe.version,
            "TUNEPLANE_RECIPE_DIGEST": body.recipe.digest,
            "TUNEPLANE_CORE_VERSION": __version__,
            "TUNEPLANE_RECIPE_PLUGINS": ",".join(body.recipe.plugins),
        }
    )
    # StarForge set these two in every job; scripts written for it still read them
    env["CLUSTER_PROFILE"] = body.resources.profile
    env["NRL_RUN_ID"] = spec.metadata.run_id
    if body.framework.observability_url:
        env["TUNEPLANE_EXTERNAL_OBSERVABILITY_URL"] = body.framework.observability_url
    native = body.recipe.adapter.native_metrics
    if native:  # the native collector's declaration (tuneplane.collector.sources)
        env[METRICS_NATIVE_ENV] = json.dumps(native, separators=(",", ":"), sort_keys=True)
    env[MONITOR_INTERVAL_ENV] = MONITOR_INTERVAL
    env["HF_HOME"] = paths.hf_home or f"{paths.storage_root}/{HF_CACHE_DIR}"
    if body.shared_code:
        env["PYTHONPATH"] = shared_code_path(spec)
    for dataset in body.datasets:
        env[dataset.variable] = dataset.dir
    return env


def shared_code_path(spec: JobSpec) -> str:
    """The folders that make each shared-code folder importable by its name (its parent), in order."""
    work = spec.spec.paths.work_dir
    parents: list[str] = []
    for folder in spec.spec.shared_code:
        parent = "/".join([work, *folder.split("/")[:-1]])
        if parent not in parents:
            parents.append(parent)
    return ":".join(parents)


def recipe_variable(spec: JobSpec) -> str:
    """`TUNEPLANE_RECIPE`: the method id for catalog recipes, plain `custom` for custom/custom."""
    name = spec.spec.recipe.name
    return "custom" if name == "custom/custom" else name


def secret_env(ingest_bound: bool) -> dict[str, str]:
    """Secret variables → keys in the per-run Secret. The job token exists only when ingest is bound."""
    keys = {JOB_TOKEN: SECRET_KEYS[JOB_TOKEN]} if ingest_bound else {}
    keys[HF_TOKEN] = SECRET_KEYS[HF_TOKEN]
    return keys


def job_env(
    spec: JobSpec, plan_env: dict[str, str], *, ingest_endpoint: str = "", gpu_watchdog: str = ""
) -> dict[str, str]:
    """The contract for this deployment's ingest binding, then what the adapter added, in order.

    A LaunchPlan's env is `spec_to_env(spec)` (no ingest) plus the adapter's own variables; a backend
    that binds ingest calls this to get the contract with the binding and keep the adapter's extras.
    `gpu_watchdog` is the lab's `cluster.gpu_watchdog`, for the launcher (`TUNEPLANE_GPU_WATCHDOG`), set
    only when it is not the launcher's default: a lab that keeps it gives its jobs the same environment.
    """
    env = spec_to_env(spec, ingest_endpoint=ingest_endpoint)
    if gpu_watchdog and gpu_watchdog != GPU_WATCHDOG_DEFAULT:
        env[GPU_WATCHDOG_ENV] = gpu_watchdog
    unbound = spec_to_env(spec)
    for key, value in plan_env.items():
        if key not in unbound and key not in env:
            env[key] = value
    return env
