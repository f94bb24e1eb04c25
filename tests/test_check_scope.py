"""What `tp validate ARGS` covers: experiment names and lab files, and a clear word for a path that is not there."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest


@pytest.mark.parametrize(
    ("arg", "says"),
    [
        ("experiments/dmo", "no experiment named 'dmo'"),
        ("experiments/dmo/", "no experiment named 'dmo'"),
        ("experiments/dmo/config.yaml", "no experiment named 'dmo'"),
    ],
)
def test_a_missing_path_under_an_experiment_root_names_the_experiment(
    demo_lab: Path, tp: Callable[..., object], arg: str, says: str
) -> None:
    result = tp("validate", arg)
    assert result.code == 1, result.output  # type: ignore[attr-defined]
    assert f"experiments/dmo: error [experiment-missing] {says}" in result.output  # type: ignore[attr-defined]
    assert "did you mean 'demo'?" in result.output  # type: ignore[attr-defined]
    assert "is not allowed" not in result.output  # type: ignore[attr-defined]


@pytest.mark.parametrize("arg", ["runs/demo/20260101-000000-abcdef.yaml", "nope/x", "plugins/none/plugin.yaml"])
def test_any_other_missing_path_is_a_usage_error(demo_lab: Path, tp: Callable[..., object], arg: str) -> None:
    result = tp("validate", arg)
    assert result.code == 2  # type: ignore[attr-defined]
    assert f"{arg}: no such file or experiment" in result.output  # type: ignore[attr-defined]
    assert "Traceback" not in result.output  # type: ignore[attr-defined]


def test_names_and_present_paths_still_validate(demo_lab: Path, tp: Callable[..., object]) -> None:
    for arg in ("demo", "experiments/demo", "experiments/demo/", "experiments/demo/config.yaml"):
        result = tp("validate", arg)
        assert result.code == 0, (arg, result.output)  # type: ignore[attr-defined]
        assert "1 experiment(s)" in result.output  # type: ignore[attr-defined]


def test_a_name_that_is_also_a_folder_of_the_lab_root_names_the_experiment(
    lab: Path, tp: Callable[..., object], git: Callable[..., str]
) -> None:
    """`tp new plugins` says "next: tp validate plugins"; run from the lab root, where `plugins/` is
    a folder of the lab too, the name is the experiment's."""
    assert tp("new", "plugins", "--method", "custom/custom").code == 0  # type: ignore[attr-defined]
    git(lab, "add", "-A")
    git(lab, "commit", "-q", "-m", "plugins")
    assert (lab / "plugins").is_dir()
    result = tp("validate", "plugins")
    assert result.code == 0, result.output  # type: ignore[attr-defined]
    assert "1 experiment(s)" in result.output  # type: ignore[attr-defined]


def test_a_changed_sweep_file_checks_its_experiment_and_its_sweeps(demo_lab: Path) -> None:
    """`tp validate --changed` with only `sweeps/<name>.yaml` changed: its experiment is in scope, so
    the sweep rules see the sweep."""
    from tuneplane.check.scope import scope_for_paths
    from tuneplane.lab.load import load_lab

    (demo_lab / "sweeps").mkdir()
    (demo_lab / "sweeps" / "lr.yaml").write_text("experiment: demo\nprofile: local\n", encoding="utf-8")
    (demo_lab / "sweeps" / "broken.yaml").write_text("experiment: [\n", encoding="utf-8")
    lab = load_lab(demo_lab)

    assert scope_for_paths(lab, ["sweeps/lr.yaml"]).experiments == {"demo"}
    assert scope_for_paths(lab, ["sweeps/broken.yaml", "sweeps/gone.yaml"]).experiments == set()
