"""Rendered manifests as a cluster reads them: the kubelet's `$(…)` expansion, no API token in training
pods, who and what a run is as labels (selectable), a Ray head that stays off the GPU nodes."""

from __future__ import annotations

import json
import random
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from podrunner import kubelet_expand
from support.render import CLUSTER_SETTINGS, build, make_lab, pod_templates, request
from twin_rbac import bot_client

from tuneplane.backends.base import SubmitRequest
from tuneplane.backends.kubernetes import ApiRetry, KubernetesBackend
from tuneplane.backends.kubernetes.payload import KubernetesObjects
from tuneplane.render.scripts import CHECKOUT_SCRIPT

if TYPE_CHECKING:
    from twin_controllers import Cluster

pytest_plugins = ("fakekube",)

NS = "ml-team"
LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
USER = "Alice Smith <alice@example.com>"


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Any:
    settings = CLUSTER_SETTINGS.replace("  user: alice\n", f'  user: "{USER}"\n')
    return make_lab(
        tmp_path_factory.mktemp("manifests") / "lab",
        {"trl-sft-exp": "trl/sft", "verl-grpo-exp": "verl/grpo"},
        settings=settings,
    )


def templates(doc: dict[str, Any]) -> list[dict[str, Any]]:
    found = list(pod_templates(doc))
    if doc["kind"] == "RayJob":
        found.append(doc["spec"]["submitterPodTemplate"])
    return found


CASES = [("trl-sft-exp", "h200"), ("trl-sft-exp", "h200:16"), ("verl-grpo-exp", "h200")]


@pytest.mark.parametrize("experiment, profile", CASES)
def test_no_pod_of_a_run_gets_an_api_token(lab: Any, experiment: str, profile: str) -> None:
    _, _, docs = build(lab, request(experiment, profile=profile))
    for template in templates(docs[0]):
        assert template["spec"]["automountServiceAccountToken"] is False


@pytest.mark.parametrize("experiment, profile", CASES)
def test_user_lab_and_experiment_are_labels_too(lab: Any, experiment: str, profile: str) -> None:
    spec, _, docs = build(lab, request(experiment, profile=profile))
    doc = docs[0]
    for meta in [doc["metadata"], *(t["metadata"] for t in templates(doc))]:
        labels = meta["labels"]
        for key in ("tuneplane.dev/user", "tuneplane.dev/lab", "tuneplane.dev/experiment"):
            assert LABEL_VALUE.match(labels[key]) and 0 < len(labels[key]) <= 63, (key, labels[key])
        assert labels["tuneplane.dev/user"].startswith("Alice-Smith")
        assert labels["tuneplane.dev/lab"] == spec.metadata.lab
    assert doc["metadata"]["annotations"]["tuneplane.dev/user"] == spec.metadata.user  # the annotations stay


def test_dollar_signs_reach_the_containers_as_written(lab: Any) -> None:
    model = "org/model-$(HOME)-$$-$x"
    _, _, docs = build(
        lab, request("trl-sft-exp", inputs={"model": model, "train_data": "t.jsonl", "validation_data": "v.jsonl"})
    )
    (template,) = list(pod_templates(docs[0]))
    init = template["spec"]["initContainers"][0]
    env: dict[str, str] = {"HOME": "/root"}
    for entry in init["env"]:
        if "value" in entry:
            env[entry["name"]] = kubelet_expand(entry["value"], env)
    document = json.loads(env["TUNEPLANE_JOBSPEC"])
    assert document["spec"]["inputs"]["model"] == model
    assert [kubelet_expand(a, env) for a in init["command"]][-1] == CHECKOUT_SCRIPT  # `$$` is the shell's PID


def _gpu_and_cpu_nodes(twin: Cluster) -> None:
    twin.add_node("cpu-1", cpu="32", memory="128Gi")
    for name in ("gpu-1", "gpu-2"):
        twin.add_node(
            name,
            labels={"nvidia.com/gpu.product": "NVIDIA-H200"},
            gpu=8,
            cpu="96",
            memory="1Ti",
            taints=[{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}],
        )


def test_the_ray_head_runs_off_the_gpu_nodes(lab: Any, cluster: Cluster, fake_kube: Any) -> None:
    cluster.add_queue(NS, "team-a", "h200-pool", gpu=64, cpu="1000", memory="16Ti")
    for name, data in (("registry-creds", {".dockerconfigjson": "e30="}), ("lab-git", {"password": "cGFzcw=="})):
        cluster.kube.put(
            {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": name, "namespace": NS}, "data": data}
        )
    _gpu_and_cpu_nodes(cluster)
    spec, _, docs = build(lab, request("verl-grpo-exp", profile="h200:16"))
    head_spec = docs[0]["spec"]["rayClusterSpec"]["headGroupSpec"]["template"]["spec"]
    assert "tolerations" not in head_spec
    backend = KubernetesBackend(
        NS,
        api_client=bot_client(fake_kube, NS),
        rng=random.Random(1),
        retry=ApiRetry(attempts=2, backoff_base=0.001, backoff_cap=0.005, timeout=5.0),
    )
    backend.submit(
        SubmitRequest(
            run_id=spec.metadata.run_id,
            experiment="verl-grpo-exp",
            namespace=NS,
            object_name=spec.metadata.name,
            payload=KubernetesObjects(docs),
            secret_data={"job-token": "tp-token-1234"},
        )
    )
    nodes = {p["metadata"]["labels"].get("ray.io/node-type"): p["spec"].get("nodeName") for p in cluster.pods(NS)}
    assert nodes["head"] == "cpu-1"
    workers = [p["spec"].get("nodeName") for p in cluster.pods(NS, {"ray.io/node-type": "worker"})]
    assert sorted(workers) == ["gpu-1", "gpu-2"]


def test_a_profile_without_a_gpu_selector_still_keeps_the_head_off_gpus(tmp_path: Path) -> None:
    settings = CLUSTER_SETTINGS.replace("    node_selector: {nvidia.com/gpu.product: NVIDIA-H200}\n", "")
    plain = make_lab(tmp_path / "lab", {"verl-grpo-exp": "verl/grpo"}, settings=settings)
    _, _, docs = build(plain, request("verl-grpo-exp"))
    head_spec = docs[0]["spec"]["rayClusterSpec"]["headGroupSpec"]["template"]["spec"]
    assert "tolerations" not in head_spec  # the GPU nodes' taint keeps it off them
