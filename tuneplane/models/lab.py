"""`tuneplane.yaml`: the lab marker and its settings (profiles, images, cluster)."""

import re
from typing import Annotated, Literal, Self

from pydantic import Field, field_validator, model_validator

from tuneplane.constants import CANCELLED, FAILED, SUCCEEDED, Phase
from tuneplane.models.backendkinds import DEFAULT_BACKEND, BackendName
from tuneplane.models.base import (
    GITHUB_LOGIN,
    LAB_NAME_RE,
    NAME,
    RetryPolicy,
    Strict,
    defaults_of,
    empty_dict,
    empty_list,
)

LAB_API = "tuneplane/project/v1"


class Toleration(Strict):
    key: str = ""
    operator: Literal["Exists", "Equal"] = "Exists"
    value: str = ""
    effect: Literal["", "NoSchedule", "PreferNoSchedule", "NoExecute"] = ""


class Profile(Strict):
    """A machine shape a run can ask for with `--profile NAME[:TOTAL_GPUS]`."""

    local: bool = Field(False, description="Runs on this machine through the local backend.")
    gpus_per_node: int = Field(8, ge=0, le=64, description="GPUs on one node of this profile.")
    max_nodes: int = Field(1, ge=1, le=1024, description="Most nodes one run may take.")
    default_gpus: int | None = Field(
        None, ge=0, description="Total GPUs when the profile has no `:N`; default one node."
    )
    gpu_product: str = Field("", description="GPU product label, e.g. NVIDIA-H200 (for people and the node selector).")
    node_selector: dict[str, str] = Field(default_factory=empty_dict, description="Kubernetes node selector.")
    tolerations: list[Toleration] = Field(default_factory=empty_list)
    cpu: str = Field("", description="CPU request per node, Kubernetes quantity.")
    memory: str = Field("", description="Memory request per node, Kubernetes quantity.")
    shm_size: str = Field("16Gi", description="Size of the memory-backed /dev/shm.")
    time_limit: int | None = Field(
        None,
        ge=60,
        le=365 * 24 * 3600,
        description="Seconds a run of this profile may take when its request sets no "
        "`timeout` (Slurm `--time`, Kubernetes `activeDeadlineSeconds`).",
    )
    retry: RetryPolicy | None = Field(None, description="This profile's retry policy; default the lab's `retry`.")


class Images(Strict):
    allowed_registries: list[str] | None = Field(
        None, description="Registry hosts custom images may come from; null allows any, [] refuses all."
    )
    require_digest: bool = Field(False, description="Refuse image references without @sha256:<digest>.")
    defaults: dict[str, str] = Field(default_factory=empty_dict, description="Per-framework default image.")


class Storage(Strict):
    pvc: str = Field("tuneplane-storage", description="PersistentVolumeClaim mounted at `root` in every pod.")
    root: str = Field("/mnt/tuneplane", description="Storage root inside pods.")
    local_root: str = Field("", description="Storage root for the local backend; default a per-user directory.")


class Repo(Strict):
    url: str = Field("", description="Clone URL of this lab repository, used by the job's init container.")
    credentials_secret: str = Field("", description="Secret with git credentials (keys `username`, `password`).")


class Ingest(Strict):
    endpoint: str = Field("", description="URL of the metrics ingest receiver reachable from jobs.")
    secret: str = Field("tuneplane-ingest", description="Secret holding the ingest HMAC key (key `secret`).")


SLURM_NAME_RE = r"^[A-Za-z0-9._-]*$"
SLURM_MEMORY_RE = r"^([0-9]+[KMGT]?)?$"
SLURM_PATH_RE = r"^(/[A-Za-z0-9._+@-]+)*/?$"


