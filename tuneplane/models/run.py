"""Run requests (`runs/<exp>/<run-id>.yaml`, people review them) and status files (the bot writes them)."""

import re
from collections.abc import Mapping
from typing import Final, Literal

from pydantic import Field, model_validator

from tuneplane.constants import NAME_PATTERN, AttemptReason, Phase, Scalar
from tuneplane.models.backendkinds import backend_kind
from tuneplane.models.base import (
    GITHUB_LOGIN,
    NAME_RE,
    EditorSchema,
    RetryPolicy,
    Strict,
    defaults_of,
    empty_dict,
    empty_list,
)

RUN_API: Final = "tuneplane/run/v1"
STATUS_API: Final = "tuneplane/status/v1"
# UTC time, then random hex: 10 digits from this version on; 6-digit ids of older requests stay valid
RUN_ID_RE = r"^[0-9]{8}-[0-9]{6}-[0-9a-f]{6,12}$"
PROFILE_RE = rf"^{NAME_PATTERN}(:[0-9]+)?$"
RUN_ID = re.compile(RUN_ID_RE.removesuffix("$") + r"\Z")  # a whole run id, for Python code


class Inputs(Strict):
    model: str = ""
    train_data: str = ""
    validation_data: str = ""
    checkpoint: str = Field("", description="export/eval: checkpoint path under the run's out dir or storage.")
    checkpoint_format: str = ""
    data: str = Field("", description="eval: the evaluation data set.")


class RunRequest(Strict):
    """What `tp submit` writes and a reviewer approves; the bot turns it into a job."""

    api_version: Literal["tuneplane/run/v1"] = Field(RUN_API, alias="apiVersion")
    kind: Literal["RunRequest"] = "RunRequest"
    experiment: str = Field(pattern=NAME_RE)
    run_id: str = Field(
        pattern=RUN_ID_RE,
        description="UTC time, then random hex: YYYYMMDD-HHMMSS-<6 to 12 hex "
        "digits>; sorts by time, unique without coordination.",
    )
    operation: Literal["train", "export", "eval"] = "train"
    profile: str = Field(pattern=PROFILE_RE, description="NAME or NAME:TOTAL_GPUS.")
    image: str = ""
    observability_url: str = ""
    set: dict[str, Scalar] = Field(default_factory=empty_dict, description="Hyperparameter overrides.")
    inputs: Inputs = Field(default_factory=defaults_of(Inputs))
    timeout: int | None = Field(
        None,
        ge=60,
        le=365 * 24 * 3600,
        description="Seconds before the job is stopped (at most a year, as a profile's "
        "`time_limit`: every engine takes it).",
    )
    requested_by: str = ""
    message: str = ""
    created_at: str = ""
    commit: str = Field("", description="Pin the job to this commit (reruns); empty: the commit the bot sees.")
    rerun_of: str = ""
    cancel: bool = Field(False, description="Set to true and merge: the bot stops the job.")
    retry: RetryPolicy | None = Field(None, description="This run's retry policy; default its profile's or the lab's.")
    sweep: str = Field("", description="The sweep this run is a trial of (sweeps/<name>.yaml); empty for none.")


def _held_run_dir(backend: object, namespace: object) -> bool:
    """Whether a status written before `run_dir` kept its run directory in `namespace`: every backend
    whose runs are not pods did (a relative storage root included), and a Kubernetes namespace is a
    DNS label, so an absolute path never is one."""
    if not isinstance(namespace, str) or not namespace:
        return False
    return namespace.startswith("/") or not backend_kind(str(backend)).runs_in_pods


def recorded_run_dir(backend: Mapping[str, object]) -> str:
    """The run directory a status file's raw `backend` object names, "" for none: its `run_dir`, or in
    a status written before that field, an absolute `namespace` (where the run directory was kept)."""
    run_dir = backend.get("run_dir")
    if isinstance(run_dir, str) and run_dir:
        return run_dir
    namespace = backend.get("namespace")
    return namespace if isinstance(namespace, str) and _held_run_dir(backend.get("backend"), namespace) else ""


class BackendObject(Strict):
    """The engine's object a run became: a Kubernetes object in its namespace, or a run kept in a run
    directory (local and Slurm runs)."""

    backend: str
    kind: str
    name: str
    namespace: str = Field(
        "", description="The object's Kubernetes namespace; empty for a run kept in a run directory."
    )
    run_dir: str = Field("", description="The run's directory (local and Slurm runs); empty for a Kubernetes object.")
    uid: str = ""

    @model_validator(mode="before")
    @classmethod
    def _run_dir_in_namespace(cls, data: object) -> object:
        """A status written before `run_dir` kept the run directory in `namespace`: read as `run_dir`."""
        if (
            isinstance(data, dict)
            and not data.get("run_dir")
            and _held_run_dir(data.get("backend"), data.get("namespace"))
        ):
            return {**data, "namespace": "", "run_dir": data["namespace"]}
        return data


