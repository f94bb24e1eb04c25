"""What would fail on a real cluster: the rendered manifests, submitted by the backend, in the cluster twin.

Each test renders a run of a real lab (tests/support/render.py), submits the manifests through the
Kubernetes backend to the twin (tests/fakekube.py with its controllers), and lets the Job, JobSet,
KubeRay and Kueue controllers and the kubelet act as they do on a cluster.
"""

from __future__ import annotations

import contextlib
import os
import random
import shlex
import shutil
import signal
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from podrunner import PodRunner, kubelet_expand
from support.httpd import answering
from support.render import CLUSTER_SETTINGS, commit_all, make_lab, pod_templates, request, resolve_run
from support.repos import git
from support.wait import wait_until
from twin_rbac import bot_client

from tuneplane.backends.base import BackendError, BackendRef, SubmitRefused, SubmitRequest
from tuneplane.backends.kubernetes import ApiRetry, KubernetesBackend
from tuneplane.backends.kubernetes.payload import KubernetesObjects

if TYPE_CHECKING:
    from fakekube import FakeKube
    from twin_controllers import Cluster

pytest_plugins = ("fakekube",)

NS = "ml-team"
TOKEN = "tp-job-token-93ab1"
FAST = ApiRetry(attempts=2, backoff_base=0.001, backoff_cap=0.005, timeout=5.0)
PRIVATE = "registry.example.com"
SETTINGS = CLUSTER_SETTINGS.replace("verl: example/verl:0.5.0", f"verl: {PRIVATE}/ml/verl:0.5.0")


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Any:
    return make_lab(
        tmp_path_factory.mktemp("cluster") / "lab",
        {"trl-sft-exp": "trl/sft", "verl-grpo-exp": "verl/grpo"},
        settings=SETTINGS,
    )