class SlurmProfile(Strict):
    """How one profile of `profiles:` is asked for on Slurm."""

    partition: str = Field(
        "", pattern=SLURM_NAME_RE, description="Partition for this profile; default `slurm.partition`."
    )
    qos: str = Field("", pattern=SLURM_NAME_RE, description="QOS for this profile; default `slurm.qos`.")
    gpu_request: Literal["gpus-per-node", "gres"] = Field(
        "gpus-per-node", description="Ask for GPUs with `--gpus-per-node=N` or `--gres=gpu:N`."
    )
    gpu_type: str = Field(
        "",
        pattern=SLURM_NAME_RE,
        description="GPU type as the cluster names it (`--gpus-per-node=h100:8`); empty for any.",
    )
    constraint: str = Field("", pattern=r"^[A-Za-z0-9._&|\[\]*-]*$", description="Node features (`--constraint`).")
    cpus_per_node: int | None = Field(None, ge=1, le=4096, description="CPUs per node; default `slurm.cpus_per_node`.")
    memory_per_node: str = Field(
        "",
        pattern=SLURM_MEMORY_RE,
        description="Memory per node (`--mem`, e.g. 500G); default `slurm.memory_per_node`.",
    )


class SlurmSoftware(Strict):
    """Where the job's software comes from."""

    kind: Literal["host", "container"] = Field(
        "host", description="host: a Python environment on the shared filesystem; container: the run's image."
    )
    python_env: str = Field(
        "",
        pattern=SLURM_PATH_RE,
        description="host: prefix of the environment with tuneplane and the framework "
        "(its bin/ goes first on PATH); empty: the nodes' own python3.",
    )
    runtime: Literal["pyxis", "apptainer"] = Field(
        "pyxis", description="container: pyxis/enroot (`srun --container-image`) or Apptainer (`apptainer exec`)."
    )
    mounts: list[str] = Field(
        default_factory=empty_list, description="container: extra `SRC:DST` mounts; the runs root is always mounted."
    )


class SlurmSettings(Strict):
    """`cluster.slurm`: how runs become Slurm batch jobs (used when `cluster.backend: slurm`)."""

    partition: str = Field(
        "", pattern=SLURM_NAME_RE, description="Partition (`--partition`); empty: the cluster's default."
    )
    account: str = Field("", pattern=SLURM_NAME_RE, description="Account to charge (`--account`).")
    qos: str = Field("", pattern=SLURM_NAME_RE, description="Quality of service (`--qos`).")
    cpus_per_node: int | None = Field(
        None, ge=1, le=4096, description="CPUs per node (`--cpus-per-task`, one task per node)."
    )
    memory_per_node: str = Field("", pattern=SLURM_MEMORY_RE, description="Memory per node (`--mem`, e.g. 500G).")
    profiles: dict[str, SlurmProfile] = Field(
        default_factory=empty_dict, description="Per-profile settings, by profile name."
    )
    software: SlurmSoftware = Field(default_factory=defaults_of(SlurmSoftware))
    runs_root: str = Field(
        "",
        pattern=SLURM_PATH_RE,
        description="Absolute path on the shared filesystem for run directories; default `cluster.storage.root`.",
    )
    requeue: bool = Field(
        False,
        description="Let Slurm requeue a job after a node failure or preemption "
        "(`--requeue`); the new attempt resumes from the newest complete "
        "checkpoint.",
    )
    limit_warning: int = Field(
        0,
        ge=0,
        le=3600,
        description="Seconds before the time limit at which the trainer is warned with "
        "SIGUSR1 so it can checkpoint (Slurm `--signal`); only processes "
        "that install a SIGUSR1 handler receive it. 0: no warning.",
    )
    hf_token_file: str = Field(
        "", pattern=SLURM_PATH_RE, description="A file only you can read holding the Hugging Face token (HF_TOKEN)."
    )
    conf: str = Field("", description="slurm.conf for the bot's Slurm commands; empty: $SLURM_CONF or Slurm's default.")
    command_timeout: float = Field(
        60,
        ge=1,
        le=600,
        description="Seconds a Slurm command may take before the controller counts as "
        "not answering (the bot retries on its next run).",
    )


