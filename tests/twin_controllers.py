"""The controllers of the cluster twin: Job, JobSet, KubeRay, Kueue, a kubelet, TTL and garbage collection.

They act on the twin's store after every client write (`FakeKube.settle`), until nothing changes, and
model what our backend and our manifests depend on, as the real controllers do it:

- **Job** (kube-controller-manager): API-server defaulting (selector, `controller-uid`/`job-name`
  labels), one pod per completion index for `Indexed` Jobs (`<job>-<index>-<rand>`, hostname
  `<job>-<index>`, label and annotation `batch.kubernetes.io/job-completion-index`), `suspend`,
  `podFailurePolicy` (FailJob / Ignore / Count on exit codes and pod conditions), `backoffLimit`, the
  `Complete`/`Failed` conditions and `ttlSecondsAfterFinished`. A success takes two status writes
  (`SuccessCriteriaMet` with the pods not yet counted, then `Complete`), and so does a failure
  (`FailureTarget` with the pods still running deleted, then `Failed` once none runs; `slow_stops` keeps
  a deleted pod running, as a rank saving on SIGTERM does); a held controller (`hold_jobs`) lets a
  reader see each, as it can between the real controller's syncs.
- **JobSet**: child Jobs `<jobset>-<replicatedJob>-<index>` with the `jobset.sigs.k8s.io/*` labels and
  annotations, a headless Service named after the subdomain, `failurePolicy.maxRestarts` (recreate all
  child Jobs, `restart-attempt` + 1), `successPolicy` (All / Any), `replicatedJobsStatus`, TTL.
- **KubeRay**: a RayCluster per RayJob with head and worker pods (`ray.io/*` labels), the submitter Job
  (KubeRay's own labels; its pods carry only the Job controller's labels unless `submitterPodTemplate`
  gives more; where its container has no command, KubeRay 1.7's, with its `until python -c …` wait for
  the dashboard), `jobDeploymentStatus`/`jobStatus` from the submitter's outcome, `shutdownAfterJobFinishes`
  with `ttlSecondsAfterFinished` deleting the RayCluster only (the submitter Job and the RayJob stay, as
  in KubeRay without `DELETE_RAYJOB_CR_AFTER_JOB_FINISHES`), `suspend` deleting both.
- **Kueue**: a mutating webhook that suspends a queued object on create, a Workload per object (owner
  reference, `kueue.x-k8s.io/job-uid` label, pod sets with their requests), admission against
  ClusterQueue quotas (`QuotaReserved`/`Admitted`, unsuspend), `Pending` with Kueue's reason when the
  quota is used up, `Finished` releasing the quota.
- **kubelet**: a pod whose `secretKeyRef` cannot be resolved waits in `CreateContainerConfigError`; an
  image from a private registry without a usable `imagePullSecrets` waits in `ErrImagePull`; otherwise
  the pod runs (or a test's pod runner runs it) until `exit_pod` ends it.

What a controller creates (pods, child Jobs, the submitter Job) goes through the API server's validation
as a client's write does (twin_core): a refused object is not created and the controller records its
`Warning` Event on the owner, which then waits, as on a cluster.

Time is the twin's clock: `advance(seconds)` moves it, so TTLs are tested without sleeping.
"""

from __future__ import annotations

import copy
import hashlib
import re
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from fakekube import FakeKube

QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
JOB_UID_LABEL = "kueue.x-k8s.io/job-uid"
INDEX = "batch.kubernetes.io/job-completion-index"
JS = "jobset.sigs.k8s.io/"
SUBMITTER_CONTAINER = "ray-job-submitter"
DASHBOARD_PORT = 8265
_COMPONENT = {"JobSet": "jobset", "RayJob": "rayjob-controller", "RayCluster": "raycluster-controller"}
_QUANTITY = re.compile(r"^([0-9.]+)([a-zA-Z]*)$")
_UNITS = {
    "": 1,
    "m": 1e-3,
    "k": 1e3,
    "M": 1e6,
    "G": 1e9,
    "T": 1e12,
    "Ki": 2**10,
    "Mi": 2**20,
    "Gi": 2**30,
    "Ti": 2**40,
    "Pi": 2**50,
}


