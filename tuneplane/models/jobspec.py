"""The JobSpec (`tuneplane/v1`, `TrainingJob`): everything a run needs, resolved and pinned.

`resolve` builds it from the experiment, its lock, the run request and the lab; every later stage
(compile, render, the launcher in the job) reads only this. Unknown fields are refused at every level.
"""

from typing import Any, Literal

from pydantic import Field

from tuneplane.constants import Scalar
from tuneplane.models.base import RetryPolicy, Strict, defaults_of, empty_dict, empty_list


class JobMeta(Strict):
    name: str = Field(description="Deterministic DNS-1035 object name, at most 40 characters.")
    experiment: str
    run_id: str
    lab: str
    user: str


class ArtifactRef(Strict):
    """One output the platform looks for under the out dir (a recipe `artifacts` glob)."""

    kind: Literal["checkpoint", "log", "export", "evaluation"]
    pattern: str
    format: str = ""


class AdapterRef(Strict):
    """The recipe's adapter options, pinned with the job so compile reads only the JobSpec."""

    launcher: str = ""
    orchestrator: str = ""
    config_mode: str = ""
    bindings: dict[str, str] = Field(default_factory=empty_dict, description="Config keys of model/data inputs.")
    platform_owned: list[str] = Field(default_factory=empty_list, description="Dotted config keys the platform sets.")
    required_inputs: list[str] = Field(default_factory=empty_list, description="Inputs a train run must name.")
    topology: dict[str, str | int] = Field(
        default_factory=empty_dict, description="min_gpus, and the config keys of the node shape."
    )
    lifecycle: dict[str, str] = Field(default_factory=empty_dict, description="Operation → entrypoint (export, eval).")
    artifacts: list[ArtifactRef] = Field(default_factory=empty_list)
    native_metrics: list[dict[str, str]] = Field(
        default_factory=empty_list,
        description="The collector's outputs: the recipe's `metrics.native` and the experiment's "
        "(experiment.yaml), merged (left out when empty).",
    )


class RecipeRef(Strict):
    name: str
    version: str
    digest: str
    manifest_digest: str
    template_digest: str
    entrypoint_kind: Literal["module", "file", "experiment"]
    entrypoint: str
    entrypoint_flags: list[str] = Field(
        default_factory=empty_list,
        exclude_if=lambda v: not v,
        description="The flags the entrypoint accepts (the recipe's `entrypoint.flags`); empty: all the "
        "adapter writes.",
    )
    plugins: list[str] = Field(default_factory=empty_list)
    observability: Literal["platform", "external"]
    adapter: AdapterRef = Field(default_factory=defaults_of(AdapterRef))


class FrameworkRef(Strict):
    kind: str
    version: str
    runtime_id: str = ""
    observability_url: str = ""


class InputsRef(Strict):
    model: str = ""
    train_data: str = ""
    validation_data: str = ""
    checkpoint: str = ""
    checkpoint_format: str = ""
    data: str = ""


class Resources(Strict):
    profile: str
    nodes: int = Field(ge=1)
    gpus_per_node: int = Field(ge=0)
    local: bool = False
    procs_per_node: int = Field(
        0,
        ge=0,
        exclude_if=lambda v: v == 0,
        description="Processes per node when they are not one per GPU (a CPU run, "
        "`--profile local:N`); 0 means one per GPU.",
    )


class LockedPluginRef(Strict):
    """A plugin the experiment locks, as the job gets it: its lock entry with the fields of its plugin.yaml."""

    id: str
    name: str
    version: str
    digest: str
    capability: str
    entrypoint: str = ""
    load: Literal["eager", "deferred"] = "eager"
    requires_core: str = ""
    source: str = Field("", description="The plugin's folder in the lab (plugins/<name> or inside a group).")


class Paths(Strict):
    """Where things are inside the job (the cluster's storage root, or the local one)."""

    storage_root: str
    run_dir: str
    work_dir: str
    exp_dir: str
    out_dir: str
    hf_home: str = Field("", description="The Hugging Face cache the job uses; it outlives the run.")


class DatasetRef(Strict):
    """A lab data set as this run sees it: `<NAME>_DATA_DIR` points at `dir`."""

    name: str
    variable: str
    dir: str
    claim: str = Field("", description="PersistentVolumeClaim mounted at `dir` (Kubernetes); empty: on storage.")
    read_only: bool = True


class JobProvenance(Strict):
    # a commit id or nothing: it is written into batch-script comments and annotations verbatim
    commit: str = Field(pattern=r"^([0-9a-f]{4,64})?$", description="The commit the job runs (hex), empty if none.")
    dirty: bool = False
    config_sha256: str = ""
    tool_version: str
    requested_by: str = ""


class JobSpecBody(Strict):
    operation: Literal["train", "export", "eval"] = "train"
    recipe: RecipeRef
    framework: FrameworkRef
    image: str = ""
    hyperparams: dict[str, Scalar] = Field(
        default_factory=empty_dict,
        description="Validated values keyed by dotted config path (custom: the `--set` keys as written).",
    )
    plugin_params: dict[str, list[str]] = Field(
        default_factory=empty_dict,
        exclude_if=lambda v: not v,
        description="The hyperparameters that are the locked algorithm plugins' alone: key → the plugins "
        "(`<owner>/<name>@<version>`) it is for. They reach install(params) with the rest of "
        "`hyperparams`, and never the trainer's config or command line.",
    )
    inputs: InputsRef = Field(default_factory=defaults_of(InputsRef))
    resources: Resources
    plugins: list[LockedPluginRef] = Field(default_factory=empty_list)
    timeout_seconds: int | None = None
    retry: RetryPolicy = Field(
        default_factory=defaults_of(RetryPolicy),
        description="The run's retry policy, resolved from its request, profile and lab.",
    )
    paths: Paths
    shared_code: list[str] = Field(
        default_factory=empty_list, description="Lab folders of shared code, importable by their names."
    )
    datasets: list[DatasetRef] = Field(default_factory=empty_list)


class JobSpec(Strict):
    api_version: Literal["tuneplane/v1"] = Field("tuneplane/v1", alias="apiVersion")
    kind: Literal["TrainingJob"] = "TrainingJob"
    metadata: JobMeta
    spec: JobSpecBody
    provenance: JobProvenance

    def to_json_dict(self) -> dict[str, Any]:
        data = self.model_dump(mode="json", by_alias=True)
        adapter = data["spec"]["recipe"].get("adapter") or {}
        if not adapter.get("native_metrics"):
            adapter.pop("native_metrics", None)  # JobSpecs (and their digests) without it stay as they were
        if self.spec.retry == RetryPolicy():
            data["spec"].pop("retry")  # likewise: a run under the default policy keeps its earlier digest
        return data
