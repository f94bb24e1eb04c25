"""The controller versions a submission needs, checked against what the cluster serves before any write.

With `fieldValidation=Strict` an older CRD refuses a field it does not know (KubeRay <= 1.1 refuses a
RayJob's `spec.backoffLimit` and `spec.submitterConfig`; JobSet < 0.6 refuses
`spec.network.publishNotReadyAddresses`). Refusing before the first write, with the controller and the
version to install, says more than the server's 400 on the second object of a run. The check reads the
server's OpenAPI v3 document of the kind's group version (the CRD's schema as installed): not served means
the controller is missing or too old for that API version; a field of the manifest the schema lacks means
an older CRD. One read per kind per backend instance: the answer is cached.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from tuneplane.backends.kubernetes.client import JOBSET, RAYJOB, WORKLOADS, Kind, Rest
from tuneplane.backends.kubernetes.kueue import QUEUE_LABEL
from tuneplane.runtime.jsonvalue import JSONObject
from tuneplane.runtime.records import FrozenRecord


class Minimum(FrozenRecord):
    controller: str
    version: str
    install: str  # where its releases are


MINIMUMS = {
    RAYJOB.kind: Minimum("KubeRay", "1.2", "https://github.com/ray-project/kuberay/releases"),
    JOBSET.kind: Minimum("JobSet", "0.6", "https://github.com/kubernetes-sigs/jobset/releases"),
}


KUEUE = Minimum("Kueue", "0.6", "https://github.com/kubernetes-sigs/kueue/releases")  # queues ray.io/v1 RayJobs


class TooOld(Exception):
    """The cluster's controller (its CRD) is older than what tuneplane renders for."""


class ServedVersions:
    """What the cluster serves of each kind tuneplane submits; read once per kind, then remembered."""

    def __init__(self, rest: Rest) -> None:
        self._rest = rest
        self._schemas: dict[str, dict[str, Any] | None] = {}

    def check(self, kind: Kind, manifest: dict[str, Any]) -> None:
        """Raise TooOld, naming the controller, the version needed and what the cluster has."""
        need = MINIMUMS.get(kind.kind)
        if need is None:
            return
        schema = self._schema(kind)
        upgrade = f"tuneplane needs {need.controller} >= {need.version} ({need.install})"
        if schema is None:
            raise TooOld(
                f"the cluster does not serve {kind.api_version} {kind.kind}: {upgrade}; "
                f"check with: kubectl api-resources --api-group={kind.group}"
            )
        unknown = sorted(set(_unknown(manifest.get("spec"), schema.get("properties", {}).get("spec", {}), "spec")))
        if unknown:
            raise TooOld(
                f"the cluster's {kind.kind} CRD ({kind.api_version}) does not know {', '.join(unknown)}, "
                f"which tuneplane writes: an older {need.controller} is installed, and {upgrade}; "
                f"upgrade it with its CRDs (kubectl explain {kind.plural}.{_first(unknown)} shows the field "
                "once it is known)"
            )

    def check_queue(self, manifest: dict[str, Any]) -> None:
        """A run with a queue label needs Kueue: without it nothing admits the suspended job, and it waits
        forever. Kueue is there when it serves its Workloads (at v1beta2, or at v1beta1 before 0.15)."""
        queue = ((manifest.get("metadata") or {}).get("labels") or {}).get(QUEUE_LABEL)
        if not queue or any(self._schema(kind) is not None for kind in WORKLOADS):
            return
        raise TooOld(
            f"the run is queued (label {QUEUE_LABEL}: {queue}, from cluster.queue in tuneplane.yaml), but the "
            "cluster serves no Kueue Workloads (kueue.x-k8s.io v1beta2 or v1beta1): tuneplane needs "
            f"{KUEUE.controller} >= {KUEUE.version} ({KUEUE.install}), or no cluster.queue; check with: "
            "kubectl api-resources --api-group=kueue.x-k8s.io"
        )

    def _schema(self, kind: Kind) -> dict[str, Any] | None:
        key = f"{kind.api_version} {kind.kind}"
        if key not in self._schemas:
            document = self._rest.openapi(kind)
            self._schemas[key] = None if document is None else _kind_schema(document, kind)
        return self._schemas[key]


def check_request(versions: ServedVersions, documents: list[JSONObject], kinds: dict[tuple[str, str], Kind]) -> None:
    """Every manifest of a submission whose kind has a minimum controller version, and Kueue for a
    queued one."""
    for manifest in documents:
        kind = kinds.get((str(manifest.get("apiVersion")), str(manifest.get("kind"))))
        if kind is not None:
            versions.check(kind, manifest)
            versions.check_queue(manifest)


def _kind_schema(document: dict[str, Any], kind: Kind) -> dict[str, Any] | None:
    """The kind's schema in an OpenAPI v3 group-version document, found by its group-version-kind."""
    for schema in ((document.get("components") or {}).get("schemas") or {}).values():
        for gvk in schema.get("x-kubernetes-group-version-kind") or []:
            if (gvk.get("group"), gvk.get("version"), gvk.get("kind")) == (kind.group, kind.version, kind.kind):
                return dict(schema)
    return None


def _unknown(value: Any, schema: dict[str, Any], path: str) -> Iterator[str]:
    """Dotted paths of the fields of `value` that `schema` does not declare (as strict validation finds them)."""
    if not schema or schema.get("x-kubernetes-preserve-unknown-fields") or "$ref" in schema:
        return
    if isinstance(value, dict):
        properties = schema.get("properties")
        extra = schema.get("additionalProperties")
        for key, item in value.items():
            if properties is not None and key in properties:
                yield from _unknown(item, properties[key], f"{path}.{key}")
            elif isinstance(extra, dict):
                yield from _unknown(item, extra, f"{path}.{key}")
            elif properties is not None and not extra:
                yield f"{path}.{key}"
    elif isinstance(value, list) and isinstance(schema.get("items"), dict):
        for item in value:
            yield from _unknown(item, schema["items"], f"{path}[]")


def _first(paths: list[str]) -> str:
    return paths[0].replace("[]", "")
