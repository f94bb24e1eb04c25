"""Shared helpers of the resolve / adapters / render tests: real labs in git repos, built inline.

Labs are made through the package itself (`tp init` and `tp new` code paths) with one experiment per
catalog recipe, a cluster configuration that exercises every manifest feature, and a git commit made
with a fixed identity (so module-scoped fixtures work before the per-test environment is set up).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

from support.labs import new_lab
from support.repos import git  # re-exported: a test of a lab built here may take its git from here too
from tuneplane.lab.catalog import Catalog, load_catalog, packaged_catalog_root
from tuneplane.lab.load import Lab, load_lab
from tuneplane.models.jobspec import JobSpec
from tuneplane.models.run import RunRequest
from tuneplane.plan.adapters import compile_plan
from tuneplane.plan.launchplan import LaunchPlan
from tuneplane.plan.resolve import resolve
from tuneplane.render.manifests import render_manifests

COMMIT = "0123456789abcdef0123456789abcdef01234567"
RUN_ID = "20250101-120000-abc123"
STORAGE = "/mnt/tuneplane"
INPUTS = {"model": "Qwen/Qwen3-0.6B", "train_data": "data/train.jsonl", "validation_data": "data/val.jsonl"}
CUSTOM_IMAGE = "registry.example.com/team/trainer:1.0"
OBS_URL = "https://wandb.example.org/team/project"

EXPERIMENTS = {
    "custom-exp": "custom/custom",
    "pytorch-exp": "pytorch/image-classification",
    "trl-sft-exp": "trl/sft",
    "trl-grpo-exp": "trl/grpo",
    "verl-grpo-exp": "verl/grpo",
    "verl-sft-exp": "verl/sft",
    "nemo-exp": "nemo-rl/grpo",
    "evalkit-exp": "evalkit/benchmark",
}

CLUSTER_SETTINGS = """\
apiVersion: tuneplane/project/v1
name: render-lab
profiles:
  local: {local: true, gpus_per_node: 0}
  cpu: {gpus_per_node: 0, max_nodes: 4, cpu: "8", memory: 32Gi, shm_size: 2Gi}
  h200:
    gpus_per_node: 8
    max_nodes: 4
    gpu_product: NVIDIA-H200
    node_selector: {nvidia.com/gpu.product: NVIDIA-H200}
    tolerations: [{key: nvidia.com/gpu, operator: Exists, effect: NoSchedule}]
    cpu: "96"
    memory: 1Ti
    shm_size: 64Gi
images:
  defaults:
    pytorch: example/pytorch:2.5.1
    trl: example/trl:1.10.0
    verl: example/verl:0.5.0
    nemo-rl: example/nemo-rl:0.4.0
    evalkit: example/evalkit:1.0.0
cluster:
  backend: kubernetes
  namespace: ml-team
  queue: team-a
  user: alice
  storage: {pvc: lab-storage, root: /mnt/tuneplane}
  repo: {url: "https://git.example.com/ml/render-lab.git", credentials_secret: lab-git}
  ingest: {endpoint: "http://ingest.tuneplane.svc:8080"}
  image_pull_secrets: [registry-creds]
  hf_token_secret: hf-token
  ttl_seconds_after_finished: 86400
