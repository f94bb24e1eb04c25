"""Run rendered manifests on Kubernetes: submit, observe, read logs, cancel.

The only module that imports `kubernetes`, and only inside functions: `tp --help` and `tp validate`
never pay for it. Every request goes through one retry loop (bounded attempts, capped and jittered
exponential backoff, Retry-After honoured) and every failure becomes a `BackendError` a person can act
on: which object, which API path, what the server said, what to check. Secret values never reach a
message or a log line.

Submission is idempotent: the job object has a deterministic name; an existing object with that name
and our run label is adopted, never duplicated, and the per-run token Secret is owned by the job object
so that the cluster deletes it with the job.
"""

from __future__ import annotations

import base64
import copy
import json
import logging
import random
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any, TypeVar

from tuneplane.backends.base import BackendError, BackendRef, Observation, SubmitRequest
from tuneplane.constants import observed_phase

log = logging.getLogger(__name__)

RUN_LABEL = "tuneplane.dev/run"
EXPERIMENT_LABEL = "tuneplane.dev/experiment"
CANCEL_ANNOTATION = "tuneplane.dev/cancelled"
COMMIT_ANNOTATION = "tuneplane.dev/commit"  # provenance the renderer writes on every job object
JOBSPEC_ANNOTATION = "tuneplane.dev/jobspec-digest"
FIELD_MANAGER = "tuneplane"
APPLY_PATCH = "application/apply-patch+yaml"
MERGE_PATCH = "application/merge-patch+json"
JOB_NAME_LABEL = "batch.kubernetes.io/job-name"
DEFAULT_CONTAINER_ANNOTATION = "kubectl.kubernetes.io/default-container"

RETRYABLE_STATUS = frozenset({429, 500, 502, 503, 504})
IMAGE_REASONS = frozenset({"ErrImagePull", "ImagePullBackOff", "InvalidImageName", "ErrImageNeverPull"})
CONFIG_REASONS = frozenset({"CreateContainerConfigError", "CreateContainerError", "RunContainerError"})
MESSAGE_LIMIT = 4000

T = TypeVar("T")


@dataclass(frozen=True)
class RetryPolicy:
    """How hard to try: bounded attempts, capped and jittered exponential backoff, a per-request timeout.

    Defaults suit a CI bot talking to a busy API server; tests shrink `backoff_base` and `timeout`.
    """

    attempts: int = 5
    backoff_base: float = 0.5  # seconds before the first retry (before jitter)
    backoff_cap: float = 10.0
    timeout: float = 30.0  # seconds for one request, connect and read together
    max_retry_after: float = 60.0  # a server asking for longer is still retried, after this long

    def delay(self, attempt: int, retry_after: float | None, rng: random.Random) -> float:
        """Equal jitter: half the capped exponential step, plus up to as much again at random."""
        step = min(self.backoff_cap, self.backoff_base * (2**attempt))
        jittered = step / 2 + rng.uniform(0, step / 2)
        if retry_after is None:
            return float(jittered)
        return float(max(min(retry_after, self.max_retry_after), jittered))


@dataclass(frozen=True)
class Kind:
    """A resource type we talk to: how to name it in messages and reach it over REST."""

    api_version: str
    kind: str
    plural: str
    job: bool = False  # a job object: what a run is, and the owner of its Secret
    core: bool = False  # reached through the typed clients rather than CustomObjectsApi

    @property
    def group(self) -> str:
        return self.api_version.rpartition("/")[0]

    @property
    def version(self) -> str:
        return self.api_version.rpartition("/")[2]

    def path(self, namespace: str, name: str | None = None, sub: str | None = None) -> str:
        root = f"/apis/{self.api_version}" if self.group else f"/api/{self.version}"
        parts = [root, "namespaces", namespace, self.plural, name, sub]
        return "/".join(p for p in parts if p)


JOB = Kind("batch/v1", "Job", "jobs", job=True, core=True)
JOBSET = Kind("jobset.x-k8s.io/v1alpha2", "JobSet", "jobsets", job=True)
RAYJOB = Kind("ray.io/v1", "RayJob", "rayjobs", job=True)
SECRET = Kind("v1", "Secret", "secrets", core=True)
CONFIGMAP = Kind("v1", "ConfigMap", "configmaps", core=True)
POD = Kind("v1", "Pod", "pods", core=True)
WORKLOAD = Kind("kueue.x-k8s.io/v1beta1", "Workload", "workloads")
LOCALQUEUE = Kind("kueue.x-k8s.io/v1beta1", "LocalQueue", "localqueues")
SUBMITTABLE = {(k.api_version, k.kind): k for k in (JOB, JOBSET, RAYJOB, CONFIGMAP)}
JOB_KINDS = {k.kind: k for k in (JOB, JOBSET, RAYJOB)}
_TYPED = {
    "Job": ("batch", "job"),
    "Secret": ("core", "secret"),
    "ConfigMap": ("core", "config_map"),
    "Pod": ("core", "pod"),
}


def build_api_client(
    kubeconfig: str | None = None, context: str | None = None, in_cluster: bool = False
) -> Any:
    """An ApiClient from a kubeconfig (default discovery when None) or the pod's service account.

    urllib3's own retries are switched off: our RetryPolicy is the one place that decides.
    """
    # lazy: the kubernetes client costs ~0.3 s to import; only cluster calls pay it
    from kubernetes import client, config
    from kubernetes.config.config_exception import ConfigException

    cfg = client.Configuration()
    try:
        if in_cluster:
            config.load_incluster_config(client_configuration=cfg)  # type: ignore[no-untyped-call]
        else:
            config.load_kube_config(  # type: ignore[no-untyped-call]
                config_file=kubeconfig, context=context, client_configuration=cfg
            )
    except (ConfigException, OSError) as exc:
        raise BackendError(_config_message(kubeconfig, context, in_cluster, exc)) from exc
    cfg.retries = False
    return client.ApiClient(cfg)


def _config_message(kubeconfig: str | None, context: str | None, in_cluster: bool, exc: Exception) -> str:
    if in_cluster:
        return (
            f"could not load the in-cluster Kubernetes configuration: {exc}. "
            "This only works inside a pod with a service account; elsewhere pass a kubeconfig."
        )
    where = kubeconfig or "the default kubeconfig ($KUBECONFIG or ~/.kube/config)"
    ctx = f" (context {context!r})" if context else ""
    return f"could not load {where}{ctx}: {exc}. Check the file exists and names the context you want."


