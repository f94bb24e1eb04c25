"""Write-time validation of the cluster twin, as the API server does it.

Core kinds are checked against the Kubernetes OpenAPI schemas `kubernetes-validate` ships (pinned to
one minor); JobSet and RayJob against the structural schemas of the real CRDs in `../shared/k8s-crds/`,
read at run time. As on a real server:

- unknown fields are *pruned*; `fieldValidation=Strict` refuses them (400), `Warn` (the server's
  default) keeps the write and answers a `Warning` header per field, `Ignore` drops them silently;
- anything else that breaks the schema (a wrong type, a missing required field, a bad enum value)
  is a 422 `Invalid` with one cause per error;
- `metadata` is checked by its own rules (name, labels), never pruned by a CRD schema;
- a schema-valid Pod, Job or Deployment is then held to the API server's core validation (twin_core):
  422 for what it refuses, 400 for a quantity that does not decode.
"""

from __future__ import annotations

import copy
import json
import re
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

import twin_core
import yaml
from support.shared import require_shared

K8S_VERSION = "1.31"
CRD_FILES = {
    ("jobset.x-k8s.io", "JobSet"): "jobset.x-k8s.io_jobsets.yaml",
    ("ray.io", "RayJob"): "ray.io_rayjobs.yaml",
}
# read for their served and deprecated versions only (test hooks write these objects, unvalidated)
VERSION_ONLY_CRDS = {
    ("kueue.x-k8s.io", "Workload"): "kueue.x-k8s.io_workloads.yaml",
    ("kueue.x-k8s.io", "LocalQueue"): "kueue.x-k8s.io_localqueues.yaml",
}
CORE_FILES = {
    ("batch/v1", "Job"): "job-batch-v1.json",
    ("v1", "Secret"): "secret-v1.json",
    ("v1", "ConfigMap"): "configmap-v1.json",
    ("v1", "Pod"): "pod-v1.json",
    ("v1", "Service"): "service-v1.json",
    ("v1", "PersistentVolumeClaim"): "persistentvolumeclaim-v1.json",
    ("apps/v1", "Deployment"): "deployment-apps-v1.json",
    ("v1", "ServiceAccount"): "serviceaccount-v1.json",
    ("rbac.authorization.k8s.io/v1", "Role"): "role-rbac-v1.json",
    ("rbac.authorization.k8s.io/v1", "RoleBinding"): "rolebinding-rbac-v1.json",
}
_DNS_1123_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
_LABEL_NAME = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")


@dataclass
class Verdict:
    """What validation decided about one write."""

    unknown: list[str] = field(default_factory=list)  # dotted paths of pruned fields
    invalid: list[str] = field(default_factory=list)  # "path: message" per schema error
    undecodable: str = ""  # why the server cannot decode the object at all (400), e.g. a bad quantity


def crd_dir() -> Path:
    """`../shared/k8s-crds`: a test whose twin needs it skips naming it when absent (fails in CI)."""
    return require_shared("k8s-crds")


@cache
def crd(group: str, kind: str) -> dict[str, Any]:
    loader: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    text = (crd_dir() / {**CRD_FILES, **VERSION_ONLY_CRDS}[(group, kind)]).read_text(encoding="utf-8")
    return dict(yaml.load(text, Loader=loader))


def crd_version(group: str, kind: str, version: str) -> dict[str, Any] | None:
    for served in crd(group, kind)["spec"]["versions"]:
        if served["name"] == version and served.get("served", True):
            return dict(served)
    return None


@cache
def deprecation(group: str, kind: str, version: str) -> str | None:
    """The warning a server sends with every request to a deprecated version of a CRD, from the CRD."""
    served = crd_version(group, kind, version)
    if served is None or not served.get("deprecated"):
        return None
    return str(served.get("deprecationWarning") or f"{group}/{version} {kind} is deprecated")


@cache
def _core_dir() -> Path:
    import kubernetes_validate

    return Path(kubernetes_validate.__file__).parent / "kubernetes-json-schema" / f"v{K8S_VERSION}.0-local"


@cache
def _core_definitions() -> dict[str, Any]:
    return dict(json.loads((_core_dir() / "_definitions.json").read_text(encoding="utf-8")))


@cache
def _core_schema(filename: str) -> dict[str, Any]:
    return dict(json.loads((_core_dir() / filename).read_text(encoding="utf-8")))


class _Resolver:
    """Follows `$ref`s of the core schemas into `_definitions.json`."""

    def __init__(self, core: bool) -> None:
        self.core = core

    def __call__(self, schema: dict[str, Any]) -> dict[str, Any]:
        seen = 0
        while self.core and "$ref" in schema and seen < 50:
            ref = str(schema["$ref"]).split("#/$defs/")[-1]
            schema = _core_definitions()["$defs"][ref]
            seen += 1
        return schema


def prune(obj: Any, schema: dict[str, Any], resolve: _Resolver, path: str, out: list[str]) -> Any:
    """Drop the fields `schema` does not declare (in place); their paths go to `out`."""
    schema = resolve(schema)
    if schema.get("x-kubernetes-preserve-unknown-fields"):
        return obj
    if isinstance(obj, dict):
        props = schema.get("properties")
        extra = schema.get("additionalProperties")
        if props is not None:
            for key in list(obj):
                if key in props:
                    obj[key] = prune(obj[key], props[key], resolve, f"{path}.{key}" if path else key, out)
                elif isinstance(extra, dict):
                    obj[key] = prune(obj[key], extra, resolve, f"{path}.{key}" if path else key, out)
                elif extra is not True:
                    out.append(f"{path}.{key}" if path else key)
                    del obj[key]
        elif isinstance(extra, dict):
            for key in list(obj):
                obj[key] = prune(obj[key], extra, resolve, f"{path}.{key}" if path else key, out)
    elif isinstance(obj, list) and isinstance(schema.get("items"), dict):
        return [prune(item, schema["items"], resolve, f"{path}[{i}]", out) for i, item in enumerate(obj)]
    return obj


