"""bench/report.py's step-loop verdict: a slowdown is claimed only when its interval clears the noise."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

BENCH = Path(__file__).resolve().parents[1] / "bench" / "report.py"


@pytest.fixture(scope="module")
def bench() -> ModuleType:
    spec = importlib.util.spec_from_file_location("bench_report", BENCH)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def steps(ci: tuple[float, float], noise: tuple[float, float]) -> dict[str, Any]:
    return {"ci_pct": list(ci), "noise_pct": list(noise)}


def test_an_interval_inside_the_noise_is_within_noise(bench: ModuleType) -> None:
    assert bench.step_verdict(steps((-0.8, 1.1), (-1.5, 1.4))).startswith("within noise")


def test_an_interval_above_zero_and_the_noise_is_a_slowdown(bench: ModuleType) -> None:
    assert bench.step_verdict(steps((2.5, 4.0), (-1.0, 1.2))) == "slower, by 2.5% at least"


def test_an_interval_above_zero_but_inside_the_noise_is_not_a_slowdown(bench: ModuleType) -> None:
    assert bench.step_verdict(steps((0.4, 1.0), (-1.0, 1.2))).startswith("within noise")


def test_a_wide_interval_says_it_cannot_tell(bench: ModuleType) -> None:
    verdict = bench.step_verdict(steps((-0.5, 6.0), (-1.0, 1.0)))
    assert verdict.startswith("cannot tell") and "--steps" in verdict


def test_an_interval_above_zero_reaching_into_the_noise_cannot_tell(bench: ModuleType) -> None:
    verdict = bench.step_verdict(steps((0.9, 10.0), (-4.3, 3.3)))
    assert verdict.startswith("cannot tell") and "overlaps the noise" in verdict


def test_the_runner_is_valid_python(bench: ModuleType) -> None:
    compile(bench.RUNNER, "runner", "exec")  # the child's code, including the ABBA rounds
