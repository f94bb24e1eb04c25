"""Rule `metrics-native-off`: a verl experiment whose own `trainer.logger` leaves out TensorBoard is told
that its metrics will never reach the platform (verl writes TensorBoard events only when the list has
`tensorboard`, and the platform's metrics of a verl run come from those files)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from conftest import REPO_ROOT

VERL_PLATFORM = sorted(
    f"verl/{p.parent.name}"
    for p in (REPO_ROOT / "catalog" / "verl").glob("*/recipe.yaml")
    if "format: tensorboard" in p.read_text(encoding="utf-8")
)


def _native_off(lab: Path, tp: Any) -> list[dict[str, Any]]:
    result = tp("validate", "exp", "--format", "json", cwd=lab)
    assert "Traceback" not in result.output, result.output
    return [p for p in json.loads(result.out)["problems"] if p["rule"] == "metrics-native-off"]


def _logger_line(lab: Path) -> tuple[Path, list[str], int]:
    path = lab / "experiments" / "exp" / "config.yaml"
    lines = path.read_text(encoding="utf-8").splitlines()
    return path, lines, next(i for i, line in enumerate(lines) if line.strip().startswith("logger:"))


def test_every_verl_recipe_that_reads_tensorboard_is_covered() -> None:
    assert VERL_PLATFORM, "no verl recipe declares TensorBoard native outputs"


@pytest.mark.parametrize("method", VERL_PLATFORM)
def test_the_scaffold_logs_to_tensorboard(lab: Path, tp: Any, method: str) -> None:
    assert tp("new", "exp", "--method", method, cwd=lab).code == 0
    assert _native_off(lab, tp) == []


@pytest.mark.parametrize("value", ["[console, wandb]", "console", "[]"])
def test_a_logger_list_without_tensorboard_is_a_warning_at_its_line(lab: Path, tp: Any, value: str) -> None:
    assert tp("new", "exp", "--method", "verl/grpo", cwd=lab).code == 0
    path, lines, index = _logger_line(lab)
    lines[index] = lines[index].split("logger:")[0] + f"logger: {value}"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    (problem,) = _native_off(lab, tp)
    assert problem["severity"] == "warning" and problem["line"] == index + 1, problem
    assert "trainer.logger has no 'tensorboard'" in problem["message"]
    assert "tp job metrics" in problem["message"] and "tensorboard" in problem["hint"]
    assert tp("validate", "exp", cwd=lab).code == 0  # a warning: the run may still go


def test_tensorboard_in_any_case_and_place_is_fine(lab: Path, tp: Any) -> None:
    assert tp("new", "exp", "--method", "verl/grpo", cwd=lab).code == 0
    path, lines, index = _logger_line(lab)
    lines[index] = lines[index].split("logger:")[0] + "logger: [wandb, TensorBoard, console]"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    assert _native_off(lab, tp) == []


def test_other_frameworks_are_not_asked(lab: Path, tp: Any) -> None:
    assert tp("new", "exp", "--method", "trl/sft", cwd=lab).code == 0
    assert _native_off(lab, tp) == []