@pytest.fixture
def twin(cluster: Cluster) -> Cluster:
    """A cluster with a queue big enough for every run here and the lab's pull and git secrets."""
    cluster.private_registries = (PRIVATE,)
    cluster.add_queue(NS, "team-a", "h200-pool", gpu=64, cpu="1000", memory="16Ti")
    for name, data in (("registry-creds", {".dockerconfigjson": "e30="}), ("lab-git", {"password": "cGFzcw=="})):
        cluster.kube.put(
            {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": name, "namespace": NS}, "data": data}
        )
    return cluster


@pytest.fixture
def backend(fake_kube: FakeKube) -> KubernetesBackend:
    return KubernetesBackend(NS, api_client=bot_client(fake_kube, NS), retry=FAST, rng=random.Random(3))


def rendered(lab: Any, experiment: str, profile: str = "h200") -> tuple[Any, list[dict[str, Any]]]:
    from support.render import build

    spec, _, docs = build(lab, request(experiment, profile=profile))
    return spec, docs


def submit(
    backend: KubernetesBackend,
    lab: Any,
    experiment: str,
    profile: str = "h200",
    secret_data: dict[str, str] | None = None,
) -> tuple[BackendRef, list[dict[str, Any]]]:
    spec, docs = rendered(lab, experiment, profile)
    data = {"job-token": TOKEN} if secret_data is None else secret_data
    ref = backend.submit(
        SubmitRequest(
            run_id=spec.metadata.run_id,
            experiment=experiment,
            namespace=NS,
            object_name=spec.metadata.name,
            payload=KubernetesObjects(docs),
            secret_data=data,
        )
    )
    return ref, docs


def ray_pods(twin: Cluster, rayjob: str) -> dict[str, list[dict[str, Any]]]:
    """The RayJob's pods by role: head, worker, submitter (found by what the controllers put on them)."""
    out: dict[str, list[dict[str, Any]]] = {"head": [], "worker": [], "submitter": []}
    for pod in twin.pods(NS):
        labels = pod["metadata"]["labels"]
        if labels.get("ray.io/node-type") in ("head", "worker"):
            out[labels["ray.io/node-type"]].append(pod)
        elif labels.get("batch.kubernetes.io/job-name") == rayjob:
            out["submitter"].append(pod)
    return out


# ── 1. a finished RayJob gives its GPUs back ─────────────────────────────────────────────────────
def test_a_finished_rayjob_deletes_its_ray_cluster_within_minutes(
    twin: Cluster, backend: KubernetesBackend, lab: Any
) -> None:
    ref, docs = submit(backend, lab, "verl-grpo-exp")
    pods = ray_pods(twin, ref.name)
    assert pods["head"] and pods["worker"] and pods["submitter"], pods
    twin.driver_exit(NS, ref.name, 0, "done\n")
    assert backend.observe(ref).phase == "Succeeded"
    twin.advance(10 * 60)  # Kueue released the quota at once; the GPU nodes must follow soon after
    left = ray_pods(twin, ref.name)
    assert left["head"] == [] and left["worker"] == [], "the Ray cluster still holds its GPU nodes"
    assert twin.kube.list("RayCluster", NS) == []
    assert twin.kube.get("RayJob", NS, ref.name) is not None  # the record stays for the bot to read


def test_job_and_jobset_keep_the_lab_ttl(lab: Any) -> None:
    for profile, kind in (("h200", "Job"), ("h200:16", "JobSet")):
        _, docs = rendered(lab, "trl-sft-exp", profile)
        (job,) = [d for d in docs if d["kind"] == kind]
        assert job["spec"]["ttlSecondsAfterFinished"] == 86400


# ── 2. no ingest secret: refused, not a pod waiting forever ─────────────────────────────────────
def test_a_run_whose_pods_need_a_token_it_lacks_is_refused_before_anything_is_created(
    twin: Cluster, backend: KubernetesBackend, lab: Any
) -> None:
    with pytest.raises(BackendError, match=r"job-token.*TUNEPLANE_JOB_TOKEN|TUNEPLANE_JOB_TOKEN.*job-token"):
        submit(backend, lab, "trl-sft-exp", secret_data={})
    assert twin.kube.list("Job", NS) == [] and twin.kube.list("Workload", NS) == []
    assert not any(p["status"].get("containerStatuses") for p in twin.pods(NS))


def test_with_the_token_the_pod_runs(twin: Cluster, backend: KubernetesBackend, lab: Any) -> None:
    ref, _ = submit(backend, lab, "trl-sft-exp")
    assert backend.observe(ref).phase == "Running"


# ── 3. the checkout lock is released whatever happens ──────────────────────────────────────────
def _checkout_process(
    root: Path, tmp: Path, url: str, path: str = "", **extra: str
) -> tuple[list[str], dict[str, str]]:
    """The rendered init container of a run at the lab's HEAD: its command, and its env (the storage root
    mapped into `tmp`, the clone URL pointed at `url`)."""
    from support import render as hr

    lab = hr.load_lab(root)
    spec = resolve_run(lab, request("trl-sft-exp"), commit=git(root, "rev-parse", "HEAD"))
    docs = hr.render_manifests(spec, hr.compile_plan(spec), lab.config)
    init = next(iter(pod_templates(docs[0])))["spec"]["initContainers"][0]
    storage = spec.spec.paths.storage_root
    declared: dict[str, str] = {}
    for entry in init["env"]:  # as the kubelet passes them on: `$(VAR)` and `$$` expanded
        if "value" in entry:
            declared[entry["name"]] = kubelet_expand(entry["value"], declared)
    env = {name: value.replace(storage, str(tmp / "storage")) for name, value in declared.items()}
    env |= {"TUNEPLANE_REPO_URL": url, "PATH": path or os.environ["PATH"], "HOME": str(tmp), **extra}
    return [kubelet_expand(arg, declared) for arg in init["command"]], env


def _checkout(root: Path, tmp: Path, url: str, **extra: str) -> subprocess.CompletedProcess[str]:
    command, env = _checkout_process(root, tmp, url, **extra)
    return subprocess.run(command, env=env, capture_output=True, text=True, timeout=60, check=False)


@pytest.fixture
def git_lab(tmp_path: Path) -> tuple[Path, str]:
    root = tmp_path / "lab"
    make_lab(root, {"trl-sft-exp": "trl/sft"}, settings=SETTINGS)
    commit_all(root, "more")
    remote = tmp_path / "remote.git"
    git(tmp_path, "clone", "-q", "--bare", str(root), str(remote))
    return root, f"file://{remote}"


def test_a_failed_checkout_leaves_no_lock_behind(git_lab: tuple[Path, str], tmp_path: Path) -> None:
    root, url = git_lab
    failed = _checkout(root, tmp_path, "file:///nonexistent/repo.git")
    assert failed.returncode != 0
    again = _checkout(root, tmp_path, url)  # a retry of the run must not wait for the failed pod's lock
    assert again.returncode == 0, again.stderr
    assert "checkout:" in again.stdout


def test_a_checkout_killed_mid_clone_is_taken_over_when_its_lease_expires(
    git_lab: tuple[Path, str], tmp_path: Path
) -> None:
    root, url = git_lab
    slow = tmp_path / "bin"
    slow.mkdir()
    (slow / "git").write_text(f'#!/bin/sh\n[ "$1" = fetch ] && sleep 60\nexec {shutil.which("git")} "$@"\n')
    (slow / "git").chmod(0o755)
    # A checkout that hangs in `git fetch`, killed hard (no trap can run), as a node failure would.
    command, env = _checkout_process(
        root, tmp_path, url, path=f"{slow}:{os.environ['PATH']}", TUNEPLANE_CHECKOUT_LEASE_SECONDS="2"
    )
    proc = subprocess.Popen(
        command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True
    )
    try:
        _wait_for(tmp_path / "storage", ".checkout.lock")
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)
    again = _checkout(root, tmp_path, url, TUNEPLANE_CHECKOUT_LEASE_SECONDS="2")
    assert again.returncode == 0, again.stderr


