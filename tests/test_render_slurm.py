"""Slurm labs without a cluster: `tp init --backend slurm`, `tp validate` of `cluster.slurm`, and the
batch script `tp render` shows (directives, quoting, bash -n, determinism, the rendezvous placeholders).
"""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
from support.labs import new_lab

from tuneplane.constants import AFTER_JOB_UPLOAD_SECONDS

SLURM_SECTION = """  slurm:
    partition: gpu
    account: ml-team
    cpus_per_node: 8
    memory_per_node: 64G
    runs_root: /shared/tuneplane
    software:
      kind: {kind}
      python_env: /shared/envs/train
      runtime: {runtime}
    profiles:
      h200:
        gpu_request: {gpu_request}
        gpu_type: h200
"""
HOSTILE = "https://t.example.org/p?q='; touch PWNED; echo '$(touch PWNED2)`x`\"\nnext-line"


def _slurm_lab(
    root: Path, git: Any, kind: str = "host", runtime: str = "pyxis", gpu_request: str = "gpus-per-node"
) -> Path:
    from tuneplane.author.scaffold import new_experiment
    from tuneplane.lab.load import load_lab

    new_lab(root, "slurm-render", backend="slurm")
    text = (root / "tuneplane.yaml").read_text(encoding="utf-8")
    start = text.index("  slurm:\n")
    text = text[:start] + SLURM_SECTION.format(kind=kind, runtime=runtime, gpu_request=gpu_request)
    (root / "tuneplane.yaml").write_text(text, encoding="utf-8")
    new_experiment(load_lab(root), "demo", "custom/custom", None)
    git(root, "add", "-A")
    git(root, "commit", "-qm", "demo")
    return root


def _render(tp: Any, root: Path, *args: str) -> str:
    result = tp(
        "render", "demo", "--image", "python:3.12", "--observability-url", "https://t.example.org/p", *args, cwd=root
    )
    assert result.code == 0, result.output
    return result.out


def test_init_backend_slurm_writes_a_commented_section_that_validates(tmp_path: Path, tp: Any) -> None:
    root = tmp_path / "lab"
    # a requirement CI can install (empty, as from a checkout without a remote, is a warning of its own)
    assert tp("init", root, "--backend", "slurm", "--tool-requirement", "tuneplane==0.5.0").code == 0
    text = (root / "tuneplane.yaml").read_text(encoding="utf-8")
    section = text[text.index("  slurm:\n") :]
    assert "backend: slurm" in text
    assert sum(1 for line in section.splitlines() if "#" in line) >= 15  # every setting explained
    result = tp("validate", cwd=root)
    assert result.code == 0 and "no problems" in result.output, result.output
    assert tp("init", tmp_path / "other", "--backend", "nomad").code == 2


def test_batch_script_asks_what_the_profile_maps_to(tmp_path: Path, tp: Any, git: Any) -> None:
    from tuneplane.plan.names import object_name

    root = _slurm_lab(tmp_path / "lab", git)
    script = _render(tp, root, "--profile", "h200:16", "--run-id", "20250102-100000-00000a")
    directives = re.findall(r"^#SBATCH (\S+)$", script, re.MULTILINE)
    assert f"--job-name={object_name('demo', '20250102-100000-00000a')}" in directives
    assert "--comment=tuneplane-run=20250102-100000-00000a" in directives
    for wanted in (
        "--nodes=2",
        "--ntasks-per-node=1",
        "--partition=gpu",
        "--account=ml-team",
        "--gpus-per-node=h200:8",
        "--cpus-per-task=8",
        "--mem=64G",
        "--no-requeue",
    ):
        assert wanted in directives, (wanted, directives)
    assert "export VIRTUAL_ENV=/shared/envs/train" in script
    assert "/shared/envs/train/bin/python3 \\\n  -m \\\n  tuneplane.launcher" in script
    assert "--output=/shared/tuneplane/runs/" in script
    subprocess.run(["bash", "-n"], input=script, text=True, check=True)

    gres = _slurm_lab(tmp_path / "gres", git, gpu_request="gres")
    assert "#SBATCH --gres=gpu:h200:8\n" in _render(tp, gres, "--profile", "h200:8")