def quantity(text: Any) -> float:
    match = _QUANTITY.match(str(text))
    if match is None or match.group(2) not in _UNITS:
        raise ValueError(f"not a Kubernetes quantity: {text!r}")
    return float(match.group(1)) * _UNITS[match.group(2)]


def _suffix(seed: str) -> str:
    alphabet = "bcdfghjklmnpqrstvwxz2456789"
    digest = hashlib.sha256(seed.encode()).digest()
    return "".join(alphabet[b % len(alphabet)] for b in digest[:5])


def _cond(obj: dict[str, Any], ctype: str) -> dict[str, Any] | None:
    for cond in (obj.get("status") or {}).get("conditions") or []:
        if cond.get("type") == ctype and cond.get("status") == "True":
            return dict(cond)
    return None


def _owner(obj: dict[str, Any]) -> dict[str, Any]:
    meta = obj["metadata"]
    return {
        "apiVersion": obj["apiVersion"],
        "kind": obj["kind"],
        "name": meta["name"],
        "uid": meta["uid"],
        "controller": True,
        "blockOwnerDeletion": True,
    }


def _owned_by(obj: dict[str, Any], owner: dict[str, Any]) -> bool:
    uid = owner["metadata"]["uid"]
    return any(o.get("uid") == uid for o in obj["metadata"].get("ownerReferences") or [])


