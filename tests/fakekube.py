"""A stateful fake Kubernetes API server for tests, spoken to through the real `kubernetes` client.

No API server can run on the test machines, so this one speaks the real REST paths, verbs, content
types and `Status` bodies our backend relies on: namespaced CRUD for the kinds we submit and read,
server-side apply, merge patch, delete with propagation policy and owner-reference garbage collection,
pod lists with label selectors and pod logs (tail and follow). Test hooks set controller-owned state
(status, pods, Kueue workloads) and inject faults (latency, 5xx, 429, connection drops, 409).

Use it as a pytest plugin (`pytest_plugins = ("fakekube",)`) for the `fake_kube` and `kube_client`
fixtures, or start a `FakeKube()` by hand.
"""

from __future__ import annotations

import base64
import copy
import dataclasses
import email.utils
import itertools
import json
import re
import socket
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest
import twin_fields as fields
import twin_rbac
import twin_schemas
import yaml


@dataclass(frozen=True)
class ResourceType:
    group: str
    version: str
    plural: str
    kind: str
    has_status: bool = True  # status is a subresource: apply and create ignore it
    validated: bool = False  # checked against the real schema on every write from a client
    custom: bool = False  # a custom resource: no strategic merge patch
    namespaced: bool = True  # cluster-scoped kinds are stored under namespace "" (test hooks only)

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version


RESOURCE_TYPES = [
    ResourceType("", "v1", "secrets", "Secret", has_status=False, validated=True),
    ResourceType("", "v1", "configmaps", "ConfigMap", has_status=False, validated=True),
    ResourceType("", "v1", "pods", "Pod", validated=True),
    ResourceType("", "v1", "services", "Service", validated=True),
    ResourceType("", "v1", "persistentvolumeclaims", "PersistentVolumeClaim", validated=True),
    ResourceType("apps", "v1", "deployments", "Deployment", validated=True),
    ResourceType("", "v1", "serviceaccounts", "ServiceAccount", has_status=False, validated=True),
    ResourceType("", "v1", "events", "Event", has_status=False),  # written by the twin's controllers only
    ResourceType("rbac.authorization.k8s.io", "v1", "roles", "Role", has_status=False, validated=True),
    ResourceType("rbac.authorization.k8s.io", "v1", "rolebindings", "RoleBinding", has_status=False, validated=True),
    ResourceType("rbac.authorization.k8s.io", "v1", "clusterroles", "ClusterRole", has_status=False, namespaced=False),
    ResourceType(
        "rbac.authorization.k8s.io",
        "v1",
        "clusterrolebindings",
        "ClusterRoleBinding",
        has_status=False,
        namespaced=False,
    ),
    ResourceType("batch", "v1", "jobs", "Job", validated=True),
    ResourceType("jobset.x-k8s.io", "v1alpha2", "jobsets", "JobSet", validated=True, custom=True),
    ResourceType("ray.io", "v1", "rayjobs", "RayJob", validated=True, custom=True),
    ResourceType("ray.io", "v1", "rayclusters", "RayCluster", custom=True),
    # Kueue >= 0.15 serves v1beta2 (stored) and v1beta1 (deprecated, with the CRD's warning); the same
    # objects through both. The later entry is the one objects are stored as (BY_KIND).
    ResourceType("kueue.x-k8s.io", "v1beta1", "workloads", "Workload", custom=True),
    ResourceType("kueue.x-k8s.io", "v1beta1", "localqueues", "LocalQueue", custom=True),
    ResourceType("kueue.x-k8s.io", "v1beta2", "workloads", "Workload", custom=True),
    ResourceType("kueue.x-k8s.io", "v1beta2", "localqueues", "LocalQueue", custom=True),
]
FIELD_VALIDATION = ("Strict", "Warn", "Ignore")
APPLY_PATCH = "application/apply-patch+yaml"
# spec fields the API server (or the controller's validating webhook) refuses to change after create
IMMUTABLE = {
    "Job": ("template", "selector", "completionMode", "podFailurePolicy"),
    "JobSet": ("replicatedJobs",),
}
# what a suspended object's pod template may change (Kubernetes' mutable scheduling directives of a Job
# that never started; the JobSet webhook's allowance for Kueue): everything else stays immutable
SCHEDULING_DIRECTIVES = {
    "metadata": ("labels", "annotations"),
    "spec": ("nodeSelector", "tolerations", "affinity", "schedulingGates"),
}
BY_PATH = {(r.group, r.version, r.plural): r for r in RESOURCE_TYPES}
BY_KIND = {r.kind: r for r in RESOURCE_TYPES}

_NS_PATH = r"namespaces/(?P<ns>[^/]+)/(?P<plural>[^/]+)(?:/(?P<name>[^/]+)(?:/(?P<sub>[^/]+))?)?"
_CORE_RE = re.compile(r"^/api/(?P<version>v1)/" + _NS_PATH + "$")
_GROUP_RE = re.compile(r"^/apis/(?P<group>[^/]+)/(?P<version>[^/]+)/" + _NS_PATH + "$")
_TERMINAL_POD_PHASES = frozenset({"Succeeded", "Failed"})
_VERSION = {
    "major": "1",
    "minor": "31",
    "gitVersion": "v1.31.0-fake",
    "gitCommit": "0" * 40,
    "gitTreeState": "clean",
    "buildDate": "2024-08-13T00:00:00Z",
    "goVersion": "go1.22.5",
    "compiler": "gc",
    "platform": "linux/amd64",
}