@dataclass(frozen=True)
class _Op:
    """One API request, described for messages (never with a body)."""

    action: str  # "apply", "read", "list", "delete", "patch", "read logs of"
    what: str  # "JobSet team-a/exp-1"
    method: str
    path: str
    kind: Kind


@dataclass(frozen=True)
class _Failure:
    kind: str  # "http" | "timeout" | "connection"
    status: int = 0
    detail: str = ""
    reason: str = ""  # the Status reason, e.g. "AlreadyExists"
    retry_after: float | None = None

    @property
    def retryable(self) -> bool:
        return self.kind != "http" or self.status in RETRYABLE_STATUS


class _Conflict(Exception):
    """A 409 on an apply: someone else created or changed the object between our read and write."""


@dataclass
class _State:
    """What a job object's own status says, before pods and queues add detail."""

    phase: str
    reason: str = ""
    message: str = ""
    started_at: str | None = None
    finished_at: str | None = None
    suspended: bool = False
    running_hint: bool = False  # the controller counts ready workers
    pods_decide: bool = False  # Pending until a pod runs (Job, JobSet); a RayJob reports its own phase
    notes: list[str] = field(default_factory=list)


class KubernetesBackend:
    """The Backend protocol over the Kubernetes API (Job, JobSet, RayJob; Kueue-aware)."""

    name = "kubernetes"

    def __init__(
        self,
        namespace: str,
        kubeconfig: str | None = None,
        context: str | None = None,
        in_cluster: bool = False,
        api_client: Any = None,
        retry: RetryPolicy = RetryPolicy(),
        *,
        propagation_policy: str = "Foreground",
        log_tail: int = 20,
        sleep: Callable[[float], None] = time.sleep,
        rng: random.Random | None = None,
    ) -> None:
        # lazy: the CLI's fast paths never load the client
        from kubernetes import client

        if propagation_policy not in {"Foreground", "Background"}:
            raise ValueError("propagation_policy must be Foreground or Background")
        self.namespace = namespace
        self.retry = retry
        self.propagation_policy = propagation_policy
        self.log_tail = log_tail
        self._client = (
            api_client if api_client is not None else build_api_client(kubeconfig, context, in_cluster)
        )
        self._apis: dict[str, Any] = {
            "core": client.CoreV1Api(self._client),
            "batch": client.BatchV1Api(self._client),
            "custom": client.CustomObjectsApi(self._client),
        }
        self._sleep = sleep
        self._rng = rng or random.Random()
        self._cancelled: set[tuple[str, str, str]] = set()

    def close(self) -> None:
        self._client.close()

    # ================================================================ submit
    def submit(self, request: SubmitRequest) -> BackendRef:
        """Apply the job object (adopting one that exists), its companions, then its token Secret."""
        ns = request.namespace or self.namespace
        copied = self._copied_secrets(request, ns)
        redact = tuple(request.secret_data.values()) + tuple(copied.values())
        job_manifest, kind, others = self._split_manifests(request, ns)
        job = self._ensure_job(kind, ns, job_manifest, redact)
        owner = _owner_reference(job)
        for manifest in others:
            self._apply(SUBMITTABLE[_type_of(manifest)], ns, _owned(manifest, owner), redact)
        self._apply(SECRET, ns, _secret(request, ns, job, owner, copied), redact)
        meta = job["metadata"]
        notes = meta.get("annotations") or {}
        return BackendRef(
            backend=self.name, kind=kind.kind, name=meta["name"], namespace=ns, uid=meta.get("uid", ""),
            commit=notes.get(COMMIT_ANNOTATION, ""), jobspec_digest=notes.get(JOBSPEC_ANNOTATION, ""),
        )

    def _copied_secrets(self, request: SubmitRequest, ns: str) -> dict[str, str]:
        """Values the run's Secret takes from other Secrets of the namespace (e.g. the lab's HF token)."""
        out: dict[str, str] = {}
        for target, (source, key) in sorted(request.secret_copies.items()):
            secret = self._get(SECRET, ns, source) or {}
            value = ((secret.get("data") or {}).get(key))
            if value is None:
                found = "has no key" if secret else "does not exist, so it has no key"
                raise BackendError(f"Secret {ns}/{source} {found} {key!r}, which run {request.run_id} passes to "
                                   f"its job as {target}; create it (kubectl create secret generic {source} "
                                   f"--from-literal={key}=...) or clear the setting in tuneplane.yaml")
            out[target] = base64.b64decode(value).decode("utf-8", "replace")
        return out

    def _split_manifests(
        self, request: SubmitRequest, ns: str
    ) -> tuple[dict[str, Any], Kind, list[dict[str, Any]]]:
        """Find the one job object named `object_name`; check every manifest is a kind we submit."""
        job: dict[str, Any] | None = None
        others: list[dict[str, Any]] = []
        for raw in request.manifests:
            manifest = copy.deepcopy(raw)
            kind = SUBMITTABLE.get(_type_of(manifest))
            if kind is None:
                supported = ", ".join(f"{k.api_version} {k.kind}" for k in SUBMITTABLE.values())
                raise BackendError(
                    f"cannot submit {manifest.get('apiVersion')} {manifest.get('kind')} for run "
                    f"{request.run_id}: the Kubernetes backend submits {supported}"
                )
            meta = manifest.setdefault("metadata", {})
            if meta.get("namespace") not in (None, "", ns):
                raise BackendError(
                    f"{kind.kind} {meta.get('name')} is rendered for namespace {meta['namespace']!r} "
                    f"but the run is submitted to {ns!r}; render and submit with the same namespace"
                )
            meta["namespace"] = ns
            if kind.job and meta.get("name") == request.object_name and job is None:
                job = manifest
            else:
                others.append(manifest)
        if job is None:
            raise BackendError(
                f"none of the {len(request.manifests)} manifests for run {request.run_id} is a Job, "
                f"JobSet or RayJob named {request.object_name!r}; the renderer must name the job object "
                "after the run"
            )
        return job, JOB_KINDS[job["kind"]], others

    def _ensure_job(
        self, kind: Kind, ns: str, manifest: dict[str, Any], redact: tuple[str, ...]
    ) -> dict[str, Any]:
        """Adopt the existing object of this name (if it is ours), else create it by server-side apply."""
        name = manifest["metadata"]["name"]
        existing = self._get(kind, ns, name, redact=redact)
        if existing is not None:
            return self._adopt(kind, existing, manifest)
        try:
            return self._apply(kind, ns, manifest, redact)
        except _Conflict:
            existing = self._get(kind, ns, name, redact=redact)
            if existing is None:  # the conflicting object is gone again: apply once more
                return self._apply(kind, ns, manifest, redact)
            return self._adopt(kind, existing, manifest)

    @staticmethod
    def _adopt(kind: Kind, existing: dict[str, Any], manifest: dict[str, Any]) -> dict[str, Any]:
        meta = existing["metadata"]
        wanted = (manifest["metadata"].get("labels") or {}).get(RUN_LABEL)
        found = (meta.get("labels") or {}).get(RUN_LABEL)
        if wanted is not None and found != wanted:
            raise BackendError(
                f"{kind.kind} {meta.get('namespace')}/{meta['name']} already exists and belongs to "
                f"{'run ' + found if found else 'no tuneplane run'} (label {RUN_LABEL}), not run {wanted}; "
                "delete it or render this run under another name"
            )
        log.info(
            "adopting existing %s %s/%s (uid %s)",
            kind.kind,
            meta.get("namespace"),
            meta["name"],
            meta.get("uid"),
        )
        return existing

    # ================================================================ observe
    def observe(self, ref: BackendRef) -> Observation:
        """Read the job object, then its pods or Kueue Workload as its state calls for."""
        kind, ns = self._job_kind(ref), ref.namespace or self.namespace
        obj = self._get(kind, ns, ref.name)
        if obj is None or (ref.uid and obj["metadata"].get("uid") != ref.uid):
            return self._vanished(ref, kind, ns, replaced=obj is not None)
        if obj["metadata"].get("deletionTimestamp"):
            return self._deleting(ref, kind, ns, obj)
        state = _STATE_READERS[kind.kind](obj)
        if state.phase == "Succeeded":
            if kind is JOBSET:
                state.started_at = self._child_jobs_start(ns, obj)
            return _observation(state, exit_code=0)
        if state.suspended:
            state.reason, state.message = self._queue_reason(kind, ns, obj)
            return _observation(state)
        pods = self._pods_or_none(kind, ns, obj)
        if state.phase == "Failed":
            return self._failure(kind, ns, obj, state, pods or [])
        return self._progress(state, pods or [])

    def _vanished(self, ref: BackendRef, kind: Kind, ns: str, replaced: bool) -> Observation:
        if (kind.kind, ns, ref.name) in self._cancelled:
            return Observation(phase="Cancelled", reason="Cancelled", message="cancelled by tuneplane")
        how = (
            "was replaced by another object of the same name" if replaced else "was deleted outside tuneplane"
        )
        return Observation(
            phase="Failed",
            reason="Disappeared",
            message=(
                f"job object disappeared: {kind.kind} {ns}/{ref.name} (uid {ref.uid or 'unknown'}) {how}, "
                "e.g. by kubectl delete, a namespace cleanup or a TTL; its pods and logs may be gone too"
            ),
        )

    def _deleting(self, ref: BackendRef, kind: Kind, ns: str, obj: dict[str, Any]) -> Observation:
        ours = (obj["metadata"].get("annotations") or {}).get(CANCEL_ANNOTATION) == "true"
        if ours or (kind.kind, ns, ref.name) in self._cancelled:
            return Observation(
                phase="Cancelled", reason="Cancelled", message="cancelled by tuneplane; pods are stopping"
            )
        return Observation(
            phase="Failed",
            reason="Deleting",
            message=f"job object disappeared: {kind.kind} {ns}/{ref.name} is being deleted outside tuneplane",
        )

    def _progress(self, state: _State, pods: list[dict[str, Any]]) -> Observation:
        """Pending or Running: say why a run is not making progress, when a pod shows it."""
        if state.pods_decide and (state.running_hint or any(_pod_phase(p) == "Running" for p in pods)):
            state.phase = "Running"
        state.started_at = state.started_at or _earliest_start(pods)
        problem = _pod_problem(pods)
        if problem is not None:
            state.reason, state.message = problem
        return _observation(state)

    def _failure(
        self, kind: Kind, ns: str, obj: dict[str, Any], state: _State, pods: list[dict[str, Any]]
    ) -> Observation:
        """Failed: name the failing container, its exit code, and its last log lines."""
        culprit = _failed_container(pods)
        state.started_at = state.started_at or _earliest_start(pods)
        exit_code = None
        parts = [f"{kind.kind} failed" + (f" ({state.reason}: {state.message})" if state.reason else "")]
        if culprit is not None:
            pod, container, terminated = culprit
            exit_code = terminated.get("exitCode")
            parts.append(_termination_line(pod, container, terminated))
            if terminated.get("reason") not in (None, "", "Error"):
                state.reason = terminated["reason"]
            parts.append(self._last_lines(ns, pod, container, obj))
        else:
            problem = _pod_problem(pods)
            if problem is not None:
                parts.append(problem[1])
        parts.extend(state.notes)
        state.message = _clip("\n".join(p for p in parts if p))
        return _observation(state, exit_code=exit_code)

    def _last_lines(self, ns: str, pod: dict[str, Any], container: str, obj: dict[str, Any]) -> str:
        name = pod["metadata"]["name"]
        try:
            text = self._read_log(ns, name, container, tail=self.log_tail)
        except BackendError as exc:
            return f"(its logs could not be read: {exc})"
        lines = [line[:300] for line in text.splitlines()[-self.log_tail :]]
        if not lines:
            return "(it wrote no log lines)"
        body = "\n".join("  " + line for line in lines)
        return _redact(f"last {len(lines)} log lines:\n{body}", self._secret_values(ns, obj))

    def _secret_values(self, ns: str, obj: dict[str, Any]) -> tuple[str, ...]:
        """The run's token values, so a job that printed one cannot leak it into a status file."""
        try:
            secret = self._get(SECRET, ns, f"{obj['metadata']['name']}-tokens")
        except BackendError:
            return ()
        values = (secret or {}).get("data") or {}
        return tuple(base64.b64decode(v).decode("utf-8", "replace") for v in values.values() if v)

    def _child_jobs_start(self, ns: str, obj: dict[str, Any]) -> str | None:
        """A JobSet keeps no start time; its child Jobs do (and outlive their pods)."""
        selector = f"jobset.sigs.k8s.io/jobset-name={obj['metadata']['name']}"
        try:
            jobs = self._list(JOB, ns, selector)
        except BackendError as exc:
            log.warning("%s", exc)
            return None
        starts = [str(s) for j in jobs if (s := (j.get("status") or {}).get("startTime"))]
        return min(starts) if starts else None

    # ---- pods ----------------------------------------------------------------------------
    def _pods_or_none(self, kind: Kind, ns: str, obj: dict[str, Any]) -> list[dict[str, Any]] | None:
        """The job's pods, leader first; an unreadable pod list degrades the detail, not the phase."""
        try:
            return self._pods(kind, ns, obj)
        except BackendError as exc:
            log.warning("%s", exc)
            return None

    def _pods(self, kind: Kind, ns: str, obj: dict[str, Any]) -> list[dict[str, Any]]:
        run = (obj["metadata"].get("labels") or {}).get(RUN_LABEL)
        pods = self._list(POD, ns, f"{RUN_LABEL}={run}") if run else []
        if not pods:
            seen: dict[str, dict[str, Any]] = {}
            for selector in _fallback_selectors(kind, obj):
                seen.update({p["metadata"]["name"]: p for p in self._list(POD, ns, selector)})
            pods = list(seen.values())
        return sorted(pods, key=lambda p: _leader_key(p, kind, obj))

    # ---- Kueue ---------------------------------------------------------------------------
    def _queue_reason(self, kind: Kind, ns: str, obj: dict[str, Any]) -> tuple[str, str]:
        """Why a suspended job waits: its Kueue Workload's QuotaReserved/Admitted/Evicted conditions."""
        try:
            workload = self._workload(ns, obj)
            if workload is None:
                return "Suspended", (
                    f"the {kind.kind} is suspended and no Kueue Workload owns it yet; if this lasts, check "
                    "that its kueue.x-k8s.io/queue-name label names a LocalQueue in this namespace"
                )
            return self._workload_reason(kind, ns, workload)
        except BackendError as exc:
            return "Suspended", f"the {kind.kind} is suspended; its Kueue Workload could not be read: {exc}"

    def _workload(self, ns: str, obj: dict[str, Any]) -> dict[str, Any] | None:
        uid = obj["metadata"].get("uid")
        workloads = self._list(WORKLOAD, ns, None, missing_ok=True)
        mine = [
            w
            for w in workloads
            if any(o.get("uid") == uid for o in w["metadata"].get("ownerReferences") or [])
        ]
        mine.sort(key=lambda w: w["metadata"].get("creationTimestamp", ""))
        return mine[-1] if mine else None

    def _workload_reason(self, kind: Kind, ns: str, workload: dict[str, Any]) -> tuple[str, str]:
        status = workload.get("status") or {}
        conds = {c.get("type"): c for c in status.get("conditions") or []}
        holds = {t for t, c in conds.items() if c.get("status") == "True"}
        local_queue = (workload.get("spec") or {}).get("queueName", "")
        cluster_queue = (status.get("admission") or {}).get("clusterQueue") or self._cluster_queue(
            ns, local_queue
        )
        if cluster_queue is None:
            return f"Queued: LocalQueue {local_queue} does not exist", (
                f"the {kind.kind} names LocalQueue {local_queue!r}, which namespace {ns} does not have; "
                "fix the kueue.x-k8s.io/queue-name label or ask an administrator to create the queue"
            )
        where = f"ClusterQueue {cluster_queue}" if cluster_queue else f"LocalQueue {local_queue or '(none)'}"
        if "Admitted" in holds:
            return "Admitted", f"admitted by {where}; waiting for the {kind.kind} to start"
        if "QuotaReserved" in holds:
            return f"Queued: quota reserved in {where}, waiting for admission checks", _cond_message(
                conds, "Admitted"
            )
        evicted = conds.get("Evicted") if "Evicted" in holds else None
        message = _cond_message(conds, "QuotaReserved") or "Kueue has not considered the Workload yet"
        if evicted is not None:
            reason = f"Queued: evicted ({evicted.get('reason', 'Evicted')}), waiting for quota in {where}"
            return reason, "; ".join(m for m in (evicted.get("message", ""), message) if m)
        return f"Queued: waiting for quota in {where}", message

    def _cluster_queue(self, ns: str, local_queue: str) -> str | None:
        """The ClusterQueue behind a LocalQueue; None when the LocalQueue is missing, "" when unreadable."""
        if not local_queue:
            return ""
        try:
            lq = self._get(LOCALQUEUE, ns, local_queue)
        except BackendError:
            return ""
        return None if lq is None else str((lq.get("spec") or {}).get("clusterQueue", ""))

    # ================================================================ logs
    def logs(self, ref: BackendRef, tail: int | None = None, follow: bool = False) -> Iterator[str]:
        """Lines from the leader pod's main container; `follow` streams until the container ends."""
        kind, ns = self._job_kind(ref), ref.namespace or self.namespace
        obj = self._get(kind, ns, ref.name)
        if obj is None:
            raise BackendError(
                f"{kind.kind} {ns}/{ref.name} does not exist (any more); there are no logs to read"
            )
        pods = self._pods(kind, ns, obj)
        if not pods:
            raise BackendError(
                f"{kind.kind} {ns}/{ref.name} has no pods yet; `tp status` says why it is waiting"
            )
        pod = pods[0]
        container = _default_container(pod)
        response = self._log_response(ns, pod["metadata"]["name"], container, tail, follow)
        return _stream_lines(response, f"pod {ns}/{pod['metadata']['name']}")

    def _read_log(self, ns: str, pod: str, container: str, tail: int | None) -> str:
        data = self._log_request(ns, pod, container, tail, follow=False, read=True)
        return bytes(data).decode("utf-8", "replace")

    def _log_response(self, ns: str, pod: str, container: str, tail: int | None, follow: bool) -> Any:
        return self._log_request(ns, pod, container, tail, follow, read=False)

    def _log_request(
        self, ns: str, pod: str, container: str, tail: int | None, follow: bool, read: bool
    ) -> Any:
        """Open a log stream, or (`read`) read it whole inside the retry loop, so a slow body is retried."""
        op = _Op(
            "read logs of", f"container {container!r} in pod {ns}/{pod}", "GET", POD.path(ns, pod, "log"), POD
        )
        kwargs: dict[str, Any] = {"container": container, "follow": follow, "_preload_content": False}
        if tail is not None:
            kwargs["tail_lines"] = tail
        if not follow:  # a followed stream lives as long as the container does
            kwargs["_request_timeout"] = self.retry.timeout
        core = self._apis["core"]

        def request() -> Any:
            response = core.read_namespaced_pod_log(pod, ns, **kwargs)
            return _read_body(response) if read else response

        return self._call(op, request)

    # ================================================================ cancel
    def cancel(self, ref: BackendRef) -> None:
        """Mark the object as cancelled by us, then delete it with its pods; absent is fine."""
        kind, ns = self._job_kind(ref), ref.namespace or self.namespace
        self._cancelled.add((kind.kind, ns, ref.name))
        mark = {"metadata": {"annotations": {CANCEL_ANNOTATION: "true"}}}
        try:
            if self._merge(kind, ns, ref.name, mark) is None:
                return
        except BackendError as exc:  # the mark only refines later observations; deleting is what matters
            log.warning("could not mark %s %s/%s as cancelled: %s", kind.kind, ns, ref.name, exc)
        self._delete(kind, ns, ref.name)

    # ================================================================ REST verbs
    def _get(self, kind: Kind, ns: str, name: str, redact: Iterable[str] = ()) -> dict[str, Any] | None:
        op = _Op("read", f"{kind.kind} {ns}/{name}", "GET", kind.path(ns, name), kind)
        if kind.core:
            fn = self._typed("read", kind)
            return self._json(op, lambda: fn(name, ns, **self._opts()), missing_ok=True, redact=redact)
        args = (kind.group, kind.version, ns, kind.plural, name)
        custom = self._apis["custom"]
        return self._json(
            op,
            lambda: custom.get_namespaced_custom_object(*args, **self._opts()),
            missing_ok=True,
            redact=redact,
        )

    def _list(
        self, kind: Kind, ns: str, selector: str | None, missing_ok: bool = False
    ) -> list[dict[str, Any]]:
        what = f"{kind.plural} in namespace {ns}" + (f" with labels {selector}" if selector else "")
        op = _Op("list", what, "GET", kind.path(ns), kind)
        opts = self._opts(**({"label_selector": selector} if selector else {}))
        if kind.core:
            fn = self._typed("list", kind)
            result = self._json(op, lambda: fn(ns, **opts), missing_ok=missing_ok)
        else:
            args = (kind.group, kind.version, ns, kind.plural)
            custom = self._apis["custom"]
            result = self._json(
                op, lambda: custom.list_namespaced_custom_object(*args, **opts), missing_ok=missing_ok
            )
        return list((result or {}).get("items") or [])

    def _apply(self, kind: Kind, ns: str, manifest: dict[str, Any], redact: Iterable[str]) -> dict[str, Any]:
        """Server-side apply: create or update, owned by field manager `tuneplane`; 409 → `_Conflict`."""
        name = manifest["metadata"]["name"]
        op = _Op("apply", f"{kind.kind} {ns}/{name}", "PATCH", kind.path(ns, name), kind)
        opts = self._opts(field_manager=FIELD_MANAGER, force=True, _content_type=APPLY_PATCH)
        if kind.core:
            fn = self._typed("patch", kind)
            result = self._json(op, lambda: fn(name, ns, manifest, **opts), conflict=True, redact=redact)
        else:
            args = (kind.group, kind.version, ns, kind.plural, name, manifest)
            custom = self._apis["custom"]
            result = self._json(
                op, lambda: custom.patch_namespaced_custom_object(*args, **opts), conflict=True, redact=redact
            )
        assert result is not None  # not missing_ok
        return result

    def _merge(self, kind: Kind, ns: str, name: str, patch: dict[str, Any]) -> dict[str, Any] | None:
        op = _Op("patch", f"{kind.kind} {ns}/{name}", "PATCH", kind.path(ns, name), kind)
        opts = self._opts(_content_type=MERGE_PATCH)
        if kind.core:
            fn = self._typed("patch", kind)
            return self._json(op, lambda: fn(name, ns, patch, **opts), missing_ok=True)
        args = (kind.group, kind.version, ns, kind.plural, name, patch)
        custom = self._apis["custom"]
        return self._json(op, lambda: custom.patch_namespaced_custom_object(*args, **opts), missing_ok=True)

    def _delete(self, kind: Kind, ns: str, name: str) -> None:
        op = _Op("delete", f"{kind.kind} {ns}/{name}", "DELETE", kind.path(ns, name), kind)
        opts = self._opts(propagation_policy=self.propagation_policy)
        if kind.core:
            fn = self._typed("delete", kind)
            self._json(op, lambda: fn(name, ns, **opts), missing_ok=True)
            return
        args = (kind.group, kind.version, ns, kind.plural, name)
        custom = self._apis["custom"]
        self._json(op, lambda: custom.delete_namespaced_custom_object(*args, **opts), missing_ok=True)

    def _typed(self, verb: str, kind: Kind) -> Callable[..., Any]:
        api, snake = _TYPED[kind.kind]
        return getattr(self._apis[api], f"{verb}_namespaced_{snake}")  # type: ignore[no-any-return]

    def _opts(self, **extra: Any) -> dict[str, Any]:
        """Raw responses (we read plain JSON, not models) and a bounded wait for each request."""
        return {"_preload_content": False, "_request_timeout": self.retry.timeout, **extra}

    def _json(
        self,
        op: _Op,
        fn: Callable[[], Any],
        missing_ok: bool = False,
        conflict: bool = False,
        redact: Iterable[str] = (),
    ) -> dict[str, Any] | None:
        data = self._call(
            op, lambda: _read_body(fn()), missing_ok=missing_ok, conflict=conflict, redact=redact
        )
        if data is None:
            return None
        try:
            return dict(json.loads(data or b"{}"))
        except (ValueError, TypeError) as exc:
            raise BackendError(
                f"could not {op.action} {op.what}: the API server answered with no JSON ({exc})"
            ) from exc

    # ================================================================ retries and messages
    def _call(
        self,
        op: _Op,
        fn: Callable[[], T],
        missing_ok: bool = False,
        conflict: bool = False,
        redact: Iterable[str] = (),
    ) -> T | None:
        """Run one request with retries; 404 → None when `missing_ok`; 409 → `_Conflict` when `conflict`."""
        attempts = max(1, self.retry.attempts)
        for attempt in range(attempts):
            try:
                return fn()
            except Exception as exc:  # classified here; anything that is not an API failure is re-raised
                failure = _classify(exc)
                if failure is None:
                    raise
                if failure.kind == "http" and failure.status == 404 and missing_ok:
                    return None
                if failure.kind == "http" and failure.status == 409 and conflict:
                    raise _Conflict(failure.detail) from exc
                if not failure.retryable or attempt + 1 == attempts:
                    raise BackendError(_redact(self._message(op, failure, attempt + 1), redact)) from exc
            delay = self.retry.delay(attempt, failure.retry_after, self._rng)
            log.info(
                "retrying: %s (attempt %d of %d, in %.2f s)",
                _redact(self._summary(op, failure), redact),
                attempt + 2,
                attempts,
                delay,
            )
            self._sleep(delay)
        raise AssertionError("unreachable")  # pragma: no cover

    def _summary(self, op: _Op, failure: _Failure) -> str:
        return f"{op.action} {op.what}: {_describe(failure, self.retry.timeout)}"

    def _message(self, op: _Op, failure: _Failure, attempts: int) -> str:
        host = getattr(getattr(self._client, "configuration", None), "host", "") or "the API server"
        tries = f"{attempts} attempt{'s' if attempts != 1 else ''}"
        return (
            f"could not {op.action} {op.what}: {_describe(failure, self.retry.timeout)} "
            f"({op.method} {op.path} on {host}, {tries}). {_hint(op, failure)}"
        )

    def _job_kind(self, ref: BackendRef) -> Kind:
        kind = JOB_KINDS.get(ref.kind)
        if kind is None:
            raise BackendError(
                f"run {ref.name} was submitted as {ref.kind!r}, which the Kubernetes backend does not manage "
                f"(it manages {', '.join(JOB_KINDS)})"
            )
        return kind


