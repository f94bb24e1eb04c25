"""`kubectl` for the documents that run against the cluster twin (`<!-- doc-test: needs-kube -->`).

The few verbs the operator guide uses, sent through the real `kubernetes` client to the API server the
kubeconfig names (the twin), with strict field validation, and answered in kubectl's words:

- `kubectl apply -f FILE|-`: each document created (`kind/name created`), or replaced when it exists
  (`kind/name configured`);
- `kubectl [-n NS] create secret generic NAME --from-literal=KEY=VALUE...`;
- `kubectl [-n NS] get KIND NAME`: `kind/name` when it exists, exit 1 with kubectl's NotFound otherwise.

Anything else exits 2 naming what is not supported, so a guide cannot come to rely on a verb this does not
really perform.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import yaml
from kubernetes import client, config, utils
from kubernetes.client.rest import ApiException

STRICT = {"field_validation": "Strict"}
# `kubectl get` names this file knows, as the twin serves them: (api version, kind)
KINDS = {
    "pvc": ("v1", "PersistentVolumeClaim"),
    "persistentvolumeclaim": ("v1", "PersistentVolumeClaim"),
    "deployment": ("apps/v1", "Deployment"),
    "service": ("v1", "Service"),
    "secret": ("v1", "Secret"),
    "job": ("batch/v1", "Job"),
    "serviceaccount": ("v1", "ServiceAccount"),
    "role": ("rbac.authorization.k8s.io/v1", "Role"),
}


def _apply(api: client.ApiClient, source: str, namespace: str | None) -> None:
    text = sys.stdin.read() if source == "-" else Path(source).read_text(encoding="utf-8")
    for doc in yaml.safe_load_all(text):
        if not doc:
            continue
        if namespace and not doc["metadata"].get("namespace"):
            doc["metadata"]["namespace"] = namespace
        group = doc["apiVersion"].rpartition("/")[0]  # kubectl names a kind with its group: job.batch/NAME
        name = f"{doc['kind'].lower()}{'.' + group if group else ''}/{doc['metadata']['name']}"
        try:
            utils.create_from_dict(api, doc, **STRICT)
            print(f"{name} created")
        except utils.FailToCreateError as exc:
            if all(getattr(e, "status", 0) == 409 for e in exc.api_exceptions):
                _replace(api, doc)
                print(f"{name} configured")
            else:
                raise


def _replace(api: client.ApiClient, doc: dict[str, Any]) -> None:
    """An object that exists: read its resourceVersion and put the document over it."""
    dynamic = _resource(api, doc["apiVersion"], doc["kind"])
    ns, name = doc["metadata"].get("namespace"), doc["metadata"]["name"]
    current = dynamic.get(name=name, namespace=ns)
    doc["metadata"]["resourceVersion"] = current.metadata.resourceVersion
    dynamic.replace(body=doc, namespace=ns, **STRICT)


def _resource(api: client.ApiClient, api_version: str, kind: str) -> Any:
    from kubernetes.dynamic import DynamicClient  # lazy: discovery only when an object is read or replaced

    return DynamicClient(api).resources.get(api_version=api_version, kind=kind)


def _secret(api: client.ApiClient, namespace: str, name: str, literals: list[str]) -> None:
    data = dict(item.split("=", 1) for item in literals)
    body = client.V1Secret(metadata=client.V1ObjectMeta(name=name, namespace=namespace), string_data=data)
    client.CoreV1Api(api).create_namespaced_secret(namespace, body, **STRICT)
    print(f"secret/{name} created")


def _get(api: client.ApiClient, namespace: str, kind: str, name: str) -> int:
    if kind.lower().rstrip("s") not in KINDS:
        print(f"kubectl (docs twin): `get {kind}` is not supported", file=sys.stderr)
        return 2
    api_version, full = KINDS[kind.lower().rstrip("s")]
    try:
        _resource(api, api_version, full).get(name=name, namespace=namespace)
    except ApiException as exc:
        if exc.status != 404:
            raise
        print(f'Error from server (NotFound): {kind} "{name}" not found', file=sys.stderr)
        return 1
    print(f"{full.lower()}/{name}")
    return 0


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="kubectl")
    parser.add_argument("-n", "--namespace", default=None)
    parser.add_argument("words", nargs="+")
    parser.add_argument("-f", "--filename", default=None)
    parser.add_argument("--from-literal", action="append", default=[])
    args = parser.parse_intermixed_args(argv)
    config.load_kube_config()
    api = client.ApiClient()
    namespace = args.namespace or config.list_kube_config_contexts()[1]["context"].get("namespace", "default")
    words = args.words
    if words == ["apply"] and args.filename:
        _apply(api, args.filename, args.namespace)
        return 0
    if words[:3] == ["create", "secret", "generic"] and len(words) == 4:
        _secret(api, namespace, words[3], args.from_literal)
        return 0
    if words[0] == "get" and len(words) == 3:
        return _get(api, namespace, words[1], words[2])
    print(f"kubectl (docs twin): {' '.join(argv)!r} is not supported", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