"""

CONTRACT_REQUIRED = [
    "TUNEPLANE_WORK_DIR",
    "TUNEPLANE_EXP_DIR",
    "TUNEPLANE_OUT_DIR",
    "TUNEPLANE_FRAMEWORK",
    "TUNEPLANE_RECIPE",
    "TUNEPLANE_CLUSTER_NUM_NODES",
    "TUNEPLANE_CLUSTER_GPUS_PER_NODE",
]
CONTRACT_PROFILE = ["TUNEPLANE_CLUSTER_PROFILE"]  # the profile's name, after the shape it gave
CONTRACT_ORDER = (
    CONTRACT_REQUIRED
    + CONTRACT_PROFILE
    + [
        "TUNEPLANE_CLUSTER_PROCS_PER_NODE",
        "TUNEPLANE_JOB_ENABLED",
        "TUNEPLANE_JOB_ENDPOINT",
        "TUNEPLANE_JOB_RUN_ID",
        "TUNEPLANE_RUN_ID",
        "TUNEPLANE_RUN_DIR",
        "TUNEPLANE_STORAGE_ROOT",
        "TUNEPLANE_FRAMEWORK_VERSION",
        "TUNEPLANE_RUNTIME_ID",
        "TUNEPLANE_RECIPE_VERSION",
        "TUNEPLANE_RECIPE_DIGEST",
        "TUNEPLANE_CORE_VERSION",
        "TUNEPLANE_RECIPE_PLUGINS",
        "CLUSTER_PROFILE",  # StarForge's names, which its labs' scripts still read
        "NRL_RUN_ID",
        "TUNEPLANE_EXTERNAL_OBSERVABILITY_URL",
        "TUNEPLANE_JOB_MONITOR_INTERVAL",
        "HF_HOME",
    ]
)

GIT_ENV = {
    "GIT_AUTHOR_NAME": "Render Test",
    "GIT_AUTHOR_EMAIL": "render@example.org",
    "GIT_COMMITTER_NAME": "Render Test",
    "GIT_COMMITTER_EMAIL": "render@example.org",
    "GIT_CONFIG_NOSYSTEM": "1",
}


def catalog() -> Catalog:
    return load_catalog(packaged_catalog_root())


def make_lab(
    root: Path,
    experiments: dict[str, str] | None = None,
    settings: str = CLUSTER_SETTINGS,
    files: dict[str, str] | None = None,
) -> Lab:
    """A committed lab at `root` with the given experiments (name → method) and extra files."""
    new_lab(
        root,
        settings=settings,
        experiments=EXPERIMENTS if experiments is None else experiments,
        files=files,
    )
    return load_lab(root)


def commit_all(root: Path, message: str = "lab") -> str:
    """Everything in `root` committed as `message` with this module's fixed identity (its labs are committed
    by module-scoped fixtures, before a test's own identity is set); the new commit."""
    git(root, "add", "-A", env=GIT_ENV)
    git(root, "commit", "-q", "--allow-empty", "-m", message, env=GIT_ENV)
    return git(root, "rev-parse", "HEAD", env=GIT_ENV)


def request(experiment: str, profile: str = "h200", **fields: Any) -> RunRequest:
    """A run request with what each recipe needs to be admitted, unless `fields` say otherwise."""
    method = EXPERIMENTS.get(experiment, "")
    data: dict[str, Any] = {"experiment": experiment, "run_id": RUN_ID, "profile": profile}
    if method == "custom/custom":
        data |= {"image": CUSTOM_IMAGE, "observability_url": OBS_URL}
    elif method.startswith(("trl/", "verl/", "nemo-rl/")):
        data["inputs"] = dict(INPUTS)
    elif method == "evalkit/benchmark":
        data["inputs"] = {"model": INPUTS["model"]}
    data |= fields
    return RunRequest.model_validate(data)


def resolve_run(lab: Lab, req: RunRequest, **kw: Any) -> JobSpec:
    kw.setdefault("commit", COMMIT)
    kw.setdefault("dirty", False)
    kw.setdefault("env", {})
    return resolve(lab, req.experiment, req, catalog=catalog(), **kw)


def build(lab: Lab, req: RunRequest) -> tuple[JobSpec, LaunchPlan, list[dict[str, Any]]]:
    spec = resolve_run(lab, req)
    plan = compile_plan(spec)
    return spec, plan, render_manifests(spec, plan, lab.config)


def pod_templates(doc: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """Every pod template of a Job, JobSet or RayJob."""
    spec = doc["spec"]
    if doc["kind"] == "Job":
        yield spec["template"]
    elif doc["kind"] == "JobSet":
        for rjob in spec["replicatedJobs"]:
            yield rjob["template"]["spec"]["template"]
    else:
        cluster = spec["rayClusterSpec"]
        yield cluster["headGroupSpec"]["template"]
        for group in cluster["workerGroupSpecs"]:
            yield group["template"]


def main_container(template: dict[str, Any]) -> dict[str, Any]:
    return template["spec"]["containers"][0]


def env_entries(container: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {entry["name"]: entry for entry in container.get("env", [])}


def env_values(container: dict[str, Any]) -> dict[str, str]:
    return {e["name"]: e["value"] for e in container.get("env", []) if "value" in e}
