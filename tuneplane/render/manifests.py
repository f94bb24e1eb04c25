"""The Kubernetes manifests one run becomes: a batch Job for one node, a JobSet for several, a RayJob
for a Ray driver, each rendered from its Jinja template, parsed back and validated before it leaves.

Also what every backend's job carries from here: `.tuneplane/jobspec.json` (`jobspec_document`) and
the trainer's command that starts the launcher (`launcher_command`).
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Callable, Sequence

from tuneplane import __version__
from tuneplane.constants import (
    CONFIG_ERROR_EXIT,
    JOB_TOKEN,
    JOBSPEC_ENV,
    NODE_RANK_ENV,
    OUT_DIR_ENV,
    RUN_DIR_ENV,
    WORK_DIR_ENV,
)
from tuneplane.errors import UsageError
from tuneplane.lab.yamlio import yaml
from tuneplane.models.base import RetryPolicy
from tuneplane.models.jobspec import JobSpec
from tuneplane.models.lab import LabFile, Profile
from tuneplane.plan.environment import job_env
from tuneplane.plan.launchplan import LaunchPlan
from tuneplane.plan.names import MANAGED_BY, REPLICATED_JOB, label_value, secret_name
from tuneplane.render.quantities import scale_cpu, scale_memory, share
from tuneplane.render.schemacheck import validate_manifest
from tuneplane.render.scripts import BOOTSTRAP, CHECKOUT_SCRIPT
from tuneplane.render.templating import render
from tuneplane.runtime.digest import canonical_json, sha256_bytes
from tuneplane.runtime.jsonvalue import JSONObject, JSONValue
from tuneplane.runtime.records import FrozenRecord

TRAINER = "trainer"
CHECKOUT = "checkout"  # the init container that clones the lab at the run's commit
COMPLETION_INDEX = "metadata.annotations['batch.kubernetes.io/job-completion-index']"
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
STORAGE_VOLUME = "storage"
SHM_VOLUME = "dshm"
RAY_HEAD_CPU = "4"
RAY_HEAD_MEMORY = "16Gi"
INIT_REQUESTS = (("cpu", "100m"), ("memory", "256Mi"))
SUBMITTER = "ray-job-submitter"  # KubeRay's name for the container that runs `ray job submit`
# KubeRay's own default: a submitter whose log stream dropped re-attaches to the running driver instead of
# failing the RayJob (with 0, one dropped stream makes KubeRay kill a healthy run)
SUBMITTER_BACKOFF = 2
SUBMITTER_LIMITS = (("cpu", "1"), ("memory", "1Gi"))
SUBMITTER_REQUESTS = (("cpu", "500m"), ("memory", "512Mi"))
SUBMITTER_WAIT_TRIES = 150  # 2 s apart: a dashboard that has not answered in 5 minutes fails this submitter
# The submitter's command, ours rather than KubeRay's: KubeRay >= 1.7 waits for the dashboard with
# `until python -c …`, which never ends in an image with `python3` but no `python`. The `ray` CLI the
# submitter needs anyway runs under whatever Python its image has; the loop is bounded, so a dashboard
# that never answers fails the submitter (and, past its retries, the RayJob) instead of holding the GPUs.
# KubeRay keeps a command it finds and only adds RAY_DASHBOARD_ADDRESS and RAY_JOB_SUBMISSION_ID.
SUBMIT_SCRIPT = (
    'address="http://${{RAY_DASHBOARD_ADDRESS#http://}}"; tries=0; '
    'until ray job list --address "$address" >/dev/null 2>&1; do '
    'tries=$((tries + 1)); if [ "$tries" -ge {tries} ]; then '
    'echo "the Ray dashboard at $address did not answer; giving up" >&2; exit 1; fi; '
    'echo "Waiting for the Ray dashboard at $address ..."; sleep 2; done; '
    'if ! ray job status --address "$address" "$RAY_JOB_SUBMISSION_ID" >/dev/null 2>&1; then '
    'ray job submit --address "$address" --no-wait --submission-id "$RAY_JOB_SUBMISSION_ID" -- {entrypoint}; fi; '
    'exec ray job logs --address "$address" --follow "$RAY_JOB_SUBMISSION_ID"'
)
ROLE_LABEL = "tuneplane.dev/role"
# What the templates are given: plain values and (key, value) pairs, read by Jinja, never by Python
Fields = dict[str, object]


class _Facts(FrozenRecord):
    """Values several parts of the manifest repeat, computed once per run."""

    digest: str  # of the JobSpec
    document: str  # .tuneplane/jobspec.json, compact


def _facts(spec: JobSpec, plan: LaunchPlan) -> _Facts:
    body = spec.to_json_dict()
    document = dict(body, launch=_launch(plan))
    return _Facts(sha256_bytes(canonical_json(body)), canonical_json(document).decode("utf-8"))


def _launch(plan: LaunchPlan, argv: list[str] | None = None) -> JSONObject:
    return {
        "argv": list[JSONValue](plan.argv if argv is None else argv),
        "mode": plan.mode,
        "cwd": plan.cwd,
        "in_process": plan.in_process,
    }


def sdk_root(spec: JobSpec) -> str:
    return f"{spec.spec.paths.storage_root}/sdk/{__version__}"


def jobspec_document(spec: JobSpec, plan: LaunchPlan, argv: list[str] | None = None) -> JSONObject:
    """`.tuneplane/jobspec.json`: the JobSpec plus how the launcher starts the entrypoint (`argv` in place
    of the plan's where the backend fills in what only the job knows, as Slurm does the rendezvous)."""
    return dict(spec.to_json_dict(), launch=_launch(plan, argv))


def launcher_command(spec: JobSpec) -> list[str]:
    """The trainer container's command: start tuneplane.launcher (image or SDK directory)."""
    mode = "prepend" if spec.spec.recipe.observability == "platform" else "keep"
    return ["python3", "-c", BOOTSTRAP, sdk_root(spec), mode]


def manifest_kind(plan: LaunchPlan) -> str:
    if plan.mode == "ray-driver":
        return "RayJob"
    return "JobSet" if plan.nodes > 1 else "Job"


def render_manifests(spec: JobSpec, plan: LaunchPlan, lab_settings: LabFile) -> list[JSONObject]:
    """The manifests of one run, each parsed back from YAML and validated before it is returned."""
    return render_documents(spec, plan, lab_settings)[1]


def render_documents(spec: JobSpec, plan: LaunchPlan, lab_settings: LabFile) -> tuple[str, list[JSONObject]]:
    """(the rendered YAML text, its documents parsed back and validated)."""
    _refuse_unrenderable(spec, lab_settings)
    kind = manifest_kind(plan)
    text = render(f"k8s/{kind.lower()}.yaml.j2", **_context(spec, plan, lab_settings, kind))
    docs = parse_documents(text)
    for doc in docs:
        validate_manifest(doc)
    return text, docs


def parse_documents(text: str) -> list[JSONObject]:
    """Parse rendered YAML back: libyaml composes, we build plain values (several times faster than
    PyYAML's constructor). Only the scalar types the templates can produce are accepted."""

    loader: type[yaml.SafeLoader] = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    try:
        docs = [_build(node) for node in yaml.compose_all(text, Loader=loader) if node is not None]
    except yaml.YAMLError as exc:
        raise UsageError(
            f"a value cannot be written into a manifest: {exc}",
            hint="remove control characters from the value (--set values, names, settings)",
        ) from None
    return [d for d in docs if isinstance(d, dict)]


_SCALARS: dict[str, Callable[[str], JSONValue]] = {
    "tag:yaml.org,2002:str": str,
    "tag:yaml.org,2002:int": int,
    "tag:yaml.org,2002:float": float,
    "tag:yaml.org,2002:bool": lambda v: v.lower() in ("true", "yes", "on"),
    "tag:yaml.org,2002:null": lambda v: None,
}


def _build(node: yaml.Node) -> JSONValue:
    if isinstance(node, yaml.MappingNode):
        out: JSONObject = {}
        for key_node, value_node in node.value:
            key = _build(key_node)
            if not isinstance(key, str) or key in out:
                raise UsageError(
                    f"rendered manifest has a bad or repeated key {key!r} (line {key_node.start_mark.line + 1})",
                    hint="this is a bug in tp's templates: report it",
                )
            out[key] = _build(value_node)
        return out
    if isinstance(node, yaml.SequenceNode):
        return [_build(item) for item in node.value]
    convert = _SCALARS.get(node.tag)
    if convert is None:
        raise UsageError(
            f"rendered manifest has a value of type {node.tag} (line {node.start_mark.line + 1})",
            hint="this is a bug in tp's templates: report it",
        )
    return convert(node.value)


def _refuse_unrenderable(spec: JobSpec, lab: LabFile) -> None:
    if spec.spec.resources.local:
        raise UsageError(
            f"{spec.metadata.experiment}/{spec.metadata.run_id} runs on this machine "
            f"(profile {spec.spec.resources.profile!r}): it has no Kubernetes manifests",
            hint="use a cluster profile, or set cluster.backend: kubernetes in tuneplane.yaml",
        )
    if not lab.cluster.repo.url:
        raise UsageError(
            "cluster.repo.url is not set in tuneplane.yaml: the job's init container clones the lab from it",
            hint="set it to the clone URL of this lab repository",
        )
    if spec.spec.resources.profile not in lab.profiles:
        raise UsageError(
            f"profile {spec.spec.resources.profile!r} is not in tuneplane.yaml",
            hint=f"profiles: {', '.join(sorted(lab.profiles))}",
        )


def _context(spec: JobSpec, plan: LaunchPlan, lab: LabFile, kind: str) -> Fields:
    profile = lab.profiles[spec.spec.resources.profile]
    facts = _facts(spec, plan)
    base = _pod_base(spec, plan, lab, profile, facts, ranked=kind == "JobSet")
    ctx: Fields = {"m": _metadata(spec, lab, facts), "j": _job_fields(spec, lab)}
    if kind == "RayJob":
        ctx["r"] = _ray_fields(spec, plan, lab)
        ctx["head"] = _ray_pod(base, spec, profile, head=True)
        ctx["worker"] = _ray_pod(base, spec, profile, head=False)
        ctx["submitter"] = _submitter_pod(base, spec)
    else:
        ctx["p"] = _trainer_pod(base, spec, plan, profile)
    return ctx


def _metadata(spec: JobSpec, lab: LabFile, facts: _Facts) -> Fields:
    labels = _labels(spec)
    if lab.cluster.queue:
        labels.append((QUEUE_LABEL, label_value(lab.cluster.queue)))
    return {
        "name": spec.metadata.name,
        "namespace": lab.cluster.namespace,
        "labels": labels,
        "annotations": _annotations(spec, facts),
    }


def _labels(spec: JobSpec) -> list[tuple[str, str]]:
    meta = spec.metadata
    return [
        ("app.kubernetes.io/name", "tuneplane"),
        ("app.kubernetes.io/instance", meta.name),
        ("app.kubernetes.io/component", spec.spec.operation),
        ("app.kubernetes.io/managed-by", MANAGED_BY),
        ("tuneplane.dev/experiment", label_value(meta.experiment)),
        # who and which lab, selectable (`kubectl get pods -l tuneplane.dev/user=…`, quotas, cost
        # reports); the annotations keep the exact values a label cannot hold
        ("tuneplane.dev/user", label_value(meta.user)),
        ("tuneplane.dev/lab", label_value(meta.lab)),
        ("tuneplane.dev/run", label_value(meta.run_id)),
        ("tuneplane.dev/recipe", label_value(spec.spec.recipe.name)),
    ]


def _annotations(spec: JobSpec, facts: _Facts) -> list[tuple[str, str]]:
    body, prov = spec.spec, spec.provenance
    res = body.resources
    return [
        ("tuneplane.dev/experiment", spec.metadata.experiment),
        ("tuneplane.dev/run-id", spec.metadata.run_id),
        ("tuneplane.dev/lab", spec.metadata.lab),
        ("tuneplane.dev/user", spec.metadata.user),
        ("tuneplane.dev/operation", body.operation),
        ("tuneplane.dev/recipe", body.recipe.name),
        ("tuneplane.dev/recipe-version", body.recipe.version),
        ("tuneplane.dev/recipe-digest", body.recipe.digest),
        ("tuneplane.dev/framework", f"{body.framework.kind} {body.framework.version}"),
        ("tuneplane.dev/image", body.image),
        ("tuneplane.dev/profile", f"{res.profile} ({res.nodes} x {res.gpus_per_node} GPU)"),
        ("tuneplane.dev/plugins", ",".join(f"{p.id}@{p.version}" for p in body.plugins)),
        ("tuneplane.dev/commit", prov.commit),
        ("tuneplane.dev/dirty", "true" if prov.dirty else "false"),
        ("tuneplane.dev/config-digest", prov.config_sha256),
        ("tuneplane.dev/jobspec-digest", facts.digest),
        ("tuneplane.dev/requested-by", prov.requested_by),
        ("tuneplane.dev/tool-version", prov.tool_version),
    ]


def _job_fields(spec: JobSpec, lab: LabFile) -> Fields:
    timeout = spec.spec.timeout_seconds
    return {
        "ttl": lab.cluster.ttl_seconds_after_finished,
        "deadline": [timeout] if timeout else [],
        "container": TRAINER,
        "config_exit": CONFIG_ERROR_EXIT,
        "replicated_job": REPLICATED_JOB,
        "nodes": spec.spec.resources.nodes,
        **_failure_rules(spec.spec.retry),
    }


def _failure_rules(retry: RetryPolicy) -> Fields:
    """The Job's restarts under the run's retry policy: every replaced pod counts against `backoffLimit`
    (attempts - 1), so a drain or a preemption can never restart training without limit.

    Rules apply first match first: exit 78 (the job as written cannot start) fails the Job at once; a
    disrupted pod (`DisruptionTarget`: preemption, eviction, a lost node) is counted when the policy
    retries any of those, else fails the Job; any other non-zero exit of the trainer fails the Job
    unless the policy retries `Error` (137 and 143 are left to the count when it retries
    `OutOfMemory` or `Signal`, which an exit code alone cannot tell apart).
    """
    on = set(retry.on)
    disruption = "Count" if on & {"Preempted", "Evicted", "NodeFailure"} else "FailJob"
    kept = [0] + ([137] if on & {"OutOfMemory", "Signal"} else []) + ([143] if "Signal" in on else [])
    # the checkout (init container) fails the same way: a wrong credential is no reason to clone again
    fails = [] if "Error" in on else [(TRAINER, kept), (CHECKOUT, [0])]
    return {"backoff": retry.attempts - 1, "disruption": disruption, "fail_exits": fails}


def _ray_fields(spec: JobSpec, plan: LaunchPlan, lab: LabFile) -> Fields:
    # A RayJob's TTL is how long KubeRay keeps the Ray cluster (the GPU nodes) after the job: Kueue gives
    # the quota back at once, so it stays short; the RayJob object and its status stay for the bot.
    # KubeRay writes the entrypoint into the submitter's command, which the kubelet expands in turn
    return {
        "entrypoint": literal(shlex.join(launcher_command(spec))),
        "workers": plan.nodes,
        "worker_gpus": str(spec.spec.resources.gpus_per_node),
        "ttl": lab.cluster.ray_cluster_ttl_seconds,
        "submitter_backoff": SUBMITTER_BACKOFF,
    }


def _pod_base(spec: JobSpec, plan: LaunchPlan, lab: LabFile, profile: Profile, facts: _Facts, ranked: bool) -> Fields:
    """What every pod of the run shares: labels, the checkout, volumes, env, scheduling."""
    paths = spec.spec.paths
    env = job_env(spec, plan.env, ingest_endpoint=lab.cluster.ingest.endpoint, gpu_watchdog=lab.cluster.gpu_watchdog)
    return {
        "labels": _labels(spec),
        "annotations": [
            ("tuneplane.dev/jobspec-digest", facts.digest),
            ("tuneplane.dev/commit", spec.provenance.commit),
        ],
        "init": _init_container(spec, lab, facts),
        "env": [(name, literal(value)) for name, value in env.items()],
        "env_fields": [(NODE_RANK_ENV, COMPLETION_INDEX), ("PET_NODE_RANK", COMPLETION_INDEX)] if ranked else [],
        "env_secrets": _secret_env(spec, plan, lab),
        "storage": {"volume": STORAGE_VOLUME, "root": paths.storage_root, "claim": lab.cluster.storage.pvc},
        "shm": {"volume": SHM_VOLUME, "size": profile.shm_size},
        "datasets": [
            {"volume": f"data-{index}", "claim": d.claim, "path": d.dir, "read_only": d.read_only}
            for index, d in enumerate(d for d in spec.spec.datasets if d.claim)
        ],
        "image": spec.spec.image,
        "working_dir": paths.work_dir,
        "pull_secrets": _opt([(name,) for name in lab.cluster.image_pull_secrets]),
        "tolerations": _opt([t.model_dump() for t in profile.tolerations]),
        "pod_security": _pod_security(lab),
        "avoid_nodes": [],
    }


def _pod_security(lab: LabFile) -> list[tuple[str, object]]:
    """The pod's securityContext fields (seccomp and the container-level ones are in the template)."""
    sec = lab.cluster.security
    fields = [
        ("runAsNonRoot", True if sec.run_as_non_root else None),
        ("runAsUser", sec.run_as_user),
        ("runAsGroup", sec.run_as_group),
        ("fsGroup", sec.fs_group),
    ]
    return [(key, value) for key, value in fields if value is not None]


def _secret_env(spec: JobSpec, plan: LaunchPlan, lab: LabFile) -> list[tuple[str, str, str, bool]]:
    """(variable, secret, key, optional): the job token only when ingest is bound; HF_TOKEN when given."""
    out = []
    for variable, key in plan.secret_env.items():
        if variable == JOB_TOKEN and not lab.cluster.ingest.endpoint:
            continue
        out.append((variable, secret_name(spec), key, variable != JOB_TOKEN))
    return out


def _init_container(spec: JobSpec, lab: LabFile, facts: _Facts) -> Fields:
    paths = spec.spec.paths
    doc = facts.document
    env = [
        ("TUNEPLANE_REPO_URL", lab.cluster.repo.url),
        ("TUNEPLANE_COMMIT", spec.provenance.commit),
        (RUN_DIR_ENV, paths.run_dir),
        (WORK_DIR_ENV, paths.work_dir),
        (OUT_DIR_ENV, paths.out_dir),
        # only algorithm plugins travel in the job package; data-prep ones never leave the machine
        (
            "TUNEPLANE_PLUGINS",
            " ".join(p.source or f"plugins/{p.name}" for p in spec.spec.plugins if p.capability == "algorithm"),
        ),
        (JOBSPEC_ENV, doc),
    ]
    creds = lab.cluster.repo.credentials_secret
    secrets = [("GIT_USERNAME", creds, "username", True), ("GIT_PASSWORD", creds, "password", False)] if creds else []
    return {
        "name": CHECKOUT,
        "image": lab.cluster.init_image,
        "command": ["sh", "-c", literal(CHECKOUT_SCRIPT)],
        "env": [(name, literal(value)) for name, value in env],
        "env_secrets": secrets,
        "requests": list(INIT_REQUESTS),
    }


def _trainer_pod(base: Fields, spec: JobSpec, plan: LaunchPlan, profile: Profile) -> Fields:
    gpus = spec.spec.resources.gpus_per_node
    return {
        **base,
        "container": TRAINER,
        "command": [[literal(arg) for arg in launcher_command(spec)]],
        "resources": _resources([("nvidia.com/gpu", gpus)] if gpus else [], _requests(profile, gpus)),
        "node_selector": _opt(sorted(profile.node_selector.items())),
    }


def _submitter_pod(base: Fields, spec: JobSpec) -> Fields:
    """KubeRay's submitter pod, written out so that it carries our labels (`tp job logs` and the driver's
    exit code are read from it), the lab's pull secrets (a private image must submit too), small fixed
    resources and the pod security context, and our submit command (SUBMIT_SCRIPT)."""
    script = SUBMIT_SCRIPT.format(tries=SUBMITTER_WAIT_TRIES, entrypoint=shlex.join(launcher_command(spec)))
    return {
        "labels": [*_labels(spec), (ROLE_LABEL, "submitter")],
        "annotations": base["annotations"],
        "container": SUBMITTER,
        "image": spec.spec.image,
        "command": ["/bin/sh", "-ec", literal(script)],
        "pull_secrets": base["pull_secrets"],
        "limits": list(SUBMITTER_LIMITS),
        "requests": list(SUBMITTER_REQUESTS),
        "pod_security": base["pod_security"],
    }


def _ray_pod(base: Fields, spec: JobSpec, profile: Profile, head: bool) -> Fields:
    """The head runs the driver without GPUs and off the GPU node selector; workers take the GPUs.

    KubeRay writes the `ray start` command of both, so no command is set here.
    """
    gpus = spec.spec.resources.gpus_per_node
    if head:
        # No GPU tolerations (a tainted GPU node refuses it) and, where the profile selects GPU nodes by
        # label, a required affinity away from them: a CPU-only head must not take a GPU node's place.
        avoid = [(key, value) for key, value in sorted(profile.node_selector.items())]
        return {
            **base,
            "container": "ray-head",
            "command": [],
            "node_selector": [],
            "env_fields": [],
            "tolerations": [],
            "avoid_nodes": _opt(avoid),
            "resources": _resources([], [("cpu", RAY_HEAD_CPU), ("memory", RAY_HEAD_MEMORY)]),
        }
    return {
        **base,
        "container": "ray-worker",
        "command": [],
        "env_fields": [],
        "resources": _resources([("nvidia.com/gpu", gpus)] if gpus else [], _requests(profile, gpus)),
        "node_selector": _opt(sorted(profile.node_selector.items())),
    }


def _resources(
    limits: list[tuple[str, str]] | list[tuple[str, int]], requests: list[tuple[str, str]]
) -> list[Sequence[object]]:
    blocks = [(name, pairs) for name, pairs in (("limits", limits), ("requests", requests)) if pairs]
    return _opt(blocks)


def _requests(profile: Profile, gpus: int) -> list[tuple[str, str]]:
    """The node's CPU and memory, scaled by the share of its GPUs the run takes."""
    part = share(gpus, profile.gpus_per_node)
    cpu = scale_cpu(profile.cpu, part) if profile.cpu else ""
    memory = scale_memory(profile.memory, part) if profile.memory else ""
    return [(k, v) for k, v in (("cpu", cpu), ("memory", memory)) if v]


_KUBELET_REFERENCE = re.compile(r"\$(?=[$(])")


def literal(text: str) -> str:
    """`text` as the kubelet must pass it on: it expands `$(VAR)` in env values, commands and args and
    turns `$$` into `$`, so a `$` before `(` or `$` is doubled (a hyperparameter `$(HOME)`, the shell's
    `$$`); any other `$` reaches the container as it is, and stays as written for a reader."""
    return _KUBELET_REFERENCE.sub("$$", text)


def _opt(items: Sequence[object]) -> list[Sequence[object]]:
    """An optional block for the templates: `[items]` renders the block, `[]` leaves it out."""
    return [items] if items else []


def to_yaml(docs: list[JSONObject]) -> str:
    """Manifests as one YAML stream, keys in the order they were rendered."""
    dumper = getattr(yaml, "CSafeDumper", yaml.SafeDumper)
    return yaml.dump_all(docs, Dumper=dumper, sort_keys=False, allow_unicode=True, width=1_000_000, explicit_start=True)