class PodSecurity(Strict):
    """The pods' securityContext: Pod Security "restricted" compatible when `run_as_non_root` is true.

    Always rendered: no privilege escalation, every capability dropped, the runtime's default seccomp
    profile. `fs_group` makes the storage volume group-writable, so a non-root trainer can write
    `$TUNEPLANE_OUT_DIR` that the init container created.
    """

    run_as_non_root: bool = Field(False, description="Refuse to start a container whose user is root.")
    run_as_user: int | None = Field(None, ge=0, description="User id of every container; default the image's.")
    run_as_group: int | None = Field(None, ge=0, description="Primary group id of every container.")
    fs_group: int | None = Field(None, ge=0, description="Group that owns the mounted volumes (fsGroup).")

    @model_validator(mode="after")
    def _root_is_not_non_root(self) -> Self:
        if self.run_as_non_root and self.run_as_user == 0:
            raise ValueError("run_as_user 0 is root, which run_as_non_root refuses: pick a non-zero user id")
        return self


class LocalSettings(Strict):
    """Runs of the local backend, as the bot sees them."""

    lost_after: int = Field(
        900,
        ge=60,
        le=7 * 86400,
        description="Seconds without a heartbeat after which the bot marks a local run of "
        "another machine `Lost` (retried when the retry policy names Lost).",
    )


class Cluster(Strict):
    backend: BackendName = Field(DEFAULT_BACKEND, description="Where runs go.")
    namespace: str = Field("tuneplane", description="Kubernetes namespace of the jobs.")
    queue: str = Field("", description="Kueue LocalQueue name; empty for none.")
    storage: Storage = Field(default_factory=defaults_of(Storage))
    repo: Repo = Field(default_factory=defaults_of(Repo))
    ingest: Ingest = Field(default_factory=defaults_of(Ingest))
    slurm: SlurmSettings = Field(default_factory=defaults_of(SlurmSettings))
    local: LocalSettings = Field(default_factory=defaults_of(LocalSettings))
    image_pull_secrets: list[str] = Field(default_factory=empty_list)
    hf_token_secret: str = Field("", description="Secret with key `token` passed to jobs as HF_TOKEN.")
    ttl_seconds_after_finished: int = Field(
        7 * 24 * 3600, ge=0, description="Seconds a finished Job or JobSet (and its logs) is kept."
    )
    ray_cluster_ttl_seconds: int = Field(
        60,
        ge=0,
        le=3600,
        description="Seconds KubeRay keeps a finished RayJob's Ray cluster (its GPU nodes) "
        "before deleting it (the bot deletes the RayJob itself once it recorded the run's end). Kueue releases the "
        "quota at once, so keep this short.",
    )
    stuck_after: int = Field(
        600,
        ge=60,
        le=7 * 24 * 3600,
        description="Seconds a pod may wait on an image it cannot pull or a Secret it cannot read before "
        "its attempt ends (`ImagePull`, `ConfigError`) and the job is deleted to give its GPUs and quota back.",
    )
    init_image: str = Field(
        "alpine/git:2.45.2",
        description="Image of the checkout init container (needs sh and "
        "git); checked against images.allowed_registries and images.require_digest.",
    )
    security: PodSecurity = Field(default_factory=defaults_of(PodSecurity))
    gpu_watchdog: Literal["warn", "stop", "off"] = Field(
        "warn",
        description="What the job's launcher does when a run's processes occupy more GPUs on a node than "
        "granted (TUNEPLANE_CLUSTER_GPUS_PER_NODE): `warn` in the job log and the status, `stop` the run "
        "(attempt reason `GpuOveruse`), or `off`. Needs nvidia-smi in the image; reaches the job as "
        "TUNEPLANE_GPU_WATCHDOG.",
    )
    user: str = Field("", description="User name in output paths; default the git user or $USER.")

    @field_validator("gpu_watchdog", mode="before")
    @classmethod
    def _bare_off(cls, value: object) -> object:
        """YAML 1.1 reads a bare `off` as false: written here, it names the policy `off`."""
        return "off" if value is False else value