def _wait_for(root: Path, name: str, limit: float = 20.0) -> None:
    wait_until(
        lambda: root.is_dir() and any(True for _ in root.rglob(name)),
        limit,
        message=f"{name} never appeared under {root}",
    )


# ── 4. RayJob logs and failures come from the driver ────────────────────────────────────────────
def test_a_rayjob_failure_names_the_driver_exit_code_and_its_log(
    twin: Cluster, backend: KubernetesBackend, lab: Any
) -> None:
    ref, _ = submit(backend, lab, "verl-grpo-exp")
    (submitter,) = ray_pods(twin, ref.name)["submitter"]
    twin.kube.logs[(NS, ray_pods(twin, ref.name)["head"][0]["metadata"]["name"], "ray-head")] = "head: raylet up\n"
    # the driver exits 3; the submitter, which only follows its log (`ray job logs --follow`), exits 0
    twin.driver_exit(NS, ref.name, 3, "driver: step 1\ndriver: CUDA error, giving up\n")
    assert twin.kube.get("Pod", NS, submitter["metadata"]["name"])["status"]["phase"] == "Succeeded"
    seen = backend.observe(ref)
    assert seen.phase == "Failed"
    assert seen.exit_code == 3
    assert "CUDA error" in seen.message
    assert [(a.reason, a.exit_code) for a in seen.attempts] == [("Error", 3)]
    lines = list(backend.logs(ref, tail=5))
    assert lines[-1] == "driver: CUDA error, giving up"


def test_a_submitter_whose_log_stream_dropped_is_retried_and_the_run_goes_on(
    twin: Cluster, backend: KubernetesBackend, lab: Any
) -> None:
    ref, docs = submit(backend, lab, "verl-grpo-exp")
    assert docs[0]["spec"]["submitterConfig"]["backoffLimit"] >= 2
    (submitter,) = ray_pods(twin, ref.name)["submitter"]
    twin.exit_pod(NS, submitter["metadata"]["name"], 1, "error: connection to the dashboard was reset\n")
    assert backend.observe(ref).phase == "Running"  # KubeRay keeps a healthy driver; a new submitter follows it
    live = [p for p in ray_pods(twin, ref.name)["submitter"] if p["status"]["phase"] == "Running"]
    assert len(live) == 1
    twin.driver_exit(NS, ref.name, 0, "driver: done\n")
    assert backend.observe(ref).phase == "Succeeded"


def test_an_evicted_ray_head_ends_an_attempt_and_the_run_goes_on_on_the_new_head(
    twin: Cluster, backend: KubernetesBackend, lab: Any
) -> None:
    """A drained node takes the Ray head: KubeRay makes a new head, the driver's job table is gone with
    the old one, the submitter re-submits on the new head. The run did not fail, but its work since the
    last checkpoint is lost: the status says so as an attempt ended `Evicted`, and the next is under way."""
    ref, _ = submit(backend, lab, "verl-grpo-exp")
    assert backend.observe(ref).phase == "Running"
    (head,) = ray_pods(twin, ref.name)["head"]
    twin.evict(NS, head["metadata"]["name"])

    seen = backend.observe(ref)
    assert seen.phase == "Running", seen
    assert [(a.number, a.reason) for a in seen.attempts] == [(1, "Evicted"), (2, None)], seen.attempts
    assert "Eviction API" in seen.attempts[0].message
    heads = [p for p in ray_pods(twin, ref.name)["head"] if not p["metadata"].get("deletionTimestamp")]
    assert len(heads) == 1 and heads[0]["metadata"]["name"] != head["metadata"]["name"]

    twin.advance(3600)  # the evicted head's object is long gone: the ledger on the RayJob remembers it
    assert not any(p["metadata"]["name"] == head["metadata"]["name"] for p in ray_pods(twin, ref.name)["head"])
    twin.driver_exit(NS, ref.name, 0, "driver: resumed, done\n")
    done = backend.observe(ref)
    assert done.phase == "Succeeded"
    assert [(a.number, a.reason) for a in done.attempts] == [(1, "Evicted"), (2, "Completed")], done.attempts


