"""What an administrator applies once for a Kubernetes lab (tuneplane.backends.kubernetes.operator, `tp cluster
storage|sdk|ingest`, `tp init --backend kubernetes`): each object goes through the real `kubernetes` client
into the cluster twin with strict field validation, as the job manifests do; the SDK installer's script runs
for real against a local wheel."""

from __future__ import annotations

import base64
import hashlib
import os
import subprocess
import sys
import zipfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
import yaml
from kubernetes import utils
from support.labs import new_lab

from tuneplane import __version__
from tuneplane.backends.kubernetes import operator

if TYPE_CHECKING:
    from fakekube import FakeKube

pytest_plugins = ("fakekube",)

VCS_REQUIREMENT = "tuneplane @ git+https://git.example.org/acme/tuneplane@v0.5.0"


@pytest.fixture()
def kube_lab(tmp_path: Path) -> Path:
    """What `tp init lab --backend kubernetes --no-git --tool-requirement VCS_REQUIREMENT` writes."""
    return new_lab(tmp_path / "lab", "lab", backend="kubernetes", use_git=False, tool_requirement=VCS_REQUIREMENT)


def _apply(kube_client: Any, text: str) -> list[Any]:
    """What `kubectl apply -f` sends for new objects: a create per document, unknown fields refused."""
    created = []
    for doc in yaml.safe_load_all(text):
        if doc is not None:
            created += utils.create_from_dict(kube_client, doc, field_validation="Strict")
    return created


def test_init_writes_the_storage_the_docs_apply(kube_lab: Path, fake_kube: FakeKube, kube_client: Any) -> None:
    """docs once said `kubectl apply -f storage-pvc.yaml` of a file nothing wrote."""
    text = (kube_lab / operator.STORAGE_FILE).read_text(encoding="utf-8")
    assert text.startswith("# ") and f"kubectl apply -f {operator.STORAGE_FILE}" in text
    _apply(kube_client, text)
    pvc = fake_kube.get("PersistentVolumeClaim", "tuneplane", "tuneplane-storage")
    assert pvc["spec"]["accessModes"] == ["ReadWriteMany"]


def test_tp_cluster_storage_prints_the_labs_volume(
    kube_lab: Path, tp: Any, fake_kube: FakeKube, kube_client: Any
) -> None:
    result = tp("cluster", "storage", "-n", "ml-team", "--size", "20Ti", "--storage-class", "cephfs", cwd=kube_lab)
    assert result.code == 0, result.output
    _apply(kube_client, result.out)
    pvc = fake_kube.get("PersistentVolumeClaim", "ml-team", "tuneplane-storage")
    assert pvc["spec"]["resources"]["requests"]["storage"] == "20Ti" and pvc["spec"]["storageClassName"] == "cephfs"


def test_the_receivers_manifests_reach_the_cluster_and_name_the_labs_secret(
    kube_lab: Path, tp: Any, fake_kube: FakeKube, kube_client: Any
) -> None:
    """templates/ingest/ were used nowhere: `tp cluster ingest` renders them, checked like the job manifests."""
    image = "registry.example.com/ml/tuneplane:0.5.0"
    result = tp("cluster", "ingest", "--image", image, cwd=kube_lab)
    assert result.code == 0, result.output
    _apply(kube_client, result.out)
    deployment = fake_kube.get("Deployment", "tuneplane", "tuneplane-ingest")
    service = fake_kube.get("Service", "tuneplane", "tuneplane-ingest")
    assert fake_kube.get("PersistentVolumeClaim", "tuneplane", "tuneplane-ingest") is not None
    pod = deployment["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert container["image"] == image and container["args"][:3] == ["tp", "ingest", "serve"]
    secret = next(v for v in pod["volumes"] if "secret" in v)["secret"]
    assert secret["secretName"] == "tuneplane-ingest" and secret["items"] == [{"key": "secret", "path": "secret"}]
    assert deployment["spec"]["replicas"] == 1 and deployment["spec"]["strategy"]["type"] == "Recreate"
    labels = deployment["spec"]["template"]["metadata"]["labels"]
    assert service["spec"]["selector"] == labels and service["spec"]["ports"][0]["port"] == 8765
    assert "http://tuneplane-ingest.tuneplane.svc:8765" in result.out  # cluster.ingest.endpoint, said once


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        (("cluster", "ingest", "--image", "x", "--size", "10GB"), "--size '10GB'"),
        (("cluster", "ingest", "--image", "x", "--name", "Ingest"), "--name 'Ingest' is not a Kubernetes name"),
        (("cluster", "storage", "--size", "1TB"), "--size '1TB'"),
    ],
)
def test_a_bad_option_is_refused_before_anything_is_printed(
    kube_lab: Path, tp: Any, argv: tuple[str, ...], said: str
) -> None:
    result = tp(*argv, cwd=kube_lab)
    assert result.code == 2 and said in result.err and result.out == "" and "Traceback" not in result.output


