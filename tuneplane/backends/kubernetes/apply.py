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
from collections.abc import Iterator
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
from tuneplane.runtime.jsonvalue import JSONObject
from tuneplane.runtime.records import FrozenRecord

RUN_LABEL = "tuneplane.dev/run"
EXPERIMENT_LABEL = "tuneplane.dev/experiment"
COMMIT_ANNOTATION = "tuneplane.dev/commit"  # provenance the renderer writes on every job object
JOBSPEC_ANNOTATION = "tuneplane.dev/jobspec-digest"
SECRET_SUFFIX = "-tokens"
ENV_HINTS = {
    "job-token": "the bot mints it from TUNEPLANE_INGEST_SECRET: set that secret in the bot's "
    "environment (or clear cluster.ingest.endpoint in tuneplane.yaml to run without reporting)"
}


def submit(rest: Rest, request: SubmitRequest, documents: list[JSONObject], ns: str, name: str) -> BackendRef:
    """Submit `documents`, the request's own rendered objects (`payload.objects_of`)."""
    copied = _copied_secrets(rest, request, ns)
    redact = tuple(request.secret_data.values()) + tuple(copied.values())
    job_manifest, kind, others = _split_manifests(request, documents, ns)
    _refuse_missing_secrets(rest, request, documents, ns, {**copied, **request.secret_data})
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


def _split_manifests(
    request: SubmitRequest, documents: list[JSONObject], ns: str
) -> tuple[dict[str, Any], Kind, list[dict[str, Any]]]:
    """Find the one job object named `object_name`; check every manifest is a kind we submit."""
    job: dict[str, Any] | None = None
    others: list[dict[str, Any]] = []
    for raw in documents:
        manifest: dict[str, Any] = copy.deepcopy(raw)  # read as the raw objects the client writes
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
            f"none of the {len(documents)} manifests for run {request.run_id} is a Job, "
            f"JobSet or RayJob named {request.object_name!r}; the renderer must name the job object "
            "after the run"
        )
    return job, JOB_KINDS[job["kind"]], others


class _Need(FrozenRecord):
    """A Secret (and one of its keys, or "" for the whole Secret) a pod cannot start without."""

    secret: str
    key: str
    used_as: str  # "GIT_PASSWORD", "envFrom of container 'trainer'", "volume 'certs'"


def _pod_specs(value: Any) -> Iterator[dict[str, Any]]:
    """Every pod spec anywhere in a manifest (a Job's template, each replicated Job's, a Ray group's)."""
    if isinstance(value, dict):
        if isinstance(value.get("containers"), list):
            yield value
        for item in value.values():
            yield from _pod_specs(item)
    elif isinstance(value, list):
        for item in value:
            yield from _pod_specs(item)


def _needs(pod: dict[str, Any]) -> Iterator[_Need]:
    """What the kubelet must read before it starts the pod: every non-optional secretKeyRef, envFrom
    secretRef and secret volume (plain or projected). A missing one keeps the pod waiting forever."""
    for container in (pod.get("initContainers") or []) + (pod.get("containers") or []):
        where = f"container {container.get('name')!r}"
        for entry in container.get("env") or []:
            ref = (entry.get("valueFrom") or {}).get("secretKeyRef")
            if isinstance(ref, dict) and not ref.get("optional"):
                yield _Need(str(ref.get("name")), str(ref.get("key")), str(entry.get("name")))
        for source in container.get("envFrom") or []:
            ref = source.get("secretRef")
            if isinstance(ref, dict) and not ref.get("optional"):
                yield _Need(str(ref.get("name")), "", f"envFrom of {where}")
    for volume in pod.get("volumes") or []:
        sources = [(volume.get("secret"), "secretName")]
        sources += [(s.get("secret"), "name") for s in (volume.get("projected") or {}).get("sources") or []]
        for ref, field_name in sources:
            if isinstance(ref, dict) and not ref.get("optional"):
                keys = [str(i.get("key")) for i in ref.get("items") or []] or [""]
                for key in keys:
                    yield _Need(str(ref.get(field_name)), key, f"volume {volume.get('name')!r}")