# ==================================================================== failure classification
def _classify(exc: BaseException) -> _Failure | None:
    """API errors, timeouts and broken connections; None for anything else (a bug, re-raised)."""
    # lazy: loaded with the kubernetes client
    import urllib3.exceptions as u3
    from kubernetes.client.exceptions import ApiException

    if isinstance(exc, ApiException):
        return _http_failure(exc) if exc.status else _Failure("connection", detail=str(exc.reason or exc))
    if isinstance(exc, u3.MaxRetryError) and exc.reason is not None:
        return _classify(exc.reason) or _Failure("connection", detail=str(exc.reason))
    if isinstance(exc, u3.NewConnectionError):
        return _Failure("connection", detail=_short(exc))
    if isinstance(exc, u3.TimeoutError | TimeoutError):
        return _Failure("timeout", detail=_short(exc))
    if isinstance(exc, u3.HTTPError | ConnectionError):
        return _Failure("connection", detail=_short(exc))
    return None


def _http_failure(exc: Any) -> _Failure:
    body: Any = {}
    try:
        body = json.loads(exc.body) if exc.body else {}
    except (TypeError, ValueError):
        body = {}
    body = body if isinstance(body, dict) else {}
    status = int(exc.status)
    # A proxy in front of the API server may answer with HTML: keep a short, single-line excerpt.
    message = str(body.get("message") or " ".join(str(exc.body or "").split())[:300] or exc.reason or "")
    headers = exc.headers or {}
    return _Failure(
        "http",
        status=status,
        detail=f"{status} {exc.reason or ''}".strip() + (f": {message}" if message else ""),
        reason=str(body.get("reason") or ""),
        retry_after=_retry_after(headers.get("Retry-After") if hasattr(headers, "get") else None),
    )


