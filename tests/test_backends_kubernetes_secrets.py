"""The lab's HF token reaches a cluster job through the run's own Secret, copied by the backend."""

from __future__ import annotations

import base64
import copy
from collections.abc import Iterator
from typing import Any

import pytest
from test_backends_kubernetes import FAST, NS, documents, kube_client, request_for

from tuneplane.backends.base import BackendError
from tuneplane.backends.kubernetes.backend import KubernetesBackend
from tuneplane.backends.kubernetes.payload import KubernetesObjects

pytest_plugins = ("fakekube",)
__all__ = ["kube_client"]  # the bot's client, held to its Role, for every test here


def _lab_secret(fake: Any, data: dict[str, str]) -> None:
    encoded = {k: base64.b64encode(v.encode()).decode() for k, v in data.items()}
    fake.put(
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": "hf", "namespace": NS},
            "type": "Opaque",
            "data": encoded,
        }
    )


def test_the_run_secret_gets_a_copy_of_the_lab_secret(fake_kube: Any, kube_client: Any) -> None:
    _lab_secret(fake_kube, {"token": "hf_abc123"})
    request = request_for("Job").replace(secret_copies={"hf-token": ("hf", "token")})
    KubernetesBackend(NS, api_client=kube_client, retry=FAST).submit(request)
    secret = fake_kube.get("Secret", NS, "sft-demo-r1-tokens")
    values = {k: base64.b64decode(v).decode() for k, v in (secret.get("data") or {}).items()}
    values |= secret.get("stringData") or {}
    assert values["hf-token"] == "hf_abc123"
    assert values["TUNEPLANE_JOB_TOKEN"]  # the run's own token is still there


@pytest.mark.parametrize("data", [None, {"other": "x"}], ids=["no-secret", "no-key"])
def test_a_missing_lab_secret_is_refused_before_anything_is_created(
    fake_kube: Any, kube_client: Any, data: dict[str, str] | None
) -> None:
    if data is not None:
        _lab_secret(fake_kube, data)
    request = request_for("Job").replace(secret_copies={"hf-token": ("hf", "token")})
    with pytest.raises(BackendError, match=r"Secret .*/hf .*'token'.*kubectl create secret generic hf"):
        KubernetesBackend(NS, api_client=kube_client, retry=FAST).submit(request)
    assert fake_kube.get("Job", NS, "sft-demo-r1") is None


def test_submit_asks_for_the_hf_token_only_when_the_lab_names_a_secret(tmp_path: Any) -> None:
    from support.render import make_lab

    from tuneplane.models.run import Inputs, RunRequest
    from tuneplane.runs.prepare import backend_request, prepare

    lab = make_lab(tmp_path / "lab", {"img": "pytorch/image-classification"})
    request = RunRequest(experiment="img", run_id="20260101-000000-abcdef", profile="h200:8", inputs=Inputs())
    run = prepare(lab, request, commit="0" * 40, dirty=False)
    assert lab.config.cluster.hf_token_secret == "hf-token"  # the test lab names one
    assert backend_request(lab.root, lab, run, env={}).secret_copies == {"hf-token": ("hf-token", "token")}


# ── every Secret a pod needs exists, with its keys, before anything is created ───────────────────
RENDER_NS = "ml-team"  # the namespace of support.render's cluster lab


@pytest.fixture
def render_client(fake_kube: Any) -> Iterator[Any]:
    """The bot's client in the rendered lab's namespace, held to the Role tuneplane declares there."""
    from twin_rbac import bot_session

    with bot_session(fake_kube, RENDER_NS) as api_client:
        yield api_client