class Dataset(Strict):
    """A named data set every job of the lab sees, mounted where `<NAME>_DATA_DIR` says."""

    path: str = Field(
        "", description="Folder on the lab's storage, relative to the storage root (every backend mounts that storage)."
    )
    volume: str = Field(
        "", description="A PersistentVolumeClaim of its own, mounted read-only at /mnt/datasets/<name> on Kubernetes."
    )
    local_path: str = Field(
        "",
        description="Where the data set lies on machines that run jobs without "
        "Kubernetes (local backend, Slurm); default <storage root>/<path>.",
    )
    read_only: bool = Field(True, description="Mount the volume read-only.")


class Tool(Strict):
    """How the lab's CI (and its pre-commit hook, when local) installs tp."""

    requirement: str = Field(
        "",
        description="PEP 508 requirement pip installs in CI: tuneplane==VERSION, or "
        "'tuneplane @ git+URL@TAG-OR-COMMIT'. Empty: CI stops and says so.",
    )
    index_url: str = Field("", description="Package index to install from instead of PyPI; empty for PyPI.")


def _ended() -> list[Phase]:
    return [SUCCEEDED, FAILED, CANCELLED]


class Webhook(Strict):
    """Where the bot posts a message when a run changes phase. The URL is a secret: it comes from an
    environment variable or a file outside the lab, never from this file."""

    name: str = Field("", description="A name for the bot's log lines; default the variable or file.")
    format: Literal["json", "slack"] = Field(
        "json", description="json: the transition as a JSON object; slack: a Slack-compatible `text` message."
    )
    url_env: str = Field(
        "",
        pattern=r"^([A-Za-z_][A-Za-z0-9_]*)?$",
        description="Environment variable holding the webhook URL (e.g. a CI secret).",
    )
    url_file: str = Field("", description="File outside the lab holding the webhook URL (~ is your home).")
    phases: list[Phase] = Field(default_factory=_ended, description="The phases a run entering them is announced for.")
    experiments: list[str] = Field(
        default_factory=empty_list, description="Only runs of these experiments; empty for every experiment."
    )
    timeout_seconds: float = Field(
        5.0, gt=0, le=60, description="Most seconds one bot run spends on this webhook, retries included."
    )
    retries: int = Field(2, ge=0, le=5, description="Tries after the first within that time (5xx, timeouts).")

    @model_validator(mode="after")
    def _one_url_source(self) -> Self:
        if bool(self.url_env) == bool(self.url_file):
            raise ValueError(
                "give the webhook URL's source: exactly one of url_env (an environment variable) or "
                "url_file (a file outside the lab); the URL itself never goes into git"
            )
        for name in self.experiments:
            if not NAME.match(name):
                raise ValueError(f"experiments: {name!r} is not an experiment name")
        return self


class Notify(Strict):
    """`notify:`: messages when runs change phase, one per run and phase change, sent by the bot."""

    webhooks: list[Webhook] = Field(default_factory=empty_list, description="Webhooks to post to.")


class PeopleBudgets(Strict):
    """`budgets.people:`: GPU-hours one person may spend in a month. A person is a GitHub login, known only
    from what no pull request can write: at the gate, the pull request's author as the workflow reports
    it (`TUNEPLANE_PR_AUTHOR`); in `status/`, the author of the pull request that merged a run's request,
    which the bot records at submit (`submitted_for`)."""

    monthly_gpu_hours: float | None = Field(
        None, ge=0, description="GPU-hours each person may spend in a month unless `logins` names them; null: none."
    )
    logins: dict[str, Annotated[float, Field(ge=0)]] = Field(
        default_factory=empty_dict,
        description="GPU-hours one person may spend in a month, by GitHub login (any case).",
    )

    @model_validator(mode="after")
    def _login_names(self) -> Self:
        for login in self.logins:
            if not re.fullmatch(GITHUB_LOGIN, login):
                raise ValueError(f"logins: {login!r} is not a GitHub login")
        lowered = [login.lower() for login in self.logins]
        if len(set(lowered)) != len(lowered):
            raise ValueError("logins: a login is named twice (GitHub logins ignore case)")
        return self

    def limit(self, login: str) -> tuple[float, str] | None:
        """The monthly limit of `login` and the setting that holds it; None: no limit for them."""
        for name, hours in self.logins.items():
            if name.lower() == login.lower():
                return hours, f"budgets.people.logins.{name}"
        if self.monthly_gpu_hours is None:
            return None
        return self.monthly_gpu_hours, "budgets.people.monthly_gpu_hours"


