"""Entrypoint kinds: an experiment file, a module of the image, or a file of the framework inside the
image, and an experiment `run.py` that wins when present. Every catalog recipe compiles."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from support.render import INPUTS, RUN_ID, build, catalog, commit_all, make_lab, resolve_run
from support.shared import require_shared

from tuneplane.errors import UsageError
from tuneplane.lab.load import load_lab
from tuneplane.models.run import RunRequest

NEMO_ROOT = "/opt/nemo-rl"


def _request(experiment: str, method: str, profile: str = "h200") -> RunRequest:
    data: dict[str, object] = {"experiment": experiment, "run_id": RUN_ID, "profile": profile, "inputs": dict(INPUTS)}
    if method == "custom/custom":
        data = {
            **data,
            "image": "registry.example.com/t:1",
            "observability_url": "https://track.example.org/p",
            "inputs": {},
        }
    if method.startswith(("ms-swift/", "openrlhf/", "verl/")) or method == "evalkit/benchmark":
        data["image"] = "registry.example.com/framework:1"
    if method == "evalkit/benchmark":
        data["inputs"] = {"model": INPUTS["model"]}
    return RunRequest.model_validate(data)


def test_nemo_rl_runs_the_frameworks_own_driver_without_a_run_py(tmp_path: Path) -> None:
    lab = make_lab(tmp_path / "lab", {"sft": "nemo-rl/sft", "grpo": "nemo-rl/grpo"})
    assert not (lab.root / "experiments" / "sft" / "run.py").exists()
    for name, script in (("sft", "run_sft.py"), ("grpo", "run_grpo.py")):
        spec = resolve_run(lab, _request(name, f"nemo-rl/{name}"))
        assert spec.spec.recipe.entrypoint_kind == "file"
        assert spec.spec.recipe.entrypoint == f"{NEMO_ROOT}/examples/{script}"
        _, plan, _ = build(lab, _request(name, f"nemo-rl/{name}"))
        assert plan.argv[:2] == ["python3", f"{NEMO_ROOT}/examples/{script}"]
        assert plan.argv[2:4] == ["--config", f"{spec.spec.paths.exp_dir}/config.yaml"]


def test_an_experiment_run_py_wins_over_the_frameworks_entry(tmp_path: Path) -> None:
    lab = make_lab(
        tmp_path / "lab",
        {"grpo": "nemo-rl/grpo", "vgrpo": "verl/grpo"},
        files={"experiments/grpo/run.py": "print('mine')\n", "experiments/vgrpo/run.py": "pass\n"},
    )
    for name, method in (("grpo", "nemo-rl/grpo"), ("vgrpo", "verl/grpo")):
        spec, plan, _ = build(lab, _request(name, method))
        assert (spec.spec.recipe.entrypoint_kind, spec.spec.recipe.entrypoint) == ("experiment", "run.py")
        assert f"{spec.spec.paths.exp_dir}/run.py" in plan.argv


def test_a_run_py_that_escapes_the_experiment_is_not_an_override(tmp_path: Path) -> None:
    lab = make_lab(tmp_path / "lab", {"grpo": "nemo-rl/grpo"}, files={"outside.py": "pass\n"})
    (lab.root / "experiments" / "grpo" / "run.py").symlink_to(lab.root / "outside.py")
    commit_all(lab.root)
    spec = resolve_run(load_lab(lab.root), _request("grpo", "nemo-rl/grpo"))
    assert spec.spec.recipe.entrypoint == f"{NEMO_ROOT}/examples/run_grpo.py"


def test_an_experiment_entrypoint_of_a_catalog_recipe_must_exist(tmp_path: Path) -> None:
    lab = make_lab(tmp_path / "lab", {"maxrl": "nemo-rl/maxrl"})
    (lab.root / "experiments" / "maxrl" / "run.py").unlink()
    commit_all(lab.root)
    with pytest.raises(UsageError, match="entrypoint is missing"):
        resolve_run(load_lab(lab.root), _request("maxrl", "nemo-rl/maxrl"))


def test_validate_admits_a_nemo_rl_experiment_without_run_py(tmp_path: Path, tp) -> None:
    lab = make_lab(tmp_path / "lab", {"sft": "nemo-rl/sft", "dpo": "nemo-rl/dpo"})
    result = tp("validate", "sft", "dpo", cwd=lab.root)
    assert result.code == 0, result.output


@pytest.mark.parametrize("method", catalog().ids)
def test_every_catalog_recipe_scaffolds_validates_and_compiles(tmp_path: Path, method: str) -> None:
    name = method.replace("/", "-")
    lab = make_lab(tmp_path / "lab", {name: method})
    if "reward-source" in {r.id for r in catalog().recipe(method).rules}:
        # its README asks for a reward; a remote one, as validation data on OpenRLHF's Ray trainer needs
        config = lab.root / "experiments" / name / "config.yaml"
        text = config.read_text(encoding="utf-8")
        assert 'reward:\n  model_name_or_path: ""' in text
        remote = "reward:\n  remote_url: http://127.0.0.1:5000/r"
        config.write_text(text.replace('reward:\n  model_name_or_path: ""', remote, 1), encoding="utf-8")
        commit_all(lab.root)
    profile = "cpu" if method.startswith(("trl/", "pytorch/", "custom/")) else "h200"
    _, plan, manifests = build(lab, _request(name, method, profile))
    assert plan.argv and manifests


# ── deprecated runtime versions ─────────────────────────────────────────────────────────────────────

STARFORGE_TRL_LOCK = ("fixtures", "starforge-lab", "experiments", "trl-grpo_qwen3.5-9b_qa-tools_v1", "recipe.lock.json")


def test_a_lock_on_a_deprecated_runtime_is_admitted_with_a_warning_and_an_upgrade_hint(tmp_path: Path, tp) -> None:
    lab = make_lab(tmp_path / "lab", {"old": "trl/grpo"})
    lock_path = lab.root / "experiments" / "old" / "recipe.lock.json"
    lock = json.loads(lock_path.read_text())
    lock["framework"] = {"kind": "trl", "version": "1.10.0", "runtime_id": "trl-1.10.0"}
    lock_path.write_text(json.dumps(lock, indent=2, sort_keys=True) + "\n")
    commit_all(lab.root)
    result = tp("validate", "old", cwd=lab.root)
    assert result.code == 0, result.output
    assert "deprecated" in result.output and "tp recipe upgrade old" in result.output
    spec = resolve_run(load_lab(lab.root), _request("old", "trl/grpo", "cpu"))
    assert (spec.spec.framework.version, spec.spec.framework.runtime_id) == ("1.10.0", "trl-1.10.0")
    assert tp("recipe", "upgrade", "old", cwd=lab.root).code == 0
    assert json.loads(lock_path.read_text())["framework"]["version"] == "1.16.0"


def test_a_new_experiment_cannot_lock_a_deprecated_runtime(tmp_path: Path, tp) -> None:
    lab = make_lab(tmp_path / "lab", {})
    result = tp("new", "x", "--method", "trl/sft", "--framework-version", "1.10.0", cwd=lab.root)
    assert result.code == 2 and "deprecated" in result.output and "1.16.0" in result.output


def test_starforge_trl_lock_names_a_runtime_the_catalog_still_has() -> None:
    legacy = json.loads(require_shared(*STARFORGE_TRL_LOCK).read_text())
    recipe = catalog().recipe(legacy["recipe"]["name"])
    kept = recipe.runtime.versions[legacy["framework"]["version"]]
    assert kept.runtime_id == legacy["framework"]["runtime_id"] and kept.deprecated


def test_catalog_frameworks_have_an_image_without_a_lab_default(tmp_path: Path) -> None:
    import re

    from support.render import CLUSTER_SETTINGS

    settings = re.sub(r"images:\n(  .*\n)+", "", CLUSTER_SETTINGS)
    assert "images:" not in settings
    lab = make_lab(
        tmp_path / "lab", {"t": "trl/sft", "p": "pytorch/image-classification", "n": "nemo-rl/sft"}, settings=settings
    )
    images = {
        name: resolve_run(lab, _request(name, method, "cpu" if name != "n" else "h200")).spec.image
        for name, method in (("t", "trl/sft"), ("p", "pytorch/image-classification"), ("n", "nemo-rl/sft"))
    }
    assert images["t"] == "huggingface/trl:1.16.0"
    assert images["p"].startswith("pytorch/pytorch:2.14.0-")
    assert re.fullmatch(r"nvcr\.io/nvidia/nemo-rl:v0\.7\.0@sha256:[0-9a-f]{64}", images["n"])


def test_a_local_nemo_rl_run_starts_the_frameworks_driver_from_its_local_checkout(
    tmp_path: Path, tp_subprocess
) -> None:
    """The local backend runs a `file` entrypoint from NEMO_RL_ROOT: here a stand-in NeMo-RL checkout
    whose driver records what it got, as NeMo-RL's own examples/run_sft.py would receive it."""
    from support.render import CLUSTER_SETTINGS

    checkout = tmp_path / "nemo-rl"
    (checkout / "examples").mkdir(parents=True)
    (checkout / "examples" / "run_sft.py").write_text(
        "import json, os, sys\n"
        "json.dump(sys.argv[1:], open(os.path.join(os.environ['TUNEPLANE_OUT_DIR'], 'argv.json'), 'w'))\n"
    )
    settings = CLUSTER_SETTINGS.replace(
        "local: {local: true, gpus_per_node: 0}", "local: {local: true, gpus_per_node: 1}"
    )  # the driver uses none
    lab = make_lab(tmp_path / "lab", {"sft": "nemo-rl/sft"}, settings=settings)
    for data in ("t.jsonl", "v.jsonl"):  # a --local run's data must be on this machine (the driver reads none)
        (lab.root / data).write_text('{"messages": []}\n', encoding="utf-8")
    result = tp_subprocess(
        "submit",
        "sft",
        "--profile",
        "local",
        "--model",
        "m",
        "--train-data",
        "t.jsonl",
        "--validation-data",
        "v.jsonl",
        "--local",
        cwd=lab.root,
        env={"NEMO_RL_ROOT": str(checkout), "TUNEPLANE_LOCAL_GPUS": "1"},
        timeout=300,
    )
    assert result.code == 0, result.output[-3000:]
    [status_path] = (lab.root / "status" / "sft").glob("*.json")
    status = json.loads(status_path.read_text())
    assert status["phase"] == "Succeeded"
    argv = json.loads((Path(status["out_dir"]) / "argv.json").read_text())
    assert argv[0] == "--config" and argv[1].endswith("experiments/sft/config.yaml")
    assert 'policy.model_name="m"' in argv and "cluster.num_nodes=1" in argv


def test_a_migrated_nemo_rl_sft_lock_binds_the_frameworks_driver(
    tmp_path: Path, tp, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The StarForge nemo-rl/sft experiment has no driver of its own: after `tp migrate` its lock binds
    NeMo-RL's examples/run_sft.py inside the image, and the lock is admitted."""
    import shutil

    root = tmp_path / "lab"
    shutil.copytree(require_shared("fixtures", "starforge-lab"), root)
    monkeypatch.setenv("TUNEPLANE_TOOL_REQUIREMENT", "tuneplane==0.5.0")  # how CI installs tp, as a team says
    assert tp("migrate", root, cwd=root).code == 0
    lock = json.loads((root / "experiments" / "sft_qwen3.5-4b_alpaca_v1" / "recipe.lock.json").read_text())
    assert lock["bindings"]["entrypoint"] == {"kind": "file", "value": "examples/run_sft.py"}
    result = tp("validate", "sft_qwen3.5-4b_alpaca_v1", "--format", "json", cwd=root)
    report = json.loads(result.out)
    assert report["errors"] == 0 and result.code == 0, result.output
    assert [p["rule"] for p in report["problems"]] == ["lock-drift"]  # advisory: `tp recipe upgrade` re-locks
