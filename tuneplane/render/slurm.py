"""Slurm batch scripts: JobSpec + LaunchPlan + lab settings → the exact script `sbatch` runs. Pure.

Every decision is made here; `templates/slurm/batch.sh.j2` loops over the lists prepared below and
passes every value through the `sh` filter (shell quoting), and every `#SBATCH` directive is checked
against a strict character set first, so nothing a person wrote can add a line or a command. This
stage is pure: whoever renders for a person or for sbatch parses the result back with `bash -n`
(`backends.slurm.commands.check_script`).

The LaunchPlan is the one the adapters compile for Kubernetes. Only where ranks meet differs: the
plan names the JobSet's first pod, which does not exist on Slurm, so the launch document carries
placeholders that the script fills with the first node's address (from `scontrol show node`) and a
port derived from the job id.
"""

from __future__ import annotations

import re

from tuneplane.constants import (
    AFTER_JOB_UPLOAD_SECONDS,
    CONFIG_ERROR_EXIT,
    GPUS_PER_NODE_ENV,
    HF_TOKEN,
    JOB_TOKEN,
    NUM_NODES_ENV,
)
from tuneplane.errors import UsageError
from tuneplane.models.jobspec import JobSpec
from tuneplane.models.lab import LabFile, SlurmProfile, SlurmSettings
from tuneplane.plan.environment import job_env
from tuneplane.plan.launchplan import LaunchPlan
from tuneplane.plan.names import RENDEZVOUS_PORT, rendezvous_host
from tuneplane.render.manifests import jobspec_document, launcher_command
from tuneplane.runtime.jsonvalue import JSONObject
from tuneplane.runtime.records import FrozenRecord, field

ADDR_PLACEHOLDER = "@TP_MASTER_ADDR@"
PORT_PLACEHOLDER = "@TP_MASTER_PORT@"
PORT_BASE, PORT_SPAN = 20000, 20000  # the job's rendezvous port: PORT_BASE + job id % PORT_SPAN
PORT_FLAGS = ("--main_process_port", "--master_port", "--master-port", "--rdzv-port")
STATE_DIR = ".tuneplane/slurm"  # under the run dir: each attempt's markers, the job id, the submit lock
TOKEN_FILE = ".tuneplane/secrets/job-token"  # under the run dir, mode 0600
LAUNCH_DOCUMENT = ".tuneplane/jobspec.slurm.json"  # under the work dir; the script fills it in
RUNTIME_ENV = frozenset(
    {"MASTER_ADDR", "MASTER_PORT", "PET_MASTER_ADDR", "PET_MASTER_PORT", NUM_NODES_ENV, GPUS_PER_NODE_ENV}
)  # the script sets these from the allocation
COMMENT_PREFIX = "tuneplane-run="
# The job starts with no environment of the submitter (--export=NONE): its PATH starts from this.
BASE_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
# srun --wait: seconds the other ranks may run on once one rank has ended, to stop a rank that hangs
# after its peers left. Ranks end apart: node rank zero uploads what the SDK left unsent (up to
# AFTER_JOB_UPLOAD_SECONDS) and writes its last files; a grace no longer than that upload lets srun
# kill it mid-upload, and a finished training reads Failed (exit 143).
STEP_WAIT = int(AFTER_JOB_UPLOAD_SECONDS) + 240
LIMIT_WARNING_ENV = "TUNEPLANE_LIMIT_WARNING_SECONDS"  # set when the trainer is warned before the limit
WARNING_SIGNAL = "USR1"

_DIRECTIVE_VALUE = re.compile(r"^[A-Za-z0-9._:/%+=,@-]+$")
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


class BatchJob(FrozenRecord):
    """One run as Slurm gets it."""

    job_name: str
    comment: str
    script: str  # the batch script
    launch_document: JSONObject  # `.tuneplane/jobspec.slurm.json`, with rendezvous placeholders
    sources: dict[str, str] = field(default_factory=dict)  # sbatch option → tuneplane.yaml setting
    image: str = ""  # the image the job runs in; "" when the nodes' own environment runs it (host)
    note: str = ""  # what a person should know about the script, e.g. that --image is not used


def job_comment(run_id: str) -> str:
    return f"{COMMENT_PREFIX}{run_id}"


def slurm_settings(lab: LabFile) -> SlurmSettings:
    return lab.cluster.slurm