class Budgets(Strict):
    """`budgets:`: GPU-hours a calendar month (UTC) may spend: the lab's, an experiment's, a person's
    (`people`). `tp validate --changed` refuses a change whose new run requests, estimated, would take
    the month's spending past one; raising a budget is a reviewed change of this file. Spent GPU-hours
    are the attempts the bot recorded in `status/`."""

    monthly_gpu_hours: float | None = Field(
        None, ge=0, description="GPU-hours the whole lab may spend in a month; null: no limit."
    )
    experiments: dict[str, Annotated[float, Field(ge=0)]] = Field(
        default_factory=empty_dict,
        description="GPU-hours one experiment may spend in a month, by experiment name.",
    )
    people: PeopleBudgets = Field(default_factory=defaults_of(PeopleBudgets))

    @model_validator(mode="after")
    def _experiment_limits(self) -> Self:
        for name in self.experiments:
            if not NAME.match(name):
                raise ValueError(f"experiments: {name!r} is not an experiment name")
        return self


class BotSettings(Strict):
    """`bot:`: how the CI bot writes its history."""

    metrics_every: int = Field(
        3600,
        ge=0,
        le=7 * 86400,
        description="Seconds between the bot's commits that only bring new metric points of running runs: "
        "a sync whose only news is metrics commits nothing until this long after the last such commit "
        "(phase changes, ends and new runs always commit at once, with the metrics held back). "
        "0 commits new metrics on every sync.",
    )


_local_profile = defaults_of(Profile, local=True, gpus_per_node=0)  # the profile of a lab that names none


class LabFile(Strict):
    """The lab marker `tuneplane.yaml`."""

    api_version: Literal["tuneplane/project/v1"] = Field(alias="apiVersion")
    name: str = Field(pattern=LAB_NAME_RE, description="The lab's name.")
    profiles: dict[str, Profile] = Field(default_factory=lambda: {"local": _local_profile()})
    retry: RetryPolicy = Field(
        default_factory=defaults_of(RetryPolicy),
        description="How often runs are tried; a profile or a run request may set its own.",
    )
    images: Images = Field(default_factory=defaults_of(Images))
    cluster: Cluster = Field(default_factory=defaults_of(Cluster))
    experiment_roots: list[str] = Field(
        default_factory=lambda: ["experiments"],
        description="Folders that hold experiments (each experiment is <root>/<name>/); names are unique across them.",
    )
    shared_code: list[str] = Field(
        default_factory=empty_list,
        description="Lab folders of Python code every job imports (e.g. common): each ships with the job "
        "and is importable by its folder name on every backend.",
    )
    datasets: dict[str, Dataset] = Field(
        default_factory=empty_dict, description="Named data sets; a job finds each at $<NAME>_DATA_DIR."
    )
    tool: Tool = Field(default_factory=defaults_of(Tool))
    notify: Notify = Field(default_factory=defaults_of(Notify), description="Messages when runs change phase.")
    budgets: Budgets = Field(
        default_factory=defaults_of(Budgets), description="GPU-hours a month may spend, lab-wide and per experiment."
    )
    bot: BotSettings = Field(default_factory=defaults_of(BotSettings), description="How the CI bot writes its history.")
