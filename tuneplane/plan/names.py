"""Object names, label values and digests every rendered object and backend agrees on. Pure."""

from __future__ import annotations

import hashlib
import re

from tuneplane.models.jobspec import JobSpec
from tuneplane.runtime.digest import canonical_json, sha256_bytes

MAX_NAME = 40
HASH_LEN = 10
REPLICATED_JOB = "trainer"  # the JobSet's one replicated job; also names the trainer container
RENDEZVOUS_PORT = 29500
MANAGED_BY = "tuneplane"
_DNS_UNSAFE = re.compile(r"[^a-z0-9-]+")
_LABEL_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]+")


def object_name(experiment: str, run_id: str) -> str:
    """Deterministic DNS-1035 name, at most 40 characters, ending in a hash of experiment + run id.

    40 leaves room for what controllers derive from it (`-tokens`, JobSet pod host names, RayCluster
    pods) within the 63-character limits.
    """
    digest = hashlib.sha256(f"{experiment}\0{run_id}".encode()).hexdigest()[:HASH_LEN]
    stem = _DNS_UNSAFE.sub("-", experiment.lower()).strip("-")
    if not stem or not stem[0].isalpha():
        stem = f"tp-{stem}".rstrip("-")
    stem = stem[: MAX_NAME - HASH_LEN - 1].rstrip("-")
    return f"{stem}-{digest}"


def attempt_name(name: str, attempt: int) -> str:
    """The object of a run's `attempt` (the bot's retry) under the name of its first (`name`, from
    `object_name`): `<stem>-<hash>-a<N>`, the stem shortened so it stays within `MAX_NAME`. Every bot
    derives the same name, so a second bot (or one restarted after a crash) adopts the object."""
    if attempt <= 1:
        return name
    suffix = f"-a{attempt}"
    stem, _, digest = name.rpartition("-")
    stem = stem[: max(1, MAX_NAME - len(digest) - 1 - len(suffix))].rstrip("-") or "tp"
    return f"{stem}-{digest}{suffix}"


def label_value(text: str) -> str:
    """A valid label value (≤ 63, alphanumeric at both ends, `-_.` inside) that still reads like `text`."""
    cleaned = _LABEL_UNSAFE.sub("-", text)[:63]
    return re.sub(r"^[^A-Za-z0-9]+|[^A-Za-z0-9]+$", "", cleaned)


def secret_name(spec: JobSpec) -> str:
    """The per-run Secret holding the job's tokens; the backend creates it, manifests only refer to it."""
    return f"{spec.metadata.name}-tokens"


def rendezvous_host(spec: JobSpec) -> str:
    """The first pod of the JobSet, through its headless service: `<jobset>-<rjob>-0-0.<jobset>`."""
    name = spec.metadata.name
    return f"{name}-{REPLICATED_JOB}-0-0.{name}"


def jobspec_digest(spec: JobSpec) -> str:
    return sha256_bytes(canonical_json(spec.to_json_dict()))