def _retry_after(value: Any) -> float | None:
    try:
        return max(0.0, float(value)) if value is not None else None
    except (TypeError, ValueError):
        return None  # the HTTP-date form: fall back to our own backoff


def _short(exc: BaseException) -> str:
    text = str(exc) or type(exc).__name__
    return text.split(": ", 1)[-1] if "object at 0x" in text else text


def _describe(failure: _Failure, timeout: float) -> str:
    if failure.kind == "timeout":
        return f"no answer within the {timeout:g} s timeout"
    if failure.kind == "connection":
        return f"the connection failed ({failure.detail})"
    return f"the API server answered {failure.detail}"


def _hint(op: _Op, failure: _Failure) -> str:
    ns = op.path.split("/namespaces/")[1].split("/")[0] if "/namespaces/" in op.path else ""
    if failure.kind == "timeout":
        return "Check network access to the API server and its load, then retry."
    if failure.kind == "connection":
        return "Check the server address in your kubeconfig and that the cluster is reachable from here."
    status, kind = failure.status, op.kind
    if status == 401:
        return "Check the credentials in your kubeconfig (an expired token?)."
    if status == 403:
        verb = {"GET": "get", "PATCH": "patch", "DELETE": "delete"}.get(op.method, op.method.lower())
        return (
            f"Ask an administrator for access: kubectl auth can-i {verb} {kind.plural}"
            f"{'.' + kind.group if kind.group else ''} -n {ns}."
        )
    if status == 404 and not kind.core:
        return f"Is the {kind.kind} CRD installed? Check with: kubectl get crd {kind.plural}.{kind.group}."
    if status in {400, 422}:
        return "The server refused the object; compare `tp render` output with the cluster's API versions."
    if status == 429:
        return "The API server is rate-limiting this client; retry later."
    if status >= 500:
        return "Check the API server's health (kubectl get --raw /readyz) and retry."
    return "Check the object and your access, then retry."


