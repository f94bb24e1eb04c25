"""Rules `cluster-*`: the cluster settings of `tuneplane.yaml` would work for pods on a real cluster.

Passing: `cluster.ingest.endpoint: http://ingest.tuneplane.svc:8080`, `cluster.init_image:
registry.example.com/tools/git:2.45@sha256:…` with that registry allowed.
Failing: `cluster.ingest.endpoint: http://127.0.0.1:8080` on a Kubernetes lab (warning: a pod's loopback
is the pod itself, so no metric arrives), an init image from a registry the allowlist refuses, or
without a digest when `images.require_digest` is set (error: the init container escapes neither).
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterator
from urllib.parse import urlsplit

from tuneplane.check.images import ImageError, check_allowed, check_digest_policy, parse_image
from tuneplane.lab.load import Lab
from tuneplane.models.backendkinds import backend_kind
from tuneplane.problems import Problem, Severity


def check(lab: Lab) -> Iterator[Problem]:
    if lab.settings is None or lab.doc is None or not backend_kind(lab.settings.cluster.backend).runs_in_pods:
        return
    yield from _loopback_ingest(lab)
    yield from _init_image(lab)


def is_loopback(url: str) -> bool:
    host = (urlsplit(url).hostname or "").strip("[]").lower()
    if host in ("localhost", "localhost.localdomain") or host.endswith(".localhost"):
        return True
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return False
    return address.is_loopback or address.is_unspecified


def _loopback_ingest(lab: Lab) -> Iterator[Problem]:
    assert lab.settings is not None and lab.doc is not None
    endpoint = lab.settings.cluster.ingest.endpoint
    if endpoint and is_loopback(endpoint):
        yield lab.doc.problem(
            "/cluster/ingest/endpoint",
            "cluster-ingest-loopback",
            f"cluster.ingest.endpoint {endpoint!r} is a loopback address: inside a pod it is the pod itself, so "
            "the jobs' metrics never reach the receiver",
            severity=Severity.WARNING,
            hint="use an address pods can reach, e.g. the receiver's Service: http://ingest.<namespace>.svc:8080",
        )


def _init_image(lab: Lab) -> Iterator[Problem]:
    assert lab.settings is not None and lab.doc is not None
    image = lab.settings.cluster.init_image
    try:
        check_init_image(image, lab.settings.images.allowed_registries, lab.settings.images.require_digest)
    except ImageError as exc:
        yield lab.doc.problem("/cluster/init_image", "cluster-init-image", f"cluster.init_image: {exc}", hint=exc.hint)


def check_init_image(image: str, lab_allowed: list[str] | None, require_digest: bool) -> None:
    """The init container's image is a deployment default, like `images.defaults`: the digest policy and
    the lab's registry allowlist apply (TUNEPLANE_ALLOWED_IMAGE_REGISTRIES is about user images)."""
    ref = parse_image(image)
    check_allowed(ref, lab_allowed)
    check_digest_policy(ref, require_digest)