def render_batch(spec: JobSpec, plan: LaunchPlan, lab: LabFile) -> BatchJob:
    """The batch script of one run and its launch document; raises UsageError on an unusable setting."""
    from tuneplane.render.templating import render  # lazy: Jinja2 loads only when a script is rendered

    if spec.spec.resources.local:
        raise UsageError(
            f"{spec.metadata.experiment}/{spec.metadata.run_id} runs on this machine "
            f"(profile {spec.spec.resources.profile!r}): it has no batch script",
            hint="use a cluster profile, or set cluster.backend: slurm in tuneplane.yaml",
        )
    settings = slurm_settings(lab)
    items = directive_items(spec, settings)
    directives = [_directive(option, value, where) for option, value, where in items]
    context = {
        "directives": directives,
        "run_id": spec.metadata.run_id,
        "experiment": spec.metadata.experiment,
        "commit": spec.provenance.commit or "(uncommitted)",
        "env": _env(spec, plan, settings, lab.cluster.gpu_watchdog),
        "state_dir": f"{spec.spec.paths.run_dir}/{STATE_DIR}",
        "port_base": PORT_BASE,
        "config_exit": CONFIG_ERROR_EXIT,
        "port_span": PORT_SPAN,
        "secret_files": _secret_files(spec, lab),
        "ingest": {"endpoint": lab.cluster.ingest.endpoint, "run_id": spec.metadata.run_id}
        if lab.cluster.ingest.endpoint
        else None,
        "software": _software_lines(settings),
        "base_path": BASE_PATH,
        "step_wait": STEP_WAIT,
        "srun_flags": _srun_flags(spec, settings),
        "command": _command(spec, settings),
    }
    script = render("slurm/batch.sh.j2", **context)
    return BatchJob(
        job_name=spec.metadata.name,
        comment=job_comment(spec.metadata.run_id),
        script=script,
        launch_document=launch_document(spec, plan),
        sources={option: where for option, _value, where in items},
        image="" if settings.software.kind == "host" else spec.spec.image,
        note=image_note(spec, lab),
    )


def directive_items(spec: JobSpec, settings: SlurmSettings) -> list[tuple[str, str, str]]:
    res, paths = spec.spec.resources, spec.spec.paths
    profile = settings.profiles.get(res.profile, SlurmProfile())
    out: list[tuple[str, str, str]] = [  # (option, value, the setting it comes from)
        ("--job-name", spec.metadata.name, "the run's object name"),
        ("--comment", job_comment(spec.metadata.run_id), "the run id"),
        ("--nodes", str(res.nodes), f"profiles.{res.profile} (the run's GPU count over its gpus_per_node)"),
        ("--ntasks-per-node", "1", "one launcher per node"),
        ("--chdir", paths.run_dir, "cluster.slurm.runs_root"),
        ("--output", f"{paths.run_dir}/logs/slurm-%j.out", "cluster.slurm.runs_root"),
        ("--open-mode", "append", "the log survives a requeue"),
    ]
    partition = profile.partition or settings.partition
    for option, value, where in (
        ("--partition", partition, _setting(res.profile, profile.partition, "partition")),
        ("--account", settings.account, "cluster.slurm.account"),
        ("--qos", profile.qos or settings.qos, _setting(res.profile, profile.qos, "qos")),
        ("--constraint", profile.constraint, f"cluster.slurm.profiles.{res.profile}.constraint"),
    ):
        if value:
            out.append((option, value, where))
    if res.gpus_per_node:
        out.append(_gpu_directive(res.gpus_per_node, profile, res.profile))
    cpus = profile.cpus_per_node or settings.cpus_per_node
    if cpus:
        out.append(("--cpus-per-task", str(cpus), _setting(res.profile, profile.cpus_per_node, "cpus_per_node")))
    memory = profile.memory_per_node or settings.memory_per_node
    if memory:
        out.append(("--mem", memory, _setting(res.profile, profile.memory_per_node, "memory_per_node")))
    out.append(("--export", "NONE", "the job gets only the environment contract"))
    limit = spec.spec.timeout_seconds
    if limit:
        out.append(("--time", slurm_time(limit), "the run request's timeout, else profiles.<name>.time_limit"))
    lead = warning_lead(limit, settings.limit_warning)
    if lead:
        out.append(("--signal", f"B:{WARNING_SIGNAL}@{lead}", "cluster.slurm.limit_warning"))
    out.append(("--requeue" if settings.requeue else "--no-requeue", "", "cluster.slurm.requeue"))
    return out


