"""RBAC in the cluster twin: who is asking (the bearer token), and whether their roles allow it.

As on a real API server, after authentication every resource request is authorized from the
RoleBindings of its namespace and the ClusterRoleBindings, against the Role or ClusterRole each binds:
a rule allows a request when its verbs, API groups, resources (`pods/log` for a subresource, `*`,
`*/log`) and resource names all match. A denial is the API server's 403 `Forbidden` Status, worded as
upstream words it. A server-side apply that would create the object needs `create` too (the apply
handler's own check, whose denial carries no reason). Discovery (`/api`, `/apis`, `/version`) is open
to every authenticated user, as `system:discovery` makes it.

Identities: a token the twin issued for a ServiceAccount (`service_account_token`) is that account
(`system:serviceaccount:NS:NAME`, in groups `system:serviceaccounts`, `system:serviceaccounts:NS`,
`system:authenticated`). Any other token is an administrator in `system:masters`, which RBAC never
restricts: test setup and the twin's own controllers act without limits, as a cluster's do.

Not modelled: the aggregation controller (a test writes an aggregated ClusterRole's rules in full, as
`edit_cluster_role` does), `escalate`/`bind` checks on writing roles, impersonation, non-resource URLs
beyond discovery.
"""

from __future__ import annotations

import contextlib
import secrets
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from fakekube import FakeKube

RBAC_GROUP = "rbac.authorization.k8s.io"
MASTERS = "system:masters"


@dataclass(frozen=True)
class Identity:
    user: str
    groups: tuple[str, ...]

    @property
    def unrestricted(self) -> bool:
        return MASTERS in self.groups


ADMIN = Identity("kubernetes-admin", (MASTERS, "system:authenticated"))


@dataclass(frozen=True)
class Attributes:
    """What the authorizer is asked: the request as RBAC sees it."""

    verb: str
    group: str
    resource: str  # the plural
    sub: str  # a subresource ("log"), or ""
    namespace: str
    name: str  # "" for create and list

    @property
    def qualified(self) -> str:
        """`jobsets.jobset.x-k8s.io`, or `pods` for the core group: how a Status names the resource."""
        return f"{self.resource}.{self.group}" if self.group else self.resource

    @property
    def combined(self) -> str:
        return f"{self.resource}/{self.sub}" if self.sub else self.resource


def identity(kube: FakeKube, authorization: str) -> Identity:
    """The caller, from its `Authorization: Bearer TOKEN` header."""
    token = authorization[len("Bearer ") :] if authorization.startswith("Bearer ") else ""
    account = kube.tokens.get(token)
    if account is None:
        return ADMIN
    ns, name = account
    return Identity(
        f"system:serviceaccount:{ns}:{name}",
        ("system:serviceaccounts", f"system:serviceaccounts:{ns}", "system:authenticated"),
    )


def issue_token(kube: FakeKube, ns: str, name: str) -> str:
    """A token for ServiceAccount NS/NAME (the TokenRequest API): the account must exist."""
    with kube.lock:
        if ("ServiceAccount", ns, name) not in kube.objects:
            raise KeyError(f"ServiceAccount {ns}/{name} does not exist; create it before asking for a token")
        token = f"sa-{secrets.token_hex(16)}"
        kube.tokens[token] = (ns, name)
        return token


def attributes(method: str, groups: dict[str, Any], query: dict[str, str]) -> Attributes:
    """The verb and resource of a request, as the API server's request-info resolver derives them."""
    name, sub = groups.get("name") or "", groups.get("sub") or ""
    if method == "GET":
        verb = "watch" if query.get("watch") in ("true", "1") else ("get" if name else "list")
    elif method == "POST":
        verb = "create"  # on a collection, or a subresource of a named object (pods/eviction)
    elif method == "DELETE":
        verb = "delete" if name else "deletecollection"
    else:
        verb = {"PUT": "update", "PATCH": "patch"}.get(method, method.lower())
    return Attributes(verb, groups.get("group") or "", groups["plural"], sub, groups["ns"], name)


def allowed(kube: FakeKube, who: Identity, attrs: Attributes) -> bool:
    """Whether any rule of any role bound to `who` in the namespace (or cluster-wide) allows the request."""
    if who.unrestricted:
        return True
    with kube.lock:
        bindings = [o for (k, n, _), o in kube.objects.items() if k == "RoleBinding" and n == attrs.namespace]
        bindings += [o for (k, _, _), o in kube.objects.items() if k == "ClusterRoleBinding"]
        for binding in bindings:
            if not any(_subject_matches(s, who, attrs.namespace) for s in binding.get("subjects") or []):
                continue
            if any(_rule_allows(rule, attrs) for rule in _rules(kube, binding)):
                return True
    return False


def forbidden_message(who: Identity, attrs: Attributes, reason: str | None = None) -> str:
    """The API server's words: `<resource> "<name>" is forbidden: User "…" cannot <verb> resource …`."""
    if reason is None:
        reason = (
            f'User "{who.user}" cannot {attrs.verb} resource "{attrs.combined}" in API group "{attrs.group}" '
            f'in the namespace "{attrs.namespace}"'
        )
    target = f'{attrs.qualified} "{attrs.name}"' if attrs.name else attrs.qualified
    return f"{target} is forbidden: {reason}"


def forbidden_details(attrs: Attributes) -> dict[str, Any]:
    return (
        {"name": attrs.name, "group": attrs.group, "kind": attrs.resource}
        if attrs.name
        else {
            "group": attrs.group,
            "kind": attrs.resource,
        }
    )


