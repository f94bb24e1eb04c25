"""Submitting a run: create the job object (adopting one that is ours), then its companions and token Secret.

Submission is idempotent: the job object has a deterministic name. It is created with a POST, never a
forced apply: a real server answers a forced apply over an existing object with 200 (or 422 for an
immutable Job template), so only a create tells "made now" from "already there". A 409 AlreadyExists
means another submitter (a bot racing us, a retry after a lost answer) made it: the object is read and
adopted when it carries our run label, refused otherwise. The companions (ConfigMaps) and the per-run
token Secret are objects only tuneplane writes: they are server-side applied, owned by the job object so
that the cluster deletes them with it. Every write asks for `fieldValidation=Strict`, so a cluster whose
CRD is older than our manifests refuses a field instead of dropping it silently.
"""

from __future__ import annotations

import base64
import copy
from typing import Any, cast

from tuneplane.backends.base import BackendError, BackendRef, SubmitRequest
from tuneplane.backends.kubernetes.client import (
    JOB_KINDS,
    SECRET,
    SUBMITTABLE,
    Conflict,
    Kind,
    Rest,
    log,
)
from tuneplane.backends.kubernetes.types import JobObject, OwnerReference, Secret

RUN_LABEL = "tuneplane.dev/run"
EXPERIMENT_LABEL = "tuneplane.dev/experiment"
COMMIT_ANNOTATION = "tuneplane.dev/commit"  # provenance the renderer writes on every job object
JOBSPEC_ANNOTATION = "tuneplane.dev/jobspec-digest"
SECRET_SUFFIX = "-tokens"
ENV_HINTS = {
    "job-token": "the bot mints it from TUNEPLANE_INGEST_SECRET: set that secret in the bot's "
    "environment (or clear cluster.ingest.endpoint in tuneplane.yaml to run without reporting)"
}


def submit(rest: Rest, request: SubmitRequest, ns: str, name: str) -> BackendRef:
    copied = _copied_secrets(rest, request, ns)
    redact = tuple(request.secret_data.values()) + tuple(copied.values())
    job_manifest, kind, others = _split_manifests(request, ns)
    _refuse_missing_keys(request, {**copied, **request.secret_data})
    job = _ensure_job(rest, kind, ns, job_manifest, redact)
    owner = _owner_reference(job)
    for manifest in others:
        rest.apply(SUBMITTABLE[_type_of(manifest)], ns, _owned(manifest, owner), redact)
    rest.apply(SECRET, ns, _secret(request, ns, job, owner, copied), redact)
    meta = job.get("metadata") or {}
    notes = meta.get("annotations") or {}
    return BackendRef(
        backend=name,
        kind=kind.kind,
        name=meta.get("name", ""),
        namespace=ns,
        uid=meta.get("uid", ""),
        commit=notes.get(COMMIT_ANNOTATION, ""),
        jobspec_digest=notes.get(JOBSPEC_ANNOTATION, ""),
    )


def _copied_secrets(rest: Rest, request: SubmitRequest, ns: str) -> dict[str, str]:
    """Values the run's Secret takes from other Secrets of the namespace (e.g. the lab's HF token)."""
    out: dict[str, str] = {}
    for target, (source, key) in sorted(request.secret_copies.items()):
        secret = cast(Secret, rest.get(SECRET, ns, source) or {})
        value = (secret.get("data") or {}).get(key)
        if value is None:
            found = "has no key" if secret else "does not exist, so it has no key"
            raise BackendError(
                f"Secret {ns}/{source} {found} {key!r}, which run {request.run_id} passes to "
                f"its job as {target}; create it (kubectl create secret generic {source} "
                f"--from-literal={key}=...) or clear the setting in tuneplane.yaml"
            )
        out[target] = base64.b64decode(value).decode("utf-8", "replace")
    return out


def _split_manifests(request: SubmitRequest, ns: str) -> tuple[dict[str, Any], Kind, list[dict[str, Any]]]:
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


def _secret_refs(value: Any) -> list[dict[str, Any]]:
    """Every `secretKeyRef` anywhere in a manifest (env of every container of every pod template)."""
    if isinstance(value, dict):
        found = [value["secretKeyRef"]] if isinstance(value.get("secretKeyRef"), dict) else []
        return found + [r for v in value.values() for r in _secret_refs(v)]
    if isinstance(value, list):
        return [r for v in value for r in _secret_refs(v)]
    return []