def _redact(text: str, secrets: Iterable[str]) -> str:
    for value in secrets:
        if value and len(value) >= 4:
            text = text.replace(value, "[redacted]")
    return text


def _clip(text: str) -> str:
    return text if len(text) <= MESSAGE_LIMIT else text[: MESSAGE_LIMIT - 20] + "\n… (truncated)"


# ==================================================================== manifests
def _type_of(manifest: dict[str, Any]) -> tuple[str, str]:
    return str(manifest.get("apiVersion", "")), str(manifest.get("kind", ""))


def _owner_reference(job: dict[str, Any]) -> dict[str, Any]:
    meta = job["metadata"]
    # No blockOwnerDeletion: it needs update rights on the owner's finalizers, which a bot may lack.
    return {"apiVersion": job["apiVersion"], "kind": job["kind"], "name": meta["name"], "uid": meta["uid"]}


def _owned(manifest: dict[str, Any], owner: dict[str, Any]) -> dict[str, Any]:
    meta = manifest["metadata"]
    if not meta.get("ownerReferences"):
        meta["ownerReferences"] = [owner]
    return manifest


def _secret(request: SubmitRequest, ns: str, job: dict[str, Any], owner: dict[str, Any],
            copied: dict[str, str]) -> dict[str, Any]:
    labels = {
        k: v for k, v in (job["metadata"].get("labels") or {}).items() if k in {RUN_LABEL, EXPERIMENT_LABEL}
    }
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {
            "name": f"{job['metadata']['name']}-tokens",
            "namespace": ns,
            "labels": labels,
            "ownerReferences": [owner],
        },
        "type": "Opaque",
        "stringData": {**copied, **request.secret_data},
    }