def now(clock: Callable[[], float] = time.time) -> str:
    """Kubernetes timestamps: RFC 3339, UTC, second precision, on `clock` (the server's, see FakeKube.clock)."""
    return datetime.fromtimestamp(clock(), UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def status_body(code: int, reason: str, message: str, details: dict[str, Any] | None = None) -> dict[str, Any]:
    """A `metav1.Status` failure, the body every real API error carries."""
    return {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "details": details or {},
        "code": code,
    }


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch: maps merge recursively, null deletes, anything else replaces."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


def selector_matches(selector: str, labels: dict[str, str]) -> bool:
    """Label selector subset: `k=v`, `k==v`, `k!=v`, `k` (exists), `!k` (absent), comma-joined."""
    for term in filter(None, (t.strip() for t in selector.split(","))):
        if "!=" in term:
            key, value = term.split("!=", 1)
            if labels.get(key.strip()) == value.strip():
                return False
        elif "=" in term:
            key, value = re.split(r"==?", term, maxsplit=1)
            if labels.get(key.strip()) != value.strip():
                return False
        elif term.startswith("!"):
            if term[1:] in labels:
                return False
        elif term not in labels:
            return False
    return True


@dataclass
class Fault:
    """One injected failure; fires for the next `times` matching requests."""

    kind: str  # "latency" | "drop" | an HTTP status code as a string ("500", "429", "409", ...)
    path_regex: re.Pattern[str] | None
    method: str | None
    times: int
    seconds: float = 0.0
    retry_after: int = 1
    reason: str = ""
    action: Callable[[], None] | None = None  # runs when the fault fires, e.g. a racing creator
    hits: int = 0

    def matches(self, method: str, path: str) -> bool:
        if self.times <= 0 or (self.method and self.method != method):
            return False
        return self.path_regex is None or self.path_regex.search(path) is not None


@dataclass
class Request:
    """What the server received, for assertions about verbs, content types and parameters."""

    method: str
    path: str
    query: dict[str, str]
    content_type: str
    body: bytes = field(repr=False)
    headers: dict[str, str] = field(default_factory=dict, repr=False)  # names lower-cased


class FakeKube:
    """The server and its state; every state change happens under one lock."""

    def __init__(self) -> None:
        self.lock = threading.RLock()
        self.changed = threading.Condition(self.lock)
        self.objects: dict[tuple[str, str, str], dict[str, Any]] = {}  # (kind, ns, name) -> object
        self.creations: Counter[tuple[str, str, str]] = Counter()
        self.deletions: list[dict[str, Any]] = []
        self.requests: list[Request] = []
        self.faults: list[Fault] = []
        self.logs: dict[tuple[str, str, str], str] = {}  # (ns, pod, container) -> text
        self.linger_deletes = False  # True: deleted objects keep a deletionTimestamp until finish_deletion
        self.owners: dict[tuple[str, str, str], dict[str, set[tuple[str, ...]]]] = {}  # field managers
        self.webhooks: list[Callable[[str, dict[str, Any]], str | None]] = []  # → a denial message, or None
        self.mutators: list[Callable[[str, dict[str, Any]], None]] = []  # mutating admission, on create
        self.after_write: list[Callable[[], None]] = []  # controllers: run after every client write
        self.validate = True  # schema validation of client writes (off only to measure its cost)
        self.tokens: dict[str, tuple[str, str]] = {}  # bearer token -> the ServiceAccount (ns, name) it is
        self.audit: list[tuple[str, twin_rbac.Attributes]] = []  # (user, request) of every authorization asked
        # API versions this server does not serve, e.g. {"kueue.x-k8s.io/v1beta2"} for a Kueue before 0.15
        self.unserved: set[str] = set()
        # An older controller's CRD in the OpenAPI document: kind → the dotted fields it lacks, e.g.
        # {"RayJob": ("spec.backoffLimit", "spec.submitterConfig")} for KubeRay 1.1
        self.older_crds: dict[str, tuple[str, ...]] = {}
        self.held: dict[tuple[str, str, str], str] = {}  # deleted, held by finalizers → propagation policy
        self.evictor: Callable[[str, str], None] | None = None  # the cluster's, for POST pods/<name>/eviction
        self.clock: Callable[[], float] = time.time  # the server's time, sent in every answer's Date header
        self._appliers: dict[tuple[str, str, str], set[str]] = {}
        self._pending_owners: dict[str, set[tuple[str, ...]]] = {}
        self._rv = itertools.count(1)
        self._stopping = threading.Event()
        self._httpd: _Server | None = None
        self._thread: threading.Thread | None = None

    # ---- lifecycle -------------------------------------------------------------------------
    def start(self) -> FakeKube:
        if self.validate:
            twin_schemas.warm()  # load and compile the schemas now, not inside a client's request timeout
        self._httpd = _Server(("127.0.0.1", 0), _Handler)
        self._httpd.kube = self
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, kwargs={"poll_interval": 0.02}, name="fakekube", daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._stopping.is_set():
            return
        self._stopping.set()
        with self.changed:
            self.changed.notify_all()
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.close_connections()
            self._httpd.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)

    @property
    def url(self) -> str:
        assert self._httpd is not None, "start() the server first"
        host, port = self._httpd.server_address[:2]
        return f"http://{host}:{port}"

    def api_client(self, token: str = "fake-token") -> Any:
        """A real `kubernetes.client.ApiClient` pointed at this server.

        urllib3's own retries are off, as the backend sets them when it builds its client, so the
        retries a test sees are the backend's. The default token is an administrator's (RBAC allows it
        everything); a ServiceAccount's (`service_account_token`) is held to its roles.
        """
        from kubernetes import client

        cfg = client.Configuration()
        cfg.host = self.url
        cfg.retries = False
        cfg.api_key = {"authorization": f"Bearer {token}"}
        return client.ApiClient(cfg)

    # ---- test hooks ------------------------------------------------------------------------
    def inject(
        self,
        fault: str | int,
        path_regex: str | None = None,
        times: int = 1,
        *,
        method: str | None = None,
        seconds: float = 0.0,
        retry_after: int = 1,
        reason: str = "",
        action: Callable[[], None] | None = None,
    ) -> Fault:
        """Make the next `times` matching requests fail: "latency" (then served), "drop", or a status code."""
        kind = str(fault)
        if kind not in {"latency", "drop"} and not kind.isdigit():
            raise ValueError(f"unknown fault {fault!r}")
        pattern = re.compile(path_regex) if path_regex else None
        injected = Fault(kind, pattern, method, times, seconds, retry_after, reason, action)
        with self.lock:
            self.faults.append(injected)
        return injected

    def service_account_token(self, ns: str, name: str) -> str:
        """A bearer token that authenticates as ServiceAccount NS/NAME (which must exist)."""
        return twin_rbac.issue_token(self, ns, name)

    def get(self, kind: str, ns: str, name: str) -> dict[str, Any] | None:
        with self.lock:
            obj = self.objects.get((kind, ns, name))
            return copy.deepcopy(obj) if obj is not None else None

    def list(self, kind: str, ns: str | None = None) -> list[dict[str, Any]]:
        with self.lock:
            return [copy.deepcopy(o) for (k, n, _), o in sorted(self.objects.items()) if k == kind and ns in (None, n)]

    def put(self, obj: dict[str, Any]) -> dict[str, Any]:
        """Create an object as another actor would (counts as a creation); returns the stored copy."""
        kind = obj["kind"]
        ns = obj["metadata"].get("namespace", "default") if BY_KIND[kind].namespaced else ""
        with self.changed:
            stored = self._create(BY_KIND[kind], ns, copy.deepcopy(obj), keep_status=True)
            self.changed.notify_all()
            return copy.deepcopy(stored)

    def set_status(self, kind: str, ns: str, name: str, status: dict[str, Any]) -> None:
        """Replace an object's status, as its controller would."""
        with self.changed:
            obj = self.objects[(kind, ns, name)]
            obj["status"] = copy.deepcopy(status)
            obj["metadata"]["resourceVersion"] = str(next(self._rv))
            self.changed.notify_all()

    def set_spec(self, kind: str, ns: str, name: str, **fields: Any) -> None:
        """Merge fields into an object's spec (e.g. `suspend=True`, as Kueue does)."""
        with self.changed:
            obj = self.objects[(kind, ns, name)]
            obj["spec"] = merge_patch(obj.get("spec", {}), fields)
            self.changed.notify_all()

    def add_pod(
        self,
        ns: str,
        name: str,
        labels: dict[str, str],
        phase: str = "Running",
        container_statuses: list[dict[str, Any]] | None = None,
        log_text: str | dict[str, str] = "",
        *,
        init_container_statuses: list[dict[str, Any]] | None = None,
        conditions: list[dict[str, Any]] | None = None,
        start_time: str | None = None,
        owner: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        """Add a pod as a controller would; `log_text` is one string (first container) or per container."""
        default = [{"name": "trainer", "state": {"running": {}}}]
        statuses = [_full_status(s) for s in container_statuses or default]
        inits = [_full_status(s) for s in init_container_statuses or []]
        containers = [{"name": s["name"], "image": s["image"]} for s in statuses]
        pod: dict[str, Any] = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name, "namespace": ns, "labels": dict(labels)},
            "spec": {
                "containers": containers,
                "initContainers": [{"name": s["name"], "image": s.get("image", "")} for s in inits],
            },
            "status": {
                "phase": phase,
                "startTime": start_time or now(),
                "containerStatuses": statuses,
                "initContainerStatuses": inits,
                "conditions": conditions or [],
            },
        }
        if owner:
            pod["metadata"]["ownerReferences"] = [owner]
        texts = log_text if isinstance(log_text, dict) else {containers[0]["name"]: log_text}
        texts = {c: text for c, text in texts.items() if text}  # a waiting container has no log yet
        with self.changed:
            stored = self._create(BY_KIND["Pod"], ns, pod, keep_status=True)
            for container, text in texts.items():
                self.logs[(ns, name, container)] = text
            self.changed.notify_all()
            return copy.deepcopy(stored)

    def append_log(self, ns: str, pod: str, text: str, container: str | None = None) -> None:
        """Append to a pod's log; followers see it."""
        with self.changed:
            key = (ns, pod, container or self._default_container(ns, pod))
            self.logs[key] = self.logs.get(key, "") + text
            self.changed.notify_all()

    def set_pod_phase(self, ns: str, name: str, phase: str) -> None:
        with self.changed:
            self.objects[("Pod", ns, name)]["status"]["phase"] = phase
            self.changed.notify_all()

    def add_workload(
        self,
        ns: str,
        name: str,
        owner_kind: str,
        owner_name: str,
        conditions: list[dict[str, Any]] | None = None,
        queue_name: str = "",
        admission: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        """Add a Kueue Workload owned by an existing job object, as Kueue would."""
        owner = self.objects[(owner_kind, ns, owner_name)]
        meta = owner["metadata"]
        workload: dict[str, Any] = {
            "apiVersion": "kueue.x-k8s.io/v1beta1",
            "kind": "Workload",
            "metadata": {
                "name": name,
                "namespace": ns,
                "labels": {"kueue.x-k8s.io/job-uid": meta["uid"]},
                "ownerReferences": [
                    {
                        "apiVersion": owner["apiVersion"],
                        "kind": owner_kind,
                        "name": owner_name,
                        "uid": meta["uid"],
                        "controller": True,
                        "blockOwnerDeletion": True,
                    }
                ],
            },
            "spec": {"queueName": queue_name, "podSets": []},
            "status": {"conditions": conditions or []},
        }
        if admission:
            workload["status"]["admission"] = admission
        return self.put(workload)

    def add_local_queue(self, ns: str, name: str, cluster_queue: str) -> dict[str, Any]:
        return self.put(
            {
                "apiVersion": "kueue.x-k8s.io/v1beta1",
                "kind": "LocalQueue",
                "metadata": {"name": name, "namespace": ns},
                "spec": {"clusterQueue": cluster_queue},
            }
        )

    def remove(self, kind: str, ns: str, name: str) -> None:
        """Delete an object behind the client's back (someone else ran kubectl delete)."""
        with self.changed:
            self._delete_now(kind, ns, name, "Background")
            self.changed.notify_all()

    def finish_deletion(self, kind: str, ns: str, name: str) -> None:
        """Complete a lingering (foreground) deletion."""
        with self.changed:
            self._delete_now(kind, ns, name, "Foreground")
            self.changed.notify_all()

    def settle(self) -> None:
        """Let the controllers act until nothing changes (bounded). Caller holds the lock or not."""
        with self.changed:
            for run in self.after_write:
                run()

    def requests_for(self, method: str, path_regex: str) -> list[Request]:
        pattern = re.compile(path_regex)
        with self.lock:
            return [r for r in self.requests if r.method == method and pattern.search(r.path)]

    # ---- state transitions (callers hold the lock) -----------------------------------------
    def _create(
        self, rtype: ResourceType, ns: str, obj: dict[str, Any], keep_status: bool, manager: str = ""
    ) -> dict[str, Any]:
        meta = obj.setdefault("metadata", {})
        if not meta.get("name") and meta.get("generateName"):
            meta["name"] = f"{meta['generateName']}{_suffix()}"
        meta.update(
            namespace=ns,
            uid=str(uuid.uuid4()),
            resourceVersion=str(next(self._rv)),
            creationTimestamp=now(self.clock),  # the server's clock, as its Date header tells it
            generation=1,
        )
        if not rtype.namespaced:
            meta.pop("namespace")
        obj["apiVersion"], obj["kind"] = rtype.api_version, rtype.kind
        if rtype.has_status and not keep_status:
            obj["status"] = {}
        if rtype.kind == "Secret":
            _fold_string_data(obj)
        key = (rtype.kind, ns, meta["name"])
        self.objects[key] = obj
        self.creations[key] += 1
        if manager:
            self.owners[key] = fields.update({}, manager, {}, obj)
            self._stamp_managers(key)
        return obj

    def _update(self, obj: dict[str, Any], new: dict[str, Any], rtype: ResourceType) -> dict[str, Any]:
        keep = {k: obj["metadata"][k] for k in ("uid", "creationTimestamp", "namespace", "name")}
        spec_changed = new.get("spec", obj.get("spec")) != obj.get("spec")
        if rtype.has_status:
            new["status"] = obj.get("status", {})
        new.setdefault("metadata", {}).update(keep, resourceVersion=str(next(self._rv)))
        new["metadata"]["generation"] = obj["metadata"].get("generation", 1) + int(spec_changed)
        new["apiVersion"], new["kind"] = rtype.api_version, rtype.kind
        if rtype.kind == "Secret":
            _fold_string_data(new)
        obj.clear()
        obj.update(new)
        return obj

    def _stamp_managers(self, key: tuple[str, str, str]) -> None:
        obj = self.objects[key]
        rtype = BY_KIND[key[0]]
        obj["metadata"]["managedFields"] = [
            {
                "manager": m,
                "operation": "Apply" if m in self._appliers.get(key, set()) else "Update",
                "apiVersion": rtype.api_version,
                "time": now(),
                "fieldsType": "FieldsV1",
                "fieldsV1": fields.to_fields_v1(paths),
            }
            for m, paths in sorted(self.owners.get(key, {}).items())
        ]

    def client_write(
        self,
        rtype: ResourceType,
        ns: str,
        name: str | None,
        new: dict[str, Any],
        *,
        manager: str,
        validation: str,
        mode: str,
        force: bool = False,
    ) -> tuple[dict[str, Any], int, list[str]]:
        """Every write a client makes: admission, validation, immutability, conflicts, then store.

        `mode`: "create" (POST), "apply" (server-side apply), "update" (PUT or merge patch, `new` is the
        whole object after the change). Returns (stored object, HTTP code, warnings). Caller holds the lock.
        """
        if validation not in FIELD_VALIDATION:
            raise _HttpError(
                400, "BadRequest", f"fieldValidation must be one of {', '.join(FIELD_VALIDATION)}, not {validation!r}"
            )
        key_name = name or (new.get("metadata") or {}).get("name")
        current = self.objects.get((rtype.kind, ns, key_name)) if key_name else None
        if mode == "create" and current is not None:
            raise _already_exists(rtype, str(key_name))
        if mode == "update" and current is None:
            raise _not_found(rtype, str(name))
        if mode == "create" and not key_name and not (new.get("metadata") or {}).get("generateName"):
            raise _HttpError(
                422,
                "Invalid",
                f"{rtype.kind} is invalid: metadata.name: Required value: name or generateName is required",
            )
        self._check_resource_version(rtype, current, new)
        if mode == "apply":
            new = self._applied(rtype, ns, str(key_name), current, new, manager, force)
        warnings = self._admit(rtype, current, new, validation)
        if current is None:
            stored = self._create(rtype, ns, new, keep_status=False)
            key = (rtype.kind, ns, stored["metadata"]["name"])
            if mode == "apply":
                self.owners[key] = self._pending_owners
                self._appliers.setdefault(key, set()).add(manager)
            else:
                self.owners[key] = fields.update({}, manager, {}, stored)
            self._stamp_managers(key)
            return stored, 201, warnings
        key = (rtype.kind, ns, str(key_name))
        if mode == "apply":
            self.owners[key] = self._pending_owners
            self._appliers.setdefault(key, set()).add(manager)
        else:
            self.owners[key] = fields.update(self.owners.get(key, {}), manager, current, new)
        self._check_immutable(rtype, current, new)
        if current["metadata"].get("deletionTimestamp"):  # a deleted object keeps its deletion mark
            new.setdefault("metadata", {})["deletionTimestamp"] = current["metadata"]["deletionTimestamp"]
        stored = self._update(current, new, rtype)
        self._stamp_managers(key)
        if key in self.held and not stored["metadata"].get("finalizers"):
            self._delete_now(*key, self.held.pop(key))
        return stored, 200, warnings

    def _applied(
        self,
        rtype: ResourceType,
        ns: str,
        name: str,
        current: dict[str, Any] | None,
        applied: dict[str, Any],
        manager: str,
        force: bool,
    ) -> dict[str, Any]:
        if rtype.has_status:
            applied.pop("status", None)
        base = copy.deepcopy(current) if current is not None else {}
        if base:
            base.pop("status", None)
        owners = self.owners.get((rtype.kind, ns, name), {}) if current is not None else {}
        try:
            result, self._pending_owners = fields.apply(base, owners, manager, applied, force)
        except fields.Conflict as exc:
            raise _HttpError(
                409, "Conflict", str(exc), {"name": name, "group": rtype.group, "kind": rtype.plural}
            ) from None
        return result

    @staticmethod
    def _check_resource_version(rtype: ResourceType, current: dict[str, Any] | None, new: dict[str, Any]) -> None:
        wanted = (new.get("metadata") or {}).get("resourceVersion")
        if not wanted:
            return
        if current is None:
            raise _HttpError(
                409,
                "Conflict",
                f'{rtype.plural} "{new["metadata"].get("name")}": resourceVersion '
                "must not be set on objects to be created",
            )
        if str(wanted) != current["metadata"]["resourceVersion"]:
            raise _HttpError(
                409,
                "Conflict",
                f"Operation cannot be fulfilled on {rtype.plural} "
                f'"{current["metadata"]["name"]}": the object has been modified; please apply your '
                "changes to the latest version and try again",
            )

    def _admit(
        self, rtype: ResourceType, current: dict[str, Any] | None, new: dict[str, Any], validation: str
    ) -> list[str]:
        """Mutating webhooks (on create), schema validation with pruning, validating webhooks."""
        if current is None:
            for mutate in self.mutators:
                mutate(rtype.kind, new)
        warnings: list[str] = []
        if rtype.validated and self.validate:
            verdict = twin_schemas.check(new, rtype.api_version, rtype.kind)
            if verdict.unknown and validation == "Strict":
                detail = ", ".join(f'unknown field "{p}"' for p in verdict.unknown)
                raise _HttpError(400, "BadRequest", f"strict decoding error: {detail}")
            if validation == "Warn":
                warnings = [f'unknown field "{p}"' for p in verdict.unknown]
            refused = _refusal(rtype, new, verdict)
            if refused is not None:
                raise refused
        denied = self._denial(rtype, new)
        if denied is not None:
            raise denied
        return warnings

    def _denial(self, rtype: ResourceType, obj: dict[str, Any]) -> _HttpError | None:
        """The first validating webhook that denies `obj`, in the API server's words."""
        for webhook in self.webhooks:
            denial = webhook(rtype.kind, obj)
            if denial:
                return _HttpError(
                    403,
                    "Forbidden",
                    f'admission webhook "{denial.split(":")[0]}" denied the '
                    f"request: {denial.split(':', 1)[-1].strip()}",
                )
        return None

    @staticmethod
    def _check_immutable(rtype: ResourceType, current: dict[str, Any], new: dict[str, Any]) -> None:
        old_spec, new_spec = current.get("spec") or {}, new.get("spec") or {}
        frozen = IMMUTABLE.get(rtype.kind, ())
        suspended = bool(old_spec.get("suspend")) and not (current.get("status") or {}).get("startTime")
        for field_name in frozen:
            old, wanted = old_spec.get(field_name), new_spec.get(field_name)
            if suspended and rtype.kind == "Job" and field_name == "template":
                old, wanted = _without_directives(old), _without_directives(wanted)
            if suspended and rtype.kind == "JobSet":
                old, wanted = _replicated_without_directives(old), _replicated_without_directives(wanted)
            if old != wanted:
                raise _HttpError(
                    422,
                    "Invalid",
                    f'{_qualified_kind(rtype)} "{current["metadata"]["name"]}" is invalid: spec.{field_name}: '
                    "Invalid value: field is immutable",
                )

    def refusal(self, obj: dict[str, Any]) -> str:
        """Why the API server refuses an object a controller creates ("" when it takes it): its core
        validation, as for a client's write (the schema held when the owner's templates were written), then
        the validating webhooks a test installed (a cluster's policy engine sees the controllers' creates)."""
        rtype = BY_KIND[obj["kind"]]
        refused = None
        if rtype.validated and self.validate:
            refused = _refusal(rtype, obj, twin_schemas.core_check(obj, rtype.kind))
        refused = refused or self._denial(rtype, obj)
        return "" if refused is None else str(refused)

    def _delete_now(self, kind: str, ns: str, name: str, policy: str) -> None:
        obj = self.objects.pop((kind, ns, name), None)
        if obj is None or policy == "Orphan":
            return
        uid = obj["metadata"]["uid"]
        for key, dependent in list(self.objects.items()):
            owners = dependent["metadata"].get("ownerReferences") or []
            if key in self.objects and any(o.get("uid") == uid for o in owners):
                self._delete_now(*key, policy)

    def _default_container(self, ns: str, pod: str) -> str:
        obj = self.objects.get(("Pod", ns, pod))
        containers = (obj or {}).get("spec", {}).get("containers") or [{"name": ""}]
        return str(containers[0]["name"])

    def _take_fault(self, method: str, path: str) -> Fault | None:
        with self.lock:
            for fault in self.faults:
                if fault.matches(method, path):
                    fault.times -= 1
                    fault.hits += 1
                    return fault
        return None


# the field labels the API server lets a list select on: every kind's name and namespace, and an Event's own
FIELD_LABELS = {
    "Event": (
        "involvedObject.kind",
        "involvedObject.namespace",
        "involvedObject.name",
        "involvedObject.uid",
        "involvedObject.apiVersion",
        "reason",
        "reportingComponent",
        "source",
        "type",
    ),
}


def _field_selector(rtype: ResourceType, text: str) -> list[tuple[str, str, bool]]:
    """(field, value, equal) per term of `fieldSelector` (`a=b`, `a==b`, `a!=b`); 400 for a field the server
    does not index for this kind."""
    terms = []
    for term in filter(None, (t.strip() for t in text.split(","))):
        field_name, op, value = re.match(r"^([^!=]+)(!=|==|=)(.*)$", term).groups()  # type: ignore[union-attr]
        if field_name not in ("metadata.name", "metadata.namespace", *FIELD_LABELS.get(rtype.kind, ())):
            raise _HttpError(400, "BadRequest", f"field label not supported: {field_name}")
        terms.append((field_name, value, op != "!="))
    return terms


def _dotted(obj: dict[str, Any], path: str) -> str:
    node: Any = obj
    for key in path.split("."):
        node = node.get(key) if isinstance(node, dict) else None
    if path == "source" and isinstance(node, dict):
        node = node.get("component")
    return "" if node is None else str(node)


def _qualified_kind(rtype: ResourceType) -> str:
    """A kind as the API server's messages name it: `Job.batch`, `JobSet.jobset.x-k8s.io`, core kinds bare."""
    return f"{rtype.kind}.{rtype.group}" if rtype.group else rtype.kind


def _refusal(rtype: ResourceType, obj: dict[str, Any], verdict: twin_schemas.Verdict) -> _HttpError | None:
    """The API server's answer to an object validation refused: 400 when it does not decode, else 422."""
    if verdict.undecodable:
        return _HttpError(
            400,
            "BadRequest",
            f'{rtype.kind} in version "{rtype.version}" cannot be handled as a {rtype.kind}: {verdict.undecodable}',
        )
    if not verdict.invalid:
        return None
    name = (obj.get("metadata") or {}).get("name", "")
    causes = [{"reason": "FieldValueInvalid", "message": m, "field": m.split(":")[0]} for m in verdict.invalid]
    return _HttpError(
        422,
        "Invalid",
        f'{_qualified_kind(rtype)} "{name}" is invalid: ' + "; ".join(verdict.invalid[:5]),
        {"name": name, "kind": rtype.kind, "causes": causes},
    )


def _without_directives(template: Any) -> Any:
    """A pod template less what a suspended object may change."""
    if not isinstance(template, dict):
        return template
    out = copy.deepcopy(template)
    for part, names in SCHEDULING_DIRECTIVES.items():
        for name in names:
            (out.get(part) or {}).pop(name, None)
    return out


def _replicated_without_directives(replicated: Any) -> Any:
    if not isinstance(replicated, list):
        return replicated
    out = copy.deepcopy(replicated)
    for rjob in out:
        job_spec = ((rjob or {}).get("template") or {}).get("spec") or {}
        if "template" in job_spec:
            job_spec["template"] = _without_directives(job_spec["template"])
    return out


def _default_policy(rtype: ResourceType) -> str:
    """With no propagation policy, the API server orphans a batch/v1 Job's pods (for compatibility:
    `kubectl delete` asks for Background itself); every other kind's dependents are collected."""
    return "Orphan" if (rtype.group, rtype.kind) == ("batch", "Job") else "Background"


def _fold_string_data(secret: dict[str, Any]) -> None:
    """The API server writes `stringData` into `data` (base64) and never returns it."""
    string_data = secret.pop("stringData", None) or {}
    data = secret.setdefault("data", {})
    for key, value in string_data.items():
        data[key] = base64.b64encode(str(value).encode()).decode()


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    kube: FakeKube

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self._sockets: set[socket.socket] = set()
        self._sockets_lock = threading.Lock()
        super().__init__(*args, **kwargs)

    def process_request(self, request: Any, client_address: Any) -> None:
        with self._sockets_lock:
            self._sockets.add(request)
        super().process_request(request, client_address)

    def shutdown_request(self, request: Any) -> None:
        with self._sockets_lock:
            self._sockets.discard(request)
        super().shutdown_request(request)

    def close_connections(self) -> None:
        """Unblock keep-alive handlers so stop() leaves no thread waiting on a socket."""
        with self._sockets_lock:
            sockets = list(self._sockets)
        for sock in sockets:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def handle_error(self, request: Any, client_address: Any) -> None:
        # A client that timed out and hung up is part of the tests, not an error.
        pass


class _HttpError(Exception):
    def __init__(self, code: int, reason: str, message: str, details: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.body = status_body(code, reason, message, details)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # headers and body go out in two writes: no 40 ms delayed-ACK stall
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def date_time_string(self, timestamp: float | None = None) -> str:
        """The Date header every answer carries, from the server's clock (the twin's, once it has one)."""
        return email.utils.formatdate(self.server.kube.clock() if timestamp is None else timestamp, usegmt=True)

    def do_GET(self) -> None:
        self._dispatch("GET")

    def do_POST(self) -> None:
        self._dispatch("POST")

    def do_PUT(self) -> None:
        self._dispatch("PUT")

    def do_PATCH(self) -> None:
        self._dispatch("PATCH")

    def do_DELETE(self) -> None:
        self._dispatch("DELETE")

    # ---- plumbing --------------------------------------------------------------------------
    def _dispatch(self, method: str) -> None:
        kube = self.server.kube
        parts = urlsplit(self.path)
        path = parts.path.rstrip("/") or "/"  # the client asks for `/version/`
        query = {k: v[-1] for k, v in parse_qs(parts.query).items()}
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        content_type = (self.headers.get("Content-Type") or "").split(";")[0].strip()
        with kube.lock:
            headers = {k.lower(): v for k, v in self.headers.items()}
            kube.requests.append(Request(method, path, query, content_type, body, headers))
        fault = kube._take_fault(method, path)
        if fault is not None and self._apply_fault(fault):
            return
        try:
            self._authorize(method, path, query, content_type)
            self._route(method, path, query, content_type, body)
        except _HttpError as exc:
            self._send_json(exc.body["code"], exc.body)

    def _authorize(self, method: str, path: str, query: dict[str, str], content_type: str) -> None:
        """RBAC, before any handler: a 403 Forbidden in the API server's words (twin_rbac)."""
        match = _CORE_RE.match(path) or _GROUP_RE.match(path)
        if match is None:
            return  # discovery: open to every authenticated user
        kube = self.server.kube
        who = twin_rbac.identity(kube, self.headers.get("Authorization") or "")
        attrs = twin_rbac.attributes(method, match.groupdict(), query)
        with kube.lock:
            kube.audit.append((who.user, attrs))
        if not twin_rbac.allowed(kube, who, attrs):
            message = twin_rbac.forbidden_message(who, attrs)
            raise _HttpError(403, "Forbidden", message, twin_rbac.forbidden_details(attrs))
        rtype = BY_PATH.get((attrs.group, match.group("version"), attrs.resource))
        creates = rtype is not None and (rtype.kind, attrs.namespace, attrs.name) not in kube.objects
        if content_type == APPLY_PATCH and creates and not attrs.sub:
            wanted = dataclasses.replace(attrs, verb="create")
            with kube.lock:
                kube.audit.append((who.user, wanted))
            if not twin_rbac.allowed(kube, who, wanted):  # the apply handler's own check: no reason given
                message = twin_rbac.forbidden_message(who, attrs, reason="")
                raise _HttpError(403, "Forbidden", message, twin_rbac.forbidden_details(attrs))

    def _apply_fault(self, fault: Fault) -> bool:
        """Act out a fault; True when the request is answered (or dropped) by it."""
        if fault.action is not None:
            fault.action()
        if fault.kind == "latency":
            self.server.kube._stopping.wait(fault.seconds)
            return False
        if fault.kind == "drop":
            self.close_connection = True
            self.connection.shutdown(socket.SHUT_RDWR)
            return True
        code = int(fault.kind)
        reason = fault.reason or {409: "AlreadyExists", 429: "TooManyRequests"}.get(code, "InternalError")
        headers = {"Retry-After": str(fault.retry_after)} if code == 429 else {}
        message = f"injected fault {code} {reason}"
        self._send_json(code, status_body(code, reason, message), headers)
        return True

    def _send_json(self, code: int, payload: Any, headers: dict[str, str] | None = None) -> None:
        warning = getattr(self, "_deprecation", None)
        if warning:
            headers = {**(headers or {}), "Warning": f'299 - "{warning}"'}
            self._deprecation = None
        data = json.dumps(payload).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        for key, value in (headers or {}).items():
            self.send_header(key, value)
        self.end_headers()
        try:
            self.wfile.write(data)
        except OSError:
            self.close_connection = True

    def _route(self, method: str, path: str, query: dict[str, str], content_type: str, body: bytes) -> None:
        match = _CORE_RE.match(path) or _GROUP_RE.match(path)
        if match is None:
            if method != "GET":
                raise _HttpError(404, "NotFound", "the server could not find the requested resource")
            self._discovery(path)
            return
        groups = match.groupdict()
        rtype = BY_PATH.get((groups.get("group") or "", groups["version"], groups["plural"]))
        if rtype is None:
            raise _HttpError(404, "NotFound", "the server could not find the requested resource")
        if rtype.api_version in kube_of(self).unserved:
            raise _HttpError(404, "NotFound", "the server could not find the requested resource")
        self._deprecation = (
            twin_schemas.deprecation(rtype.group, rtype.kind, rtype.version)
            if rtype.custom and rtype.group.startswith("kueue")
            else None
        )
        ns, name, sub = groups["ns"], groups["name"], groups["sub"]
        if name is None:
            self._collection(method, rtype, ns, query, body)
        elif sub == "log" and rtype.kind == "Pod" and method == "GET":
            self._pod_log(ns, name, query)
        elif sub == "eviction" and rtype.kind == "Pod" and method == "POST":
            self._evict(ns, name)
        elif sub in (None, "status"):
            self._item(method, rtype, ns, name, sub, query, content_type, body)
        else:
            raise _HttpError(404, "NotFound", "the server could not find the requested resource")

    def _discovery(self, path: str) -> None:
        if path == "/version":
            self._send_json(200, _VERSION)
        elif path == "/api":
            self._send_json(200, {"kind": "APIVersions", "versions": ["v1"], "serverAddressByClientCIDRs": []})
        elif path == "/apis":
            self._send_json(200, _group_list())
        elif path.startswith("/openapi/v3/apis/"):
            found = _openapi(path.removeprefix("/openapi/v3/apis/"), kube_of(self))
            if found is None:
                raise _HttpError(404, "NotFound", "the server could not find the requested resource")
            self._send_json(200, found)
        else:
            found = _resource_list(path)
            if found is None:
                raise _HttpError(404, "NotFound", "the server could not find the requested resource")
            self._send_json(200, found)

    # ---- collections and items -------------------------------------------------------------
    def _collection(self, method: str, rtype: ResourceType, ns: str, query: dict[str, str], body: bytes) -> None:
        kube = self.server.kube
        if method == "GET":
            selector = query.get("labelSelector", "")
            fields_wanted = _field_selector(rtype, query.get("fieldSelector", ""))
            with kube.lock:
                items = [
                    dict(copy.deepcopy(o), apiVersion=rtype.api_version)
                    for (k, n, _), o in sorted(kube.objects.items())
                    if k == rtype.kind
                    and n == ns
                    and selector_matches(selector, o["metadata"].get("labels") or {})
                    and all((_dotted(o, f) == v) == equal for f, v, equal in fields_wanted)
                ]
                rv = str(next(kube._rv))
            start = int(query.get("continue") or 0)
            limit = int(query.get("limit") or 0)
            page = items[start : start + limit] if limit else items[start:]
            meta: dict[str, Any] = {"resourceVersion": rv}
            if limit and start + limit < len(items):
                meta["continue"] = str(start + limit)
                meta["remainingItemCount"] = len(items) - start - limit
            payload = {"kind": f"{rtype.kind}List", "apiVersion": rtype.api_version, "metadata": meta, "items": page}
            self._send_json(200, payload)
        elif method == "POST":
            obj = _decode(body)
            with kube.changed:
                stored, code, warnings = kube.client_write(
                    rtype,
                    ns,
                    None,
                    obj,
                    manager=_manager(query, self.headers),
                    mode="create",
                    validation=query.get("fieldValidation", "Warn"),
                )
                stored = copy.deepcopy(stored)
                kube.settle()
                kube.changed.notify_all()
            self._send_json(code, stored, _warning_headers(warnings))
        else:
            raise _HttpError(405, "MethodNotAllowed", f"{method} is not supported on a collection")

    def _item(
        self,
        method: str,
        rtype: ResourceType,
        ns: str,
        name: str,
        sub: str | None,
        query: dict[str, str],
        content_type: str,
        body: bytes,
    ) -> None:
        kube = self.server.kube
        warnings: list[str] = []
        with kube.changed:
            current = kube.objects.get((rtype.kind, ns, name))
            if method == "GET":
                result, code = self._require(current, rtype, name), 200
            elif method == "DELETE":
                result, code = self._delete(rtype, ns, name, query, body), 200
            elif method == "PATCH" and content_type == "application/apply-patch+yaml":
                result, code, warnings = self._apply(rtype, ns, name, sub, query, body)
            elif method == "PATCH":
                result, code, warnings = self._patch(rtype, ns, name, current, sub, query, content_type, body)
            elif method == "PUT":
                result, code, warnings = self._replace(rtype, ns, name, current, sub, query, body)
            else:
                raise _HttpError(405, "MethodNotAllowed", f"{method} is not supported")
            result = copy.deepcopy(result)
            if result.get("kind") == rtype.kind:
                result["apiVersion"] = rtype.api_version  # as the version asked for
            if method != "GET":
                kube.settle()
            kube.changed.notify_all()
        self._send_json(code, result, _warning_headers(warnings))

    @staticmethod
    def _require(current: dict[str, Any] | None, rtype: ResourceType, name: str) -> dict[str, Any]:
        if current is None:
            raise _not_found(rtype, name)
        return current

    def _apply(
        self, rtype: ResourceType, ns: str, name: str, sub: str | None, query: dict[str, str], body: bytes
    ) -> tuple[dict[str, Any], int, list[str]]:
        """Server-side apply: create when absent, else merge the fields this manager owns."""
        if not query.get("fieldManager"):
            raise _HttpError(400, "BadRequest", 'PatchOptions.meta.k8s.io "" is invalid: fieldManager: Required value')
        if sub is not None:
            raise _HttpError(405, "MethodNotAllowed", f"apply to the {sub} subresource is not supported here")
        applied = _decode(body)
        if (applied.get("metadata") or {}).get("name") != name:
            raise _HttpError(400, "BadRequest", "the name of the object does not match the name on the URL")
        if (applied.get("apiVersion"), applied.get("kind")) != (rtype.api_version, rtype.kind):
            raise _HttpError(
                400, "BadRequest", f"the apiVersion and kind of the body must be {rtype.api_version} {rtype.kind}"
            )
        return self.server.kube.client_write(
            rtype,
            ns,
            name,
            applied,
            manager=query["fieldManager"],
            mode="apply",
            validation=query.get("fieldValidation", "Strict" if rtype.custom else "Warn"),
            force=query.get("force") == "true",
        )

    def _patch(
        self,
        rtype: ResourceType,
        ns: str,
        name: str,
        current: dict[str, Any] | None,
        sub: str | None,
        query: dict[str, str],
        content_type: str,
        body: bytes,
    ) -> tuple[dict[str, Any], int, list[str]]:
        allowed = {"application/merge-patch+json", "application/json-patch+json"}
        if not rtype.custom:
            allowed.add("application/strategic-merge-patch+json")
        if content_type not in allowed:
            raise _HttpError(
                415,
                "UnsupportedMediaType",
                f"the body of the request was in an unknown format - accepted media types include: "
                f"{', '.join(sorted(allowed))}",
            )
        obj = self._require(current, rtype, name)
        patch = _decode(body) if content_type != "application/json-patch+json" else {}
        if content_type == "application/json-patch+json":
            raise _HttpError(415, "UnsupportedMediaType", "JSON patch is not modelled by the twin")
        kube = self.server.kube
        if sub == "status":
            obj["status"] = merge_patch(obj.get("status", {}), patch.get("status", {}))
            obj["metadata"]["resourceVersion"] = str(next(kube._rv))
            return obj, 200, []
        if rtype.has_status:
            patch.pop("status", None)
        new = merge_patch(copy.deepcopy(obj), patch)
        if "resourceVersion" not in (patch.get("metadata") or {}):
            new["metadata"].pop("resourceVersion", None)
        return kube.client_write(
            rtype,
            ns,
            name,
            new,
            manager=_manager(query, self.headers),
            mode="update",
            validation=query.get("fieldValidation", "Warn"),
        )

    def _replace(
        self,
        rtype: ResourceType,
        ns: str,
        name: str,
        current: dict[str, Any] | None,
        sub: str | None,
        query: dict[str, str],
        body: bytes,
    ) -> tuple[dict[str, Any], int, list[str]]:
        obj = self._require(current, rtype, name)
        new = _decode(body)
        if sub == "status":
            self.server.kube._check_resource_version(rtype, obj, new)
            obj["status"] = new.get("status", {})
            obj["metadata"]["resourceVersion"] = str(next(self.server.kube._rv))
            return obj, 200, []
        if not (new.get("metadata") or {}).get("resourceVersion"):
            raise _HttpError(
                422,
                "Invalid",
                f'{rtype.kind} "{name}" is invalid: metadata.resourceVersion: '
                "Invalid value: 0: must be specified for an update",
            )
        return self.server.kube.client_write(
            rtype,
            ns,
            name,
            new,
            manager=_manager(query, self.headers),
            mode="update",
            validation=query.get("fieldValidation", "Warn"),
        )

    def _delete(self, rtype: ResourceType, ns: str, name: str, query: dict[str, str], body: bytes) -> dict[str, Any]:
        kube = self.server.kube
        obj = self._require(kube.objects.get((rtype.kind, ns, name)), rtype, name)
        options = _decode(body) if body else {}
        policy = query.get("propagationPolicy") or options.get("propagationPolicy") or _default_policy(rtype)
        kube.deletions.append({"kind": rtype.kind, "namespace": ns, "name": name, "propagationPolicy": policy})
        if kube.linger_deletes and policy == "Foreground":
            obj["metadata"]["deletionTimestamp"] = now(kube.clock)
            obj["metadata"]["finalizers"] = ["foregroundDeletion"]
            return obj
        if obj["metadata"].get("finalizers"):  # held until every finalizer is removed (by an update)
            obj["metadata"].setdefault("deletionTimestamp", now(kube.clock))
            kube.held[(rtype.kind, ns, name)] = policy
            return obj
        kube._delete_now(rtype.kind, ns, name, policy)
        return {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Success",
            "details": {"name": name},
        }

    def _evict(self, ns: str, name: str) -> None:
        """The Eviction API (`kubectl drain`): the cluster's evictor disrupts the pod, else it is deleted."""
        kube = self.server.kube
        with kube.changed:
            self._require(kube.objects.get(("Pod", ns, name)), BY_KIND["Pod"], name)
            if kube.evictor is not None:
                kube.evictor(ns, name)
            else:
                kube._delete_now("Pod", ns, name, "Background")
            kube.settle()
            kube.changed.notify_all()
        self._send_json(201, {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201})

    # ---- pod logs --------------------------------------------------------------------------
    def _pod_log(self, ns: str, name: str, query: dict[str, str]) -> None:
        kube = self.server.kube
        with kube.lock:
            pod = self._require(kube.objects.get(("Pod", ns, name)), BY_KIND["Pod"], name)
            container = self._log_container(pod, name, query.get("container"))
            key = (ns, name, container)
            text = kube.logs.get(key)
            if text is None:
                state = _container_state(pod, container)
                if "waiting" in state:
                    reason = state["waiting"].get("reason", "ContainerCreating")
                    raise _HttpError(
                        400,
                        "BadRequest",
                        f'container "{container}" in pod "{name}" is waiting to start: {reason}',
                    )
                text = ""
        tail = query.get("tailLines")
        if query.get("follow") != "true":
            self._send_text(_tail(text, int(tail)) if tail else text)
            return
        self._follow(key, _tail(text, int(tail)) if tail else text, len(text))

    @staticmethod
    def _log_container(pod: dict[str, Any], name: str, wanted: str | None) -> str:
        names = [c["name"] for c in pod["spec"]["containers"]]
        if wanted is None:
            if len(names) > 1:
                raise _HttpError(
                    400,
                    "BadRequest",
                    f"a container name must be specified for pod {name}, choose one of: [{' '.join(names)}]",
                )
            return names[0]
        inits = [c["name"] for c in pod["spec"].get("initContainers") or []]
        if wanted not in names + inits:
            raise _HttpError(400, "BadRequest", f"container {wanted} is not valid for pod {name}")
        return wanted

    def _send_text(self, text: str) -> None:
        data = text.encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _follow(self, key: tuple[str, str, str], first: str, offset: int) -> None:
        """Stream the log as chunks until the pod is terminal and drained, or the server stops."""
        kube = self.server.kube
        self.send_response(200)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        try:
            for chunk in self._follow_chunks(kube, key, first, offset):
                self.wfile.write(f"{len(chunk):x}\r\n".encode() + chunk + b"\r\n")
                self.wfile.flush()
            self.wfile.write(b"0\r\n\r\n")
        except OSError:
            self.close_connection = True

    @staticmethod
    def _follow_chunks(kube: FakeKube, key: tuple[str, str, str], first: str, offset: int) -> Iterator[bytes]:
        if first:
            yield first.encode()
        while not kube._stopping.is_set():
            with kube.changed:
                text = kube.logs.get(key, "")
                pod = kube.objects.get(("Pod", key[0], key[1]))
                done = pod is None or pod["status"].get("phase") in _TERMINAL_POD_PHASES
                if len(text) == offset and not done:
                    kube.changed.wait(0.2)
                    continue
            if len(text) > offset:
                yield text[offset:].encode()
                offset = len(text)
            elif done:
                return


def kube_of(handler: _Handler) -> FakeKube:
    return handler.server.kube


def _full_status(status: dict[str, Any]) -> dict[str, Any]:
    """Fill the fields a real kubelet always reports (the typed client requires them)."""
    full = copy.deepcopy(status)
    full.setdefault("image", "busybox:1.36")
    full.setdefault("imageID", "")
    full.setdefault("ready", "running" in (full.get("state") or {}))
    full.setdefault("restartCount", 0)
    full.setdefault("state", {"running": {}})
    return full


def _container_state(pod: dict[str, Any], container: str) -> dict[str, Any]:
    statuses = (pod.get("status") or {}).get("containerStatuses") or []
    statuses = statuses + ((pod.get("status") or {}).get("initContainerStatuses") or [])
    for status in statuses:
        if status.get("name") == container:
            return dict(status.get("state") or {})
    return {}


def _tail(text: str, lines: int) -> str:
    kept = text.splitlines(keepends=True)[-lines:] if lines > 0 else []
    return "".join(kept)


def _decode(body: bytes) -> dict[str, Any]:
    try:
        value = yaml.safe_load(body.decode() or "{}")  # JSON is YAML; apply bodies may be either
    except (yaml.YAMLError, UnicodeDecodeError) as exc:
        raise _HttpError(400, "BadRequest", f"error decoding body: {exc}") from exc
    if not isinstance(value, dict):
        raise _HttpError(400, "BadRequest", "the body must be an object")
    return value


def _suffix() -> str:
    """The random suffix of generated names: five characters of the API server's alphabet."""
    alphabet = "bcdfghjklmnpqrstvwxz2456789"
    return "".join(alphabet[b % len(alphabet)] for b in uuid.uuid4().bytes[:5])


def _manager(query: dict[str, str], headers: Any) -> str:
    """The field manager of a non-apply write: the parameter, else the user agent's first word."""
    if query.get("fieldManager"):
        return query["fieldManager"]
    agent = str(headers.get("User-Agent") or "unknown")
    return agent.split("/")[0] or "unknown"


def _warning_headers(warnings: list[str]) -> dict[str, str]:
    escaped = [w.replace("\\", "\\\\").replace('"', '\\"') for w in warnings]
    return {"Warning": ", ".join(f'299 - "{w}"' for w in escaped)} if warnings else {}


def _not_found(rtype: ResourceType, name: str) -> _HttpError:
    what = f"{rtype.plural}.{rtype.group}" if rtype.group else rtype.plural
    return _HttpError(
        404, "NotFound", f'{what} "{name}" not found', {"name": name, "group": rtype.group, "kind": rtype.plural}
    )


def _already_exists(rtype: ResourceType, name: str) -> _HttpError:
    what = f"{rtype.plural}.{rtype.group}" if rtype.group else rtype.plural
    details = {"name": name, "group": rtype.group, "kind": rtype.plural}
    return _HttpError(409, "AlreadyExists", f'{what} "{name}" already exists', details)


def _group_list() -> dict[str, Any]:
    groups: dict[str, list[str]] = {}
    for rtype in RESOURCE_TYPES:
        if rtype.group and rtype.version not in groups.setdefault(rtype.group, []):
            groups[rtype.group].append(rtype.version)
    items = []
    for group, versions in groups.items():
        gvs = [{"groupVersion": f"{group}/{v}", "version": v} for v in versions]
        items.append({"name": group, "versions": gvs, "preferredVersion": gvs[0]})
    return {"kind": "APIGroupList", "apiVersion": "v1", "groups": items}


def _openapi(group_version: str, kube: FakeKube) -> dict[str, Any] | None:
    """The OpenAPI v3 document of a CRD group version, as the server publishes it: each kind's schema
    (from the real CRD, less the fields `older_crds` takes away) with its group-version-kind."""
    if group_version in kube.unserved:
        return None
    group, _, version = group_version.partition("/")
    schemas: dict[str, Any] = {}
    for gk in (*twin_schemas.CRD_FILES, *twin_schemas.VERSION_ONLY_CRDS):
        served = twin_schemas.crd_version(*gk, version) if gk[0] == group else None
        if served is None:
            continue
        schema = copy.deepcopy(served["schema"]["openAPIV3Schema"])
        for dotted in kube.older_crds.get(gk[1], ()):
            *parents, leaf = dotted.split(".")
            node = schema
            for part in parents:
                node = node["properties"][part]
            del node["properties"][leaf]
        schema["x-kubernetes-group-version-kind"] = [{"group": group, "version": version, "kind": gk[1]}]
        schemas[".".join([*reversed(group.split(".")), version, gk[1]])] = schema
    return {"openapi": "3.0.0", "components": {"schemas": schemas}} if schemas else None


def _resource_list(path: str) -> dict[str, Any] | None:
    match = re.fullmatch(r"/api/(v1)|/apis/([^/]+)/([^/]+)", path)
    if match is None:
        return None
    group, version = ("", "v1") if match.group(1) else (match.group(2), match.group(3))
    resources = [
        {
            "name": r.plural,
            "singularName": r.kind.lower(),
            "namespaced": True,
            "kind": r.kind,
            "verbs": ["create", "delete", "get", "list", "patch", "update"],
        }
        for r in RESOURCE_TYPES
        if (r.group, r.version) == (group, version)
    ]
    if not resources:
        return None
    gv = f"{group}/{version}" if group else version
    return {"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": gv, "resources": resources}


@pytest.fixture
def fake_kube() -> Iterator[FakeKube]:
    """A started fake API server, stopped (and its connections closed) after the test."""
    server = FakeKube().start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def cluster(fake_kube: FakeKube) -> Any:
    """`fake_kube` with its controllers: Job, JobSet, KubeRay, Kueue, a kubelet (pods run by default)."""
    from twin_controllers import Cluster

    return Cluster(fake_kube).install()


@pytest.fixture
def kube_client(fake_kube: FakeKube) -> Iterator[Any]:
    """A real `kubernetes` ApiClient pointed at `fake_kube`."""
    api_client = fake_kube.api_client()
    try:
        yield api_client
    finally:
        api_client.close()