def test_the_submitter_pod_carries_the_run_labels(twin: Cluster, backend: KubernetesBackend, lab: Any) -> None:
    ref, _ = submit(backend, lab, "verl-grpo-exp")
    (submitter,) = ray_pods(twin, ref.name)["submitter"]
    labels = submitter["metadata"]["labels"]
    assert labels["tuneplane.dev/run"] and labels["tuneplane.dev/experiment"] == "verl-grpo-exp"


# ── 4b. the submitter runs in an image that has `python3` but no `python` ─────────────────────────
RAY_STUB = """#!/bin/sh
for arg in "$@"; do printf '%s\\037' "$arg"; done >> {record}
printf '\\036' >> {record}
case "$2" in
  status) exit 1 ;;
  submit) echo "Job submitted" ;;
  logs) echo "driver: done" ;;
esac
"""


def _image(tmp_path: Path, python: bool) -> tuple[Path, Path]:
    """A stand-in for a trainer image's PATH: a shell, `sleep`, `python3`, a `ray` that records its calls,
    and `python` only when asked; returns the directory and the record of `ray` calls."""
    image, record = tmp_path / ("image-python" if python else "image"), tmp_path / "ray-calls"
    image.mkdir()
    tools = {name: shutil.which(name) for name in ("bash", "sh", "sleep", "cat")}
    tools["python3"] = sys.executable
    if python:
        tools["python"] = sys.executable
    for name, target in tools.items():
        assert target, name
        (image / name).symlink_to(target)
    (image / "ray").write_text(RAY_STUB.format(record=record))
    (image / "ray").chmod(0o755)
    return image, record


def _healthy_dashboard() -> contextlib.AbstractContextManager[int]:
    """A Ray dashboard that says its GCS is healthy (the endpoint KubeRay's wait loop asks); yields its port."""
    return answering(lambda path: b"success" if path.startswith("/api/gcs_healthz") else b"{}")


def _run_submitter(twin: Cluster, pod: dict[str, Any], tmp_path: Path, image: Path, port: int) -> tuple[int, str]:
    """The submitter's command as its container runs it, in `image`, with the head Service on `port`; a
    command that never gets past its wait loop is stopped once it said so twice."""
    env = {e["name"]: e.get("value", "") for e in pod["spec"]["containers"][0].get("env") or []}
    dashboard = env["RAY_DASHBOARD_ADDRESS"].removeprefix("http://")
    runner = PodRunner(twin, tmp_path / "storage", hosts={dashboard: f"127.0.0.1:{port}"}, image_path=[str(image)])
    proc = runner.start(pod)
    assert proc.stdout is not None
    lines: list[str] = []
    for line in proc.stdout:
        lines.append(line)
        if sum("Waiting" in seen for seen in lines) >= 2:
            os.killpg(proc.pid, signal.SIGKILL)
            break
    return proc.wait(timeout=60), "".join(lines)


def test_the_submitter_needs_no_python_on_path(
    twin: Cluster, backend: KubernetesBackend, lab: Any, tmp_path: Path
) -> None:
    ref, docs = submit(backend, lab, "verl-grpo-exp")
    (submitter,) = ray_pods(twin, ref.name)["submitter"]
    image, record = _image(tmp_path, python=False)
    with _healthy_dashboard() as port:
        code, log = _run_submitter(twin, submitter, tmp_path, image, port)
    assert code == 0, log
    calls = _calls(record)
    job_id = twin.kube.get("RayJob", NS, ref.name)["status"]["jobId"]
    assert [c[:2] for c in calls] == [["job", "list"], ["job", "status"], ["job", "submit"], ["job", "logs"]]
    submitted = calls[2]
    assert submitted[submitted.index("--submission-id") + 1] == job_id
    entrypoint = shlex.split(kubelet_expand(docs[0]["spec"]["entrypoint"], {}))
    assert submitted[submitted.index("--") + 1 :] == entrypoint  # the driver as the RayJob names it
    assert "--follow" in calls[3] and calls[3][-1] == job_id