class Provenance(Strict):
    commit: str = ""
    dirty: bool = False
    recipe: str = ""
    recipe_digest: str = ""
    plugin_digests: dict[str, str] = Field(default_factory=empty_dict)
    image: str = ""
    image_digest: str = ""
    jobspec_digest: str = ""
    tool_version: str = ""


class Artifact(Strict):
    kind: str
    path: str
    format: str = ""
    size_bytes: int = 0
    step: int | None = None


class Transition(Strict):
    phase: Phase
    at: str


class Attempt(Strict):
    """One try of a run: an engine's requeue or pod replacement, or the bot's retry, each starts one."""

    number: int = Field(ge=1, description="1 for the first attempt, counted across engine and bot retries.")
    started_at: str | None = None
    finished_at: str | None = None
    where: list[str] = Field(default_factory=empty_list, description="Nodes or pods the attempt ran on.")
    exit_code: int | None = None
    signal: int | None = Field(None, description="The signal that ended the trainer, when one did.")
    reason: AttemptReason | Literal[""] = Field("", description="Why it ended; empty while under way.")
    message: str = Field("", description="What a person can act on: the trainer's own last error line.")
    failed_node: str = ""
    failed_rank: int | None = None
    log_tail: list[str] = Field(default_factory=empty_list, description="The failing rank's last log lines.")
    gpus: int = Field(0, ge=0, description="GPUs the attempt held.")
    gpu_seconds: float = Field(0.0, ge=0, description="GPUs held times the attempt's wall time.")
    object: str = Field("", description="The backend object that ran it (the bot's retries each make one).")


class SubmittedFor(Strict):
    """Whom the bot submitted a run for: the pull request that merged its request, as the bot's workflow
    asked GitHub at submit time. The bot writes it; a run request cannot (its `requested_by` is the
    pull request's own word). Per-person budgets count the run's GPU-hours against `login`."""

    commit: str = Field(description="The commit of the default branch that added the run request.")
    pull_request: int | None = Field(None, ge=1, description="The pull request that merged that commit.")
    login: str = Field(
        "", pattern=rf"^({GITHUB_LOGIN})?$", description="The GitHub login of its author (empty: none known)."
    )


class RunStatus(Strict):
    """`status/<exp>/<run-id>.json`: written by the bot only."""

    api_version: Literal["tuneplane/status/v1"] = Field(STATUS_API, alias="apiVersion")
    kind: Literal["RunStatus"] = "RunStatus"
    schema_ref: EditorSchema = None
    experiment: str
    run_id: str
    method: str = ""
    operation: str = "train"
    profile: str = ""
    phase: Phase
    reason: str = ""
    message: str = ""
    submitted_at: str | None = None
    started_at: str | None = None
    finished_at: str | None = None
    exit_code: int | None = None
    backend: BackendObject | None = None
    provenance: Provenance = Field(default_factory=defaults_of(Provenance))
    out_dir: str = ""
    artifacts: list[Artifact] = Field(default_factory=empty_list)
    metrics: dict[str, float] = Field(default_factory=empty_dict, description="Last value of each primary metric.")
    metric_history: dict[str, list[float]] = Field(
        default_factory=empty_dict, description="Recent values, for sparklines."
    )
    history: list[Transition] = Field(default_factory=empty_list)
    hyperparameters: dict[str, Scalar] = Field(
        default_factory=empty_dict,
        description="The run's effective hyperparameters: config.yaml merged with the request's `--set` as the "
        "job was started with them, nested keys joined with dots; scalars only, bounded in count and length.",
    )
    hyperparameters_left_out: list[str] = Field(
        default_factory=empty_list,
        description="The dotted keys `hyperparameters` does not keep (a list or null value, or past the bound), "
        "the first few named; the run's commit has them all.",
    )
    attempts: list[Attempt] = Field(default_factory=empty_list, description="Every attempt, oldest first.")
    retry: RetryPolicy | None = Field(
        None, description="The retry policy the run was submitted under (none: the default policy)."
    )
    submitted_for: SubmittedFor | None = Field(
        None, description="The pull request and author the bot submitted the run for (none: not known to the bot)."
    )