class Cluster:
    """Controllers installed on a FakeKube; `FakeKube.settle()` runs them to a fixpoint."""

    def __init__(self, kube: FakeKube, *, auto_run: bool = True, private_registries: tuple[str, ...] = ()) -> None:
        self.kube = kube
        self.auto_run = auto_run  # pods start running as soon as they can; False: a pod runner starts them
        self.private_registries = private_registries
        self.cluster_queues: dict[str, dict[str, float]] = {}
        self.cq_preemption: set[str] = set()  # ClusterQueues that preempt lower-priority Workloads
        self.priority_classes: dict[str, int] = {}  # PriorityClass and WorkloadPriorityClass values
        self.nodes: dict[str, dict[str, Any]] = {}  # none: pods run unscheduled, as before nodes existed
        self.ray_drivers: dict[tuple[str, str], dict[str, Any]] = {}  # the Ray dashboard's job table
        self.ray_dashboards: dict[str, str] = {}  # a dashboard address in the cluster → a real one here
        self.offset = 0.0
        self.jobs_held = False  # the Job controller syncs only when a test steps it (`hold_jobs`)
        self.slow_stops = False  # True: a pod its failing Job deletes runs on after SIGTERM (twin_jobs._fail)
        self._job_syncs = 0
        self._serial = 0
        self._changed = False

    def install(self) -> Cluster:
        self.kube.mutators.append(self._kueue_webhook)
        self.kube.after_write.append(self.reconcile)
        self.kube.evictor = self._evict_now
        self.kube.clock = self.now  # the API server's Date header tells the twin's time, as a real one tells its own
        return self

    # ---- test hooks ------------------------------------------------------------------------
    def add_cluster_queue(self, name: str, **quota: Any) -> None:
        """A ClusterQueue with nominal quotas, e.g. `gpu=8, cpu="96", memory="1Ti"` (gpu: nvidia.com/gpu)."""
        self.cluster_queues[name] = {("nvidia.com/gpu" if k == "gpu" else k): quantity(v) for k, v in quota.items()}
        self.kube.settle()

    def add_queue(self, ns: str, local_queue: str, cluster_queue: str, **quota: Any) -> None:
        self.cluster_queues[cluster_queue] = {
            ("nvidia.com/gpu" if k == "gpu" else k): quantity(v) for k, v in quota.items()
        }
        self.kube.add_local_queue(ns, local_queue, cluster_queue)
        self.kube.settle()

    def add_node(
        self,
        name: str,
        labels: dict[str, str] | None = None,
        taints: list[dict[str, Any]] | None = None,
        **allocatable: Any,
    ) -> None:
        """A node with allocatable resources, e.g. `gpu=8, cpu="96", memory="1Ti"`; pods are scheduled from now on."""
        self.nodes[name] = {
            "labels": {"kubernetes.io/hostname": name, **(labels or {})},
            "taints": taints or [],
            "allocatable": {("nvidia.com/gpu" if k == "gpu" else k): quantity(v) for k, v in allocatable.items()},
        }
        self.kube.settle()

    def evict(self, ns: str, name: str, reason: str = "EvictionByEvictionAPI", *, record: str = "") -> None:
        """The Eviction API (a drain), the taint manager (`DeletionByTaintManager`) or the kubelet
        (`TerminationByKubelet`) deletes a pod: see twin_scheduler.disrupt."""
        from twin_scheduler import disrupt

        messages = {
            "EvictionByEvictionAPI": "Eviction API: evicting",
            "DeletionByTaintManager": "Taint manager: deleting due to NoExecute taint",
            "TerminationByKubelet": "Kubelet: evicting the pod (node pressure)",
        }
        with self.kube.changed:
            disrupt(self, self.kube.objects[("Pod", ns, name)], reason, messages.get(reason, reason), record=record)
            self.kube.settle()
            self.kube.changed.notify_all()

    def driver_exit(self, ns: str, rayjob: str, code: int, log: str = "") -> None:
        """The Ray driver of `rayjob` ends with `code`: the dashboard's job table says so, and every
        submitter following its log gets the log and exits 0, as `ray job logs --follow` does."""
        from twin_ray import ray_failure_message

        with self.kube.changed:
            self.ray_drivers[(ns, rayjob)] = {
                "status": "SUCCEEDED" if code == 0 else "FAILED",
                "driver_exit_code": code,
                "message": "Job finished successfully." if code == 0 else ray_failure_message(code, log),
            }
            followers = [
                p["metadata"]["name"]
                for p in self._all("Pod")
                if p["metadata"]["namespace"] == ns
                and (p["metadata"].get("labels") or {}).get("batch.kubernetes.io/job-name") == rayjob
                and p["status"].get("phase") == "Running"
            ]
        for name in followers:
            self.exit_pod(ns, name, 0, log)
        self.kube.settle()

    def _evict_now(self, ns: str, name: str) -> None:
        """The Eviction API's effect (the caller holds the lock and settles)."""
        from twin_scheduler import disrupt

        disrupt(self, self.kube.objects[("Pod", ns, name)], "EvictionByEvictionAPI", "Eviction API: evicting")

    def drain(self, node: str, *, record: str = "") -> list[str]:
        """`kubectl drain`: cordon the node, then evict every pod bound to it; returns their names."""
        self.nodes[node]["taints"].append({"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"})
        pods = [
            (p["metadata"]["namespace"], p["metadata"]["name"])
            for p in self._all("Pod")
            if p["spec"].get("nodeName") == node and p["status"].get("phase") not in ("Succeeded", "Failed")
        ]
        for ns, name in pods:
            self.evict(ns, name, record=record)
        return [name for _, name in pods]

    def kueue_evict(
        self,
        ns: str,
        kind: str,
        name: str,
        reason: str = "PodsReadyTimeout",
        message: str = "Exceeded the PodsReady timeout",
    ) -> None:
        """Kueue evicts the Workload of a job object (a timeout, a stopped queue): see twin_kueue.evict."""
        from twin_kueue import evict, workload_of

        with self.kube.changed:
            workload = workload_of(self, self.kube.objects[(kind, ns, name)])
            assert workload is not None, f"{kind} {ns}/{name} has no Workload"
            evict(self, workload, reason, "", message)
            self.kube.settle()
            self.kube.changed.notify_all()

    def hold_jobs(self) -> None:
        """The Job controller falls behind: it syncs no Job until `step_jobs` or `release_jobs`, while
        the kubelet and the other controllers go on. The real one syncs a Job a while after the pod
        events it waits for (batched by a second, behind its informers) and finishes a Job in more than
        one status write, so a reader can see a pod `Succeeded` under a Job that is not yet `Complete`
        (see twin_jobs._check_success), or a Job's `FailureTarget` before its `Failed` (twin_jobs._fail)."""
        self.jobs_held = True

    def step_jobs(self, syncs: int = 1) -> None:
        """`syncs` syncs of every Job by the held Job controller, each one status write of a finishing
        Job, then held again; what the other controllers make of them follows at once."""
        with self.kube.changed:
            self._job_syncs = syncs
            self.kube.settle()
            self._job_syncs = 0
            self.kube.changed.notify_all()

    def release_jobs(self) -> None:
        """The Job controller catches up and syncs at once again."""
        with self.kube.changed:
            self.jobs_held = False
            self.kube.settle()
            self.kube.changed.notify_all()

    def advance(self, seconds: float) -> None:
        self.offset += seconds
        self.kube.settle()

    def pods(self, ns: str, selector: dict[str, str] | None = None) -> list[dict[str, Any]]:
        with self.kube.lock:
            return [
                copy.deepcopy(p)
                for (k, n, _), p in sorted(self.kube.objects.items())
                if k == "Pod"
                and n == ns
                and all((p["metadata"].get("labels") or {}).get(a) == b for a, b in (selector or {}).items())
            ]

    def start_pod(self, ns: str, name: str) -> None:
        with self.kube.changed:
            self._run(self.kube.objects[("Pod", ns, name)])
            self.kube.settle()
            self.kube.changed.notify_all()

    def exit_pod(
        self,
        ns: str,
        name: str,
        code: int,
        log: str = "",
        *,
        reason: str = "",
        container: str | None = None,
        conditions: list[dict[str, Any]] | None = None,
        message: str = "",
    ) -> None:
        """End a running pod's main container with `code` (and its log text), as the kubelet reports it;
        `message` is what the container wrote to its termination message (the launcher's end record)."""
        with self.kube.changed:
            pod = self.kube.objects[("Pod", ns, name)]
            status = pod["status"]
            at = self.stamp()
            for cs in status.get("containerStatuses") or []:
                if container in (None, cs["name"]):
                    cs["state"] = {
                        "terminated": {
                            "exitCode": code,
                            "reason": reason or ("Completed" if code == 0 else "Error"),
                            "finishedAt": at,
                            "startedAt": status.get("startTime", at),
                        }
                    }
                    if message:
                        cs["state"]["terminated"]["message"] = message
                    cs["ready"] = False
            status["phase"] = "Succeeded" if code == 0 else "Failed"
            status["conditions"] = [c for c in status.get("conditions") or [] if c.get("type") != "Ready"] + (
                conditions or []
            )
            if log:
                main = container or pod["spec"]["containers"][0]["name"]
                self.kube.logs[(ns, name, main)] = self.kube.logs.get((ns, name, main), "") + log
            self._touch(pod)
            self.kube.settle()
            self.kube.changed.notify_all()

    def finish(self, ns: str, selector: dict[str, str], code: int = 0, log: str = "") -> list[str]:
        """Exit every running pod matching `selector`; returns their names."""
        names = [p["metadata"]["name"] for p in self.pods(ns, selector) if p["status"].get("phase") == "Running"]
        for name in names:
            self.exit_pod(ns, name, code, log)
        return names

    # ---- the loop --------------------------------------------------------------------------
    def now(self) -> float:
        return time.time() + self.offset

    def stamp(self, at: float | None = None) -> str:
        return datetime.fromtimestamp(self.now() if at is None else at, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")

    def seconds(self, stamp: str) -> float:
        return datetime.strptime(stamp, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC).timestamp()

    def reconcile(self) -> None:
        for _ in range(60):
            self._changed = False
            self._kueue()
            self._jobsets()
            self._rayjobs()
            self._rayclusters()
            self._jobs()
            self._kubelet()
            self._ttl()
            if not self._changed:
                return

    def _touch(self, obj: dict[str, Any]) -> None:
        obj["metadata"]["resourceVersion"] = str(next(self.kube._rv))
        self._changed = True

    def _all(self, kind: str) -> list[dict[str, Any]]:
        return [o for (k, _, _), o in sorted(self.kube.objects.items()) if k == kind]

    def _children(self, kind: str, owner: dict[str, Any]) -> list[dict[str, Any]]:
        ns = owner["metadata"]["namespace"]
        return [o for o in self._all(kind) if o["metadata"]["namespace"] == ns and _owned_by(o, owner)]

    def _make(self, obj: dict[str, Any]) -> dict[str, Any] | None:
        """Create as a controller does, through the API server's validation: an object it refuses is not
        created (None) and the controller records a Warning Event on the owner, then tries again later."""
        from fakekube import BY_KIND

        refused = self.kube.refusal(obj)
        if refused:
            self._failed_create(obj, refused)
            return None
        self._changed = True
        return self.kube._create(BY_KIND[obj["kind"]], obj["metadata"]["namespace"], obj, keep_status=True)

    def _failed_create(self, obj: dict[str, Any], refused: str) -> None:
        """The Warning Event each controller records when the API server refuses what it creates, with its
        reason and wording; repeats are counted on one Event (the recorder aggregates similar events)."""
        from fakekube import BY_KIND

        (owner,) = obj["metadata"]["ownerReferences"][:1]
        ns = obj["metadata"]["namespace"]
        if owner["kind"] == "JobSet":
            reason, message = "JobCreationFailed", refused
        elif owner["kind"] == "RayJob":
            reason, message = (
                "FailedToCreateRayJobSubmitter",
                f"Failed to create new Kubernetes Job {ns}/{obj['metadata']['name']}: {refused}",
            )
        elif owner["kind"] == "RayCluster":
            group = "Head" if (obj["metadata"].get("labels") or {}).get("ray.io/node-type") == "head" else "Worker"
            reason = f"FailedToCreate{group}Pod"
            message = f"Failed to create {group.lower()} Pod {ns}/{obj['metadata']['name']}, {refused}"
        else:
            reason, message = "FailedCreate", f"Error creating: {refused}"
        for event in self._all("Event"):
            if event["involvedObject"].get("uid") == owner["uid"] and event["reason"] == reason:
                event.update(count=event["count"] + 1, message=message, lastTimestamp=self.stamp())
                return
        self.kube._create(
            BY_KIND["Event"],
            ns,
            {
                "metadata": {"name": f"{owner['name']}.{self._serial:x}{len(self._all('Event')):x}", "namespace": ns},
                "involvedObject": {
                    "apiVersion": owner["apiVersion"],
                    "kind": owner["kind"],
                    "name": owner["name"],
                    "namespace": ns,
                    "uid": owner["uid"],
                },
                "reason": reason,
                "message": message,
                "type": "Warning",
                "count": 1,
                "firstTimestamp": self.stamp(),
                "lastTimestamp": self.stamp(),
                "source": {"component": _COMPONENT.get(owner["kind"], "job-controller")},
            },
            keep_status=True,
        )

    def _remove(self, obj: dict[str, Any]) -> None:
        meta = obj["metadata"]
        if (obj["kind"], meta["namespace"], meta["name"]) in self.kube.objects:
            self.kube._delete_now(obj["kind"], meta["namespace"], meta["name"], "Background")
            self._changed = True

    def _name(self, stem: str) -> str:
        self._serial += 1
        return f"{stem}-{_suffix(f'{stem}/{self._serial}/{self.kube.url}')}"

    # ---- Kueue -----------------------------------------------------------------------------
    def _kueue_webhook(self, kind: str, obj: dict[str, Any]) -> None:
        if kind in ("Job", "JobSet", "RayJob") and (obj.get("metadata", {}).get("labels") or {}).get(QUEUE_LABEL):
            obj.setdefault("spec", {})["suspend"] = True

    def _kueue(self) -> None:
        from twin_kueue import reconcile_kueue

        reconcile_kueue(self)

    # ---- Job -------------------------------------------------------------------------------
    def _jobs(self) -> None:
        from twin_jobs import reconcile_job

        if self.jobs_held:
            if self._job_syncs <= 0:
                return
            self._job_syncs -= 1
        for job in self._all("Job"):
            reconcile_job(self, job)

    def _jobsets(self) -> None:
        from twin_jobs import reconcile_jobset

        for jobset in self._all("JobSet"):
            reconcile_jobset(self, jobset)

    def _rayjobs(self) -> None:
        from twin_ray import reconcile_rayjob

        for rayjob in self._all("RayJob"):
            reconcile_rayjob(self, rayjob)

    def _rayclusters(self) -> None:
        from twin_ray import reconcile_raycluster

        for cluster in self._all("RayCluster"):
            reconcile_raycluster(self, cluster)

    # ---- kubelet ---------------------------------------------------------------------------
    def _kubelet(self) -> None:
        from twin_scheduler import reap, schedule

        reap(self)
        for pod in self._all("Pod"):
            status = pod.setdefault("status", {})
            if status.get("phase") not in (None, "", "Pending") or pod["metadata"].get("deletionTimestamp"):
                continue
            if self.nodes and not pod["spec"].get("nodeName") and not schedule(self, pod):
                continue
            problem = self._pod_problem(pod)
            if problem is not None:
                self._wait(pod, *problem)
            elif self.auto_run:
                self._run(pod)
            elif status.get("phase") != "Pending" or not status.get("containerStatuses"):
                self._wait(pod, "ContainerCreating", "")

    def _pod_problem(self, pod: dict[str, Any]) -> tuple[str, str] | None:
        ns = pod["metadata"]["namespace"]
        spec = pod["spec"]
        for container in (spec.get("initContainers") or []) + spec["containers"]:
            image = str(container.get("image", ""))
            host = image.split("/")[0] if "/" in image and ("." in image.split("/")[0]) else "docker.io"
            if host in self.private_registries and not any(
                ("Secret", ns, s.get("name")) in self.kube.objects for s in spec.get("imagePullSecrets") or []
            ):
                return "ErrImagePull", (
                    f'failed to pull and unpack image "{image}": failed to resolve reference: '
                    "pull access denied, repository does not exist or may require "
                    "authorization: authorization failed: no basic auth credentials"
                )
            for entry in container.get("env") or []:
                ref = (entry.get("valueFrom") or {}).get("secretKeyRef")
                if not ref or ref.get("optional"):
                    continue
                secret = self.kube.objects.get(("Secret", ns, ref["name"]))
                if secret is None:
                    return "CreateContainerConfigError", f'secret "{ref["name"]}" not found'
                if ref["key"] not in (secret.get("data") or {}):
                    return "CreateContainerConfigError", (
                        f"couldn't find key {ref['key']} in Secret {ns}/{ref['name']}"
                    )
        return None

    def _wait(self, pod: dict[str, Any], reason: str, message: str) -> None:
        status = pod["status"]
        spec = pod["spec"]
        waiting = {"waiting": {"reason": reason, "message": message} if message else {"reason": reason}}
        inits = [c["name"] for c in spec.get("initContainers") or []]
        statuses = {
            "initContainerStatuses": [self._container(c, spec, waiting) for c in inits],
            "containerStatuses": [self._container(c["name"], spec, waiting) for c in spec["containers"]],
        }
        wanted = {"phase": "Pending", **statuses, "conditions": [{"type": "PodScheduled", "status": "True"}]}
        if any(status.get(k) != v for k, v in wanted.items()):
            status.update(wanted)
            self._touch(pod)

    def _container(self, name: str, spec: dict[str, Any], state: dict[str, Any]) -> dict[str, Any]:
        image = next(
            (c.get("image", "") for c in (spec.get("initContainers") or []) + spec["containers"] if c["name"] == name),
            "",
        )
        return {
            "name": name,
            "image": image,
            "imageID": "",
            "ready": "running" in state,
            "restartCount": 0,
            "state": copy.deepcopy(state),
            "started": "running" in state,
        }

    def _run(self, pod: dict[str, Any]) -> None:
        status = pod["status"]
        spec = pod["spec"]
        at = self.stamp()
        done = {"terminated": {"exitCode": 0, "reason": "Completed", "startedAt": at, "finishedAt": at}}
        status.update(
            phase="Running",
            startTime=status.get("startTime") or at,
            podIP="127.0.0.1",
            initContainerStatuses=[self._container(c["name"], spec, done) for c in spec.get("initContainers") or []],
            containerStatuses=[
                self._container(c["name"], spec, {"running": {"startedAt": at}}) for c in spec["containers"]
            ],
            conditions=[{"type": "PodScheduled", "status": "True"}, {"type": "Ready", "status": "True"}],
        )
        self._touch(pod)

    # ---- TTL -------------------------------------------------------------------------------
    def _ttl(self) -> None:
        for kind in ("Job", "JobSet"):
            for obj in self._all(kind):
                ttl = (obj.get("spec") or {}).get("ttlSecondsAfterFinished")
                if ttl is None or obj["metadata"].get("ownerReferences"):
                    continue
                finished = self._finished_at(obj)
                if finished is not None and self.now() >= self.seconds(finished) + int(ttl):
                    self._remove(obj)

    @staticmethod
    def _finished_at(obj: dict[str, Any]) -> str | None:
        for ctype in ("Complete", "Failed", "Completed"):
            cond = _cond(obj, ctype)
            if cond is not None:
                return str(cond.get("lastTransitionTime"))
        return None

    def iter_pods_of(self, owner: dict[str, Any]) -> Iterator[dict[str, Any]]:
        yield from self._children("Pod", owner)
