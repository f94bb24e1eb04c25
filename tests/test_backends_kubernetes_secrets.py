"""The lab's HF token reaches a cluster job through the run's own Secret, copied by the backend."""

from __future__ import annotations

import base64
import dataclasses
from typing import Any

import pytest
from test_backends_kubernetes import FAST, NS, kube_client, request_for

from tuneplane.backends.base import BackendError
from tuneplane.backends.kubernetes.backend import KubernetesBackend

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
    request = dataclasses.replace(request_for("Job"), secret_copies={"hf-token": ("hf", "token")})
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
    request = dataclasses.replace(request_for("Job"), secret_copies={"hf-token": ("hf", "token")})
    with pytest.raises(BackendError, match=r"Secret .*/hf .*'token'.*kubectl create secret generic hf"):
        KubernetesBackend(NS, api_client=kube_client, retry=FAST).submit(request)
    assert fake_kube.get("Job", NS, "sft-demo-r1") is None


def test_submit_asks_for_the_hf_token_only_when_the_lab_names_a_secret(tmp_path: Any) -> None:
    from helpers_render import make_lab

    from tuneplane.models.run import Inputs, RunRequest
    from tuneplane.runs.prepare import backend_request, prepare

    lab = make_lab(tmp_path / "lab", {"img": "pytorch/image-classification"})
    request = RunRequest(experiment="img", run_id="20260101-000000-abcdef", profile="h200:8", inputs=Inputs())
    run = prepare(lab, request, commit="0" * 40, dirty=False)
    assert lab.config.cluster.hf_token_secret == "hf-token"  # the test lab names one
    assert backend_request(lab.root, lab, run, env={}).secret_copies == {"hf-token": ("hf-token", "token")}