# ==================================================================== job object states
def _true_conditions(obj: dict[str, Any]) -> dict[str, dict[str, Any]]:
    conds = (obj.get("status") or {}).get("conditions") or []
    return {c.get("type", ""): c for c in conds if c.get("status") == "True"}


def _job_state(obj: dict[str, Any]) -> _State:
    status, conds = obj.get("status") or {}, _true_conditions(obj)
    started = status.get("startTime")
    if "Complete" in conds:
        return _State(
            "Succeeded",
            started_at=started,
            finished_at=status.get("completionTime") or _ltt(conds["Complete"]),
        )
    if "Failed" in conds:
        failed = conds["Failed"]
        return _State("Failed", failed.get("reason", ""), failed.get("message", ""), started, _ltt(failed))
    if "Suspended" in conds or (obj.get("spec") or {}).get("suspend"):
        return _State("Pending", started_at=started, suspended=True)
    return _State("Pending", started_at=started, running_hint=bool(status.get("ready")), pods_decide=True)


def _jobset_state(obj: dict[str, Any]) -> _State:
    status, conds = obj.get("status") or {}, _true_conditions(obj)
    restarts = int(status.get("restarts") or 0)
    notes = [f"the JobSet restarted {restarts} time{'s' if restarts != 1 else ''}"] if restarts else []
    if "Completed" in conds:
        return _State("Succeeded", finished_at=_ltt(conds["Completed"]), notes=notes)
    if "Failed" in conds:
        failed = conds["Failed"]
        return _State(
            "Failed", failed.get("reason", ""), failed.get("message", ""), None, _ltt(failed), notes=notes
        )
    if "Suspended" in conds or (obj.get("spec") or {}).get("suspend"):
        return _State("Pending", suspended=True, notes=notes)
    replicated = status.get("replicatedJobsStatus") or []
    ready = any(int(r.get("ready") or 0) > 0 for r in replicated)
    return _State("Pending", running_hint=ready, pods_decide=True, notes=notes)


