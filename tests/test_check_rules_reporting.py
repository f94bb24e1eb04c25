"""`lint-no-metrics`: a training entrypoint of the experiment's own with no way for its metrics to
reach the run (no tuneplane.report, no TunePlaneCallback, no declared native output)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from conftest import write_tree

LAUNCH = 'exec python "${TUNEPLANE_EXP_DIR}/train.py" --output-dir "${TUNEPLANE_OUT_DIR}"\n'
PRINTS_ONLY = 'for step in range(3):\n    print(f"loss={1 / (step + 1)}")\n'
# a trl/grpo train.py of the kind a StarForge lab carries: its own argparse, no callback
OWN_GRPO = '''"""GRPO on a toy task. Metrics: see tuneplane.report (not wired yet)."""
import argparse

from trl import GRPOConfig, GRPOTrainer

parser = argparse.ArgumentParser()
parser.add_argument("--output-dir")
args = parser.parse_args()
# trainer = GRPOTrainer(..., callbacks=[TunePlaneCallback()])
trainer = GRPOTrainer(model="m", args=GRPOConfig(output_dir=args.output_dir), reward_funcs=[len])
trainer.train()
'''


def _custom(lab: Path, tp: Any, files: dict[str, str]) -> list[dict[str, Any]]:
    assert tp("new", "byo", "--method", "custom/custom").code == 0
    train = lab / "experiments/byo/train.sh"
    head = train.read_text(encoding="utf-8").splitlines(keepends=True)[:-1]
    write_tree(lab, {"experiments/byo/train.sh": "".join(head) + LAUNCH, **files})
    return _found(tp, "byo")


def _found(tp: Any, experiment: str) -> list[dict[str, Any]]:
    result = tp("validate", experiment, "--format", "json")
    assert "Traceback" not in result.output, result.output
    return [p for p in json.loads(result.out)["problems"] if p["rule"] == "lint-no-metrics"]


def test_a_trainer_that_only_prints_is_warned_at_its_launch_line(lab: Path, tp: Any) -> None:
    found = _custom(lab, tp, {"experiments/byo/train.py": PRINTS_ONLY})
    assert [(p["file"], p["line"], p["col"], p["severity"]) for p in found] == [
        ("experiments/byo/train.sh", 38, 1, "warning")
    ]
    assert "reports no metrics" in found[0]["message"] and "TunePlaneCallback" in found[0]["hint"]
    assert "metrics.native" in found[0]["hint"]


@pytest.mark.parametrize(
    "files",
    [
        {"experiments/byo/train.py": "from tuneplane.report import init, log\n"},
        {"experiments/byo/train.py": "import tuneplane.report as tpr\n"},
        {"experiments/byo/lib/cb.py": "from tuneplane import report\n"},
        {"experiments/byo/train.py": "callbacks = [TunePlaneCallback()]\n"},
        {
            "experiments/byo/experiment.yaml": "apiVersion: tuneplane/experiment/v1\n"
            "metrics:\n  native: [{format: jsonl, path: logs/metrics.jsonl}]\n"
        },
    ],
    ids=["sdk", "sdk-module", "elsewhere-in-the-experiment", "callback", "native-declared"],
)
def test_any_way_of_reporting_is_enough(lab: Path, tp: Any, files: dict[str, str]) -> None:
    assert _custom(lab, tp, files) == []


def test_the_shared_code_counts(lab: Path, tp: Any) -> None:
    settings = lab / "tuneplane.yaml"
    settings.write_text(settings.read_text(encoding="utf-8") + "shared_code: [common]\n", encoding="utf-8")
    assert _custom(lab, tp, {"common/reporting.py": "from tuneplane.report import log\n"}) == []


def test_a_mention_in_prose_is_not_reporting(lab: Path, tp: Any) -> None:
    files = {"experiments/byo/train.py": '"""Reports through tuneplane.report."""\n# TunePlaneCallback later\n'}
    assert len(_custom(lab, tp, files)) == 1


def test_the_scaffold_is_left_to_lint_scaffold(lab: Path, tp: Any) -> None:
    assert tp("new", "byo", "--method", "custom/custom").code == 0
    assert _found(tp, "byo") == []


def test_a_catalog_templates_own_train_py_is_checked_too(lab: Path, tp: Any) -> None:
    assert tp("new", "grpo", "--method", "trl/grpo").code == 0
    assert _found(tp, "grpo") == []  # the template reports through the platform's TRL helper
    write_tree(lab, {"experiments/grpo/train.py": OWN_GRPO})
    found = _found(tp, "grpo")
    assert [(p["file"], p["line"]) for p in found] == [("experiments/grpo/train.py", 1)]


def test_a_platform_module_entrypoint_is_not_checked(lab: Path, tp: Any) -> None:
    assert tp("new", "sft", "--method", "verl/sft").code == 0
    assert _found(tp, "sft") == []
