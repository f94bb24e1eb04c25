"""The Backend protocol over the Kubernetes API: Job, JobSet, RayJob, Kueue-aware.

This module wires the parts: `client` (the REST client and its retries), `apply` (submission),
`status` (observation), `pods` (pods, leader and diagnosis), `kueue` (why a run is queued).
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable, Iterator
from typing import Any, cast

from tuneplane.backends.base import BackendError, BackendRef, Observation, SubmitRefused, SubmitRequest
from tuneplane.backends.kubernetes import apply, status
from tuneplane.backends.kubernetes.client import (
    DEFAULT_RETRY,
    JOB_KINDS,
    RAYJOB,
    SUBMITTABLE,
    ApiRetry,
    Kind,
    Rest,
    build_api_client,
    stream_lines,
)
from tuneplane.backends.kubernetes.payload import objects_of
from tuneplane.backends.kubernetes.pods import default_container, find_pods
from tuneplane.backends.kubernetes.types import JobObject
from tuneplane.backends.kubernetes.versions import ServedVersions, TooOld, check_request

__all__ = ["KubernetesBackend", "ApiRetry", "build_api_client"]

log = logging.getLogger("tuneplane.backends.kubernetes")


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
        retry: ApiRetry = DEFAULT_RETRY,
        *,
        propagation_policy: str = "Foreground",
        log_tail: int = 20,
        stuck_after: float = status.Stuck.after,
        sleep: Callable[[float], None] = time.sleep,
        rng: random.Random | None = None,
    ) -> None:
        if propagation_policy not in {"Foreground", "Background"}:
            raise ValueError("propagation_policy must be Foreground or Background")
        self.namespace = namespace
        self.retry = retry
        self.propagation_policy = propagation_policy
        self.log_tail = log_tail
        self.stuck_after = stuck_after  # seconds a pod may wait on an image or a Secret before its attempt ends
        self._client = api_client if api_client is not None else build_api_client(kubeconfig, context, in_cluster)
        self._rest = Rest(self._client, retry, sleep, rng or random.Random())
        self._cancelled: set[tuple[str, str, str]] = set()
        self._versions = ServedVersions(self._rest)

    def close(self) -> None:
        self._client.close()

    def submit(self, request: SubmitRequest) -> BackendRef:
        """Check that the cluster's controllers know what the manifests say, then create the job object
        (adopting one that is ours), its companions, then its token Secret."""
        documents = objects_of(request.run_id, request.payload).documents
        try:
            check_request(self._versions, documents, SUBMITTABLE)
        except TooOld as exc:
            raise SubmitRefused(f"run {request.run_id} cannot be submitted: {exc}") from exc
        return apply.submit(self._rest, request, documents, request.namespace or self.namespace, self.name)

    def observe(self, ref: BackendRef) -> Observation:
        kind, ns = self._job_kind(ref), ref.namespace or self.namespace
        cancelled = (kind.kind, ns, ref.name) in self._cancelled
        stuck = status.Stuck(self.stuck_after, self.propagation_policy)
        return status.observe(self._rest, ref, kind, ns, cancelled, self.log_tail, stuck)

    def logs(self, ref: BackendRef, tail: int | None = None, follow: bool = False) -> Iterator[str]:
        """Lines from the leader pod's main container; `follow` streams until the container ends."""
        kind, ns = self._job_kind(ref), ref.namespace or self.namespace
        obj = cast(JobObject | None, self._rest.get(kind, ns, ref.name))
        if obj is None:
            raise BackendError(f"{kind.kind} {ns}/{ref.name} does not exist (any more); there are no logs to read")
        pods = find_pods(self._rest, kind, ns, obj)
        if not pods:
            raise BackendError(f"{kind.kind} {ns}/{ref.name} has no pods yet; `tp status` says why it is waiting")
        name = (pods[0].get("metadata") or {}).get("name", "")
        response = self._rest.pod_log(ns, name, default_container(pods[0]), tail, follow, read=False)
        return stream_lines(response, f"pod {ns}/{name}")

    def cancel(self, ref: BackendRef) -> None:
        """Mark the object as cancelled by us, then delete it with its pods; absent is fine."""
        kind, ns = self._job_kind(ref), ref.namespace or self.namespace
        self._cancelled.add((kind.kind, ns, ref.name))
        mark = {"metadata": {"annotations": {status.CANCEL_ANNOTATION: "true"}}}
        try:
            if self._rest.merge(kind, ns, ref.name, mark) is None:
                return
        except BackendError as exc:  # the mark only refines later observations; deleting is what matters
            log.warning("could not mark %s %s/%s as cancelled: %s", kind.kind, ns, ref.name, exc)
        self._rest.delete(kind, ns, ref.name, self.propagation_policy)

    def clean_up(self, ref: BackendRef) -> None:
        """Delete a finished RayJob, which nothing else deletes: KubeRay at `ttlSecondsAfterFinished` deletes
        only its Ray cluster and keeps the RayJob and its submitter Job. Garbage collection takes what the
        RayJob owns: the submitter Job and its pods, the Ray cluster, the run's tokens Secret. A Job or a
        JobSet is left to its own `ttlSecondsAfterFinished` (`cluster.ttl_seconds_after_finished`), which
        deletes it with its pods and Secret; absent is fine."""
        kind, ns = self._job_kind(ref), ref.namespace or self.namespace
        if kind is RAYJOB:
            self._rest.delete(kind, ns, ref.name, self.propagation_policy)

    def _job_kind(self, ref: BackendRef) -> Kind:
        kind = JOB_KINDS.get(ref.kind)
        if kind is None:
            raise BackendError(
                f"run {ref.name} was submitted as {ref.kind!r}, which the Kubernetes backend does not manage "
                f"(it manages {', '.join(JOB_KINDS)})"
            )
        return kind