def test_the_sdk_job_fills_the_folder_the_trainers_bootstrap_reads(
    kube_lab: Path, tp: Any, fake_kube: FakeKube, kube_client: Any
) -> None:
    from support.render import build, make_lab, request

    from tuneplane.render.manifests import launcher_command

    result = tp("cluster", "sdk", cwd=kube_lab)
    assert result.code == 0, result.output
    (job,) = _apply(kube_client, result.out)
    container = job.spec.template.spec.containers[0]
    env = {e.name: e.value for e in container.env}
    assert env["TARGET"] == f"/mnt/tuneplane/sdk/{__version__}" and env["REQUIREMENT"] == VCS_REQUIREMENT
    assert container.volume_mounts[0].mount_path == "/mnt/tuneplane"
    assert job.spec.template.spec.volumes[0].persistent_volume_claim.claim_name == "tuneplane-storage"
    # the folder a rendered trainer container puts first on sys.path is the one the Job fills
    spec = build(make_lab(kube_lab.parent / "render", {"custom-exp": "custom/custom"}), request("custom-exp"))[0]
    assert operator.sdk_root(spec.spec.paths.storage_root) in launcher_command(spec)


def test_the_sdk_job_is_refused_while_the_requirement_is_empty(kube_lab: Path, tp: Any) -> None:
    path = kube_lab / "tuneplane.yaml"
    path.write_text(path.read_text(encoding="utf-8").replace(f'"{VCS_REQUIREMENT}"', '""'), encoding="utf-8")
    result = tp("cluster", "sdk", cwd=kube_lab)
    assert result.code == 2 and "tool.requirement" in result.err and result.out == ""


def _wheel(where: Path, version: str) -> Path:
    """A minimal wheel of a `tuneplane` at `version` (what pip installs: no build, no index)."""
    name = f"tuneplane-{version}"
    files = {
        "tuneplane/__init__.py": f'__version__ = "{version}"\n',
        f"{name}.dist-info/METADATA": f"Metadata-Version: 2.1\nName: tuneplane\nVersion: {version}\n",
        f"{name}.dist-info/WHEEL": "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    lines = []
    for rel, text in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest()).rstrip(b"=").decode()
        lines.append(f"{rel},sha256={digest},{len(text.encode())}")
    files[f"{name}.dist-info/RECORD"] = "\n".join([*lines, f"{name}.dist-info/RECORD,,"]) + "\n"
    path = where / f"{name}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as zf:
        for rel, text in files.items():
            zf.writestr(rel, text)
    return path


def _install(tmp_path: Path, wheel: Path) -> subprocess.CompletedProcess[str]:
    shim = tmp_path / "bin"
    shim.mkdir(exist_ok=True)
    (shim / "python").symlink_to(sys.executable) if not (shim / "python").exists() else None
    env = {
        **os.environ,
        "PATH": os.pathsep.join([str(shim), os.environ["PATH"]]),
        "TARGET": str(tmp_path / "storage" / "sdk" / __version__),
        "REQUIREMENT": str(wheel),
        "INDEX_URL": "",
        "VERSION": __version__,
        "PIP_NO_INDEX": "1",
    }
    return subprocess.run(["sh", "-c", operator.SDK_SCRIPT], env=env, capture_output=True, text=True, timeout=300)


def test_the_sdk_script_installs_the_version_the_bot_renders_for(tmp_path: Path) -> None:
    target = tmp_path / "storage" / "sdk" / __version__
    other = tmp_path / "other"
    other.mkdir()
    wrong = _install(tmp_path, _wheel(other, "0.0.1"))
    assert wrong.returncode == 1 and "installs tuneplane 0.0.1" in wrong.stderr and not target.exists()
    assert list((tmp_path / "storage" / "sdk").iterdir()) == []  # nothing half-installed left behind

    right = _install(tmp_path, _wheel(tmp_path, __version__))
    assert right.returncode == 0, right.stderr
    assert (target / "tuneplane" / "__init__.py").read_text() == f'__version__ = "{__version__}"\n'
    again = _install(tmp_path, _wheel(other, "0.0.1"))  # a second apply finds it there and changes nothing
    assert again.returncode == 0 and "already there" in again.stdout
