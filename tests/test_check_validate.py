"""`tp validate` on good and ordinary input: no false alarms, the rules that should fire do, and the
StarForge lab is recognised. Hostile input is in test_check_validate_hostile.py."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from tuneplane.check.validate import validate
from tuneplane.lab.load import load_lab
from tuneplane.problems import Problem, Severity

RUN_ID = "20260101-120000-abcdef"
URL = "https://wandb.example.org/team/proj"
DIGEST = "sha256:" + "ab" * 32
IMG = "pytorch/image-classification"


def new(tp: Any, name: str, method: str) -> None:
    result = tp("new", name, "--method", method)
    assert result.code == 0, result.output


def report(tp: Any, *args: str, env: dict[str, str] | None = None) -> tuple[int, dict[str, Any]]:
    result = tp("validate", "--format", "json", *args, env=env)
    assert "Traceback" not in result.output
    return result.code, json.loads(result.out)


def problems_in(data: dict[str, Any], prefix: str) -> list[dict[str, Any]]:
    return [p for p in data["problems"] if p["file"].startswith(prefix)]


def write(root: Path, rel: str, text: str) -> Path:
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


# ── no false alarms ─────────────────────────────────────────────────────────────────────────────────


def test_empty_lab_is_clean(lab: Path, tp: Any) -> None:
    code, data = report(tp)
    assert (code, data["problems"]) == (0, [])
    assert data["checked"].startswith("0 experiment")


def test_good_config_values_pass(lab: Path, tp: Any) -> None:
    """YAML 1.1 booleans, an int for a float, inclusive bounds, a dotted exponent, keys of your own."""
    new(tp, "img", "pytorch/image-classification")
    write(
        lab,
        "experiments/img/config.yaml",
        "epochs: 1\nlearning_rate: 1.0e-6\nweight_decay: 1\nmomentum: 0\namp: on\noptimizer: sgd\n"
        "label_smoothing: 0.5\nextra: {my_own_setting: {nested: true}}\n",
    )
    code, data = report(tp, "img")
    assert (code, data["problems"]) == (0, [])


def test_null_leaves_an_optional_param_unset(lab: Path, tp: Any) -> None:
    """Catalog templates write `key: null` for "unset: the framework's default"; not a type error."""
    new(tp, "img", "pytorch/image-classification")
    write(lab, "experiments/img/config.yaml", "epochs: null\nmax_grad_norm: ~\noptimizer: null\n")
    code, data = report(tp, "img")
    assert (code, data["problems"]) == (0, [])


def test_good_run_requests_pass(lab: Path, tp: Any) -> None:
    for name, method in (("byo", "custom/custom"), ("img", IMG), ("sft", "trl/sft")):
        new(tp, name, method)
    write(lab, "experiments/byo/train.sh", 'exec python "${TUNEPLANE_EXP_DIR}/train.py"\n')

    def head(suffix: str) -> str:  # a run id names one run across the lab
        return "apiVersion: tuneplane/run/v1\nkind: RunRequest\nrun_id: " + RUN_ID[:-1] + suffix + "\n"

    write(
        lab,
        f"runs/byo/{RUN_ID[:-1]}1.yaml",
        head("1") + f"experiment: byo\nprofile: h200:16\n"
        f"image: registry.example.com/team/x:1.0@{DIGEST}\nobservability_url: {URL}\n"
        "set: {anything: goes}\n",
    )
    write(
        lab,
        f"runs/img/{RUN_ID[:-1]}2.yaml",
        head("2") + "experiment: img\nprofile: h200\n"
        "set: {epochs: 2, learning_rate: 1, amp: yes, optimizer: sgd, label_smoothing: 0.5}\n",
    )
    write(
        lab,
        f"runs/sft/{RUN_ID[:-1]}3.yaml",
        head("3") + "experiment: sft\nprofile: h200:32\ninputs:\n"
        "  model: Qwen/Qwen3-0.6B\n  train_data: data/train.jsonl\n  validation_data: data/val.jsonl\n",
    )
    code, data = report(tp, env={"TUNEPLANE_ALLOWED_IMAGE_REGISTRIES": "registry.example.com"})
    assert problems_in(data, "runs/") == []
    assert data["errors"] == 0 and code == 0
    assert "3 run request" in data["checked"]


def test_set_accepts_the_config_path_too(lab: Path, make_catalog: Any, tp: Any) -> None:
    catalog = make_catalog()
    recipe = catalog / "pytorch/image-classification/recipe.yaml"
    text = recipe.read_text(encoding="utf-8")
    assert "seed: {type: int, path: seed," in text
    recipe.write_text(
        text.replace("seed: {type: int, path: seed,", "seed: {type: int, path: train.seed,"), encoding="utf-8"
    )
    new(tp, "img", "pytorch/image-classification")
    config = lab / "experiments/img/config.yaml"  # the closed config follows the moved path
    config.write_text(config.read_text(encoding="utf-8").replace("seed: 0\n", "train: {seed: 0}\n"), encoding="utf-8")
    write(
        lab,
        f"runs/img/{RUN_ID}.yaml",
        "apiVersion: tuneplane/run/v1\nkind: RunRequest\nexperiment: img\n"
        f"run_id: {RUN_ID}\nprofile: h200\nset:\n  train.seed: 3\n  seed: 4\n",
    )
    code, data = report(tp, "img")
    assert problems_in(data, "runs/") == [] and code == 0


def test_symlink_inside_the_experiment_is_a_fine_entrypoint(lab: Path, tp: Any) -> None:
    new(tp, "byo", "custom/custom")
    exp = lab / "experiments/byo"
    write(lab, "experiments/byo/scripts/real.sh", 'exec python "${TUNEPLANE_EXP_DIR}/train.py"\n')
    (exp / "train.sh").unlink()
    (exp / "train.sh").symlink_to("scripts/real.sh")
    code, data = report(tp, "byo")
    assert [p for p in data["problems"] if p["rule"] == "entrypoint"] == []


def test_custom_config_is_not_checked_against_params(lab: Path, tp: Any) -> None:
    new(tp, "byo", "custom/custom")
    write(lab, "experiments/byo/config.yaml", "learning_rate: fast\nepochs: [1, 2]\nlearning_rte: 3\n")
    code, data = report(tp, "byo")
    assert [p for p in data["problems"] if p["rule"].startswith("config-")] == []


# ── rules that should fire ──────────────────────────────────────────────────────────────────────────


def test_required_param_missing_from_config(lab: Path, make_catalog: Any, tp: Any) -> None:
    catalog = make_catalog()
    recipe = catalog / "pytorch/image-classification/recipe.yaml"
    old = (
        'seed: {type: int, path: seed, doc: "Seeds weights, data order and the synthetic data.", '
        "group: optimizer, required: false"
    )
    text = recipe.read_text(encoding="utf-8")
    assert text.count(old) == 1
    recipe.write_text(text.replace(old, old.replace("required: false", "required: true")), encoding="utf-8")
    new(tp, "img", "pytorch/image-classification")
    write(lab, "experiments/img/config.yaml", "epochs: 2\n")
    code, data = report(tp, "img")
    found = [p for p in data["problems"] if p["rule"] == "config-required"]
    assert len(found) == 1 and "'seed'" in found[0]["message"] and "--set seed=" in found[0]["hint"]
    assert code == 1


LINT_CASES = [
    ("lint-hardcoded-gpus", "set -e\nexec torchrun --nproc_per_node 8 train.py\n", 2),
    ("lint-output-dir", "exec python train.py --output-dir ./checkpoints\n", 1),
    ("lint-output-dir", "mkdir -p /tmp/ckpt\n", 1),
    ("lint-exec", 'cd "$TUNEPLANE_EXP_DIR"\npython train.py --output_dir "$TUNEPLANE_OUT_DIR"\n', 2),
]


@pytest.mark.parametrize("rule,script,line", LINT_CASES, ids=["gpus", "relative-out", "tmp-out", "no-exec"])
def test_lint_warnings_point_at_the_line(lab: Path, tp: Any, rule: str, script: str, line: int) -> None:
    new(tp, "byo", "custom/custom")
    write(lab, "experiments/byo/train.sh", script)
    code, data = report(tp, "byo")
    found = [p for p in data["problems"] if p["rule"] == rule]
    places = [(p["file"], p["line"], p["severity"]) for p in found]
    assert places == [("experiments/byo/train.sh", line, "warning")]
    assert code == 0


def test_lint_passing_example_is_quiet(lab: Path, tp: Any) -> None:
    new(tp, "byo", "custom/custom")
    write(
        lab,
        "experiments/byo/train.sh",
        "#!/usr/bin/env bash\nset -euo pipefail\n"
        'exec torchrun --nproc_per_node "${TUNEPLANE_CLUSTER_PROCS_PER_NODE}" '
        '"${TUNEPLANE_EXP_DIR}/train.py" '
        '--output-dir "${TUNEPLANE_OUT_DIR}"\n',
    )
    write(lab, "experiments/byo/train.py", "from tuneplane.report import log\n")  # it reports its metrics
    assert report(tp, "byo")[1]["problems"] == []


def test_scaffold_warning_is_the_only_problem_of_a_fresh_custom_experiment(lab: Path, tp: Any) -> None:
    new(tp, "byo", "custom/custom")
    code, data = report(tp, "byo")
    assert [p["rule"] for p in data["problems"]] == ["lint-scaffold"]
    assert "no training command yet" in data["problems"][0]["message"]
    assert code == 0
    assert tp("validate", "byo", "--strict").code == 1


def test_unknown_experiment_suggests_a_name(lab: Path, tp: Any) -> None:
    new(tp, "sft-qwen", "custom/custom")
    code, data = report(tp, "sft-qwn")
    found = [p for p in data["problems"] if p["rule"] == "experiment-missing"]
    assert len(found) == 1 and "did you mean 'sft-qwen'" in found[0]["hint"]
    assert code == 1


def test_run_request_experiment_field_must_match_its_directory(lab: Path, tp: Any) -> None:
    new(tp, "img", "pytorch/image-classification")
    new(tp, "other", "pytorch/image-classification")
    write(
        lab,
        f"runs/img/{RUN_ID}.yaml",
        f"apiVersion: tuneplane/run/v1\nkind: RunRequest\nexperiment: other\nrun_id: {RUN_ID}\nprofile: h200\n",
    )
    code, data = report(tp)
    found = [p for p in data["problems"] if p["file"] == f"runs/img/{RUN_ID}.yaml"]
    assert [(p["line"], p["rule"]) for p in found] == [(3, "run-schema")]
    assert code == 1


def test_library_result_is_sorted_and_without_duplicates(lab: Path, tp: Any) -> None:
    new(tp, "img", "pytorch/image-classification")
    write(lab, "experiments/img/config.yaml", "seed: -1\nepochs: 0\n")
    problems = validate(load_lab(lab), ["img", "img"])
    assert problems == sorted(set(problems))
    assert all(isinstance(p, Problem) for p in problems)
    assert [(p.line, p.rule) for p in problems if p.severity is Severity.ERROR] == [
        (1, "config-range"),
        (2, "config-range"),
    ]


# ── StarForge ───────────────────────────────────────────────────────────────────────────────────────


def test_starforge_lab_is_recognised_and_explained(shared_dir: Path, tmp_path: Path, tp_subprocess: Any) -> None:
    root = tmp_path / "starforge-lab"
    shutil.copytree(shared_dir / "fixtures" / "starforge-lab", root)
    result = tp_subprocess("validate", "--format", "json", cwd=root)
    assert "Traceback" not in result.output
    data = json.loads(result.out)
    rules = {(p["file"], p["rule"], p["severity"]) for p in data["problems"]}
    assert ("starforge.yaml", "starforge-lab", "error") in rules
    assert any("tp migrate" in p["hint"] for p in data["problems"] if p["rule"] == "starforge-lab")
    legacy = [p for p in data["problems"] if p["rule"] == "lock-legacy"]
    assert sorted(p["file"] for p in legacy) == sorted(
        f"experiments/{d.name}/recipe.lock.json" for d in (root / "experiments").iterdir()
    )
    assert all(p["severity"] == "warning" and p["line"] == 2 for p in legacy)
    assert not [p for p in data["problems"] if p["rule"] == "lock-tampered"]  # legacy digests verify
    assert result.code == 1


def test_starforge_lab_text_output_names_the_fix(shared_dir: Path, tmp_path: Path, tp_subprocess: Any) -> None:
    root = tmp_path / "starforge-lab"
    shutil.copytree(shared_dir / "fixtures" / "starforge-lab", root)
    result = tp_subprocess("validate", cwd=root / "experiments")
    assert "Traceback" not in result.output
    assert "StarForge" in result.out and "tp migrate" in result.out