def _refuse_missing_keys(request: SubmitRequest, data: dict[str, str]) -> None:
    """A pod that requires a key of the run's Secret which submission will not write never starts: it
    waits in CreateContainerConfigError, holding its queue's quota. Refuse before creating anything."""
    own = f"{request.object_name}{SECRET_SUFFIX}"
    for manifest in request.manifests:
        for ref in _secret_refs(manifest):
            if ref.get("name") != own or ref.get("optional") or ref.get("key") in data:
                continue
            key = str(ref.get("key"))
            variables = _variables_for(manifest, key)
            raise BackendError(
                f"run {request.run_id} cannot be submitted: its pods require key {key!r} of Secret {own} "
                f"(as {', '.join(variables) or 'an environment variable'}), and nothing provides it, so they "
                f"would wait in CreateContainerConfigError forever; {ENV_HINTS.get(key, 'provide the value')}"
            )


def _variables_for(value: Any, key: str) -> list[str]:
    if isinstance(value, dict):
        ref = (
            ((value.get("valueFrom") or {}).get("secretKeyRef") or {})
            if isinstance(value.get("valueFrom"), dict)
            else {}
        )
        here = [str(value.get("name"))] if ref.get("key") == key else []
        return sorted(set(here + [v for item in value.values() for v in _variables_for(item, key)]))
    if isinstance(value, list):
        return sorted({v for item in value for v in _variables_for(item, key)})
    return []


def _ensure_job(rest: Rest, kind: Kind, ns: str, manifest: dict[str, Any], redact: tuple[str, ...]) -> JobObject:
    """Create the job object; on 409 AlreadyExists adopt it when it is ours."""
    name = manifest["metadata"]["name"]
    for _ in range(3):  # bounded: create, or read what exists; the object may vanish in between
        try:
            return cast(JobObject, rest.create(kind, ns, manifest, redact))
        except Conflict as exc:
            if exc.failure.reason not in ("", "AlreadyExists"):
                raise BackendError(
                    f"could not create {kind.kind} {ns}/{name}: the API server answered {exc.failure.detail}"
                ) from exc
        existing = cast(JobObject | None, rest.get(kind, ns, name, redact=redact))
        if existing is not None:
            return _adopt(kind, existing, manifest)
    raise BackendError(
        f"could not create {kind.kind} {ns}/{name}: it exists and vanishes again each time it "
        "is read (is another tool deleting it?); retry later"
    )


def _adopt(kind: Kind, existing: JobObject, manifest: dict[str, Any]) -> JobObject:
    meta = existing.get("metadata") or {}
    wanted = (manifest["metadata"].get("labels") or {}).get(RUN_LABEL)
    found = (meta.get("labels") or {}).get(RUN_LABEL)
    if wanted is not None and found != wanted:
        raise BackendError(
            f"{kind.kind} {meta.get('namespace')}/{meta.get('name')} already exists and belongs to "
            f"{'run ' + found if found else 'no tuneplane run'} (label {RUN_LABEL}), not run {wanted}; "
            "delete it or render this run under another name"
        )
    log.info("adopting existing %s %s/%s (uid %s)", kind.kind, meta.get("namespace"), meta.get("name"), meta.get("uid"))
    return existing


def _type_of(manifest: dict[str, Any]) -> tuple[str, str]:
    return str(manifest.get("apiVersion", "")), str(manifest.get("kind", ""))


def _owner_reference(job: JobObject) -> OwnerReference:
    meta = job.get("metadata") or {}
    # No blockOwnerDeletion: it needs update rights on the owner's finalizers, which a bot may lack.
    return {
        "apiVersion": job.get("apiVersion", ""),
        "kind": job.get("kind", ""),
        "name": meta.get("name", ""),
        "uid": meta.get("uid", ""),
    }


def _owned(manifest: dict[str, Any], owner: OwnerReference) -> dict[str, Any]:
    meta = manifest["metadata"]
    if not meta.get("ownerReferences"):
        meta["ownerReferences"] = [dict(owner)]
    return manifest


def _secret(
    request: SubmitRequest, ns: str, job: JobObject, owner: OwnerReference, copied: dict[str, str]
) -> dict[str, Any]:
    meta = job.get("metadata") or {}
    labels = {k: v for k, v in (meta.get("labels") or {}).items() if k in {RUN_LABEL, EXPERIMENT_LABEL}}
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {
            "name": f"{meta.get('name')}{SECRET_SUFFIX}",
            "namespace": ns,
            "labels": labels,
            "ownerReferences": [dict(owner)],
        },
        "type": "Opaque",
        "stringData": {**copied, **request.secret_data},
    }