def _refuse_missing_secrets(
    rest: Rest, request: SubmitRequest, documents: list[JSONObject], ns: str, data: dict[str, str]
) -> None:
    """A pod that needs a Secret or a key that is not there never starts: it waits in
    CreateContainerConfigError (ContainerCreating for a volume) forever, holding its GPUs and its queue's
    quota. Every Secret the pods need is read now (the run's own one is what submission will write), and
    the run refused before anything is created, with every gap and its fix at once."""
    own = f"{request.object_name}{SECRET_SUFFIX}"
    needs = list(dict.fromkeys(n for m in documents for pod in _pod_specs(m) for n in _needs(pod)))
    keys: dict[str, set[str] | None] = {own: set(data)}
    for name in dict.fromkeys(n.secret for n in needs):
        if name not in keys:
            found = cast(Secret | None, rest.get(SECRET, ns, name))
            keys[name] = None if found is None else set(found.get("data") or {})
    missing = [n for n in needs if keys[n.secret] is None or (n.key and n.key not in (keys[n.secret] or ()))]
    if missing:
        gaps = dict.fromkeys(n.secret for n in missing)
        lines = [_missing_line(request, ns, s, keys[s], [n for n in missing if n.secret == s], own) for s in gaps]
        raise BackendError(
            f"run {request.run_id} cannot be submitted: its pods would wait in CreateContainerConfigError "
            "forever, holding their GPUs and queue quota:\n" + "\n".join(f"  - {line}" for line in lines)
        )
    _warn_missing_pull_secrets(rest, request, documents, ns)


def _missing_line(
    request: SubmitRequest, ns: str, secret: str, keys: set[str] | None, needs: list[_Need], own: str
) -> str:
    """One Secret's gaps: what is missing, who needs it, which setting names it, and the command that fixes it."""
    wanted = sorted({n.key for n in needs if n.key})
    uses = ", ".join(sorted({n.used_as for n in needs}))
    if secret == own:
        key = wanted[0]
        return (
            f"its pods require key {key!r} of Secret {own} (as {uses}), which submission would not "
            f"write; {ENV_HINTS.get(key, 'provide the value')}"
        )
    listed = " or ".join(repr(k) for k in wanted)
    if keys is None:
        what = f"does not exist, so it has no key {listed}" if wanted else "does not exist"
    else:
        what = f"has no key {listed}"
    setting = request.secret_settings.get(secret)
    named = f"; tuneplane.yaml names it in {setting}" if setting else ""
    literals = " ".join(f"--from-literal={k}=..." for k in wanted) or "--from-literal=KEY=..."
    return (
        f"Secret {ns}/{secret} {what}, which the pods need (as {uses}){named}. Create it: "
        f"kubectl create secret generic {secret} -n {ns} {literals}" + (f" (or correct {setting})" if setting else "")
    )


def _warn_missing_pull_secrets(rest: Rest, request: SubmitRequest, documents: list[JSONObject], ns: str) -> None:
    """A missing image pull Secret is only a warning: the kubelet pulls without it, so a public image
    still starts; a private one fails the pull and the attempt ends `ImagePull` after the grace period."""
    names = dict.fromkeys(
        str(ref.get("name"))
        for m in documents
        for pod in _pod_specs(m)
        for ref in pod.get("imagePullSecrets") or []
        if isinstance(ref, dict)
    )
    for name in names:
        if cast(Secret | None, rest.get(SECRET, ns, name)) is None:
            setting = request.secret_settings.get(name, "the manifests")
            log.warning(
                "image pull Secret %s/%s (named by %s in tuneplane.yaml) does not exist: a private image of run "
                "%s will not pull; create it: kubectl create secret docker-registry %s -n %s --docker-server=... "
                "--docker-username=... --docker-password=...",
                ns,
                name,
                setting,
                request.run_id,
                name,
                ns,
            )


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
