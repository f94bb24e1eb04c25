"""`tp bot sync` against the cluster twin: what a job prints never carries its secrets into git.

The cluster copies a job's words into places the backend reads: KubeRay copies the Ray driver's last
log lines into the RayJob's `.status.message`, the kubelet copies a container's termination message,
controllers and Kueue write condition messages. Each reaches the run's status file, so each is
redacted of the run's secret values (its job token, the lab's HF token) before the bot commits it.
"""

from __future__ import annotations

import base64
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from support.labs import new_lab
from support.repos import BRANCH, backend_factory, clone, configure, git, kube_lab, make_remote, quiet, set_backend

from tuneplane.bot.entry import reconcile, sync
from tuneplane.lab.runs import RunKey, read_status, write_request
from tuneplane.plan.names import object_name

if TYPE_CHECKING:
    from twin_controllers import Cluster

pytest_plugins = ("fakekube",)  # the fake_kube and cluster fixtures

NS = "tuneplane"
INGEST_SECRET = "s3cret-for-the-ingest-receiver"
HF_TOKEN = "hf_QbXwTzR8vKpL2mNcYdE4sJuA7oF1gHiW"
RUN_ID = "20250102-100000-000000"
EXPERIMENT = "rl"


def ray_lab(tmp_path: Path) -> Path:
    """A Kubernetes lab with one verl GRPO run (a RayJob) requested and the lab's HF token set; the bot's clone."""
    from tuneplane.author.scaffold import new_experiment
    from tuneplane.lab.load import load_lab
    from tuneplane.models.run import RunRequest

    remote, work = make_remote(tmp_path), tmp_path / "seed"
    new_lab(work, "ray-lab")
    configure(work)
    git(work, "remote", "add", "origin", str(remote))
    set_backend(work, "kubernetes")
    settings = work / "tuneplane.yaml"
    text = settings.read_text(encoding="utf-8").replace('hf_token_secret: ""', "hf_token_secret: hf-token")
    text = text.replace("defaults: {}", "defaults: {verl: example/verl:0.5.0}")
    settings.write_text(text, encoding="utf-8")
    new_experiment(load_lab(work), EXPERIMENT, "verl/grpo", None)
    inputs = {"model": "Qwen/Qwen3-0.6B", "train_data": "data/train.jsonl", "validation_data": "data/val.jsonl"}
    write_request(work, RunRequest(experiment=EXPERIMENT, run_id=RUN_ID, profile="h200:8", inputs=inputs))
    git(work, "add", "-A")
    git(work, "commit", "-q", "-m", "a Ray run")
    git(work, "push", "-q", "origin", f"HEAD:{BRANCH}")
    return clone(remote, tmp_path / "bot")


def _secrets(cluster: Cluster, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TUNEPLANE_INGEST_SECRET", INGEST_SECRET)
    hf = {"token": base64.b64encode(HF_TOKEN.encode()).decode()}
    cluster.kube.put(
        {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "hf-token", "namespace": NS}, "data": hf}
    )


def _assert_no_secret_in_git(bot: Path, experiment: str, run_id: str) -> None:
    from tuneplane.ingest import mint_token

    token = mint_token(INGEST_SECRET.encode(), run_id, experiment)
    assert "[redacted]" in read_status(bot, RunKey(experiment, run_id)).model_dump_json()
    history = git(bot, "log", "-p", "--all")
    for secret in (token, HF_TOKEN):
        assert secret not in history
        assert all(secret not in p.read_text() for p in (bot / "status").rglob("*") if p.is_file())


def _printed(experiment: str, run_id: str) -> str:
    from tuneplane.ingest import mint_token

    token = mint_token(INGEST_SECRET.encode(), run_id, experiment)
    return f"debug: TUNEPLANE_JOB_TOKEN={token}\nhttp 401 with HF_TOKEN={HF_TOKEN}"


@pytest.mark.parametrize("how", ["exit-code", "supervisor-error"])
def test_a_ray_driver_that_prints_its_tokens_leaves_none_in_git(
    tmp_path: Path, cluster: Cluster, monkeypatch: pytest.MonkeyPatch, how: str
) -> None:
    _secrets(cluster, monkeypatch)
    bot = ray_lab(tmp_path)
    backends = backend_factory(cluster.kube)
    reconcile(bot, backends=backends, echo=quiet)
    name = object_name(EXPERIMENT, RUN_ID)
    printed = _printed(EXPERIMENT, RUN_ID)
    if how == "exit-code":  # Ray: "Job entrypoint command failed with exit code 3, last available logs …"
        cluster.driver_exit(NS, name, 3, printed + "\n")
    else:  # Ray's job supervisor failed with the driver's words in its first line
        with cluster.kube.changed:
            cluster.ray_drivers[(NS, name)] = {"status": "FAILED", "message": f"Unexpected error occurred: {printed}"}
            cluster.kube.settle()
    assert HF_TOKEN in cluster.kube.get("RayJob", NS, name)["status"]["message"]  # KubeRay copied it

    sync(bot, backends=backends, echo=quiet)

    assert read_status(bot, RunKey(EXPERIMENT, RUN_ID)).phase == "Failed"
    _assert_no_secret_in_git(bot, EXPERIMENT, RUN_ID)


def test_a_trainer_error_in_the_termination_message_leaves_no_token_in_git(
    tmp_path: Path, cluster: Cluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tuneplane.runtime.attempts import encode

    _secrets(cluster, monkeypatch)
    bot, (run_id,) = kube_lab(tmp_path)
    text = (
        (bot / "tuneplane.yaml").read_text(encoding="utf-8").replace('hf_token_secret: ""', "hf_token_secret: hf-token")
    )
    (bot / "tuneplane.yaml").write_text(text, encoding="utf-8")
    git(bot, "commit", "-q", "-am", "the lab's HF token")
    backends = backend_factory(cluster.kube)
    reconcile(bot, backends=backends, echo=quiet)
    name = object_name("demo", run_id)
    (pod,) = cluster.pods(NS, {"job-name": name})
    printed = _printed("demo", run_id)
    # the launcher's end record: the trainer's error line and last output lines, in the termination message
    record = encode({"exit_code": 1, "error": f"RuntimeError: {printed}", "log_tail": printed.splitlines()})
    cluster.exit_pod(NS, pod["metadata"]["name"], 1, printed + "\n", message=record)

    sync(bot, backends=backends, echo=quiet)

    assert read_status(bot, RunKey("demo", run_id)).phase == "Failed"
    _assert_no_secret_in_git(bot, "demo", run_id)