def _calls(record: Path) -> list[list[str]]:
    """The `ray` stub's calls, each as its argument list."""
    return [call.split("\x1f")[:-1] for call in record.read_text().split("\x1e") if call]


@pytest.mark.parametrize("python", [False, True])
def test_kuberay_s_own_submitter_waits_for_python_forever(
    twin: Cluster, backend: KubernetesBackend, lab: Any, tmp_path: Path, python: bool
) -> None:
    """The twin as KubeRay 1.7: its default command's wait loop needs `python` on the image's PATH."""
    spec, docs = rendered(lab, "verl-grpo-exp")
    container = docs[0]["spec"]["submitterPodTemplate"]["spec"]["containers"][0]
    for key in ("command", "args"):
        container.pop(key, None)
    ref = backend.submit(
        SubmitRequest(
            run_id=spec.metadata.run_id,
            experiment="verl-grpo-exp",
            namespace=NS,
            object_name=spec.metadata.name,
            payload=KubernetesObjects(docs),
            secret_data={"job-token": TOKEN},
        )
    )
    (submitter,) = ray_pods(twin, ref.name)["submitter"]
    image, record = _image(tmp_path, python=python)
    with _healthy_dashboard() as port:
        code, log = _run_submitter(twin, submitter, tmp_path, image, port)
    if python:
        assert code == 0 and [c[:2] for c in _calls(record)][-1] == ["job", "logs"], log
    else:
        assert code == -signal.SIGKILL and "Waiting for Ray Dashboard GCS to become healthy" in log
        assert not record.exists()  # it never got to `ray job submit`


# ── 4c. controllers too old for the manifests are named before anything is written ──────────────
@pytest.mark.parametrize(
    "experiment, profile, kind, fields, needed",
    [
        ("verl-grpo-exp", "h200", "RayJob", ("spec.backoffLimit", "spec.submitterConfig"), "KubeRay >= 1.2"),
        ("trl-sft-exp", "h200:16", "JobSet", ("spec.network.publishNotReadyAddresses",), "JobSet >= 0.6"),
    ],
)
def test_an_older_controller_is_named_with_the_version_needed(
    twin: Cluster,
    backend: KubernetesBackend,
    lab: Any,
    experiment: str,
    profile: str,
    kind: str,
    fields: tuple[str, ...],
    needed: str,
) -> None:
    twin.kube.older_crds[kind] = fields  # the CRD of an older release, which strict validation would refuse
    with pytest.raises(SubmitRefused) as refused:
        submit(backend, lab, experiment, profile)
    message = str(refused.value)
    assert needed in message and all(f in message for f in fields), message
    assert not twin.kube.list(kind, NS)  # nothing written
    assert not [s for s in twin.kube.list("Secret", NS) if s["metadata"]["name"].endswith("-tokens")]


def test_a_group_version_the_cluster_does_not_serve_is_named(
    twin: Cluster, backend: KubernetesBackend, lab: Any
) -> None:
    twin.kube.unserved.add("ray.io/v1")  # KubeRay before 1.0 served only ray.io/v1alpha1
    with pytest.raises(SubmitRefused, match=r"does not serve ray.io/v1 RayJob: tuneplane needs KubeRay >= 1.2"):
        submit(backend, lab, "verl-grpo-exp")
    assert not twin.kube.list("RayJob", NS)


def test_a_queued_run_on_a_cluster_without_kueue_is_refused_naming_it(
    twin: Cluster, backend: KubernetesBackend, lab: Any
) -> None:
    """Without Kueue nothing would admit the suspended job: it would wait forever, holding nothing but
    hope. The run is refused before anything is written; with Kueue's v1beta1 alone (before 0.15) it goes."""
    twin.kube.unserved.update({"kueue.x-k8s.io/v1beta2", "kueue.x-k8s.io/v1beta1"})
    with pytest.raises(SubmitRefused, match=r"serves no Kueue Workloads .*tuneplane needs Kueue >= 0.6"):
        submit(backend, lab, "trl-sft-exp")
    assert not twin.kube.list("Job", NS)
    twin.kube.unserved.discard("kueue.x-k8s.io/v1beta1")
    fresh = KubernetesBackend(NS, api_client=bot_client(twin.kube, NS), retry=FAST)  # a new bot run asks again
    ref, _ = submit(fresh, lab, "trl-sft-exp")
    assert twin.kube.get("Job", NS, ref.name) is not None