def _rules(kube: FakeKube, binding: dict[str, Any]) -> list[dict[str, Any]]:
    ref = binding.get("roleRef") or {}
    ns = (binding.get("metadata") or {}).get("namespace", "")
    if ref.get("kind") == "Role" and binding.get("kind") == "RoleBinding":
        role = kube.objects.get(("Role", ns, ref.get("name", "")))
    elif ref.get("kind") == "ClusterRole":
        role = kube.objects.get(("ClusterRole", "", ref.get("name", "")))
    else:
        role = None
    return list((role or {}).get("rules") or [])


def _subject_matches(subject: dict[str, Any], who: Identity, ns: str) -> bool:
    kind, name = subject.get("kind"), subject.get("name")
    if kind == "User":
        return bool(name == who.user)
    if kind == "Group":
        return name in who.groups
    if kind == "ServiceAccount":
        return who.user == f"system:serviceaccount:{subject.get('namespace') or ns}:{name}"
    return False


def _rule_allows(rule: dict[str, Any], attrs: Attributes) -> bool:
    verbs, groups = rule.get("verbs") or [], rule.get("apiGroups") or []
    resources, names = rule.get("resources") or [], rule.get("resourceNames") or []
    return (
        ("*" in verbs or attrs.verb in verbs)
        and ("*" in groups or attrs.group in groups)
        and any(_resource_matches(r, attrs) for r in resources)
        and (not names or attrs.name in names)
    )


def _resource_matches(pattern: str, attrs: Attributes) -> bool:
    if pattern in ("*", attrs.combined):
        return True
    return bool(attrs.sub) and pattern == f"*/{attrs.sub}"


# ---- the real aggregated `edit` ClusterRole ------------------------------------------------------
_WRITE = ["create", "delete", "deletecollection", "patch", "update"]
_READ = ["get", "list", "watch"]
# What Kubernetes' bootstrap `edit` role holds once its aggregation controller has run (view's rules
# included), for the groups a training namespace uses. Nothing of JobSet, KubeRay or Kueue: none of
# them ships a role labelled `rbac.authorization.k8s.io/aggregate-to-edit`.
_EDIT_RULES = [
    (
        [""],
        ["pods", "pods/attach", "pods/exec", "pods/portforward", "pods/proxy"],
        _WRITE,
    ),
    (
        [""],
        [
            "configmaps",
            "events",
            "persistentvolumeclaims",
            "replicationcontrollers",
            "replicationcontrollers/scale",
            "secrets",
            "serviceaccounts",
            "services",
            "services/proxy",
        ],
        _WRITE,
    ),
    ([""], ["serviceaccounts"], ["impersonate"]),
    ([""], ["serviceaccounts/token"], ["create"]),
    ([""], ["pods/attach", "pods/exec", "pods/portforward", "pods/proxy", "secrets", "services/proxy"], _READ),
    (
        [""],
        [
            "configmaps",
            "endpoints",
            "persistentvolumeclaims",
            "persistentvolumeclaims/status",
            "pods",
            "replicationcontrollers",
            "replicationcontrollers/scale",
            "serviceaccounts",
            "services",
            "services/status",
            "bindings",
            "events",
            "limitranges",
            "namespaces/status",
            "pods/log",
            "pods/status",
            "replicationcontrollers/status",
            "resourcequotas",
            "resourcequotas/status",
            "namespaces",
        ],
        _READ,
    ),
    (["batch"], ["cronjobs", "jobs"], _WRITE),
    (["batch"], ["cronjobs", "cronjobs/status", "jobs", "jobs/status"], _READ),
    (["apps"], ["daemonsets", "deployments", "deployments/scale", "replicasets", "statefulsets"], _WRITE + _READ),
    (["autoscaling"], ["horizontalpodautoscalers"], _WRITE + _READ),
    (["policy"], ["poddisruptionbudgets"], _WRITE + _READ),
    (["networking.k8s.io"], ["ingresses", "networkpolicies"], _WRITE + _READ),
    (["coordination.k8s.io"], ["leases"], _WRITE + _READ),
]


def edit_cluster_role() -> dict[str, Any]:
    """The cluster's `edit` ClusterRole with its aggregated rules filled in."""
    return {
        "apiVersion": f"{RBAC_GROUP}/v1",
        "kind": "ClusterRole",
        "metadata": {"name": "edit", "labels": {"rbac.authorization.k8s.io/aggregate-to-admin": "true"}},
        "rules": [{"apiGroups": g, "resources": r, "verbs": v} for g, r, v in _EDIT_RULES],
    }


def grant(kube: FakeKube, manifests: list[dict[str, Any]]) -> str:
    """Store the objects as an administrator's `kubectl apply` would, and a token for their ServiceAccount."""
    account = next(m for m in manifests if m["kind"] == "ServiceAccount")["metadata"]
    for manifest in manifests:
        kube.put(manifest)
    return issue_token(kube, account["namespace"], account["name"])


def bot_client(kube: FakeKube, ns: str) -> Any:
    """A real ApiClient authenticated as the bot's ServiceAccount, bound to the Role tuneplane declares."""
    from tuneplane.backends.kubernetes import rbac

    with kube.lock:
        token = next((t for t, acct in kube.tokens.items() if acct == (ns, rbac.BOT_NAME)), None)
    return kube.api_client(token or grant(kube, rbac.manifests(ns)))


@contextlib.contextmanager
def bot_session(kube: FakeKube, ns: str) -> Iterator[Any]:
    """`bot_client` for the length of a `with`, closed after (a test's fixture yields it)."""
    api_client = bot_client(kube, ns)
    try:
        yield api_client
    finally:
        api_client.close()