_RAY_PHASES = {
    "PENDING": "Pending",
    "RUNNING": "Running",
    "SUCCEEDED": "Succeeded",
    "FAILED": "Failed",
    "STOPPED": "Cancelled",
}


def _rayjob_state(obj: dict[str, Any]) -> _State:
    status = obj.get("status") or {}
    job_status, deployment = status.get("jobStatus") or "", status.get("jobDeploymentStatus") or ""
    started, ended = status.get("startTime"), status.get("endTime")
    reason, message = str(status.get("reason") or ""), str(status.get("message") or "")
    if job_status in {"SUCCEEDED", "FAILED", "STOPPED"}:
        phase = _RAY_PHASES[job_status]
        return _State(
            phase, reason or (job_status.title() if phase != "Succeeded" else ""), message, started, ended
        )
    if deployment in {"Failed", "ValidationFailed"}:
        return _State(
            "Failed",
            reason or deployment,
            message or f"RayJob deployment status {deployment}",
            started,
            ended,
        )
    if deployment in {"Suspended", "Suspending"} or (obj.get("spec") or {}).get("suspend"):
        return _State("Pending", suspended=True)
    if job_status == "RUNNING":
        return _State("Running", started_at=started)
    waiting = "Ray cluster starting" if deployment in {"", "New", "Initializing"} else f"RayJob {deployment}"
    return _State("Pending", reason=deployment or "Initializing", message=waiting, started_at=started)


_STATE_READERS: dict[str, Callable[[dict[str, Any]], _State]] = {
    "Job": _job_state,
    "JobSet": _jobset_state,
    "RayJob": _rayjob_state,
}


def _ltt(condition: dict[str, Any]) -> str | None:
    value = condition.get("lastTransitionTime")
    return str(value) if value else None


def _cond_message(conds: dict[str, dict[str, Any]], kind: str) -> str:
    return str((conds.get(kind) or {}).get("message") or "")


def _observation(state: _State, exit_code: int | None = None) -> Observation:
    message = state.message
    if state.notes and state.phase != "Failed":
        message = "; ".join(m for m in [message, *state.notes] if m)
    return Observation(
        phase=observed_phase(state.phase),
        reason=state.reason,
        message=_clip(message),
        started_at=state.started_at,
        finished_at=state.finished_at,
        exit_code=exit_code,
    )


# ==================================================================== pods
def _fallback_selectors(kind: Kind, obj: dict[str, Any]) -> list[str]:
    """Controller-set labels, for pods whose template lacks our run label."""
    name = obj["metadata"]["name"]
    if kind is JOBSET:
        return [f"jobset.sigs.k8s.io/jobset-name={name}"]
    if kind is RAYJOB:
        cluster = (obj.get("status") or {}).get("rayClusterName")
        return [f"{JOB_NAME_LABEL}={name}"] + ([f"ray.io/cluster={cluster}"] if cluster else [])
    return [f"{JOB_NAME_LABEL}={name}"]


