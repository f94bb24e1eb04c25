"""The bot's permissions as code: the namespaced Role, its RoleBinding and ServiceAccount.

The Role is the list of requests the backend makes, one rule per kind it reaches, each verb with the
call that needs it. Nothing more: the bot gets no `pods/exec`, no `delete` on Secrets (the run's Secret
goes with its job object through its owner reference), no `list` on Secrets, and no `watch`. Its `get`
and `patch` on Secrets are not narrowed by `resourceNames`: each run's token Secret has its own name,
which a Role cannot match by pattern, and a server-side apply answers with the whole object anyway; the
docs (gitops.md) ask for a namespace of the lab's own for that reason. A
cluster's `edit` role is no substitute: neither JobSet's nor KubeRay's roles aggregate into it. The
tests run the backend against the cluster twin as this Role's ServiceAccount, so a new request that
the Role does not cover fails there.
"""

from __future__ import annotations

from typing import Any

from tuneplane.backends.kubernetes.client import (
    CONFIGMAP,
    EVENT,
    JOB,
    JOBSET,
    LOCALQUEUES,
    POD,
    RAYJOB,
    RBAC_COMMAND,
    RBAC_FILE,
    SECRET,
    WORKLOADS,
    Kind,
)
from tuneplane.runtime.records import FrozenRecord

BOT_NAME = "tuneplane-bot"  # the ServiceAccount, Role and RoleBinding
__all__ = ["BOT_NAME", "RBAC_COMMAND", "RBAC_FILE", "RULES", "manifests", "to_yaml", "user"]


class Rule(FrozenRecord):
    """Verbs on resources of one API group, with the calls that need them (the YAML's comment)."""

    group: str
    resources: tuple[str, ...]
    verbs: tuple[str, ...]
    why: str

    def as_policy_rule(self) -> dict[str, Any]:
        return {"apiGroups": [self.group], "resources": list(self.resources), "verbs": list(self.verbs)}


def _rule(kinds: tuple[Kind, ...], verbs: tuple[str, ...], why: str, sub: str = "") -> Rule:
    groups = {k.group for k in kinds}
    if len(groups) != 1:
        raise AssertionError(f"one rule is one API group, not {sorted(groups)}")  # pragma: no cover
    resources = tuple(sorted({k.plural + (f"/{sub}" if sub else "") for k in kinds}))
    return Rule(groups.pop(), resources, verbs, why)


JOB_VERBS = ("create", "get", "patch", "delete")
RULES = (
    _rule(
        (JOB,),
        ("create", "get", "list", "patch", "delete"),
        "submit (create; get to adopt one a racing bot made), observe (get; list a JobSet's child Jobs for "
        "its start time), record attempts and mark a cancel (merge patch), cancel (delete)",
    ),
    _rule((JOBSET,), JOB_VERBS, "multi-node runs: submit, observe, record attempts, mark a cancel, cancel"),
    _rule((RAYJOB,), JOB_VERBS, "Ray runs: submit, observe, mark a cancel, cancel"),
    _rule(
        (SECRET,),
        ("create", "get", "patch"),
        "the run's token Secret: server-side apply (patch, and create when it makes it); get: the lab's "
        "Secrets a run copies (hf_token_secret), and the run's tokens to redact them from messages. No delete: "
        "the job object owns the Secret, so the cluster deletes it with the job",
    ),
    _rule((CONFIGMAP,), ("create", "patch"), "a run's companion ConfigMaps: server-side apply, owned by the job"),
    _rule((POD,), ("list",), "a run's pods by label: phase, waiting reasons, exit codes, the leader"),
    _rule((POD,), ("get",), "the last log lines of a failed container; tp job logs", sub="log"),
    _rule(
        (EVENT,),
        ("list",),
        "a run that waits without pods: the controllers' Warning Events say the API server refused them",
    ),
    # Kueue's: why a queued run waits. Harmless on a cluster without Kueue.
    _rule(WORKLOADS, ("list",), "a queued run's Kueue Workload, listed by its job-uid label"),
    _rule(tuple(LOCALQUEUES.values()), ("get",), "the LocalQueue a queued run names: its ClusterQueue"),
)


def metadata(namespace: str, name: str) -> dict[str, Any]:
    return {"name": name, "namespace": namespace, "labels": {"app.kubernetes.io/name": "tuneplane"}}


def service_account(namespace: str, name: str = BOT_NAME) -> dict[str, Any]:
    """The bot's identity; the workflow's kubeconfig carries one of its tokens."""
    return {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": metadata(namespace, name)}


def role(namespace: str, name: str = BOT_NAME) -> dict[str, Any]:
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "Role",
        "metadata": metadata(namespace, name),
        "rules": [r.as_policy_rule() for r in RULES],
    }


def role_binding(namespace: str, name: str = BOT_NAME) -> dict[str, Any]:
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "RoleBinding",
        "metadata": metadata(namespace, name),
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name},
        "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": namespace}],
    }


def manifests(namespace: str, name: str = BOT_NAME) -> list[dict[str, Any]]:
    """ServiceAccount, Role, RoleBinding: in the order `kubectl apply -f` needs them."""
    return [service_account(namespace, name), role(namespace, name), role_binding(namespace, name)]


def user(namespace: str, name: str = BOT_NAME) -> str:
    """The user name the API server gives the ServiceAccount (in its 403 messages, for `--as`)."""
    return f"system:serviceaccount:{namespace}:{name}"


def to_yaml(namespace: str, name: str = BOT_NAME) -> str:
    """The three objects as one YAML stream, each rule of the Role preceded by why the bot needs it."""
    # lazy: PyYAML is only needed by the commands that write these objects
    from tuneplane.lab.yamlio import yaml

    head = [
        f"# The CI bot's identity and permissions in namespace {namespace} (written by tuneplane; "
        f"`{RBAC_COMMAND}` prints it again).",
        f"# Apply once, as an administrator: kubectl apply -f {RBAC_FILE}",
        f"# Check: kubectl auth can-i --list -n {namespace} --as {user(namespace, name)}",
    ]
    docs = manifests(namespace, name)
    dumper = getattr(yaml, "CSafeDumper", yaml.SafeDumper)
    sa, rb = (yaml.dump(d, Dumper=dumper, sort_keys=False, width=1_000_000) for d in (docs[0], docs[2]))
    role_doc = {k: v for k, v in docs[1].items() if k != "rules"}
    lines = [yaml.dump(role_doc, Dumper=dumper, sort_keys=False, width=1_000_000).rstrip("\n"), "rules:"]
    for rule in RULES:
        lines.append(f"# {rule.why}")
        body = yaml.dump([rule.as_policy_rule()], Dumper=dumper, sort_keys=False, default_flow_style=None)
        lines.append(body.rstrip("\n"))
    return "\n".join(head) + "\n---\n" + sa + "---\n" + "\n".join(lines) + "\n---\n" + rb
