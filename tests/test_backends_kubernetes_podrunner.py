"""The rendered pods run: submitted through the backend to the cluster twin, executed by the pod runner.

The lab is served by a real git smart-HTTP server (basic auth, the credentials from the rendered
Secret reference), the init container's script clones the run's commit, the launcher verifies the
plugins and starts the entrypoint, `tuneplane.report` sends metrics to a real ingest receiver on
127.0.0.1, and the backend reads the outcome back from the twin.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from githttp import GitHttpServer
from podrunner import PodRunner
from support import render as hr
from support.installed import needs
from support.render import CLUSTER_SETTINGS, commit_all, git, make_lab, request, resolve_run
from support.wait import wait_until
from twin_rbac import bot_client

from tuneplane.backends.base import SubmitRequest
from tuneplane.backends.kubernetes import ApiRetry, KubernetesBackend
from tuneplane.backends.kubernetes.payload import KubernetesObjects
from tuneplane.ingest import mint_token, start_server, summary

pytest_plugins = ("fakekube",)

NS = "ml-team"
REPO = "https://git.example.com/ml/render-lab.git"
INGEST = "http://ingest.tuneplane.svc:8080"
GIT_USER, GIT_PASSWORD = "bot", "s3cret-pass"
SECRET = b"ingest-hmac-key-for-tests"
FAST = ApiRetry(attempts=2, backoff_base=0.001, backoff_cap=0.005, timeout=10.0)

TRAIN_PY = """
import os
from tuneplane import report
report.init(hparams={"lr": 0.1})
loss = 1.0
for step in range(5):
    loss *= 0.5
    report.log({"loss": loss}, step=step)
report.finish()
os.makedirs(os.path.join(os.environ["TUNEPLANE_OUT_DIR"], "checkpoints"), exist_ok=True)
print("trained on", os.environ["TUNEPLANE_CLUSTER_NUM_NODES"], "node(s) in", os.getcwd(), flush=True)
"""
TRAIN_SH = '#!/usr/bin/env bash\nset -euo pipefail\nexec python "${TUNEPLANE_EXP_DIR}/train.py"\n'
PLUGIN_YAML = """schema: tuneplane/plugin/v1
name: envtool
version: 0.1.0
capability: environment
summary: Sets up the environment.
entrypoint: envtool_plugin:install
load: eager
requires:
  core: ">=0.1,<1"