def warning_lead(limit: int | None, asked: int) -> int:
    """Seconds before the limit the warning comes: what was asked, kept shorter than the limit; 0: none."""
    if not asked or not limit:
        return 0
    return max(1, min(asked, limit // 2))


def _setting(profile: str, override: object, key: str) -> str:
    return f"cluster.slurm.profiles.{profile}.{key}" if override else f"cluster.slurm.{key}"


def _gpu_directive(gpus: int, profile: SlurmProfile, name: str) -> tuple[str, str, str]:
    where = f"profiles.{name}.gpus_per_node (asked as {{}} by cluster.slurm.profiles.{name}.gpu_request)"
    typed = f"{profile.gpu_type}:{gpus}" if profile.gpu_type else str(gpus)
    if profile.gpu_request == "gres":
        return "--gres", f"gpu:{typed}", where.format("--gres")
    return "--gpus-per-node", typed, where.format("--gpus-per-node")


def _directive(option: str, value: str, where: str) -> str:
    if not value:
        return option
    if not _DIRECTIVE_VALUE.match(value):
        raise UsageError(
            f"{where}: {value!r} cannot be passed to sbatch as {option}",
            hint="use letters, digits and . _ : / % + = , @ - only (no spaces or quotes)",
        )
    return f"{option}={value}"


def slurm_time(seconds: int) -> str:
    """`--time` as minutes:seconds (Slurm's `M:S` form), rounded up to whole seconds."""
    minutes, rest = divmod(int(seconds), 60)
    return f"{minutes}:{rest:02d}"


def _env(spec: JobSpec, plan: LaunchPlan, settings: SlurmSettings, gpu_watchdog: str) -> list[tuple[str, str]]:
    out = []
    lead = warning_lead(spec.spec.timeout_seconds, settings.limit_warning)
    extra = {LIMIT_WARNING_ENV: str(lead)} if lead else {}
    for name, value in {**job_env(spec, plan.env, gpu_watchdog=gpu_watchdog), **extra}.items():
        if name in RUNTIME_ENV:
            continue
        if not _ENV_NAME.match(name):
            raise UsageError(
                f"environment variable name {name!r} is not valid in a shell",
                hint="this is a bug in an adapter; report it",
            )
        out.append((name, value))
    return out


def _secret_files(spec: JobSpec, lab: LabFile) -> list[tuple[str, str]]:
    files = []
    if lab.cluster.ingest.endpoint:
        files.append((JOB_TOKEN, f"{spec.spec.paths.run_dir}/{TOKEN_FILE}"))
    if lab.cluster.slurm.hf_token_file:
        files.append((HF_TOKEN, lab.cluster.slurm.hf_token_file))
    return files


def _software_lines(settings: SlurmSettings) -> list[str]:
    from tuneplane.render.templating import shell_quote  # lazy: as render above

    software = settings.software
    if software.kind == "host" and software.python_env:
        env = software.python_env.rstrip("/")
        return [f"export VIRTUAL_ENV={shell_quote(env)}", f'export PATH={shell_quote(env + "/bin")}:"$PATH"']
    return []


def _srun_flags(spec: JobSpec, settings: SlurmSettings) -> list[str]:
    software = settings.software
    if software.kind != "container" or software.runtime != "pyxis":
        return []
    root = spec.spec.paths.storage_root
    mounts = ",".join([f"{root}:{root}", *software.mounts])
    return [
        f"--container-image={pyxis_image(spec.spec.image)}",
        f"--container-mounts={mounts}",
        f"--container-workdir={spec.spec.paths.work_dir}",
    ]


def pyxis_image(image: str) -> str:
    """An image reference as pyxis/enroot expect it: `registry#repository:tag`, the registry host split off
    with `#` (a plain `host/repo` would be read as a Docker Hub repository named `host/repo`)."""
    if "://" in image or "#" in image:
        return image.split("://", 1)[-1]
    first, sep, rest = image.partition("/")
    if sep and ("." in first or ":" in first or first == "localhost"):
        return f"{first}#{rest}"
    return image


def image_note(spec: JobSpec, lab: LabFile) -> str:
    """Why the run's image is not what runs ('' when it is): with `software.kind: host` the nodes' own
    Python environment runs the job and `--image` is accepted and ignored."""
    if slurm_settings(lab).software.kind == "host" and spec.spec.image:
        return (
            f"the image {spec.spec.image} was not used: cluster.slurm.software.kind is host, so the job ran "
            "in the nodes' Python environment"
        )
    return ""


def _command(spec: JobSpec, settings: SlurmSettings) -> list[str]:
    software = settings.software
    if software.kind == "host":
        python = f"{software.python_env.rstrip('/')}/bin/python3" if software.python_env else "python3"
        return [python, "-m", "tuneplane.launcher"]
    launcher = launcher_command(spec)
    if software.runtime == "apptainer":
        root = spec.spec.paths.storage_root
        binds = ",".join([f"{root}:{root}", *software.mounts])
        image = spec.spec.image if "://" in spec.spec.image else f"docker://{spec.spec.image}"
        return ["apptainer", "exec", "--nv", "--bind", binds, "--pwd", spec.spec.paths.work_dir, image, *launcher]
    return launcher


def launch_document(spec: JobSpec, plan: LaunchPlan) -> JSONObject:
    """`.tuneplane/jobspec.json` as on Kubernetes, with the rendezvous left for the script to fill in."""
    return jobspec_document(spec, plan, argv=rendezvous_argv(list(plan.argv), rendezvous_host(spec)))


def rendezvous_argv(argv: list[str], host: str) -> list[str]:
    """argv with the Kubernetes rendezvous host and port replaced by the script's placeholders."""
    out: list[str] = []
    for index, arg in enumerate(argv):
        arg = arg.replace(f"{host}:{RENDEZVOUS_PORT}", f"{ADDR_PLACEHOLDER}:{PORT_PLACEHOLDER}")
        arg = arg.replace(host, ADDR_PLACEHOLDER)
        if arg == str(RENDEZVOUS_PORT) and index and argv[index - 1] in PORT_FLAGS:
            arg = PORT_PLACEHOLDER
        out.append(arg)
    return out
