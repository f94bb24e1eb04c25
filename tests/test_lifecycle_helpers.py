"""The TRL and verl helpers the catalog templates call: config, overrides, checkpoints, exports."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tuneplane.lifecycle import trl_support, verl_export

ROOT = Path(__file__).resolve().parents[1]
# template scripts run in place: leave no __pycache__ in the catalog
NO_PYC = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}


def test_config_and_overrides(tmp_path):
    config = tmp_path / "config.yaml"
    config.write_text("learning_rate: 1.0e-5\nmodel_name_or_path: ''\n")
    loaded = trl_support.load_config(config)
    trl_support.apply_overrides(loaded, {"learning_rate": 2e-5, "peft.r": 16})
    assert loaded == {"learning_rate": 2e-5, "model_name_or_path": "", "peft": {"r": 16}}
    (tmp_path / "o.json").write_text(json.dumps({"a": 1}))
    assert trl_support.read_overrides("@" + str(tmp_path / "o.json")) == {"a": 1}
    assert trl_support.read_overrides('{"b": true}') == {"b": True}
    assert trl_support.read_overrides(None) == {}


@pytest.mark.parametrize("text, error", [("[1]", "JSON object"), ("", None)])
def test_overrides_must_be_an_object(text, error):
    if error is None:
        assert trl_support.read_overrides(text) == {}
        return
    with pytest.raises(SystemExit, match=error):
        trl_support.read_overrides(text)


def test_an_override_below_a_scalar_is_refused():
    with pytest.raises(SystemExit, match="'lr' is not a mapping"):
        trl_support.apply_overrides({"lr": 1}, {"lr.x": 2})


def test_an_empty_or_non_mapping_config(tmp_path):
    empty = tmp_path / "empty.yaml"
    empty.write_text("")
    assert trl_support.load_config(empty) == {}
    listed = tmp_path / "list.yaml"
    listed.write_text("- a\n")
    with pytest.raises(SystemExit, match="must be a mapping"):
        trl_support.load_config(listed)


def test_output_dir_falls_back_to_the_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("TUNEPLANE_OUT_DIR", str(tmp_path / "out"))
    assert trl_support.output_dir(None) == (tmp_path / "out").resolve()
    assert trl_support.output_dir(str(tmp_path / "x")) == (tmp_path / "x").resolve()


def test_checkpoints_final_first_then_the_highest_step(tmp_path):
    with pytest.raises(SystemExit, match="no checkpoint"):
        trl_support.latest_checkpoint(tmp_path)
    for name in ("checkpoint-9", "checkpoint-10", "checkpoint-x"):
        (tmp_path / name).mkdir()
    assert trl_support.latest_checkpoint(tmp_path).name == "checkpoint-10"
    (tmp_path / "final").mkdir()
    assert trl_support.latest_checkpoint(tmp_path).name == "final"


def test_verl_picks_the_newest_step_and_the_actor_shards(tmp_path):
    with pytest.raises(SystemExit, match="no global_step"):
        verl_export.newest_step(tmp_path)
    for n in (5, 40, 100):
        (tmp_path / f"global_step_{n}").mkdir()
    newest = verl_export.newest_step(tmp_path)
    assert newest.name == "global_step_100" and verl_export.shard_folder(newest) == newest
    (newest / "actor").mkdir()
    assert verl_export.shard_folder(newest) == newest / "actor"


def test_a_failed_verl_merge_leaves_no_export(tmp_path):
    """The merger writes to hf_export.partial; a failure must not replace a good hf_export."""
    (tmp_path / "checkpoints" / "global_step_1").mkdir(parents=True)
    (tmp_path / "hf_export").mkdir()
    (tmp_path / "hf_export" / "keep").write_text("good")
    result = subprocess.run(
        [sys.executable, "-m", "tuneplane.lifecycle.verl_export", "--output-dir", str(tmp_path)],
        capture_output=True,
        text=True,
    )  # verl is not installed: the merger fails
    assert result.returncode != 0
    assert (tmp_path / "hf_export" / "keep").read_text() == "good"


TEMPLATES = sorted(ROOT.glob("catalog/*/*/template/export.py"))


@pytest.mark.parametrize(
    "script", [p for p in TEMPLATES if p.parts[-4] in ("trl", "verl")], ids=lambda p: "/".join(p.parts[-4:-2])
)
def test_template_exports_are_fronts_to_the_shared_code(script):
    result = subprocess.run(
        [sys.executable, str(script), "--help"], capture_output=True, text=True, cwd=script.parent, env=NO_PYC
    )
    assert result.returncode == 0 and "--checkpoint" in result.stdout and "--output-dir" in result.stdout