def test_the_served_versions_are_read_once_per_backend(twin: Cluster, backend: KubernetesBackend, lab: Any) -> None:
    submit(backend, lab, "verl-grpo-exp")
    twin.kube.older_crds["RayJob"] = ("spec.backoffLimit",)  # read once: a later change is not seen
    submit(backend, lab, "verl-grpo-exp", profile="h200:16")
    assert len(twin.kube.requests_for("GET", r"^/openapi/v3/apis/ray.io/v1")) == 1


# ── 5. a private image submits ──────────────────────────────────────────────────────────────────
def test_the_rayjob_submitter_pulls_a_private_image(twin: Cluster, backend: KubernetesBackend, lab: Any) -> None:
    ref, docs = submit(backend, lab, "verl-grpo-exp")
    (submitter,) = ray_pods(twin, ref.name)["submitter"]
    assert submitter["spec"]["containers"][0]["image"].startswith(PRIVATE)
    assert submitter["status"]["phase"] == "Running", submitter["status"]
    assert backend.observe(ref).phase == "Running"


# ── what works but was wrong ───────────────────────────────────────────────────────────────────
def test_part_of_a_node_asks_for_that_share_of_its_cpu_and_memory(lab: Any) -> None:
    for profile, cpu, memory in (("h200:4", "48", "512Gi"), ("h200:1", "12", "128Gi"), ("h200", "96", "1Ti")):
        _, docs = rendered(lab, "trl-sft-exp", profile)
        requests = next(iter(pod_templates(docs[0])))["spec"]["containers"][0]["resources"]["requests"]
        assert (requests["cpu"], requests["memory"]) == (cpu, memory), profile


def test_every_pod_has_a_restricted_security_context(tmp_path: Path) -> None:
    settings = SETTINGS.replace(
        "  ttl_seconds_after_finished: 86400\n",
        "  ttl_seconds_after_finished: 86400\n"
        "  security: {run_as_non_root: true, run_as_user: 1000, run_as_group: 1000, "
        "fs_group: 1000}\n",
    )
    secured = make_lab(tmp_path / "lab", {"trl-sft-exp": "trl/sft", "verl-grpo-exp": "verl/grpo"}, settings=settings)
    for experiment, profile in (("trl-sft-exp", "h200"), ("trl-sft-exp", "h200:16"), ("verl-grpo-exp", "h200")):
        _, docs = rendered(secured, experiment, profile)
        templates = list(pod_templates(docs[0]))
        if docs[0]["kind"] == "RayJob":
            templates.append(docs[0]["spec"]["submitterPodTemplate"])
        for template in templates:
            pod = template["spec"]["securityContext"]
            assert pod == {
                "runAsNonRoot": True,
                "runAsUser": 1000,
                "runAsGroup": 1000,
                "fsGroup": 1000,
                "seccompProfile": {"type": "RuntimeDefault"},
            }
            for container in template["spec"].get("initContainers", []) + template["spec"]["containers"]:
                assert container["securityContext"] == {
                    "allowPrivilegeEscalation": False,
                    "capabilities": {"drop": ["ALL"]},
                }


def test_torchrun_across_nodes_uses_a_static_rendezvous_from_the_completion_index(lab: Any) -> None:
    rich = make_lab(
        Path(lab.root).parent / "torch-lab", {"pytorch-exp": "pytorch/image-classification"}, settings=SETTINGS
    )
    spec, docs = rendered(rich, "pytorch-exp", "h200:16")
    (template,) = list(pod_templates(docs[0]))
    env = {e["name"]: e for e in template["spec"]["containers"][0]["env"]}
    assert env["PET_MASTER_ADDR"]["value"] == f"{spec.metadata.name}-trainer-0-0.{spec.metadata.name}"
    assert env["PET_MASTER_PORT"]["value"] == "29500" and env["PET_NNODES"]["value"] == "2"
    assert env["PET_NODE_RANK"]["valueFrom"]["fieldRef"]["fieldPath"] == (
        "metadata.annotations['batch.kubernetes.io/job-completion-index']"
    )


