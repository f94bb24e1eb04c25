"""render: manifests per recipe × shape against golden files, every manifest rule of the issue, the
job's checkout script and launcher bootstrap run for real, the PR diff comment and `tp render`.

Golden files live in tests/golden/ and are compared as parsed structures; regenerate them with
`TUNEPLANE_REGEN=1 pytest tests/test_render_manifests.py` after a deliberate change (a catalog edit included).
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from podrunner import kubelet_expand
from support.render import (
    CLUSTER_SETTINGS,
    COMMIT,
    CONTRACT_ORDER,
    EXPERIMENTS,
    RUN_ID,
    build,
    commit_all,
    env_entries,
    env_values,
    git,
    main_container,
    make_lab,
    pod_templates,
    request,
    resolve_run,
)

from tuneplane import __version__
from tuneplane.errors import UsageError
from tuneplane.lab.load import Lab, load_lab
from tuneplane.plan.adapters import compile_plan
from tuneplane.plan.names import label_value, object_name
from tuneplane.render.diff import COMMENT_LIMIT, RenderedChange, diff_comment
from tuneplane.render.manifests import jobspec_document, render_manifests, to_yaml
from tuneplane.render.schemacheck import manifest_errors
from tuneplane.render.scripts import BOOTSTRAP, CHECKOUT_SCRIPT
from tuneplane.runtime.digest import tree_digest

GOLDEN = Path(__file__).parent / "golden"
RUN_HEAD = "apiVersion: tuneplane/run/v1\nkind: RunRequest\n"
REGEN = os.environ.get("TUNEPLANE_REGEN") == "1"
CKPT = "/mnt/tuneplane/runs/alice/trl-sft-exp/20240101-000000-000000/out/checkpoints/final"

# recipe × shape: one node, several nodes, and the Ray driver on one and several nodes
CASES = {
    "custom.one-node": ("custom-exp", "h200", {}),
    "custom.multi-node": ("custom-exp", "h200:16", {}),
    "pytorch-image-classification.one-node": (
        "pytorch-exp",
        "h200:4",
        {"set": {"epochs": 5}, "timeout": 7200},
    ),
    "pytorch-image-classification.multi-node": ("pytorch-exp", "h200:16", {}),
    "trl-sft.one-node": ("trl-sft-exp", "h200", {}),
    "trl-sft.multi-node": ("trl-sft-exp", "h200:16", {}),
    "trl-grpo.one-node": ("trl-grpo-exp", "h200", {}),
    "trl-grpo.multi-node": ("trl-grpo-exp", "h200:24", {}),
    "verl-sft.one-node": ("verl-sft-exp", "h200", {}),
    "verl-sft.multi-node": ("verl-sft-exp", "h200:16", {}),
    "verl-grpo.ray-one-node": ("verl-grpo-exp", "h200", {}),
    "verl-grpo.ray-multi-node": ("verl-grpo-exp", "h200:32", {"timeout": 86400}),
    "nemo-rl-grpo.ray-one-node": ("nemo-exp", "h200", {}),
    "nemo-rl-grpo.ray-multi-node": ("nemo-exp", "h200:16", {}),
    "evalkit-benchmark.one-node": ("evalkit-exp", "h200:1", {}),
    "trl-sft.export": ("trl-sft-exp", "h200", {"operation": "export", "inputs": {"checkpoint": CKPT}}),
    "trl-sft.eval": (
        "trl-sft-exp",
        "h200",
        {"operation": "eval", "inputs": {"checkpoint": CKPT, "data": "d.jsonl"}},
    ),
}
EXPECTED_KIND = {
    "one-node": "Job",
    "multi-node": "JobSet",
    "ray-one-node": "RayJob",
    "ray-multi-node": "RayJob",
    "export": "Job",
    "eval": "Job",
}


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Lab:
    return make_lab(tmp_path_factory.mktemp("render") / "lab")


def manifest(lab: Lab, exp: str, profile: str = "h200", **fields: Any) -> dict[str, Any]:
    (doc,) = build(lab, request(exp, profile, **fields))[2]
    return doc


_DIGEST = re.compile(r"sha256:[0-9a-f]{64}")


def normalise(value: Any) -> Any:
    """Digests and the tool version change with every catalog edit or release; the structure does not."""
    if isinstance(value, dict):
        return {k: normalise(v) for k, v in value.items()}
    if isinstance(value, list):
        return [normalise(v) for v in value]
    if isinstance(value, str):
        text = _DIGEST.sub("sha256:<digest>", value)
        text = text.replace(f"/sdk/{__version__}", "/sdk/<version>")
        text = text.replace(f'"tool_version":"{__version__}"', '"tool_version":"<version>"')
        return "<version>" if text == __version__ else text
    return value


# ── golden manifests ────────────────────────────────────────────────────────────────────────────────


@pytest.mark.parametrize("case", sorted(CASES))
def test_golden_manifests(lab: Lab, case: str) -> None:
    exp, profile, fields = CASES[case]
    docs = build(lab, request(exp, profile, **fields))[2]
    assert [d["kind"] for d in docs] == [EXPECTED_KIND[case.split(".", 1)[1]]]
    for doc in docs:
        assert list(manifest_errors(doc)) == []
    path = GOLDEN / f"{case}.yaml"
    actual = normalise(docs)
    if REGEN:
        GOLDEN.mkdir(exist_ok=True)
        path.write_text(f"# tp render golden file: {case} (regenerate with TUNEPLANE_REGEN=1)\n" + to_yaml(actual))
    assert path.is_file(), f"{path} is missing: run TUNEPLANE_REGEN=1 pytest {__file__}"
    expected = [d for d in yaml.safe_load_all(path.read_text()) if d is not None]
    assert actual == expected, f"{case} differs from {path.name}; if intended, regenerate with TUNEPLANE_REGEN=1"


def test_every_golden_file_belongs_to_a_case() -> None:
    assert sorted(p.stem for p in GOLDEN.glob("*.yaml")) == sorted(CASES)


def test_every_catalog_recipe_has_golden_cases() -> None:
    methods = {m.replace("/", "-") for m in EXPERIMENTS.values()} | {"custom"}
    covered = {case.split(".")[0] for case in CASES}
    assert {m for m in methods if m != "custom-custom"} <= covered


def test_rendering_is_deterministic(lab: Lab) -> None:
    req = request("trl-sft-exp", "h200:16")
    assert build(lab, req)[2] == build(lab, req)[2]


# ── kinds and their specifics ───────────────────────────────────────────────────────────────────────


def test_one_node_is_a_batch_job_with_the_failure_rules(lab: Lab) -> None:
    doc = manifest(lab, "pytorch-exp", "h200:4", timeout=3600)
    spec = doc["spec"]
    assert (doc["apiVersion"], doc["kind"]) == ("batch/v1", "Job")
    # the default retry policy (3 attempts): two pod replacements, each counted
    assert spec["backoffLimit"] == 2 and spec["ttlSecondsAfterFinished"] == 86400
    assert spec["activeDeadlineSeconds"] == 3600
    rule = spec["podFailurePolicy"]["rules"][0]
    assert rule == {
        "action": "FailJob",
        "onExitCodes": {"containerName": "trainer", "operator": "In", "values": [78]},
    }
    assert spec["template"]["spec"]["restartPolicy"] == "Never"
    assert "activeDeadlineSeconds" not in manifest(lab, "pytorch-exp")["spec"]


def test_several_nodes_are_a_jobset_indexed_by_node(lab: Lab) -> None:
    doc = manifest(lab, "trl-sft-exp", "h200:24")
    name = object_name("trl-sft-exp", RUN_ID)
    assert (doc["apiVersion"], doc["kind"]) == ("jobset.x-k8s.io/v1alpha2", "JobSet")
    (rjob,) = doc["spec"]["replicatedJobs"]
    job = rjob["template"]["spec"]
    assert (rjob["name"], rjob["replicas"]) == ("trainer", 1)
    assert (job["parallelism"], job["completions"], job["completionMode"], job["backoffLimit"]) == (
        3,
        3,
        "Indexed",
        2,
    )
    assert doc["spec"]["network"]["enableDNSHostnames"] is True and doc["spec"]["failurePolicy"] == {"maxRestarts": 0}
    env = env_entries(main_container(job["template"]))
    index = "metadata.annotations['batch.kubernetes.io/job-completion-index']"
    assert env["TUNEPLANE_NODE_RANK"]["valueFrom"]["fieldRef"]["fieldPath"] == index
    assert env["PET_NODE_RANK"]["valueFrom"]["fieldRef"]["fieldPath"] == index
    assert env["MASTER_ADDR"]["value"] == f"{name}-trainer-0-0.{name}"
    launch = _jobspec_of(job["template"])["launch"]["argv"]
    assert launch[launch.index("--main_process_ip") + 1] == f"{name}-trainer-0-0.{name}"


def test_ray_drivers_are_rayjobs_with_a_gpu_free_head(lab: Lab) -> None:
    doc = manifest(lab, "verl-grpo-exp", "h200:32", timeout=7200)
    spec = doc["spec"]
    assert (doc["apiVersion"], doc["kind"]) == ("ray.io/v1", "RayJob")
    assert spec["shutdownAfterJobFinishes"] is True and spec["backoffLimit"] == 0
    assert spec["activeDeadlineSeconds"] == 7200
    head = spec["rayClusterSpec"]["headGroupSpec"]
    (workers,) = spec["rayClusterSpec"]["workerGroupSpecs"]
    assert head["rayStartParams"]["num-gpus"] == "0"
    assert "nvidia.com/gpu" not in main_container(head["template"])["resources"].get("limits", {})
    assert "nodeSelector" not in head["template"]["spec"]
    assert workers["replicas"] == workers["minReplicas"] == workers["maxReplicas"] == 4
    assert main_container(workers["template"])["resources"]["limits"]["nvidia.com/gpu"] == 8
    for template in (head["template"], workers["template"]):
        assert "command" not in main_container(template)  # KubeRay writes `ray start`


def test_the_ray_entrypoint_runs_the_launcher(lab: Lab) -> None:
    spec = resolve_run(lab, request("nemo-exp"))
    doc = render_manifests(spec, compile_plan(spec), lab.config)[0]
    argv = shlex.split(doc["spec"]["entrypoint"])
    assert argv == ["python3", "-c", BOOTSTRAP, f"/mnt/tuneplane/sdk/{__version__}", "prepend"]


# ── what every pod carries ──────────────────────────────────────────────────────────────────────────


@pytest.mark.parametrize(
    "exp, profile", [("trl-sft-exp", "h200"), ("trl-sft-exp", "h200:16"), ("verl-grpo-exp", "h200")]
)
def test_every_pod_has_checkout_storage_shm_and_scheduling(lab: Lab, exp: str, profile: str) -> None:
    doc = manifest(lab, exp, profile)
    for template in pod_templates(doc):
        pod = template["spec"]
        (init,) = pod["initContainers"]
        assert [kubelet_expand(a, {}) for a in init["command"]] == ["sh", "-c", CHECKOUT_SCRIPT]
        init_env = env_entries(init)
        assert init_env["TUNEPLANE_REPO_URL"]["value"] == "https://git.example.com/ml/render-lab.git"
        assert init_env["TUNEPLANE_COMMIT"]["value"] == COMMIT
        assert init_env["GIT_PASSWORD"]["valueFrom"]["secretKeyRef"] == {
            "name": "lab-git",
            "key": "password",
            "optional": False,
        }
        volumes = {v["name"]: v for v in pod["volumes"]}
        assert volumes["storage"]["persistentVolumeClaim"] == {"claimName": "lab-storage"}
        assert volumes["dshm"]["emptyDir"] == {"medium": "Memory", "sizeLimit": "64Gi"}
        container = main_container(template)
        mounts = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
        assert mounts == {"/mnt/tuneplane": "storage", "/dev/shm": "dshm"}
        assert init["volumeMounts"] == [{"name": "storage", "mountPath": "/mnt/tuneplane"}]
        assert pod["imagePullSecrets"] == [{"name": "registry-creds"}]
        if template is not (doc["spec"].get("rayClusterSpec") or {}).get("headGroupSpec", {}).get("template"):
            assert pod["tolerations"] == [
                {"key": "nvidia.com/gpu", "operator": "Exists", "value": "", "effect": "NoSchedule"}
            ]
        else:  # the CPU-only Ray head keeps off the GPU nodes
            assert "tolerations" not in pod and pod["affinity"]["nodeAffinity"]
        assert pod["restartPolicy"] == "Never"
        assert container["terminationMessagePolicy"] == init["terminationMessagePolicy"] == "FallbackToLogsOnError"
        assert container["image"] == resolve_run(lab, request(exp, profile)).spec.image
    trainer = main_container(list(pod_templates(doc))[-1])
    assert trainer["resources"]["limits"] == {"nvidia.com/gpu": 8}
    assert trainer["resources"]["requests"] == {"cpu": "96", "memory": "1Ti"}
    assert list(pod_templates(doc))[-1]["spec"]["nodeSelector"] == {"nvidia.com/gpu.product": "NVIDIA-H200"}


def test_a_cpu_profile_asks_for_no_gpus(lab: Lab) -> None:
    doc = manifest(lab, "pytorch-exp", "cpu")
    container = main_container(doc["spec"]["template"])
    assert container["resources"] == {"requests": {"cpu": "8", "memory": "32Gi"}}
    assert "nodeSelector" not in doc["spec"]["template"]["spec"]


def test_labels_annotations_and_queue(lab: Lab) -> None:
    spec = resolve_run(lab, request("trl-sft-exp", requested_by="alice@example.org"))
    doc = render_manifests(spec, compile_plan(spec), lab.config)[0]
    meta = doc["metadata"]
    assert meta["name"] == spec.metadata.name == object_name("trl-sft-exp", RUN_ID)
    assert meta["namespace"] == "ml-team"
    assert meta["labels"] == {
        "app.kubernetes.io/name": "tuneplane",
        "app.kubernetes.io/instance": meta["name"],
        "app.kubernetes.io/component": "train",
        "app.kubernetes.io/managed-by": "tuneplane",
        "tuneplane.dev/experiment": "trl-sft-exp",
        "tuneplane.dev/user": "alice",
        "tuneplane.dev/lab": "render-lab",
        "tuneplane.dev/run": RUN_ID,
        "tuneplane.dev/recipe": "trl-sft",
        "kueue.x-k8s.io/queue-name": "team-a",
    }
    notes = meta["annotations"]
    from tuneplane.plan.names import jobspec_digest

    assert notes["tuneplane.dev/commit"] == COMMIT and notes["tuneplane.dev/dirty"] == "false"
    assert notes["tuneplane.dev/jobspec-digest"] == jobspec_digest(spec)
    assert notes["tuneplane.dev/recipe-digest"] == spec.spec.recipe.digest
    assert notes["tuneplane.dev/recipe"] == "trl/sft" and notes["tuneplane.dev/requested-by"] == "alice@example.org"
    pod_labels = doc["spec"]["template"]["metadata"]["labels"]
    assert "kueue.x-k8s.io/queue-name" not in pod_labels and pod_labels["tuneplane.dev/run"] == RUN_ID


def test_no_queue_label_without_a_queue(tmp_path: Path) -> None:
    lab = make_lab(
        tmp_path / "lab",
        {"img": "pytorch/image-classification"},
        settings=CLUSTER_SETTINGS.replace("  queue: team-a\n", ""),
    )
    doc = manifest(lab, "img")
    assert "kueue.x-k8s.io/queue-name" not in doc["metadata"]["labels"]


def test_every_contract_variable_is_in_the_pod_and_tokens_come_from_the_run_secret(lab: Lab) -> None:
    doc = manifest(lab, "custom-exp")
    name = object_name("custom-exp", RUN_ID)
    container = main_container(doc["spec"]["template"])
    env = env_entries(container)
    for variable in CONTRACT_ORDER:
        assert "value" in env[variable], variable
    assert [e["name"] for e in container["env"] if e["name"] in CONTRACT_ORDER] == CONTRACT_ORDER
    assert env["TUNEPLANE_JOB_TOKEN"]["valueFrom"]["secretKeyRef"] == {
        "name": f"{name}-tokens",
        "key": "job-token",
        "optional": False,
    }
    assert env["HF_TOKEN"]["valueFrom"]["secretKeyRef"] == {
        "name": f"{name}-tokens",
        "key": "hf-token",
        "optional": True,
    }
    values = env_values(container)
    assert values["TUNEPLANE_JOB_ENABLED"] == "1"
    assert values["TUNEPLANE_JOB_ENDPOINT"] == "http://ingest.tuneplane.svc:8080"
    assert values["TUNEPLANE_EXTERNAL_OBSERVABILITY_URL"] == "https://wandb.example.org/team/project"
    assert "value" not in env["TUNEPLANE_JOB_TOKEN"] and "value" not in env["HF_TOKEN"]


def test_without_ingest_there_is_no_job_token(tmp_path: Path) -> None:
    settings = CLUSTER_SETTINGS.replace('  ingest: {endpoint: "http://ingest.tuneplane.svc:8080"}\n', "")
    lab = make_lab(tmp_path / "lab", {"img": "pytorch/image-classification"}, settings=settings)
    env = env_entries(main_container(manifest(lab, "img")["spec"]["template"]))
    assert env["TUNEPLANE_JOB_ENABLED"]["value"] == "0" and "TUNEPLANE_JOB_TOKEN" not in env
    assert "HF_TOKEN" in env


def test_platform_observability_prepends_the_sdk_and_external_does_not(lab: Lab) -> None:
    platform = main_container(manifest(lab, "trl-sft-exp")["spec"]["template"])
    external = main_container(manifest(lab, "custom-exp")["spec"]["template"])
    assert platform["command"] == ["python3", "-c", BOOTSTRAP, f"/mnt/tuneplane/sdk/{__version__}", "prepend"]
    assert external["command"][-1] == "keep"


def test_the_init_container_carries_the_jobspec_document(lab: Lab) -> None:
    spec = resolve_run(lab, request("trl-sft-exp", "h200:16"))
    plan = compile_plan(spec)
    doc = render_manifests(spec, plan, lab.config)[0]
    template = doc["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]
    assert _jobspec_of(template) == jobspec_document(spec, plan)


def _jobspec_of(template: dict[str, Any]) -> dict[str, Any]:
    init = env_values(template["spec"]["initContainers"][0])
    return json.loads(init["TUNEPLANE_JOBSPEC"])  # type: ignore[no-any-return]


# ── names ───────────────────────────────────────────────────────────────────────────────────────────


@pytest.mark.parametrize(
    "experiment",
    ["sft_qwen3.5-4b_alpaca_v1", "7b-model", "A" * 120, "x", "_.-", "trl-grpo_qwen3.5-9b_qa-tools_v1"],
)
def test_object_names_are_dns_1035_and_at_most_40(experiment: str) -> None:
    name = object_name(experiment, RUN_ID)
    assert re.fullmatch(r"[a-z]([-a-z0-9]*[a-z0-9])?", name) and len(name) <= 40
    assert name == object_name(experiment, RUN_ID)
    assert name != object_name(experiment, "20250101-120000-abc124")
    import hashlib

    assert name.endswith(hashlib.sha256(f"{experiment}\0{RUN_ID}".encode()).hexdigest()[:10])


@pytest.mark.parametrize("text", ["trl/sft", "a" * 80, "-x-", "ünïcode", "a b\nc", "..", ""])
def test_label_values_are_valid(text: str) -> None:
    value = label_value(text)
    assert len(value) <= 63 and re.fullmatch(r"(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?", value)


# ── what cannot be rendered ─────────────────────────────────────────────────────────────────────────


def test_local_runs_have_no_manifests(lab: Lab, tmp_path: Path) -> None:
    spec = resolve_run(lab, request("pytorch-exp", "local"), env={"TUNEPLANE_STORAGE_ROOT": str(tmp_path)})
    with pytest.raises(UsageError, match="runs on this machine"):
        render_manifests(spec, compile_plan(spec), lab.config)


def test_a_cluster_lab_needs_its_repository_url(tmp_path: Path) -> None:
    settings = CLUSTER_SETTINGS.replace('url: "https://git.example.com/ml/render-lab.git", ', "")
    lab = make_lab(tmp_path / "lab", {"img": "pytorch/image-classification"}, settings=settings)
    with pytest.raises(UsageError, match="cluster.repo.url is not set"):
        manifest(lab, "img")


# ── the job side, run for real ──────────────────────────────────────────────────────────────────────

PLUGIN = """\
schema: tuneplane/plugin/v1
name: opsd
version: 1.0.0
capability: algorithm
entrypoint: opsd_patch:install
load: eager
scope: entrypoint
"""


def test_checkout_script_clones_the_commit_and_writes_the_jobspec(tmp_path: Path) -> None:
    """The init container's script against a real repository: two pods of one run, in turn."""
    from tuneplane.author.plugin_lock import lock_plugin
    from tuneplane.launcher import read_jobspec

    storage = tmp_path / "storage"
    settings = (
        CLUSTER_SETTINGS.replace("root: /mnt/tuneplane", f"root: {storage}")
        .replace("https://git.example.com/ml/render-lab.git", f"file://{tmp_path / 'lab'}")
        .replace("credentials_secret: lab-git", 'credentials_secret: ""')
    )
    files = {
        "plugins/opsd/plugin.yaml": PLUGIN,
        "plugins/opsd/opsd_patch/__init__.py": "def install(p):\n    pass\n",
    }
    lab = make_lab(tmp_path / "lab", {"t": "trl/sft"}, settings=settings, files=files)
    lock_plugin(lab.root, "t", "alice/opsd@1.0.0")
    head = commit_all(lab.root)
    (lab.root / "uncommitted.txt").write_text("not in the job\n")
    lab = load_lab(lab.root)
    from support.render import INPUTS

    spec = resolve_run(lab, request("t", "h200:16", inputs=INPUTS), commit=head)
    doc = render_manifests(spec, compile_plan(spec), lab.config)[0]
    init = doc["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]["initContainers"][0]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GIT_", "TUNEPLANE_"))} | env_values(init)
    for pod in ("first", "second"):
        done = subprocess.run(
            [kubelet_expand(a, env) for a in init["command"]],
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert done.returncode == 0, f"{pod} pod: {done.stderr}"
    work = Path(spec.spec.paths.work_dir)
    assert git(work, "rev-parse", "HEAD") == head
    assert not (work / "uncommitted.txt").exists()
    assert Path(spec.spec.paths.out_dir).is_dir()
    view = read_jobspec(work)
    assert view.launch.argv == compile_plan(spec).argv
    (plugin,) = spec.spec.plugins
    assert tree_digest(work / "tuneplane_plugins/opsd") == plugin.digest
    assert "is ready" in done.stdout


@pytest.mark.parametrize("mode", ["prepend", "keep"])
def test_the_bootstrap_starts_the_launcher(tmp_path: Path, mode: str) -> None:
    work = tmp_path / "work"
    (work / ".tuneplane").mkdir(parents=True)
    code = "import os; print('PYTHONPATH=' + os.environ.get('PYTHONPATH', ''))"
    document = {
        "apiVersion": "tuneplane/v1",
        "kind": "TrainingJob",
        "spec": {"framework": {"kind": "custom"}},
        "launch": {"argv": [sys.executable, "-c", code], "mode": "direct", "cwd": str(work)},
    }
    (work / ".tuneplane/jobspec.json").write_text(json.dumps(document))
    sdk = str(Path(__file__).resolve().parents[1])
    env = dict(os.environ, TUNEPLANE_WORK_DIR=str(work), PYTHONPATH="/sentinel")
    done = subprocess.run(
        [sys.executable, "-c", BOOTSTRAP, sdk, mode],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    expected = f"{sdk}{os.pathsep}/sentinel" if mode == "prepend" else "/sentinel"
    assert f"PYTHONPATH={expected}" in done.stdout


# ── the pull-request comment ────────────────────────────────────────────────────────────────────────


def test_diff_comment_has_one_collapsible_diff_per_request() -> None:
    changes = [
        RenderedChange("runs/a/1.yaml", "kind: Job\nx: 1\n", "kind: Job\nx: 2\n"),
        RenderedChange("runs/b/2.yaml", None, "kind: Job\n"),
        RenderedChange("runs/c/3.yaml", "kind: Job\n", None),
        RenderedChange("runs/d/4.yaml", None, None, error="unknown profile 'h100'"),
    ]
    text = diff_comment(changes, "origin/main")
    assert text.count("<details") == 4 and text.count("</details>") == 4
    assert "<code>runs/a/1.yaml</code>: changed (+1 \u22121)" in text and "-x: 1\n+x: 2" in text
    assert "runs/b/2.yaml</code>: new" in text and "runs/c/3.yaml</code>: removed" in text
    assert "runs/d/4.yaml</code>: refused" in text and "unknown profile 'h100'" in text
    assert "`origin/main`" in text


def test_diff_comment_stays_within_the_limit_and_says_so() -> None:
    big = "\n".join(f"line {i}: " + "x" * 80 for i in range(3000))
    changes = [RenderedChange(f"runs/e/{i}.yaml", None, big) for i in range(5)]
    text = diff_comment(changes, "main")
    assert len(text) <= COMMENT_LIMIT
    assert "**Truncated:**" in text and "5 run request(s) are not shown in full" in text
    assert text.count("<details") == text.count("</details>") >= 1
    assert text.count("```") % 2 == 0


def test_diff_comment_fences_survive_backticks() -> None:
    text = diff_comment([RenderedChange("runs/a/1.yaml", None, "a: ```not a fence```\n")], "main")
    assert "````diff" in text and text.rstrip().endswith("</details>")


def test_diff_comment_without_changes() -> None:
    assert "No run request changed" in diff_comment([], "main")


# ── tp render, tp export, tp eval ───────────────────────────────────────────────────────────────────


@pytest.fixture()
def cli_lab(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    from tuneplane.lab.runs import dump_request

    lab = make_lab(tmp_path / "lab", {"t": "trl/sft", "c": "custom/custom", "img": "pytorch/image-classification"})
    from support.render import INPUTS

    for i, profile in enumerate(["h200", "h200:16"]):
        req = request("t", profile, inputs=INPUTS, run_id=f"20250101-12000{i}-abc123")
        path = lab.root / f"runs/t/{req.run_id}.yaml"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(dump_request(req))
    commit_all(lab.root, "runs")
    monkeypatch.chdir(lab.root)
    return lab.root


def test_tp_render_experiment_with_flags(cli_lab: Path, tp: Any) -> None:
    result = tp("render", "img", "--profile", "h200:16", "--set", "epochs=4")
    assert result.code == 0, result.output
    (doc,) = [d for d in yaml.safe_load_all(result.out) if d]
    assert doc["kind"] == "JobSet" and doc["metadata"]["name"] == object_name("img", "00000000-000000-000000")
    template = doc["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]
    assert _jobspec_of(template)["spec"]["hyperparams"]["epochs"] == 4


def test_tp_render_run_request_file_as_json(cli_lab: Path, tp: Any) -> None:
    result = tp("render", "runs/t/20250101-120000-abc123.yaml", "--format", "json")
    assert result.code == 0, result.output
    (doc,) = json.loads(result.out)
    assert doc["kind"] == "Job" and doc["metadata"]["labels"]["tuneplane.dev/run"] == "20250101-120000-abc123"
    assert doc["metadata"]["annotations"]["tuneplane.dev/commit"] == git(cli_lab, "rev-parse", "HEAD")


def test_tp_render_all_writes_one_file_per_request(cli_lab: Path, tp: Any, tmp_path: Path) -> None:
    out = tmp_path / "out"
    result = tp("render", "--all", "-o", out)
    assert result.code == 0, result.output
    files = sorted(p.relative_to(out).as_posix() for p in out.rglob("*.yaml"))
    assert files == ["t/20250101-120000-abc123.yaml", "t/20250101-120001-abc123.yaml"]
    kinds = [next(yaml.safe_load_all((out / f).read_text()))["kind"] for f in files]
    assert kinds == ["Job", "JobSet"]


def test_tp_render_all_in_parallel_matches_one_by_one(cli_lab: Path, tp: Any, tmp_path: Path) -> None:
    from tuneplane.lab.runs import dump_request
    from tuneplane.runs.review import PARALLEL_MIN

    for i in range(PARALLEL_MIN):
        req = request("img", "h200:16" if i % 2 else "h200", run_id=f"20250102-1200{i:02d}-abc123")
        (cli_lab / "runs/img").mkdir(parents=True, exist_ok=True)
        (cli_lab / f"runs/img/{req.run_id}.yaml").write_text(dump_request(req))
    (cli_lab / "runs/img/20250103-000000-badbad.yaml").write_text(
        RUN_HEAD + "experiment: img\nrun_id: 20250103-000000-badbad\nprofile: h200:12\n"
    )
    commit_all(cli_lab, "many runs")
    out = tmp_path / "out"
    result = tp("render", "--all", "-o", out)
    assert result.code == 1
    assert "runs/img/20250103-000000-badbad.yaml: refused: 12 GPUs do not fill whole h200 nodes" in result.err
    written = sorted(out.rglob("*.yaml"))
    assert len(written) == PARALLEL_MIN + 2
    sample = written[5]
    single = tp("render", f"runs/{sample.parent.name}/{sample.name}")
    assert single.code == 0 and single.out == sample.read_text()


_FORKS: list[int] = []  # pids forked by this process (os.fork and multiprocessing; subprocess execs do not count)
os.register_at_fork(after_in_parent=lambda: _FORKS.append(os.getpid()))


@pytest.mark.parametrize("start", ["threading", "_thread"])
def test_tp_render_all_beside_another_thread_renders_without_forking(
    cli_lab: Path, tp: Any, tmp_path: Path, start: str
) -> None:
    """fork() while another thread runs may deadlock the child (Python 3.12 and later warn of it): a host
    process with threads gets the serial path, and the same files. A thread started below `threading` (as
    pytest-xdist's execnet does, or a native library) is not in threading's count but is one all the same."""
    import _thread
    import threading

    from tuneplane.lab.runs import dump_request
    from tuneplane.runs.review import PARALLEL_MIN

    for i in range(PARALLEL_MIN):
        req = request("img", "h200", run_id=f"20250102-1300{i:02d}-abc123")
        (cli_lab / "runs/img").mkdir(parents=True, exist_ok=True)
        (cli_lab / f"runs/img/{req.run_id}.yaml").write_text(dump_request(req))
    commit_all(cli_lab, "many runs")
    stop, stopped = threading.Event(), threading.Event()

    def wait() -> None:
        stop.wait(60)
        stopped.set()

    if start == "threading":
        threading.Thread(target=wait, daemon=True).start()
    else:
        _thread.start_new_thread(wait, ())
    forks = len(_FORKS)
    try:
        result = tp("render", "--all", "-o", tmp_path / "out")
    finally:
        stop.set()
        stopped.wait(10)
    assert result.code == 0, result.err
    assert len(_FORKS) == forks, "tp render forked workers while another thread was running"
    written = sorted((tmp_path / "out").rglob("*.yaml"))
    assert len(written) == len(list((cli_lab / "runs").rglob("*.yaml"))) > PARALLEL_MIN
    single = tp("render", f"runs/{written[3].parent.name}/{written[3].name}")
    assert single.code == 0 and single.out == written[3].read_text()
    # a tp process of its own has no other thread: it forks its workers (counted in it), and writes the same files
    counting = (
        "import os, runpy, sys\n"
        "forks = []\n"
        "os.register_at_fork(after_in_parent=lambda: forks.append(1))\n"
        "sys.argv = ['tp', *sys.argv[1:]]\n"
        "try:\n    runpy.run_module('tuneplane', run_name='__main__')\n"
        "finally:\n    print(f'forks={len(forks)}', file=sys.stderr)\n"
    )
    forked = subprocess.run(
        [sys.executable, "-c", counting, "render", "--all", "-o", str(tmp_path / "forked")],
        cwd=cli_lab,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert forked.returncode == 0, forked.stderr
    several = (os.cpu_count() or 1) > 1
    assert ("forks=0" not in forked.stderr) == several, forked.stderr  # one CPU: the serial path, no fork
    assert [p.read_text() for p in written] == [
        (tmp_path / "forked" / p.relative_to(tmp_path / "out")).read_text() for p in written
    ]


def test_tp_render_names_a_missing_run_request_once(cli_lab: Path, tp: Any) -> None:
    """A path that names nothing is a usage error (exit 2), as `tp validate` and `tp rerun` say of it;
    a file that is there but refused is a problem (exit 1)."""
    result = tp("render", "runs/img/nope.yaml")
    assert result.code == 2
    assert "runs/img/nope.yaml: no such file" in result.err
    assert result.err.count("runs/img/nope.yaml") == 1, result.err
    assert tp("validate", "runs/img/nope.yaml").code == 2


def test_tp_render_notes_a_dirty_tree_but_renders(cli_lab: Path, tp: Any) -> None:
    (cli_lab / "scratch.txt").write_text("wip")
    result = tp("render", "img", "--profile", "h200")
    assert result.code == 0 and "uncommitted changes" in result.err
    doc = next(d for d in yaml.safe_load_all(result.out) if d)
    assert doc["metadata"]["annotations"]["tuneplane.dev/dirty"] == "true"
    quiet = tp("render", "img", "--profile", "h200", "--allow-dirty")
    assert quiet.code == 0 and "uncommitted" not in quiet.err


def test_tp_render_refusal_is_a_usage_error(cli_lab: Path, tp: Any) -> None:
    result = tp("render", "c", "--profile", "h200", "--observability-url", "https://w.example/p")
    assert result.code == 2 and "custom/custom needs --image" in result.err
    assert tp("render").code == 2
    mixed = tp("render", "runs/t/20250101-120000-abc123.yaml", "--profile", "h200")
    assert mixed.code == 2 and "go with EXP" in mixed.err


def test_tp_render_changed_diff_against_the_base(cli_lab: Path, tp: Any) -> None:
    git(cli_lab, "checkout", "-q", "-b", "feature")
    first = cli_lab / "runs/t/20250101-120000-abc123.yaml"
    first.write_text(first.read_text().replace("profile: h200\n", "profile: h200:16\n"))
    from tuneplane.lab.runs import dump_request

    added = request("img", "h200", run_id="20250105-000000-abc123")
    (cli_lab / "runs/img").mkdir()
    (cli_lab / f"runs/img/{added.run_id}.yaml").write_text(dump_request(added))
    (cli_lab / "runs/img/20250106-000000-abc123.yaml").write_text(
        RUN_HEAD + "experiment: img\nrun_id: 20250106-000000-abc123\nprofile: h100\n"
    )
    commit_all(cli_lab, "change runs")
    result = tp("render", "--changed", "--diff", "--base", "main")
    assert result.code == 1, result.output  # one refused request
    text = result.out
    assert "### tp render: 3 changed run request(s) against `main`" in text
    assert "runs/t/20250101-120000-abc123.yaml</code>: changed" in text
    assert '+kind: "JobSet"' in text and '-kind: "Job"' in text
    assert "runs/img/20250105-000000-abc123.yaml</code>: new" in text
    assert "runs/img/20250106-000000-abc123.yaml</code>: refused" in text and "unknown profile 'h100'" in text
    assert len(text) <= COMMENT_LIMIT


def test_tp_export_and_eval_dry_run(cli_lab: Path, tp: Any) -> None:
    result = tp(
        "export",
        "t",
        "--checkpoint",
        "runs/alice/t/r/out/checkpoints/final",
        "--profile",
        "h200",
        "--dry-run",
    )
    assert result.code == 0, result.output
    # the real run folder a run started now gets (a fresh run id), named on stderr too
    run_dir = result.err.strip().removeprefix("run folder: ")
    assert re.fullmatch(r"/mnt/tuneplane/runs/alice/t/\d{8}-\d{6}-[0-9a-f]{10}", run_dir), result.err
    assert shlex.split(result.out) == [
        "python3",
        f"{run_dir}/work/experiments/t/export.py",
        "--output-dir",
        f"{run_dir}/out",
        "--checkpoint",
        "/mnt/tuneplane/runs/alice/t/r/out/checkpoints/final",
    ]
    evaluated = tp("eval", "t", "--checkpoint", "/c", "--data", "it's data.jsonl", "-p", "h200", "--dry-run")
    assert evaluated.code == 0 and shlex.split(evaluated.out)[3] == "it's data.jsonl"
    manifests = tp("eval", "t", "--checkpoint", "/c", "--data", "d", "-p", "h200")
    doc = next(d for d in yaml.safe_load_all(manifests.out) if d)
    assert doc["metadata"]["labels"]["app.kubernetes.io/component"] == "eval"
    assert main_container(doc["spec"]["template"])["resources"]["limits"] == {"nvidia.com/gpu": 1}


@pytest.mark.parametrize("command, extra", [("export", ()), ("eval", ("--data", "d"))])
def test_tp_export_and_eval_take_a_timeout_as_submit_does(
    cli_lab: Path, tp: Any, command: str, extra: tuple[str, ...]
) -> None:
    result = tp(command, "t", "--checkpoint", "/c", *extra, "-p", "h200", "--timeout", "90m")
    assert result.code == 0, result.output
    doc = next(d for d in yaml.safe_load_all(result.out) if d)
    assert doc["spec"]["activeDeadlineSeconds"] == 5400
    refused = tp(command, "t", "--checkpoint", "/c", *extra, "-p", "h200", "--timeout", "soon")
    assert refused.code == 2 and "--timeout 'soon' is not a duration" in refused.err


@pytest.mark.parametrize("command", ["export", "eval"])
def test_tp_export_and_eval_refuse_custom(cli_lab: Path, tp: Any, command: str) -> None:
    result = tp(command, "c", "--checkpoint", "/c", "-p", "h200")
    assert result.code == 2
    assert f"custom adapter refuses {command}" in result.err


def test_tp_render_a_local_run_shows_its_jobspec_and_process(cli_lab: Path, tp: Any) -> None:
    from tuneplane.models.jobspec import JobSpec

    result = tp("render", "img", "--profile", "local", "--format", "json")
    assert result.code == 0, result.output
    spec_doc, launch = json.loads(result.out)
    spec = JobSpec.model_validate(spec_doc)
    assert spec.spec.resources.local is True
    assert launch["kind"] == "LaunchPlan" and launch["argv"][:2] == ["torchrun", "--standalone"]
    assert launch["env"]["TUNEPLANE_OUT_DIR"] == spec.spec.paths.out_dir
    assert "TUNEPLANE_JOB_TOKEN" not in launch["env"]
