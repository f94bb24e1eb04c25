"""The catalog's templates resume from the newest complete checkpoint on every new attempt, whoever
started it, and the bot tells each attempt truthfully.

Each run goes the whole way: a run request merged in a lab in git, the bot (`reconcile`/`sync` passes,
in this process) submits it to an engine, the engine runs the real template through the real launcher,
reporting to a real ingest receiver, and interrupts it twice once a checkpoint exists:

- Slurm (the real two-node cluster): the PyTorch template, requeued twice with `scontrol requeue`;
- Kubernetes (the cluster twin, its pods run by the pod runner): a TRL SFT on CPU, its pod evicted
  twice, the Job replacing it under the run's retry policy.

Attempts 2 and 3 must resume at the step of the newest complete checkpoint the attempt before left (the
launcher and the trainer say so), attempt 3 must finish, the status must hold three attempts (the first
two interrupted, the last completed) with their GPU-seconds summed, each committed status must hold at
least as many attempts as the one before, and the stored metric series must have every step once.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import secrets
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from podrunner import PodRunner
from support.repos import git
from support.resume import (
    assert_gpu_seconds,
    attempt_logs,
    committed_attempts,
    ended,
    newest_step,
    tiny_causal_lm,
)
from support.slurm import make_slurm_lab, quiet, request_run, status_of, sync_until, terminal
from support.wait import until

if TYPE_CHECKING:
    from slurm_cluster import SlurmCluster

pytest_plugins = ("slurm_cluster", "fakekube")

REQUIRED = os.environ.get("CI") == "true"  # in CI a missing framework is a failure, not a skip
INGEST_SECRET_ENV = "TUNEPLANE_INGEST_SECRET"


def _require(module: str) -> Any:
    if REQUIRED:
        return __import__(module)
    return pytest.importorskip(module, reason=f"{module} is not installed")


@pytest.fixture()
def ingest(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[str, Path]]:
    """A real ingest receiver on 127.0.0.1 (its URL and store); the bot mints per-run tokens from its secret."""
    from tuneplane.ingest import start_server

    secret = secrets.token_hex(16)
    url, stop = start_server(tmp_path / "ingest.db", secret.encode())
    monkeypatch.setenv(INGEST_SECRET_ENV, secret)
    try:
        yield url, tmp_path / "ingest.db"
    finally:
        stop()


def _steps(db: Path, experiment: str, run_id: str, key: str) -> list[int]:
    from tuneplane.ingest import series

    return [step for step, _ in series(db, run_id, key, experiment)]


# ── Slurm: the PyTorch template, requeued twice ──────────────────────────────────────────────────────

PT_RUN = "20250104-100000-0000a1"
PT_EPOCHS, PT_PER_EPOCH = 16, 4
PT_SMALL = {
    "epochs": PT_EPOCHS,
    "synthetic_train_samples": 16 * PT_PER_EPOCH,
    "synthetic_val_samples": 16,
    "batch_size": 16,
    "log_interval": 1,
}


@pytest.mark.slow
def test_pytorch_run_requeued_twice_by_slurm_resumes_each_time_and_the_bot_records_three_attempts(
    slurm_cluster: SlurmCluster, tmp_path: Path, ingest: tuple[str, Path]
) -> None:
    from tuneplane.bot.entry import reconcile, sync

    torch = _require("torch")
    url, db = ingest
    root = make_slurm_lab(
        tmp_path / "lab",
        slurm_cluster,
        tmp_path / "shared",
        {"cls": {}},
        method="pytorch/image-classification",
        ingest=url,
    )
    path = root / "tuneplane.yaml"
    path.write_text(path.read_text().replace("    partition: debug\n", "    partition: debug\n    requeue: true\n"))
    git(root, "commit", "-qam", "let Slurm requeue")
    request_run(root, "cls", PT_RUN, "gpu:1", set=PT_SMALL, observability_url="")
    assert reconcile(root, echo=quiet).submitted == [f"cls/{PT_RUN}"]
    submitted = status_of(root, "cls", PT_RUN)
    job, run_dir = submitted["backend"]["uid"], Path(submitted["out_dir"]).parent
    out = run_dir / "out"

    resumed_at = []
    for attempt in (1, 2):
        before = newest_step(out)
        until(lambda: newest_step(out), lambda s, b=before: s > b, 180, f"attempt {attempt} wrote no checkpoint")
        slurm_cluster.command("scontrol", "requeue", job)  # Slurm ends the attempt and queues the job again
        until(lambda n=attempt: ended(run_dir, n), bool, 60, f"attempt {attempt} never ended")
        resumed_at.append(newest_step(out))  # what the next attempt must resume from
        sync(root, echo=quiet)  # the bot records the attempt that ended
    statuses = sync_until(root, lambda s: terminal(s[PT_RUN]), [("cls", PT_RUN)], timeout=300)
    status = statuses[PT_RUN]
    log = "\n".join(p.read_text(errors="replace") for p in sorted((run_dir / "logs").glob("slurm-*.out")))
    assert status["phase"] == "Succeeded", (status, log[-4000:])

    by_attempt = attempt_logs(log, f"tuneplane: job {job} attempt (\\d+) started")
    assert sorted(by_attempt) == [1, 2, 3], log[-4000:]
    assert "resumes from" not in by_attempt[1]
    for attempt, step in zip((2, 3), resumed_at, strict=True):
        assert f"launcher: attempt {attempt} resumes from " in by_attempt[attempt], by_attempt[attempt][-3000:]
        assert f'"step": {step}}}' in by_attempt[attempt], by_attempt[attempt][-3000:]  # the trainer's own word
    assert 0 < resumed_at[0] < resumed_at[1] < PT_EPOCHS * PT_PER_EPOCH
    assert all(step % PT_PER_EPOCH == 0 for step in resumed_at)  # an epoch's end, where this loop saves

    _three_attempts(root, "cls", PT_RUN, status, gpus=1)
    ends = [(a["exit_code"], a["signal"]) for a in status["attempts"]]
    assert ends == [(143, signal.SIGTERM), (143, signal.SIGTERM), (0, None)], status["attempts"]  # torchrun's 1 too
    assert status["backend"] == submitted["backend"]  # Slurm requeued its own job: the bot made no other
    total = PT_EPOCHS * PT_PER_EPOCH
    state = torch.load(out / "checkpoints" / f"epoch-{PT_EPOCHS}" / "state.pt", map_location="cpu", weights_only=False)
    assert (state["epoch"], state["step"]) == (PT_EPOCHS, total)
    assert _steps(db, "cls", PT_RUN, "train/loss") == list(range(1, total + 1))
    assert _steps(db, "cls", PT_RUN, "validation/loss") == list(range(PT_PER_EPOCH, total + 1, PT_PER_EPOCH))
    mirrored = [
        json.loads(line)["step"]
        for line in (out / "logs" / "metrics.jsonl").read_text().splitlines()
        if "train/loss" in line
    ]
    assert mirrored == list(range(1, total + 1))  # the local mirror holds each step once too

    until(lambda: slurm_cluster.forgotten(job), bool, 150, "Slurm still knows the job", every=1)
    sync(root, echo=quiet)  # once Slurm has forgotten the job, its files tell the same story
    assert status_of(root, "cls", PT_RUN) == status


def _three_attempts(root: Path, experiment: str, run_id: str, status: dict[str, Any], gpus: int) -> None:
    """Three attempts, the first two interrupted by the engine, in the status and growing through git."""
    spent = status["attempts"]
    assert [a["number"] for a in spent] == [1, 2, 3], spent
    assert [a["reason"] for a in spent] == [_INTERRUPTED[status["backend"]["backend"]]] * 2 + ["Completed"], spent
    assert_gpu_seconds(status, gpus)
    committed = committed_attempts(root, f"status/{experiment}/{run_id}.json")
    assert committed == sorted(committed) and committed[-1] == 3, committed
    assert {1, 2, 3} <= set(committed), committed  # each attempt was committed as it came


_INTERRUPTED = {"slurm": "Preempted", "kubernetes": "Evicted"}  # a requeue with no other cause; a drain


# ── Kubernetes: a TRL SFT, its pod evicted twice ─────────────────────────────────────────────────────

NS = "ml-team"
REPO = "https://git.example.com/ml/render-lab.git"
GIT_USER, GIT_PASSWORD = "bot", "s3cret-pass"
GRACE_SECONDS = 30  # a pod's terminationGracePeriodSeconds by default
SFT_RUN = "20250104-110000-0000b1"
SFT_STEPS = 24
SFT_SMALL = {
    "max_steps": SFT_STEPS,
    "save_steps": 2,
    "save_total_limit": 2,
    "logging_steps": 1,
    "bf16": False,
    "gradient_checkpointing": False,
    "per_device_train_batch_size": 2,
    "gradient_accumulation_steps": 1,
    "max_length": 16,
    "warmup_steps": 0,
    "eval_strategy": "no",
}
# one GPU a pod (granted by Kueue, counted in GPU-hours; the trainer runs on CPU here)
ONE_GPU = '  gpu1: {gpus_per_node: 1, max_nodes: 1, cpu: "2", memory: 4Gi, shm_size: 1Gi}\n'


class _Pod:
    """One pod of the twin run as real processes by the pod runner: its output kept as it comes."""

    def __init__(self, runner: PodRunner, pod: dict[str, Any]) -> None:
        self.runner, self.name = runner, pod["metadata"]["name"]
        assert runner.run_init(pod), runner.cluster.kube.logs  # the checkout
        self.proc = runner.start(pod)
        self.lines: list[str] = []
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append(line)

    def wait(self, timeout: float) -> str:
        """The container's output once its first process has ended; whatever of its tree is left then
        ends with it (as a container's processes do), and past `timeout` everything is killed."""
        try:
            self.code = self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.code = self.proc.wait()
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.reader.join(timeout=30)
        return "".join(self.lines)

    def evicted(self) -> str:
        """A drain's eviction: the API marks the pod (DisruptionTarget), the kubelet sends SIGTERM to the
        container's first process (the launcher) and kills the rest after the grace period; its output."""
        self.runner.cluster.evict(NS, self.name)
        self.proc.send_signal(signal.SIGTERM)
        output = self.wait(GRACE_SECONDS)
        self.runner.cluster.kube.logs[(NS, self.name, "trainer")] = output
        return output


def _kube_lab(root: Path, assets: Path, ingest_url: str) -> None:
    """A lab on the Kubernetes backend whose jobs report to `ingest_url`, with a TRL SFT experiment
    that logs at info level (the Trainer then says where it resumed), and its run request."""
    from support.render import CLUSTER_SETTINGS, commit_all, make_lab

    from tuneplane.lab.runs import write_request
    from tuneplane.models.run import RunRequest

    settings = CLUSTER_SETTINGS.replace("http://ingest.tuneplane.svc:8080", ingest_url)
    make_lab(root, {"sft": "trl/sft"}, settings=settings.replace("  cpu: {", ONE_GPU + "  cpu: {", 1))
    config = root / "experiments" / "sft" / "config.yaml"
    config.write_text(config.read_text() + "log_level: info\n")
    data = str(assets / "sft.jsonl")
    inputs = {"model": str(assets / "model"), "train_data": data, "validation_data": data}
    write_request(root, RunRequest(experiment="sft", run_id=SFT_RUN, profile="gpu1", inputs=inputs, set=SFT_SMALL))
    commit_all(root, "request a TRL SFT run")


@pytest.mark.slow
def test_trl_sft_evicted_twice_on_kubernetes_resumes_each_time_and_the_bot_records_three_attempts(
    cluster: Any, tmp_path: Path, ingest: tuple[str, Path]
) -> None:
    from githttp import GitHttpServer
    from twin_rbac import bot_client

    from tuneplane.backends.kubernetes import ApiRetry, KubernetesBackend
    from tuneplane.bot.entry import reconcile, sync

    _require("torch")
    _require("trl")
    url, db = ingest
    assets = tiny_causal_lm(tmp_path / "assets")
    root = tmp_path / "lab"
    _kube_lab(root, assets, url)
    _kube_namespace(cluster)
    backend = KubernetesBackend(
        NS,
        api_client=bot_client(cluster.kube, NS),
        retry=ApiRetry(attempts=2, backoff_base=0.001, backoff_cap=0.005, timeout=10.0),
    )

    def passes() -> None:
        sync(root, backends=lambda _n: backend, echo=quiet)
        reconcile(root, backends=lambda _n: backend, echo=quiet)

    (tmp_path / "git").mkdir()
    server = GitHttpServer(tmp_path / "git", GIT_USER, GIT_PASSWORD).start()
    try:
        runner = PodRunner(cluster, tmp_path / "node-storage", hosts={REPO: server.publish(root, "render-lab.git")})
        said: list[str] = []
        report = reconcile(root, backends=lambda _n: backend, echo=said.append)
        assert report.submitted == [f"sft/{SFT_RUN}"], (report, said)
        submitted = status_of(root, "sft", SFT_RUN)["backend"]
        logs, resumed_at, seen = {}, [], set()
        for attempt in (1, 2, 3):
            (pod,) = [
                p
                for p in cluster.pods(NS)
                if p["metadata"]["name"] not in seen and not p["metadata"].get("deletionTimestamp")
            ]
            seen.add(pod["metadata"]["name"])
            running = _Pod(runner, pod)
            out = Path(runner.map(status_of(root, "sft", SFT_RUN)["out_dir"]))  # the pod's volume, here
            if attempt < 3:
                before = newest_step(out)
                passes()  # the bot sees the attempt running
                # evicted as soon as it saved a newer checkpoint: a tiny run must not reach its end first
                until(lambda o=out: newest_step(o), lambda s, b=before: s > b, 300, f"attempt {attempt}: no checkpoint")
                logs[attempt] = running.evicted()
                assert running.code == 128 + signal.SIGTERM, logs[attempt][-3000:]
                resumed_at.append(newest_step(out))  # what the next attempt must resume from
            else:
                logs[attempt] = running.wait(600)
                assert running.code == 0, logs[attempt][-4000:]
                cluster.exit_pod(NS, running.name, 0, logs[attempt])
            passes()  # the bot records the attempt that ended (the Job has replaced its pod)
    finally:
        server.stop()

    status = status_of(root, "sft", SFT_RUN)
    assert status["phase"] == "Succeeded", status
    assert "resumes from" not in logs[1]
    for attempt, step in zip((2, 3), resumed_at, strict=True):
        assert f"launcher: attempt {attempt} resumes from " in logs[attempt], logs[attempt][-3000:]
        assert f"and global step {step}\n" in logs[attempt], logs[attempt][-3000:]  # transformers' own word
    assert 0 < resumed_at[0] < resumed_at[1] < SFT_STEPS
    _three_attempts(root, "sft", SFT_RUN, status, gpus=1)
    assert [a["exit_code"] for a in status["attempts"]] == [143, 143, 0], status["attempts"]  # the kubelet's TERM
    assert status["backend"] == submitted  # the Job replaced its pod each time: the bot made no other object
    state = json.loads((out / "checkpoints" / f"checkpoint-{SFT_STEPS}" / "trainer_state.json").read_text())
    assert state["global_step"] == SFT_STEPS
    assert (out / "checkpoints" / "final" / "config.json").is_file()
    assert _steps(db, "sft", SFT_RUN, "train/loss") == list(range(1, SFT_STEPS + 1))


def _kube_namespace(cluster: Any) -> None:
    """The team's namespace in the twin: a queue with one GPU, the lab's git credentials, an HF token;
    its pods are started by the pod runner, not the twin."""
    cluster.auto_run = False
    cluster.add_queue(NS, "team-a", "pool", gpu=1, cpu="64", memory="256Gi")
    for name, data in (("lab-git", {"username": GIT_USER, "password": GIT_PASSWORD}), ("hf-token", {"token": "hf_x"})):
        encoded = {key: _b64(value) for key, value in data.items()}
        cluster.kube.put(
            {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": name, "namespace": NS}, "data": encoded}
        )


def _b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


# ── the job-side flag renderer (ms-swift) ──────────────────────────────────────────────────────────


ECHO = "import json, sys\nprint('ARGV=' + json.dumps(sys.argv[1:]))\n"


def _rendered(tmp_path: Path, resume_from: str | None, *options: str) -> list[str]:
    (tmp_path / "echo.py").write_text(ECHO)
    (tmp_path / "config.yaml").write_text("learning_rate: 1.0e-4\n")
    env = {k: v for k, v in os.environ.items() if k != "TUNEPLANE_RESUME_FROM"}
    if resume_from is not None:
        env["TUNEPLANE_RESUME_FROM"] = resume_from
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "tuneplane.lifecycle.cli_flags",
            "--style",
            "flat",
            "--config",
            str(tmp_path / "config.yaml"),
            "--platform-json",
            '{"output_dir": "/out/checkpoints"}',
            *options,
            "--",
            str(tmp_path / "echo.py"),
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    line = next(x for x in done.stdout.splitlines() if x.startswith("ARGV="))
    return list(json.loads(line[5:]))


def test_the_flag_renderer_passes_the_resume_checkpoint_only_when_there_is_one(tmp_path: Path) -> None:
    flag = ("--resume-flag", "resume_from_checkpoint")
    resumed = _rendered(tmp_path, "/out/checkpoints/checkpoint-40", *flag)
    assert resumed == [
        "--learning_rate",
        "1.0e-4",
        "--output_dir",
        "/out/checkpoints",
        "--resume_from_checkpoint",
        "/out/checkpoints/checkpoint-40",
    ]
    assert "--resume_from_checkpoint" not in _rendered(tmp_path, None, *flag)  # a first attempt starts afresh
    assert "--resume_from_checkpoint" not in _rendered(tmp_path, "", *flag)
    # an entrypoint that declares no resume flag is never given one
    assert "--resume_from_checkpoint" not in _rendered(tmp_path, "/out/checkpoints/checkpoint-40")