def _leader_key(pod: dict[str, Any], kind: Kind, obj: dict[str, Any]) -> tuple[Any, ...]:
    """Leader first: the RayJob submitter, then the Ray head, then replicated-job and completion index 0."""
    meta = pod["metadata"]
    labels = meta.get("labels") or {}
    order = [r.get("name") for r in ((obj.get("spec") or {}).get("replicatedJobs") or [])]
    replicated = labels.get("jobset.sigs.k8s.io/replicatedjob-name")
    if kind is RAYJOB and labels.get(JOB_NAME_LABEL) == obj["metadata"]["name"]:
        role = 0  # the submitter pod carries the Ray driver's output
    else:
        role = 1 if labels.get("ray.io/node-type") == "head" else 2
    return (
        role,
        order.index(replicated) if replicated in order else len(order),
        _int(labels.get("jobset.sigs.k8s.io/job-index")),
        _int(labels.get("batch.kubernetes.io/job-completion-index")),
        meta.get("creationTimestamp", ""),
        meta.get("name", ""),
    )


def _int(value: Any) -> int:
    try:
        return int(value)
    except (TypeError, ValueError):
        return 0


def _pod_phase(pod: dict[str, Any]) -> str:
    return str((pod.get("status") or {}).get("phase") or "")


def _earliest_start(pods: list[dict[str, Any]]) -> str | None:
    """When the first pod started: the start of a run whose controller keeps no start time (JobSet)."""
    starts = [str(s) for p in pods if (s := (p.get("status") or {}).get("startTime"))]
    return min(starts) if starts else None


def _default_container(pod: dict[str, Any]) -> str:
    annotated = (pod["metadata"].get("annotations") or {}).get(DEFAULT_CONTAINER_ANNOTATION)
    containers = (pod.get("spec") or {}).get("containers") or [{}]
    return str(annotated or containers[0].get("name", ""))


def _statuses(pod: dict[str, Any]) -> list[tuple[dict[str, Any], bool]]:
    """Container statuses, init containers first (they run first), each flagged `is_init`."""
    status = pod.get("status") or {}
    inits = [(s, True) for s in status.get("initContainerStatuses") or []]
    return inits + [(s, False) for s in status.get("containerStatuses") or []]


def _pod_problem(pods: list[dict[str, Any]]) -> tuple[str, str] | None:
    """The first thing a person must fix: an image pull, a crash loop, bad config, no room to schedule."""
    for pod in pods:
        name = f"{pod['metadata'].get('namespace', '')}/{pod['metadata']['name']}"
        for status, is_init in _statuses(pod):
            found = _container_problem(name, status, is_init)
            if found is not None:
                return found
        for cond in (pod.get("status") or {}).get("conditions") or []:
            if cond.get("type") == "PodScheduled" and cond.get("status") == "False":
                reason = cond.get("reason") or "Unschedulable"
                return reason, f"pod {name} cannot be scheduled: {cond.get('message', reason)}"
    return None


def _container_problem(pod: str, status: dict[str, Any], is_init: bool) -> tuple[str, str] | None:
    waiting = (status.get("state") or {}).get("waiting") or {}
    reason, detail = waiting.get("reason", ""), waiting.get("message", "")
    which = f"{'init container' if is_init else 'container'} {status.get('name')!r} in pod {pod}"
    if reason in IMAGE_REASONS:
        image = status.get("image", "")
        return reason, (
            f"{which} cannot pull image {image!r} ({reason}){': ' + detail if detail else ''}. Check that "
            "the image name and tag exist and that the cluster may pull from that registry "
            "(imagePullSecrets)."
        )
    if reason == "CrashLoopBackOff":
        last = ((status.get("lastState") or {}).get("terminated")) or {}
        code = (
            f"; last exit code {last['exitCode']} ({last.get('reason', 'Error')})"
            if "exitCode" in last
            else ""
        )
        return reason, f"{which} keeps crashing (restarted {status.get('restartCount', 0)} times{code})"
    if reason in CONFIG_REASONS:
        return reason, (
            f"{which} cannot start ({reason}){': ' + detail if detail else ''}. A Secret or ConfigMap it "
            "references may be missing."
        )
    return None


def _failed_container(pods: list[dict[str, Any]]) -> tuple[dict[str, Any], str, dict[str, Any]] | None:
    """The container that failed first (init containers and earliest finish win): the root cause."""
    found: list[tuple[str, int, dict[str, Any], str, dict[str, Any]]] = []
    for pod in pods:
        for status, is_init in _statuses(pod):
            terminated = (status.get("state") or {}).get("terminated") or {}
            if terminated and terminated.get("exitCode", 0) != 0:
                found.append(
                    (
                        terminated.get("finishedAt") or "~",
                        0 if is_init else 1,
                        pod,
                        status["name"],
                        terminated,
                    )
                )
    if not found:
        return None
    found.sort(key=lambda f: (f[0], f[1]))
    _, _, pod, container, terminated = found[0]
    return pod, container, terminated


def _termination_line(pod: dict[str, Any], container: str, terminated: dict[str, Any]) -> str:
    reason = terminated.get("reason") or "Error"
    line = (
        f"container {container!r} in pod {pod['metadata'].get('namespace', '')}/{pod['metadata']['name']} "
        f"exited with code {terminated.get('exitCode')} ({reason})"
    )
    if reason == "OOMKilled":
        line += "; it ran out of memory: raise the memory limit or lower the batch size"
    extra = str(terminated.get("message") or "").strip()
    return line + (f": {extra[:500]}" if extra else "")


def _read_body(response: Any) -> bytes:
    """The whole body of a raw response, and the connection back to the pool."""
    try:
        return bytes(response.data or b"")
    finally:
        response.release_conn()


def _stream_lines(response: Any, what: str) -> Iterator[str]:
    """Decode a log response line by line as it arrives; a broken stream ends with a clear error."""
    # lazy: loaded with the kubernetes client
    import urllib3.exceptions as u3

    pending = b""
    try:
        for chunk in response.stream(4096, decode_content=True):
            pending += chunk
            *lines, pending = pending.split(b"\n")
            for line in lines:
                yield line.decode("utf-8", "replace")
        if pending:
            yield pending.decode("utf-8", "replace")
    except (u3.HTTPError, OSError) as exc:
        raise BackendError(
            f"the log stream of {what} broke off: {_short(exc)}; run the command again"
        ) from exc
    finally:
        response.release_conn()
