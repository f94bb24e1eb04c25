"""What an administrator applies once for a Kubernetes lab, besides the bot's Role: the storage every
job mounts, the tp SDK on that storage, and the metrics receiver.

- The storage: a ReadWriteMany PersistentVolumeClaim named `cluster.storage.pvc`, mounted at
  `cluster.storage.root` in every pod of every run (run folders, checkouts, outputs).
- The SDK: a job's trainer container starts `tuneplane.launcher` with `<root>/sdk/<version>` first on
  `sys.path` (and, for a platform-observability recipe, on the trainer's `PYTHONPATH`), so an image without
  tuneplane still runs the launcher and imports `tuneplane.report`. `sdk_job` fills that folder: a Job that
  pip-installs the lab's `tool.requirement` (the job side is standard library only, so `--no-deps`) into it
  and checks the version it got is the one the bot renders for.
- The receiver: `tp ingest serve` as one Deployment (SQLite has one writer) on its own volume, and a
  Service, from `templates/ingest/`.

Every object is checked against the Kubernetes schema of its kind before it is printed, as rendered
job manifests are, so a bad `--size` or name is refused here rather than by the API server.
"""

from __future__ import annotations

from typing import Any

from tuneplane import __version__
from tuneplane.errors import UsageError

STORAGE_FILE = "cluster/storage-pvc.yaml"
SDK_DIR = "sdk"  # <storage root>/sdk/<version>: what the trainer container's bootstrap puts first on sys.path
INGEST_NAME = "tuneplane-ingest"
INGEST_PORT = 8765
INGEST_SECRET_KEY = "secret"  # the key of cluster.ingest.secret the receiver and the bot read
SDK_IMAGE = "python:3.12"  # has git, which pip needs for a requirement from a repository
# Schemas of the pinned Kubernetes minor (kubernetes-validate's strict set), per kind printed here.
SCHEMAS = {
    ("v1", "PersistentVolumeClaim"): "persistentvolumeclaim-v1.json",
    ("v1", "Service"): "service-v1.json",
    ("apps/v1", "Deployment"): "deployment-apps-v1.json",
    ("batch/v1", "Job"): "job-batch-v1.json",
}
LABELS = {"app.kubernetes.io/name": "tuneplane"}
# The SDK installer's script: constant text, every value arrives as an environment variable. It installs
# into a fresh folder beside the target and renames it into place, so a job never sees half an SDK.
SDK_SCRIPT = r"""set -eu
if [ -f "$TARGET/tuneplane/__init__.py" ]; then echo "sdk: $TARGET is already there"; exit 0; fi
mkdir -p "$(dirname "$TARGET")"
tmp="$TARGET.tmp.$$"
rm -rf "$tmp"
if [ -n "$INDEX_URL" ]; then set -- --index-url "$INDEX_URL"; else set --; fi
python -m pip install --quiet --no-cache-dir --no-deps --target "$tmp" "$@" "$REQUIREMENT"
got=$(cd / && PYTHONPATH="$tmp" python -c 'import tuneplane; print(tuneplane.__version__)')
if [ "$got" != "$VERSION" ]; then
  echo "sdk: $REQUIREMENT installs tuneplane $got, but the bot renders jobs for $VERSION" >&2
  rm -rf "$tmp"
  exit 1
fi
chmod -R a+rX "$tmp"
mv "$tmp" "$TARGET"
echo "sdk: tuneplane $got in $TARGET"
"""


def sdk_root(storage_root: str, version: str = __version__) -> str:
    """The folder jobs take tuneplane from (render.manifests puts the same path in every trainer command)."""
    return f"{storage_root.rstrip('/')}/{SDK_DIR}/{version}"


def storage_pvc(namespace: str, name: str, size: str, storage_class: str = "") -> dict[str, Any]:
    """The volume every pod of every run mounts: ReadWriteMany, since a run's pods share it across nodes."""
    spec: dict[str, Any] = {"accessModes": ["ReadWriteMany"], "resources": {"requests": {"storage": size}}}
    if storage_class:
        spec["storageClassName"] = storage_class
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {"name": name, "namespace": namespace, "labels": dict(LABELS)},
        "spec": spec,
    }