def test_the_init_image_is_a_lab_setting_under_the_image_policy(tmp_path: Path, tp: Any) -> None:
    settings = SETTINGS.replace("images:\n", "images:\n  allowed_registries: [registry.example.com]\n").replace(
        "  ttl_seconds_after_finished: 86400\n",
        "  ttl_seconds_after_finished: 86400\n  init_image: docker.io/alpine/git:2.45.2\n",
    )
    root = tmp_path / "lab"
    policed = make_lab(root, {"trl-sft-exp": "trl/sft"}, settings=settings)
    with pytest.raises(Exception, match=r"cluster.init_image .*registry 'docker.io' is not allowed"):
        rendered(policed, "trl-sft-exp")
    result = tp("validate", cwd=root)
    assert result.code == 1 and "cluster-init-image" in result.output
    (root / "tuneplane.yaml").write_text(
        settings.replace("docker.io/alpine/git:2.45.2", "registry.example.com/tools/git:2.45.2")
    )
    commit_all(root, "allowed init image")
    ok = make_lab_reload(root)
    _, docs = rendered(ok, "trl-sft-exp")
    init = next(iter(pod_templates(docs[0])))["spec"]["initContainers"][0]
    assert init["image"] == "registry.example.com/tools/git:2.45.2"


def make_lab_reload(root: Path) -> Any:
    from support import render as hr

    return hr.load_lab(root)


def test_a_cluster_lab_with_a_loopback_ingest_endpoint_is_warned(tmp_path: Path, tp: Any) -> None:
    root = tmp_path / "lab"
    make_lab(
        root,
        {"trl-sft-exp": "trl/sft"},
        settings=SETTINGS.replace("http://ingest.tuneplane.svc:8080", "http://127.0.0.1:8080"),
    )
    result = tp("validate", cwd=root)
    assert "cluster-ingest-loopback" in result.output and "127.0.0.1" in result.output
    assert result.code == 0  # a warning: the run still works, it only reports nothing


def test_after_a_pod_is_replaced_the_logs_come_from_its_replacement(
    twin: Cluster, backend: KubernetesBackend, lab: Any
) -> None:
    ref, _ = submit(backend, lab, "trl-sft-exp")
    (first,) = twin.pods(NS)
    # A node drain: the pod is disrupted, the rendered podFailurePolicy ignores it and the Job replaces it.
    twin.exit_pod(
        NS, first["metadata"]["name"], 143, "step 1\n", conditions=[{"type": "DisruptionTarget", "status": "True"}]
    )
    live = [p for p in twin.pods(NS) if p["status"]["phase"] == "Running"]
    assert len(live) == 1 and live[0]["metadata"]["name"] != first["metadata"]["name"]
    twin.kube.append_log(NS, live[0]["metadata"]["name"], "resumed at step 1\n", container="trainer")
    assert list(backend.logs(ref)) == ["resumed at step 1"]
    assert backend.observe(ref).phase == "Running"


def test_the_workload_is_read_by_its_job_uid_label(twin: Cluster, backend: KubernetesBackend, lab: Any) -> None:
    twin.cluster_queues["h200-pool"] = {"nvidia.com/gpu": 8.0, "cpu": 96.0, "memory": float(2**40)}
    first, _ = submit(backend, lab, "trl-sft-exp")
    spec, docs = rendered(lab, "trl-sft-exp")
    other = [dict(d, metadata={**d["metadata"], "name": "second-run"}) for d in docs]
    for doc in other:
        doc["metadata"]["labels"] = {**doc["metadata"]["labels"], "tuneplane.dev/run": "second"}
    second = backend.submit(
        SubmitRequest(
            run_id="second",
            experiment="trl-sft-exp",
            namespace=NS,
            object_name="second-run",
            payload=KubernetesObjects(other),
            secret_data={"job-token": TOKEN},
        )
    )
    seen = backend.observe(second)
    assert seen.phase == "Pending" and seen.reason == "Queued: waiting for quota in ClusterQueue h200-pool"
    assert "insufficient unused quota for cpu" in seen.message or "nvidia.com/gpu" in seen.message
    (listing,) = twin.kube.requests_for("GET", r"/workloads$")[-1:]
    uid = twin.kube.get("Job", NS, "second-run")["metadata"]["uid"]  # type: ignore[index]
    assert listing.query["labelSelector"] == f"kueue.x-k8s.io/job-uid={uid}"
    assert backend.observe(first).phase == "Running"
