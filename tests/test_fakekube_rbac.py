"""RBAC in the cluster twin (twin_rbac): a ServiceAccount is held to the roles bound to it, and refused
in the API server's words; an administrator and the twin's own controllers are not."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

if TYPE_CHECKING:
    from fakekube import FakeKube

pytest_plugins = ("fakekube",)

NS = "team-a"
RBAC = "rbac.authorization.k8s.io"
USER = f"system:serviceaccount:{NS}:robot"
APPLY = "application/apply-patch+yaml"


def account(kube: FakeKube, rules: list[dict[str, Any]], *, cluster_role: str = "") -> Any:
    """ServiceAccount `robot` bound to a Role of `rules` (or to ClusterRole `cluster_role`); its client."""
    kube.put({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "robot", "namespace": NS}})
    if not cluster_role:
        kube.put(
            {"apiVersion": f"{RBAC}/v1", "kind": "Role", "metadata": {"name": "r", "namespace": NS}, "rules": rules}
        )
    ref = {"apiGroup": RBAC, "kind": "ClusterRole" if cluster_role else "Role", "name": cluster_role or "r"}
    kube.put(
        {
            "apiVersion": f"{RBAC}/v1",
            "kind": "RoleBinding",
            "metadata": {"name": "rb", "namespace": NS},
            "roleRef": ref,
            "subjects": [{"kind": "ServiceAccount", "name": "robot", "namespace": NS}],
        }
    )
    return kube.api_client(kube.service_account_token(NS, "robot"))


def refusal(call: Any) -> dict[str, Any]:
    with pytest.raises(ApiException) as caught:
        call()
    assert caught.value.status == 403
    return dict(json.loads(caught.value.body))


def secret(name: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": name, "namespace": NS}, "stringData": {"k": "v"}}


def test_a_denied_request_is_the_api_servers_forbidden_status(fake_kube: FakeKube) -> None:
    core = client.CoreV1Api(account(fake_kube, [{"apiGroups": [""], "resources": ["pods"], "verbs": ["list"]}]))
    fake_kube.put(secret("git-credentials"))

    body = refusal(lambda: core.read_namespaced_secret("git-credentials", NS))

    assert body == {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": f'secrets "git-credentials" is forbidden: User "{USER}" cannot get resource "secrets" in API '
        f'group "" in the namespace "{NS}"',
        "reason": "Forbidden",
        "details": {"name": "git-credentials", "group": "", "kind": "secrets"},
        "code": 403,
    }
    assert core.list_namespaced_pod(NS).items == []  # what the Role grants is served


def test_a_collection_a_group_and_a_subresource_are_named_as_upstream_names_them(fake_kube: FakeKube) -> None:
    api = account(fake_kube, [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list"]}])
    fake_kube.add_pod(NS, "p", {}, log_text="hello\n")
    custom, core = client.CustomObjectsApi(api), client.CoreV1Api(api)

    listed = refusal(lambda: custom.list_namespaced_custom_object("jobset.x-k8s.io", "v1alpha2", NS, "jobsets"))
    logs = refusal(lambda: core.read_namespaced_pod_log("p", NS))

    assert listed["message"] == (
        f'jobsets.jobset.x-k8s.io is forbidden: User "{USER}" cannot list resource "jobsets" in API group '
        f'"jobset.x-k8s.io" in the namespace "{NS}"'
    )
    assert logs["message"] == (
        f'pods "p" is forbidden: User "{USER}" cannot get resource "pods/log" in API group "" in the namespace "{NS}"'
    )


def test_a_server_side_apply_that_creates_needs_create_too(fake_kube: FakeKube) -> None:
    core = client.CoreV1Api(account(fake_kube, [{"apiGroups": [""], "resources": ["secrets"], "verbs": ["patch"]}]))
    fake_kube.put(secret("exists"))

    def apply(name: str) -> Any:
        return core.patch_namespaced_secret(name, NS, secret(name), field_manager="t", _content_type=APPLY)

    apply("exists")  # patch alone changes what is there
    body = refusal(lambda: apply("new"))

    assert body["message"] == 'secrets "new" is forbidden: '  # the apply handler's check gives no reason
    assert fake_kube.get("Secret", NS, "new") is None


def test_rules_match_by_wildcard_resource_name_and_group_subject(fake_kube: FakeKube) -> None:
    fake_kube.put(
        {
            "apiVersion": f"{RBAC}/v1",
            "kind": "ClusterRole",
            "metadata": {"name": "reader"},
            "rules": [
                {"apiGroups": ["*"], "resources": ["*/log"], "verbs": ["get"]},
                {"apiGroups": [""], "resources": ["secrets"], "verbs": ["get"], "resourceNames": ["mine"]},
            ],
        }
    )
    fake_kube.put(
        {
            "apiVersion": f"{RBAC}/v1",
            "kind": "ClusterRoleBinding",
            "metadata": {"name": "readers"},
            "roleRef": {"apiGroup": RBAC, "kind": "ClusterRole", "name": "reader"},
            "subjects": [{"kind": "Group", "name": f"system:serviceaccounts:{NS}", "apiGroup": RBAC}],
        }
    )
    core = client.CoreV1Api(account(fake_kube, []))
    fake_kube.put(secret("mine"))
    fake_kube.put(secret("theirs"))
    fake_kube.add_pod(NS, "p", {}, log_text="hello\n")

    assert core.read_namespaced_pod_log("p", NS) == "hello\n"
    assert core.read_namespaced_secret("mine", NS).metadata.name == "mine"
    refusal(lambda: core.read_namespaced_secret("theirs", NS))
    refusal(lambda: core.read_namespaced_pod("p", NS))


def test_an_administrator_is_not_restricted_and_discovery_is_open(fake_kube: FakeKube, kube_client: Any) -> None:
    robot = account(fake_kube, [])
    client.CoreV1Api(kube_client).create_namespaced_secret(NS, secret("s"))  # the tests' own token

    assert client.CoreV1Api(kube_client).read_namespaced_secret("s", NS).metadata.name == "s"
    assert "batch" in {g.name for g in client.ApisApi(robot).get_api_versions().groups}
    refusal(lambda: client.CoreV1Api(robot).read_namespaced_secret("s", NS))


def test_a_token_needs_its_service_account(fake_kube: FakeKube) -> None:
    with pytest.raises(KeyError, match="ServiceAccount team-a/ghost does not exist"):
        fake_kube.service_account_token(NS, "ghost")


def test_rbac_objects_written_by_a_client_are_checked_against_their_schema(
    fake_kube: FakeKube, kube_client: Any
) -> None:
    custom = client.CustomObjectsApi(kube_client)
    bad = {"apiVersion": f"{RBAC}/v1", "kind": "Role", "metadata": {"name": "r"}, "rules": [{"verbs": "get"}]}

    with pytest.raises(ApiException) as caught:
        custom.create_namespaced_custom_object(RBAC, "v1", NS, "roles", bad, field_validation="Strict")

    assert caught.value.status == 422