def _put_secret(fake: Any, name: str, data: dict[str, str], ns: str = NS) -> None:
    encoded = {k: base64.b64encode(v.encode()).decode() for k, v in data.items()}
    fake.put({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": name, "namespace": ns}, "data": encoded})


def _rendered_request(tmp_path: Any) -> Any:
    """A trl/sft run of a lab whose clone uses `cluster.repo.credentials_secret: lab-git`, as the bot packs it."""
    from support.render import make_lab, request

    from tuneplane.runs.prepare import backend_request, prepare

    lab = make_lab(tmp_path / "lab", {"trl-sft-exp": "trl/sft"})
    run = prepare(lab, request("trl-sft-exp"), commit="0" * 40, dirty=False)
    return backend_request(lab.root, lab, run, env={"TUNEPLANE_INGEST_SECRET": "k" * 32})


@pytest.mark.parametrize("data", [None, {"username": "bot"}], ids=["no-secret", "no-password-key"])
def test_missing_git_credentials_are_refused_naming_the_setting_and_the_fix(
    fake_kube: Any, render_client: Any, tmp_path: Any, data: dict[str, str] | None
) -> None:
    if data is not None:
        _put_secret(fake_kube, "lab-git", data, RENDER_NS)
    _put_secret(fake_kube, "hf-token", {"token": "hf_x"}, RENDER_NS)
    request = _rendered_request(tmp_path)
    with pytest.raises(BackendError) as caught:
        KubernetesBackend(RENDER_NS, api_client=render_client, retry=FAST).submit(request)
    text = str(caught.value)
    assert f"Secret {RENDER_NS}/lab-git" in text and "'password'" in text and "GIT_PASSWORD" in text
    assert "cluster.repo.credentials_secret" in text
    assert f"kubectl create secret generic lab-git -n {RENDER_NS}" in text and "--from-literal=password=" in text
    assert "'username'" not in text  # GIT_USERNAME is optional: the clone works without it
    assert fake_kube.list("Job", RENDER_NS) == [] and fake_kube.list("Secret", RENDER_NS) != []
    assert fake_kube.get("Secret", RENDER_NS, request.object_name + "-tokens") is None


def test_with_the_git_credentials_the_run_is_submitted(fake_kube: Any, render_client: Any, tmp_path: Any) -> None:
    _put_secret(fake_kube, "lab-git", {"password": "pass"}, RENDER_NS)
    _put_secret(fake_kube, "hf-token", {"token": "hf_x"}, RENDER_NS)
    _put_secret(fake_kube, "registry-creds", {".dockerconfigjson": "{}"}, RENDER_NS)
    request = _rendered_request(tmp_path)
    ref = KubernetesBackend(RENDER_NS, api_client=render_client, retry=FAST).submit(request)
    assert fake_kube.get("Job", RENDER_NS, ref.name) is not None


def test_a_missing_image_pull_secret_only_warns(
    fake_kube: Any, render_client: Any, tmp_path: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """The kubelet pulls without it (a public image still starts); a private one ends the attempt ImagePull."""
    _put_secret(fake_kube, "lab-git", {"password": "pass"}, RENDER_NS)
    _put_secret(fake_kube, "hf-token", {"token": "hf_x"}, RENDER_NS)
    request = _rendered_request(tmp_path)
    with caplog.at_level("WARNING", logger="tuneplane.backends.kubernetes"):
        ref = KubernetesBackend(RENDER_NS, api_client=render_client, retry=FAST).submit(request)
    assert fake_kube.get("Job", RENDER_NS, ref.name) is not None
    warned = " ".join(r.getMessage() for r in caplog.records)
    assert "registry-creds" in warned and "cluster.image_pull_secrets" in warned


def _with_pod_secrets(request: Any) -> Any:
    """`request` whose pod also takes Secrets through envFrom, a secret volume and a projected volume."""
    job = copy.deepcopy(documents(request)[0])
    pod = job["spec"]["template"]["spec"]
    pod["containers"][0]["envFrom"] = [
        {"secretRef": {"name": "bundle"}},
        {"secretRef": {"name": "maybe", "optional": True}},
    ]
    pod["containers"][0]["env"] = [
        {"name": "OPT", "valueFrom": {"secretKeyRef": {"name": "absent", "key": "k", "optional": True}}}
    ]
    pod["volumes"] = [
        {"name": "certs", "secret": {"secretName": "certs", "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
        {
            "name": "extra",
            "projected": {"sources": [{"secret": {"name": "wandb", "items": [{"key": "key", "path": "k"}]}}]},
        },
        {"name": "opt", "secret": {"secretName": "optional-vol", "optional": True}},
    ]
    return request.replace(payload=KubernetesObjects([job]))


def test_secrets_from_env_from_and_volumes_are_checked_all_at_once(fake_kube: Any, kube_client: Any) -> None:
    _put_secret(fake_kube, "certs", {"tls.crt": "x"})
    request = _with_pod_secrets(request_for("Job"))
    with pytest.raises(BackendError) as caught:
        KubernetesBackend(NS, api_client=kube_client, retry=FAST).submit(request)
    text = str(caught.value)
    assert f"Secret {NS}/bundle does not exist" in text  # envFrom
    assert f"Secret {NS}/certs has no key 'ca.crt'" in text  # a volume's item
    assert f"Secret {NS}/wandb does not exist" in text  # a projected volume
    assert "maybe" not in text and "absent" not in text and "optional-vol" not in text
    assert fake_kube.get("Job", NS, "sft-demo-r1") is None

    _put_secret(fake_kube, "bundle", {"A": "1"})
    _put_secret(fake_kube, "certs", {"ca.crt": "x"})
    _put_secret(fake_kube, "wandb", {"key": "x"})
    KubernetesBackend(NS, api_client=kube_client, retry=FAST).submit(request)
    assert fake_kube.get("Job", NS, "sft-demo-r1") is not None