@cache
def _crd_validator(group: str, kind: str, version: str) -> Any:
    import jsonschema

    served = crd_version(group, kind, version)
    assert served is not None
    schema = copy.deepcopy(served["schema"]["openAPIV3Schema"])
    schema["properties"]["metadata"] = {"type": "object"}
    return jsonschema.Draft4Validator(_int_or_string(schema))


def _int_or_string(schema: Any) -> Any:
    """`x-kubernetes-int-or-string` means integer or string, whatever `type` says."""
    if isinstance(schema, dict):
        out = {k: _int_or_string(v) for k, v in schema.items()}
        if out.get("x-kubernetes-int-or-string"):
            out.pop("type", None)
            out.pop("anyOf", None)
            out["type"] = ["integer", "string"]
        return out
    if isinstance(schema, list):
        return [_int_or_string(v) for v in schema]
    return schema


@cache
def _core_validator(filename: str) -> Any:
    import jsonschema
    from referencing import Registry, Resource

    schema = _core_schema(filename)
    registry = Resource.from_contents(_core_definitions()) @ (Resource.from_contents(schema) @ Registry())
    return jsonschema.Draft202012Validator(schema, registry=registry)


def check(obj: dict[str, Any], api_version: str, kind: str) -> Verdict:
    """Prune `obj` in place and say what was unknown and what is invalid."""
    verdict = Verdict()
    group, _, version = api_version.rpartition("/")
    verdict.invalid.extend(_metadata_errors(obj.get("metadata") or {}))
    if (group, kind) in CRD_FILES:
        served = crd_version(group, kind, version)
        if served is None:
            verdict.invalid.append(f"apiVersion: {api_version} is not served by the {kind} CRD")
            return verdict
        root = served["schema"]["openAPIV3Schema"]
        body = {k: v for k, v in obj.items() if k not in ("metadata", "apiVersion", "kind")}
        schema = {
            **root,
            "properties": {k: v for k, v in root["properties"].items() if k not in ("metadata", "apiVersion", "kind")},
        }
        prune(body, schema, _Resolver(core=False), "", verdict.unknown)
        obj.update(body)
        for key in [k for k in obj if k not in body and k not in ("metadata", "apiVersion", "kind")]:
            del obj[key]
        verdict.invalid.extend(_errors(_crd_validator(group, kind, version), obj))
    elif (api_version, kind) in CORE_FILES:
        filename = CORE_FILES[(api_version, kind)]
        meta = obj.get("metadata")
        prune(obj, _core_schema(filename), _Resolver(core=True), "", verdict.unknown)
        if meta is not None:
            obj["metadata"] = meta
        verdict.invalid.extend(_errors(_core_validator(filename), obj))
        if not verdict.invalid:
            core_check(obj, kind, verdict)
    return verdict


def core_check(obj: dict[str, Any], kind: str, verdict: Verdict | None = None) -> Verdict:
    """The API server's core validation alone (twin_core), into `verdict`. A controller's create needs no
    more: what it copies from its owner's templates met their schema when the owner was written."""
    verdict = Verdict() if verdict is None else verdict
    try:
        verdict.invalid.extend(twin_core.errors(obj, kind))
    except twin_core.Undecodable as exc:
        verdict.undecodable = str(exc)
    return verdict


def warm() -> None:
    """Load every schema once per process (a CRD takes about a second to parse and compile)."""
    for (group, kind), _ in CRD_FILES.items():
        for served in crd(group, kind)["spec"]["versions"]:
            _crd_validator(group, kind, served["name"])
    for filename in CORE_FILES.values():
        _core_validator(filename)


def _errors(validator: Any, obj: dict[str, Any]) -> list[str]:
    found = []
    for error in sorted(validator.iter_errors(obj), key=lambda e: list(map(str, e.absolute_path))):
        where = ".".join(str(p) for p in error.absolute_path) or "(root)"
        found.append(f"{where}: {error.message}")
    return found


def _metadata_errors(meta: dict[str, Any]) -> list[str]:
    errors = []
    name = meta.get("name")
    if name is not None and (not isinstance(name, str) or len(name) > 253 or not _DNS_1123_SUBDOMAIN.match(name)):
        errors.append(
            f"metadata.name: Invalid value: {name!r}: a lowercase RFC 1123 subdomain must consist of "
            "lower case alphanumeric characters, '-' or '.'"
        )
    for key, value in (meta.get("labels") or {}).items():
        prefix, _, short = str(key).rpartition("/")
        if not _LABEL_NAME.match(short) or len(short) > 63 or len(prefix) > 253:
            errors.append(f"metadata.labels: Invalid value: {key!r}: name part must be a valid label name")
        if not isinstance(value, str) or len(value) > 63 or not _LABEL_VALUE.match(value):
            errors.append(
                f"metadata.labels: Invalid value: {value!r}: a valid label must be an empty string "
                "or consist of alphanumeric characters, '-', '_' or '.', at most 63 characters"
            )
    for key, value in (meta.get("annotations") or {}).items():
        if not isinstance(value, str):
            errors.append(f"metadata.annotations.{key}: Invalid value: annotation values must be strings")
    return errors