scope: entrypoint
"""


@pytest.fixture
def servers(tmp_path: Path) -> Iterator[dict[str, Any]]:
    git_server = GitHttpServer(tmp_path / "git", GIT_USER, GIT_PASSWORD)
    (tmp_path / "git").mkdir()
    git_server.start()
    url, stop = start_server(tmp_path / "ingest.sqlite", SECRET)
    try:
        yield {"git": git_server, "ingest": url, "db": tmp_path / "ingest.sqlite"}
    finally:
        stop()
        git_server.stop()


@pytest.fixture
def twin(cluster: Any) -> Any:
    cluster.auto_run = False  # the pod runner starts the pods
    cluster.add_queue(NS, "team-a", "cpu-pool", gpu=0, cpu="64", memory="256Gi")
    cluster.kube.put(
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": "lab-git", "namespace": NS},
            "data": {"username": _b64(GIT_USER), "password": _b64(GIT_PASSWORD)},
        }
    )
    return cluster


def _b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


def _custom_lab(root: Path, tp: Any) -> Any:
    make_lab(root, {"custom-exp": "custom/custom"}, settings=CLUSTER_SETTINGS)
    exp = root / "experiments" / "custom-exp"
    (exp / "train.py").write_text(TRAIN_PY)
    (exp / "train.sh").write_text(TRAIN_SH)
    plugin = root / "plugins" / "envtool"
    plugin.mkdir(parents=True)
    (plugin / "plugin.yaml").write_text(PLUGIN_YAML)
    (plugin / "envtool_plugin.py").write_text("def install(params):\n    pass\n")
    locked = tp("plugin", "lock", "custom-exp", "acme/envtool", cwd=root)
    assert locked.code == 0, locked.output
    commit_all(root, "demo experiment")
    return hr.load_lab(root)


def _submit(twin: Any, lab: Any, experiment: str, profile: str, **fields: Any) -> tuple[KubernetesBackend, Any, Any]:
    spec = resolve_run(lab, request(experiment, profile=profile, **fields), commit=git(lab.root, "rev-parse", "HEAD"))
    docs = hr.render_manifests(spec, hr.compile_plan(spec), lab.config)
    backend = KubernetesBackend(NS, api_client=bot_client(twin.kube, NS), retry=FAST)
    token = mint_token(SECRET, spec.metadata.run_id)
    ref = backend.submit(
        SubmitRequest(
            run_id=spec.metadata.run_id,
            experiment=experiment,
            namespace=NS,
            object_name=spec.metadata.name,
            payload=KubernetesObjects(docs),
            secret_data={"job-token": token},
        )
    )
    return backend, ref, spec


def _runner(twin: Any, tmp_path: Path, servers: dict[str, Any], **hosts: str) -> PodRunner:
    url = servers["git"].publish(_lab_root(tmp_path), "render-lab.git")
    return PodRunner(twin, tmp_path / "node-storage", hosts={REPO: url, INGEST: servers["ingest"], **hosts})


def _lab_root(tmp_path: Path) -> Path:
    return tmp_path / "lab"


def test_a_job_checks_out_its_commit_runs_train_sh_and_reports_metrics(
    twin: Any, tmp_path: Path, servers: dict[str, Any], tp: Any
) -> None:
    lab = _custom_lab(_lab_root(tmp_path), tp)
    backend, ref, spec = _submit(twin, lab, "custom-exp", "cpu")
    runner = _runner(twin, tmp_path, servers)
    (pod,) = twin.pods(NS)
    assert backend.observe(ref).phase == "Pending"  # admitted by Kueue, waiting for its containers
    codes = runner.run([pod])
    assert list(codes.values()) == [0], twin.kube.logs
    seen = backend.observe(ref)
    assert (seen.phase, seen.exit_code) == ("Succeeded", 0), seen

    name = pod["metadata"]["name"]
    checkout = twin.kube.logs[(NS, name, "checkout")]
    assert f"checkout: {spec.provenance.commit}" in checkout
    statuses = [s for _, _, s in servers["git"].requests]
    assert 401 in statuses and 200 in statuses  # challenged, then the Secret's credentials were used
    log = "\n".join(backend.logs(ref))
    assert "plugin  : acme/envtool@0.1.0 skipped" in log  # the launcher read the locked plugins
    assert "trained on 1 node(s)" in log
    metrics = summary(servers["db"], spec.metadata.run_id)
    assert metrics, "no metric reached the ingest receiver"
    assert json.dumps(metrics).count("loss") >= 1
    work = Path(runner.map(spec.spec.paths.work_dir))
    assert git(work, "rev-parse", "HEAD") == spec.provenance.commit
    assert (work / "experiments" / "custom-exp" / "train.sh").read_text() == TRAIN_SH


def test_a_failing_checkout_fails_the_pod_with_the_init_containers_exit_code(
    twin: Any, tmp_path: Path, servers: dict[str, Any], tp: Any
) -> None:
    lab = _custom_lab(_lab_root(tmp_path), tp)
    backend, ref, _ = _submit(twin, lab, "custom-exp", "cpu")
    runner = _runner(twin, tmp_path, servers)
    servers["git"].credentials = (GIT_USER, "not-the-password")
    (pod,) = twin.pods(NS)
    assert runner.run([pod]) == {}
    seen = backend.observe(ref)
    assert seen.phase == "Failed" and seen.exit_code not in (None, 0)
    assert "init container" in seen.message or "checkout" in seen.message


# ── a 2-node JobSet: a real torchrun rendezvous ─────────────────────────────────────────────────
ALGO_YAML = (
    PLUGIN_YAML.replace("name: envtool", "name: algo")
    .replace("capability: environment", "capability: algorithm")
    .replace("envtool_plugin:install", "algo_plugin:install")
)
TWO_NODES = CLUSTER_SETTINGS.replace(
    "  cpu: {gpus_per_node: 0,",
    '  cpu2: {gpus_per_node: 1, max_nodes: 2, cpu: "2", memory: 4Gi, shm_size: 1Gi}\n  cpu: {gpus_per_node: 0,',
)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_a_two_node_jobset_runs_a_real_torchrun_rendezvous(
    twin: Any, tmp_path: Path, servers: dict[str, Any], tp: Any
) -> None:
    needs("torch", reason="torch (CPU) runs the rendezvous")
    root = _lab_root(tmp_path)
    make_lab(root, {"pytorch-exp": "pytorch/image-classification"}, settings=TWO_NODES)
    plugin = root / "plugins" / "algo"
    plugin.mkdir(parents=True)
    (plugin / "plugin.yaml").write_text(ALGO_YAML)
    (plugin / "algo_plugin.py").write_text("def install(params):\n    print('algo installed', flush=True)\n")
    assert tp("plugin", "lock", "pytorch-exp", "acme/algo", cwd=root).code == 0
    commit_all(root, "vision")
    lab = hr.load_lab(root)
    twin.cluster_queues["cpu-pool"]["nvidia.com/gpu"] = 2
    backend, ref, spec = _submit(twin, lab, "pytorch-exp", "cpu2:2", set={"epochs": 1, "max_steps": 2})
    assert ref.kind == "JobSet"
    pods = sorted(twin.pods(NS), key=lambda p: p["metadata"]["annotations"]["batch.kubernetes.io/job-completion-index"])
    assert [p["metadata"]["labels"]["jobset.sigs.k8s.io/job-index"] for p in pods] == ["0", "0"]
    env = {e["name"]: e.get("value") for e in pods[0]["spec"]["containers"][0]["env"]}
    assert env["PET_MASTER_ADDR"] == f"{ref.name}-trainer-0-0.{ref.name}"  # pod 0, through the headless service
    assert twin.kube.get("Service", NS, ref.name) is not None
    port = str(_free_port())  # the node's 29500 may be taken on this machine
    runner = _runner(twin, tmp_path, servers, **{env["PET_MASTER_ADDR"]: "127.0.0.1"})
    for pod in pods:
        for entry in pod["spec"]["containers"][0]["env"]:
            if entry["name"] in ("PET_MASTER_PORT", "MASTER_PORT"):
                entry["value"] = port
    codes = runner.run(pods)
    logs = [twin.kube.logs.get((NS, p["metadata"]["name"], "trainer"), "") for p in pods]
    assert list(codes.values()) == [0, 0], logs
    # every rank installs the plugin; the job's log names it once, from node 0's first rank
    assert all("algo installed" in log for log in logs), logs
    assert [log.count("plugin  : acme/algo@0.1.0 applied in entrypoint process") for log in logs] == [1, 0], logs
    seen = backend.observe(ref)
    assert seen.phase == "Succeeded", seen
    assert summary(servers["db"], spec.metadata.run_id)


# ── a RayJob: the submitter's `ray job submit` against a real local Ray head ───────────────────
FAKE_DRIVER = """
import os, sys
from tuneplane import report
report.init()
report.log({"reward": 0.75}, step=1)
report.finish()
print("driver argv", " ".join(sys.argv[1:3]), "on", os.environ.get("TUNEPLANE_CLUSTER_NUM_NODES"), flush=True)
"""


@pytest.fixture
def ray_head(tmp_path: Path) -> Iterator[dict[str, Any]]:
    ray = shutil.which("ray") or str(Path(sys.executable).parent / "ray")
    if not Path(ray).exists():
        if os.environ.get("CI") == "true":
            pytest.fail("ray is a test extra (pip install .[test]); it is missing")
        pytest.skip("ray is not installed (a test extra)")
    yield {"ray": ray, "tmp": tmp_path}


def test_a_rayjob_entrypoint_is_submitted_to_a_real_ray_head(
    twin: Any, tmp_path: Path, servers: dict[str, Any], ray_head: dict[str, Any]
) -> None:
    root = _lab_root(tmp_path)
    make_lab(root, {"verl-grpo-exp": "verl/grpo"}, settings=TWO_NODES)
    lab = hr.load_lab(root)
    twin.cluster_queues["cpu-pool"]["nvidia.com/gpu"] = 2
    backend, ref, spec = _submit(twin, lab, "verl-grpo-exp", "cpu2:1")
    pods = twin.pods(NS)
    head = next(p for p in pods if p["metadata"]["labels"].get("ray.io/node-type") == "head")
    runner = _runner(twin, tmp_path, servers)
    # A stand-in for verl's driver module (verl itself is not installed here): the launcher runs it in
    # the driver process on the head, as it runs verl.trainer.main_ppo on a cluster.
    fake = tmp_path / "fake-verl" / "verl" / "trainer"
    fake.mkdir(parents=True)
    for part in (fake.parent, fake):
        (part / "__init__.py").write_text("")
    (fake / "main_ppo.py").write_text(FAKE_DRIVER)
    assert runner.run_init(head)  # the checkout, on the head
    env = runner.env(head, head["spec"]["containers"][0])
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(tmp_path / "fake-verl"), env.get("PYTHONPATH", "")) if p)
    gcs, dash = _free_port(), _free_port()
    ray_tmp = Path("/tmp") / f"ray-{os.getpid()}-{gcs}"
    # The head in the foreground (`--block`) in its own process group, so it is stopped by its PID.
    proc = subprocess.Popen(
        [
            ray_head["ray"],
            "start",
            "--head",
            "--block",
            f"--port={gcs}",
            f"--dashboard-port={dash}",
            "--dashboard-host=127.0.0.1",
            "--num-cpus=1",
            "--num-gpus=0",
            "--include-dashboard=true",
            f"--temp-dir={ray_tmp}",
            "--disable-usage-stats",
        ],
        env=env,
        cwd=runner.map(head["spec"]["containers"][0]["workingDir"]),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        _wait_for_dashboard(dash, proc)
        for worker in [p for p in pods if p is not head and p["metadata"]["labels"].get("ray.io/node-type")]:
            twin.start_pod(NS, worker["metadata"]["name"])
        submitter = next(p for p in twin.pods(NS) if p["metadata"]["labels"].get("tuneplane.dev/role") == "submitter")
        dashboard = next(
            e["value"] for e in submitter["spec"]["containers"][0]["env"] if e["name"] == "RAY_DASHBOARD_ADDRESS"
        )
        runner.hosts[dashboard] = f"127.0.0.1:{dash}"
        twin.ray_dashboards[dashboard] = f"127.0.0.1:{dash}"  # KubeRay reads the job's end from the dashboard
        codes = runner.run([submitter])
        log = twin.kube.logs.get((NS, submitter["metadata"]["name"], "ray-job-submitter"), "")
        assert list(codes.values()) == [0], log
        assert "driver argv" in log
        seen = backend.observe(ref)
        assert seen.phase == "Succeeded", seen
        assert "driver argv" in "\n".join(backend.logs(ref))
        assert summary(servers["db"], spec.metadata.run_id)
    finally:
        try:
            os.killpg(proc.pid, 15)
            proc.wait(timeout=30)
        except (ProcessLookupError, subprocess.TimeoutExpired):
            os.killpg(proc.pid, 9)
            proc.wait(timeout=10)
        shutil.rmtree(ray_tmp, ignore_errors=True)


def _wait_for_dashboard(port: int, proc: subprocess.Popen[bytes], limit: float = 150.0) -> None:
    import urllib.request

    def answers() -> bool:
        if proc.poll() is not None:
            raise AssertionError(f"ray start --head exited with {proc.returncode}")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/version", timeout=2) as answer:
                return bool(answer.status == 200)
        except OSError:
            return False

    wait_until(
        answers, limit, interval=0.5, message=f"the Ray dashboard did not answer on port {port} within {limit:g} s"
    )