def sdk_job(
    namespace: str, pvc: str, storage_root: str, requirement: str, index_url: str = "", image: str = SDK_IMAGE
) -> dict[str, Any]:
    """A Job that installs `requirement` into `<storage root>/sdk/<this version>` on the lab's volume."""
    env = {
        "TARGET": sdk_root(storage_root),
        "REQUIREMENT": requirement,
        "INDEX_URL": index_url,
        "VERSION": __version__,
    }
    name = f"tuneplane-sdk-{__version__.replace('.', '-').replace('+', '-').lower()}"[:63].rstrip("-")
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": namespace, "labels": dict(LABELS)},
        "spec": {
            "backoffLimit": 2,
            "ttlSecondsAfterFinished": 86400,
            "template": {
                "metadata": {"labels": dict(LABELS)},
                "spec": {
                    "restartPolicy": "Never",
                    "automountServiceAccountToken": False,
                    "containers": [
                        {
                            "name": "install",
                            "image": image,
                            "command": ["sh", "-c", SDK_SCRIPT],
                            "env": [{"name": k, "value": v} for k, v in env.items()],
                            "volumeMounts": [{"name": "storage", "mountPath": storage_root}],
                        }
                    ],
                    "volumes": [{"name": "storage", "persistentVolumeClaim": {"claimName": pvc}}],
                },
            },
        },
    }


def ingest_manifests(
    namespace: str,
    image: str,
    secret_name: str,
    name: str = INGEST_NAME,
    port: int = INGEST_PORT,
    storage: str = "10Gi",
    cpu: str = "500m",
    memory: str = "1Gi",
) -> list[dict[str, Any]]:
    """The receiver's volume, Deployment and Service, rendered from templates/ingest/ and parsed back."""
    # lazy: the templates and their parser are only needed by the command that prints them
    from tuneplane.render.manifests import parse_documents
    from tuneplane.render.templating import render

    values = {
        "name": name,
        "namespace": namespace,
        "image": image,
        "port": port,
        "storage": storage,
        "cpu": cpu,
        "memory": memory,
        "secret_name": secret_name,
        "secret_key": INGEST_SECRET_KEY,
    }
    docs: list[dict[str, Any]] = []
    for template in ("pvc", "deployment", "service"):
        docs += parse_documents(render(f"ingest/{template}.yaml.j2", **values))
    return docs


def check_quantities(**named: str) -> None:
    """Each option a quantity the API server takes (`--size 1TB` is not: TB is no Kubernetes unit)."""
    from tuneplane.check.kube import quantity_error  # lazy: only the printing commands check their options

    for option, text in named.items():
        if error := quantity_error(text):
            raise UsageError(
                f"--{option.replace('_', '-')} {text!r}: {error}",
                hint="write a Kubernetes quantity, e.g. 10Gi, 1Ti or 500m (Gi is 2^30 bytes; GB is not a unit there)",
            )


def checked(docs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """`docs`, each valid for its kind's schema; else UsageError naming the object and the field."""
    # lazy: jsonschema and the schemas are only for the commands that print manifests
    from tuneplane.render.schemacheck import core_validator

    for doc in docs:
        schema = SCHEMAS[(str(doc.get("apiVersion")), str(doc.get("kind")))]
        for error in core_validator(schema).iter_errors(doc):
            path = ".".join(str(p) for p in error.absolute_path) or "(top)"
            raise UsageError(
                f"{doc['kind']} {doc['metadata'].get('name', '?')}: {path}: {error.message}",
                hint="quantities like 10Gi or 500m; names of at most 63 lower-case letters, digits and '-'",
            )
    return docs


def to_yaml(docs: list[dict[str, Any]], head: list[str]) -> str:
    """One YAML stream for `kubectl apply -f`, under comment lines saying what it is."""
    # lazy: PyYAML is only needed by the commands that write these objects
    from tuneplane.lab.yamlio import yaml

    body = "---\n".join(yaml.safe_dump(d, sort_keys=False, default_flow_style=False) for d in docs)
    return "".join(f"# {line}\n" for line in head) + body