def test_batch_script_is_deterministic_and_holds_no_secret(
    tmp_path: Path, tp: Any, git: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = _slurm_lab(tmp_path / "lab", git)
    monkeypatch.setenv("TUNEPLANE_INGEST_SECRET", "s3cret-ingest-key")
    first = _render(tp, root, "--profile", "h200:8")
    second = _render(tp, root, "--profile", "h200:8")
    assert first == second
    assert "s3cret" not in first and "TOKEN=" not in first.replace('TUNEPLANE_JOB_TOKEN="$(cat', "")


def test_every_value_reaches_the_job_exactly_as_written(tmp_path: Path, tp: Any, git: Any) -> None:
    """A hostile tracking URL (quotes, $(…), backticks, a newline) is one inert shell word."""
    root = _slurm_lab(tmp_path / "lab", git)
    result = tp(
        "render", "demo", "--image", "python:3.12", "--observability-url", HOSTILE, "--profile", "h200:8", cwd=root
    )
    if result.code != 0:  # refused as a URL is fine too: then it never reaches a script
        assert "observability" in result.output.lower()
        return
    script = result.out
    exports = "\n".join(line for line in _logical_lines(script) if line.startswith("export TUNEPLANE_"))
    work = tmp_path / "sandbox"
    work.mkdir()
    done = subprocess.run(
        ["bash", "-c", exports + '\nprintf %s "$TUNEPLANE_EXTERNAL_OBSERVABILITY_URL"'],
        cwd=work,
        capture_output=True,
        text=True,
        check=True,
    )
    assert done.stdout == HOSTILE
    assert list(work.iterdir()) == []  # nothing ran


def _logical_lines(script: str) -> list[str]:
    """Lines, with a quoted value spanning several lines kept in one piece (as bash reads them)."""
    out, buffer = [], ""
    for line in script.splitlines():
        buffer = f"{buffer}\n{line}" if buffer else line
        if buffer.count("'") % 2 == 0:
            out.append(buffer)
            buffer = ""
    return out


def test_several_nodes_meet_where_the_script_says(tmp_path: Path, tp: Any, git: Any) -> None:
    """The launch document is the adapters' plan with the JobSet host swapped for placeholders."""
    from tuneplane.plan.names import RENDEZVOUS_PORT
    from tuneplane.render.slurm import ADDR_PLACEHOLDER, PORT_PLACEHOLDER, rendezvous_argv

    argv = [
        "torchrun",
        "--rdzv_endpoint",
        f"job-trainer-0-0.job:{RENDEZVOUS_PORT}",
        "--main_process_ip",
        "job-trainer-0-0.job",
        "--main_process_port",
        str(RENDEZVOUS_PORT),
        "--lr",
        str(RENDEZVOUS_PORT),
    ]
    assert rendezvous_argv(argv, "job-trainer-0-0.job") == [
        "torchrun",
        "--rdzv_endpoint",
        f"{ADDR_PLACEHOLDER}:{PORT_PLACEHOLDER}",
        "--main_process_ip",
        ADDR_PLACEHOLDER,
        "--main_process_port",
        PORT_PLACEHOLDER,
        "--lr",
        str(RENDEZVOUS_PORT),
    ]

    root = _slurm_lab(tmp_path / "lab", git)
    result = tp(
        "render",
        "demo",
        "--image",
        "python:3.12",
        "--observability-url",
        "https://t.example.org/p",
        "--profile",
        "h200:16",
        "--format",
        "json",
        cwd=root,
    )
    assert result.code == 0, result.output
    [doc] = json.loads(result.out)
    assert doc["kind"] == "SlurmBatch"
    assert doc["launch_document"]["launch"]["argv"][0] == "bash"
    assert "scontrol show node" in doc["script"] and "SLURM_NODEID" in doc["script"]


@pytest.mark.parametrize("runtime", ["pyxis", "apptainer"])
def test_container_software_runs_the_image(tmp_path: Path, tp: Any, git: Any, runtime: str) -> None:
    root = _slurm_lab(tmp_path / "lab", git, kind="container", runtime=runtime)
    script = _render(tp, root, "--profile", "h200:8")
    subprocess.run(["bash", "-n"], input=script, text=True, check=True)
    if runtime == "pyxis":
        assert "--container-image=python:3.12" in script
        assert "--container-mounts=/shared/tuneplane:/shared/tuneplane" in script
    else:
        assert "apptainer \\\n  exec" in script and "docker://python:3.12" in script
    assert "VIRTUAL_ENV" not in script


def test_validate_locates_bad_slurm_settings(tmp_path: Path, tp: Any, git: Any) -> None:
    root = _slurm_lab(tmp_path / "lab", git)
    path = root / "tuneplane.yaml"
    text = path.read_text(encoding="utf-8")
    path.write_text(
        text.replace("      h200:\n        gpu_request", "      h20:\n        gpu_request"), encoding="utf-8"
    )
    result = tp("validate", cwd=root)
    assert result.code == 1, result.output
    lines = path.read_text(encoding="utf-8").splitlines()
    bad_profile = next(i for i, line in enumerate(lines, 1) if "h20:" in line)
    assert f"tuneplane.yaml:{bad_profile}:" in result.output and "did you mean 'h200'" in result.output

    path.write_text(text.replace("partition: gpu", "partition: gpu two"), encoding="utf-8")
    result = tp("validate", cwd=root)
    assert result.code == 1, result.output
    lines = path.read_text(encoding="utf-8").splitlines()
    bad_partition = next(i for i, line in enumerate(lines, 1) if "partition: gpu two" in line)
    assert f"tuneplane.yaml:{bad_partition}:" in result.output and "gpu two" in result.output


@pytest.mark.parametrize(
    ("said", "setting"),
    [
        ("Invalid account or account/partition combination specified", "cluster.slurm.account"),
        ("Invalid qos specification", "cluster.slurm.qos"),
        ("Requested time limit is invalid (missing or exceeds some limit)", "the run request's timeout"),
        ("Invalid partition name specified", "cluster.slurm.profiles.gpu.partition"),
    ],
)
def test_refusals_that_need_accounting_name_their_setting(said: str, setting: str) -> None:
    """Slurm's own wording (accounting and EnforcePartLimits are off on the test cluster)."""
    from tuneplane.backends.base import SubmitRefused
    from tuneplane.backends.slurm.errors import refusal

    sources = {
        "--account": "cluster.slurm.account",
        "--qos": "cluster.slurm.qos",
        "--time": "the run request's timeout",
        "--partition": "cluster.slurm.profiles.gpu.partition",
    }
    refused = refusal(f"sbatch: error: Batch job submission failed: {said}", sources)
    assert isinstance(refused, SubmitRefused) and refused.setting == setting
    assert str(refused).startswith(f"{setting}: sbatch refused the job: ") and "hint:" in str(refused)


def test_a_slurm_lab_without_a_shared_runs_root_is_warned(tmp_path: Path, tp: Any, git: Any) -> None:
    root = _slurm_lab(tmp_path / "lab", git)
    path = root / "tuneplane.yaml"
    path.write_text(
        path.read_text(encoding="utf-8")
        .replace("    runs_root: /shared/tuneplane\n", "")
        .replace("      python_env: /shared/envs/train\n", ""),
        encoding="utf-8",
    )
    result = tp("validate", cwd=root)
    assert result.code == 0, result.output  # warnings only
    assert "warning [lab-slurm] cluster.slurm.runs_root is not set" in result.output
    assert "warning [lab-slurm] cluster.slurm.software.python_env is not set" in result.output


def _edit(root: Path, git: Any, old: str, new: str) -> None:
    path = root / "tuneplane.yaml"
    text = path.read_text(encoding="utf-8")
    assert old in text, old
    path.write_text(text.replace(old, new, 1), encoding="utf-8")
    git(root, "commit", "-qam", "edit settings")


def _directives(script: str) -> list[str]:
    return re.findall(r"^#SBATCH (\S+)$", script, re.MULTILINE)


def test_requeue_the_profiles_time_limit_and_a_clean_environment(tmp_path: Path, tp: Any, git: Any) -> None:
    root = _slurm_lab(tmp_path / "lab", git)
    _edit(root, git, "    runs_root: /shared/tuneplane\n", "    runs_root: /shared/tuneplane\n    requeue: true\n")
    _edit(
        root,
        git,
        "    gpus_per_node: 8\n    max_nodes: 4\n",
        "    gpus_per_node: 8\n    max_nodes: 4\n    time_limit: 7200\n",
    )
    script = _render(tp, root, "--profile", "h200:8")
    directives = _directives(script)
    assert "--requeue" in directives and "--no-requeue" not in directives
    assert "--time=120:00" in directives  # no --timeout: the profile's time_limit bounds the run
    assert "--export=NONE" in directives
    assert not any(d.startswith("--signal") for d in directives)  # no warning unless asked for
    assert "export PATH=" in script  # nothing of the submitter's environment is relied on
    srun = script[script.index("\nsrun ") :]
    for flag in ("--kill-on-bad-exit=1", "--wait=", "--label", "--export=ALL"):
        assert flag in srun, flag
    # the other ranks end first; node rank zero's launcher then uploads for up to a minute: srun's
    # grace must outlast that by minutes, or it kills a finished training mid-upload (exit 143)
    wait = int(srun.split("--wait=")[1].split()[0])
    assert wait >= AFTER_JOB_UPLOAD_SECONDS + 120, wait
    assert "tuneplane: job $SLURM_JOB_ID attempt $TUNEPLANE_ATTEMPT started" in script
    assert "SLURM_RESTART_COUNT" in script
    subprocess.run(["bash", "-n"], input=script, text=True, check=True)
    timed = _render(tp, root, "--profile", "h200:8", "--timeout", "600")
    assert "--time=10:00" in _directives(timed)


def test_the_limit_warning_is_opt_in_and_comes_before_the_limit(tmp_path: Path, tp: Any, git: Any) -> None:
    root = _slurm_lab(tmp_path / "lab", git)
    _edit(root, git, "    runs_root: /shared/tuneplane\n", "    runs_root: /shared/tuneplane\n    limit_warning: 300\n")
    script = _render(tp, root, "--profile", "h200:8", "--timeout", "3600")
    assert "--signal=B:USR1@300" in _directives(script)
    assert "export TUNEPLANE_LIMIT_WARNING_SECONDS=300" in script
    short = _render(tp, root, "--profile", "h200:8", "--timeout", "120")
    assert "--signal=B:USR1@60" in _directives(short)  # always well before a short limit


def test_pyxis_gets_registry_hash_image_references() -> None:
    from tuneplane.render.slurm import pyxis_image

    assert pyxis_image("nvcr.io/nvidia/pytorch:24.01-py3") == "nvcr.io#nvidia/pytorch:24.01-py3"
    assert pyxis_image("localhost:5000/team/train@sha256:" + "a" * 64) == "localhost:5000#team/train@sha256:" + "a" * 64
    assert pyxis_image("python:3.12") == "python:3.12"  # Docker Hub: no registry to split off
    assert pyxis_image("ghcr.io#org/img:1") == "ghcr.io#org/img:1"
    assert pyxis_image("docker://ghcr.io#org/img:1") == "ghcr.io#org/img:1"


def test_a_host_environment_accepts_an_image_and_says_it_is_not_used(tmp_path: Path, git: Any) -> None:
    from tuneplane.lab.load import load_lab
    from tuneplane.models.run import RunRequest
    from tuneplane.plan.adapters import compile_plan
    from tuneplane.plan.resolve import resolve
    from tuneplane.render.slurm import render_batch

    root = _slurm_lab(tmp_path / "lab", git)
    lab = load_lab(root)
    request = RunRequest(
        experiment="demo",
        run_id="20250102-100000-00000b",
        profile="h200:8",
        image="python:3.12",
        observability_url="https://t.example.org/p",
    )
    spec = resolve(lab, "demo", request, commit="0" * 40, dirty=False)
    batch = render_batch(spec, compile_plan(spec), lab.config)
    assert batch.image == "" and "python:3.12 was not used" in batch.note
    assert "python:3.12" not in batch.script


def test_a_slurm_run_is_packed_with_the_lab_it_is_staged_from(tmp_path: Path, git: Any) -> None:
    """What `tp render` shows is the batch as rendered; submitting packs that same batch with the lab's
    root to stage the commit from, and the run's ingest token for its token file when it has one."""

    from tuneplane.backends.slurm.batch import SlurmBatch
    from tuneplane.lab.load import load_lab
    from tuneplane.models.run import RunRequest
    from tuneplane.runs.prepare import backend_request, prepare

    root = _slurm_lab(tmp_path / "lab", git)
    settings = root / "tuneplane.yaml"
    text = settings.read_text(encoding="utf-8")
    settings.write_text(text.replace('endpoint: ""', "endpoint: https://ingest.example.org", 1), encoding="utf-8")
    lab = load_lab(root)
    request = RunRequest(
        experiment="demo",
        run_id="20250102-100000-00000c",
        profile="h200:8",
        image="python:3.12",
        observability_url="https://t.example.org/p",
    )
    run = prepare(lab, request, commit="0" * 40, dirty=False)
    assert isinstance(run.payload, SlurmBatch) and run.payload.lab_root == ""

    packed = backend_request(root, lab, run, env={"TUNEPLANE_INGEST_SECRET": "k" * 32})
    assert packed.payload == run.payload.replace(lab_root=str(root))
    assert list(packed.secret_data) == ["job-token"] and packed.secret_data["job-token"]
    assert backend_request(root, lab, run, env={}).secret_data == {}  # no secret, no token
