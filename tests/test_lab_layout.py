"""Labs as people lay them out: several experiment roots, shared code, data sets, grouped plugins.

`tuneplane.yaml` names the experiment roots (`smoke/` beside `experiments/`), the lab-level code that
ships with every job (`common/`, importable as `common` on every backend), and named data sets (a
path on the lab's storage, or a volume of their own) that every backend mounts and names in
`<NAME>_DATA_DIR`. Checked through the CLI: `tp validate`, `tp submit --local` (a real job) and `tp
render` (the Kubernetes manifests).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
import yaml
from conftest import write_tree
from support.repos import git

LAYOUT = """
experiment_roots: [experiments, smoke]
shared_code: [common]
datasets:
  alpaca: {{path: datasets/alpaca}}
  image-net: {{volume: imagenet-ro, local_path: {imagenet}}}
"""

PROBE_SH = """#!/usr/bin/env bash
set -euo pipefail
exec python "${TUNEPLANE_EXP_DIR}/probe.py"
"""
PROBE_PY = """import json, os
import common.helpers

keys = ["PYTHONPATH", "ALPACA_DATA_DIR", "IMAGE_NET_DATA_DIR", "HF_HOME", "TUNEPLANE_CLUSTER_PROFILE",
        "TUNEPLANE_EXP_DIR", "TUNEPLANE_WORK_DIR", "TUNEPLANE_RUN_DIR"]
seen = {k: os.environ.get(k) for k in keys}
seen["helper"] = common.helpers.VALUE
seen["alpaca_rows"] = open(os.path.join(os.environ["ALPACA_DATA_DIR"], "train.jsonl")).read().count("\\n")
with open(os.path.join(os.environ["TUNEPLANE_OUT_DIR"], "env.json"), "w") as fh:
    json.dump(seen, fh)
"""
CUSTOM = ("--image", "python:3.12", "--observability-url", "https://track.example.org/p")


def _add_settings(root: Path, text: str) -> None:
    path = root / "tuneplane.yaml"
    path.write_text(path.read_text(encoding="utf-8") + text, encoding="utf-8")


def _commit(root: Path) -> None:
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "layout")


def _move(root: Path, name: str, to_root: str) -> None:
    (root / to_root).mkdir(exist_ok=True)
    (root / "experiments" / name).rename(root / to_root / name)


@pytest.fixture()
def layout_lab(lab: Path, tmp_path: Path, tp: Any) -> Path:
    imagenet = tmp_path / "imagenet"
    imagenet.mkdir()
    _add_settings(lab, LAYOUT.format(imagenet=imagenet))
    assert tp("new", "smoke-probe", "--method", "custom/custom", cwd=lab).code == 0
    write_tree(lab / "experiments" / "smoke-probe", {"train.sh": PROBE_SH, "probe.py": PROBE_PY})
    _move(lab, "smoke-probe", "smoke")
    write_tree(lab, {"common/__init__.py": "", "common/helpers.py": "VALUE = 'shared'\n"})
    _commit(lab)
    return lab


def _problems(result: Any) -> list[dict[str, Any]]:
    assert "Traceback" not in result.output, result.output
    return list(json.loads(result.out)["problems"])


def test_experiments_under_every_root_are_validated_and_listed(layout_lab: Path, tp: Any) -> None:
    result = tp("validate", "--format", "json", cwd=layout_lab)
    assert [p for p in _problems(result) if p["severity"] == "error"] == []
    assert "smoke-probe" in tp("ls", cwd=layout_lab).out
    broken = layout_lab / "smoke" / "smoke-probe" / "recipe.lock.json"
    broken.write_text("{", encoding="utf-8")
    problems = _problems(tp("validate", "smoke-probe", "--format", "json", cwd=layout_lab))
    assert [p["file"] for p in problems if p["severity"] == "error"] == ["smoke/smoke-probe/recipe.lock.json"]


def test_one_experiment_name_in_two_roots_is_an_error(layout_lab: Path, tp: Any) -> None:
    assert tp("new", "twin", "--method", "custom/custom", cwd=layout_lab).code == 0
    assert tp("new", "twin2", "--method", "custom/custom", cwd=layout_lab).code == 0
    (layout_lab / "experiments" / "twin2").rename(layout_lab / "smoke" / "twin")
    result = tp("validate", "--format", "json", cwd=layout_lab)
    dup = [p for p in _problems(result) if p["rule"] == "experiment-duplicate"]
    assert dup and dup[0]["severity"] == "error" and "smoke/twin" in dup[0]["message"]
    assert "experiments/twin" in dup[0]["message"] and dup[0]["hint"]


@pytest.mark.parametrize(
    ("settings", "needle"),
    [
        ("shared_code: [lib]\n", "lib"),
        ("shared_code: [torch]\n", "torch"),
        ("shared_code: [../outside]\n", "outside"),
        ("experiment_roots: [experiments, ../elsewhere]\n", "elsewhere"),
        ("datasets:\n  alpaca: {path: a, volume: b}\n", "alpaca"),
        ("datasets:\n  alpaca: {path: ../../etc}\n", "alpaca"),
        ("datasets:\n  alpaca: {path: a}\n  ALPACA: {path: b}\n", "ALPACA_DATA_DIR"),
    ],
)
def test_bad_layout_settings_are_placed_errors(lab: Path, tp: Any, settings: str, needle: str) -> None:
    _add_settings(lab, settings)
    problems = _problems(tp("validate", "--format", "json", cwd=lab))
    errors = [p for p in problems if p["severity"] == "error"]
    assert errors, problems
    assert errors[0]["file"] == "tuneplane.yaml" and errors[0]["line"] > 1 and needle in errors[0]["message"]
    assert errors[0]["hint"]


def test_local_job_sees_shared_code_data_sets_cache_and_profile(
    layout_lab: Path, tp_subprocess: Any, tmp_path: Path
) -> None:
    storage = Path(os.environ["TUNEPLANE_STORAGE_ROOT"])
    write_tree(storage, {"datasets/alpaca/train.jsonl": "{}\n{}\n"})
    result = tp_subprocess("submit", "smoke-probe", "--profile", "local", *CUSTOM, "--local", cwd=layout_lab)
    assert result.code == 0, result.output
    [env_file] = storage.glob("runs/*/smoke-probe/*/out/env.json")
    seen = json.loads(env_file.read_text(encoding="utf-8"))
    assert seen["helper"] == "shared" and seen["alpaca_rows"] == 2
    assert seen["TUNEPLANE_WORK_DIR"] in seen["PYTHONPATH"].split(os.pathsep)
    assert seen["TUNEPLANE_EXP_DIR"] == f"{seen['TUNEPLANE_WORK_DIR']}/smoke/smoke-probe"
    assert seen["ALPACA_DATA_DIR"] == str(storage / "datasets" / "alpaca")
    assert seen["IMAGE_NET_DATA_DIR"] == str(tmp_path / "imagenet")
    assert seen["TUNEPLANE_CLUSTER_PROFILE"] == "local"
    assert seen["HF_HOME"] and not seen["HF_HOME"].startswith(seen["TUNEPLANE_RUN_DIR"])  # survives the run


def test_kubernetes_job_mounts_data_sets_and_puts_shared_code_on_the_path(layout_lab: Path, tp: Any) -> None:
    text = (layout_lab / "tuneplane.yaml").read_text(encoding="utf-8")
    text = text.replace("backend: local ", "backend: kubernetes ", 1)
    text = text.replace('url: ""  ', "url: 'https://git.example.com/ml/lab.git'", 1)
    (layout_lab / "tuneplane.yaml").write_text(text, encoding="utf-8")
    _commit(layout_lab)
    result = tp("render", "smoke-probe", "--profile", "h200:8", *CUSTOM, cwd=layout_lab)
    assert result.code == 0, result.output
    [job] = [d for d in yaml.safe_load_all(result.out) if d and d.get("kind") == "Job"]
    pod = job["spec"]["template"]["spec"]
    trainer = pod["containers"][0]
    env = {e["name"]: e.get("value") for e in trainer["env"]}
    work = env["TUNEPLANE_WORK_DIR"]
    assert work in env["PYTHONPATH"].split(":")
    assert env["TUNEPLANE_EXP_DIR"] == f"{work}/smoke/smoke-probe"
    assert env["ALPACA_DATA_DIR"] == "/mnt/tuneplane/datasets/alpaca"
    assert env["HF_HOME"] == "/mnt/tuneplane/cache/huggingface"
    assert env["TUNEPLANE_CLUSTER_PROFILE"] == "h200"
    mount = next(m for m in trainer["volumeMounts"] if m["mountPath"] == env["IMAGE_NET_DATA_DIR"])
    assert mount.get("readOnly") is True
    volume = next(v for v in pod["volumes"] if v["name"] == mount["name"])
    assert volume["persistentVolumeClaim"]["claimName"] == "imagenet-ro"


# ── plugins grouped in folders ───────────────────────────────────────────────────────────────────


def test_a_folder_of_plugins_is_not_a_broken_plugin(lab: Path, tp: Any) -> None:
    assert tp("plugin", "new", "opsd", "--dir", lab / "plugins" / "examples", cwd=lab).code == 0
    assert tp("plugin", "new", "tiny", cwd=lab).code == 0
    _commit(lab)
    result = tp("validate", "--format", "json", cwd=lab)
    assert [p for p in _problems(result) if p["severity"] == "error"] == []
    assert tp("new", "sft", "--method", "trl/sft", cwd=lab).code == 0
    locked = tp("plugin", "lock", "sft", "alice/opsd", cwd=lab)
    assert locked.code == 0, locked.output
    _commit(lab)
    result = tp("validate", "--format", "json", cwd=lab)
    assert [p for p in _problems(result) if p["severity"] == "error"] == []
    (lab / "plugins" / "examples" / "opsd" / "extra.py").write_text("X = 1\n", encoding="utf-8")
    tampered = _problems(tp("validate", "sft", "--format", "json", cwd=lab))
    assert [p["rule"] for p in tampered if p["severity"] == "error"] == ["plugins-lock-digest"]


def test_two_plugins_of_one_name_in_different_folders_are_an_error(lab: Path, tp: Any) -> None:
    assert tp("plugin", "new", "opsd", "--dir", lab / "plugins" / "examples", cwd=lab).code == 0
    assert tp("plugin", "new", "opsd", "--dir", lab / "plugins" / "team", cwd=lab).code == 0
    problems = _problems(tp("validate", "--format", "json", cwd=lab))
    dup = [p for p in problems if p["rule"] == "plugin-duplicate"]
    assert dup and "plugins/examples/opsd" in dup[0]["message"] and "plugins/team/opsd" in dup[0]["message"]


def test_changed_files_in_any_root_or_shared_code_pick_the_right_experiments(layout_lab: Path, tp: Any) -> None:
    assert tp("new", "other", "--method", "custom/custom", cwd=layout_lab).code == 0
    _commit(layout_lab)
    (layout_lab / "smoke" / "smoke-probe" / "recipe.lock.json").write_text("{", encoding="utf-8")
    named = _problems(tp("validate", "smoke/smoke-probe/train.sh", "--format", "json", cwd=layout_lab))
    assert {p["file"] for p in named if p["severity"] == "error"} == {"smoke/smoke-probe/recipe.lock.json"}
    _commit(layout_lab)
    (layout_lab / "common" / "helpers.py").write_text("VALUE = 'changed'\n", encoding="utf-8")
    _commit(layout_lab)
    changed = tp("validate", "--changed", "--base", "HEAD~1", "--format", "json", cwd=layout_lab)
    assert json.loads(changed.out)["problems"] and "smoke/smoke-probe/recipe.lock.json" in changed.out


def test_the_experiment_index_holds_folders_and_links_to_folders_in_order_and_nothing_else(tmp_path: Path) -> None:
    from tuneplane.lab.layout import experiment_index
    from tuneplane.models.lab import LAB_API, LabFile

    write_tree(tmp_path, {"experiments/b/train.sh": "", "experiments/a/train.sh": "", "experiments/notes.md": ""})
    write_tree(tmp_path, {"experiments/.hidden/train.sh": "", "smoke/b/train.sh": "", "elsewhere/c/train.sh": ""})
    (tmp_path / "experiments" / "c").symlink_to(tmp_path / "elsewhere" / "c")
    (tmp_path / "experiments" / "gone").symlink_to(tmp_path / "nowhere")
    (tmp_path / "experiments" / "self").symlink_to("self")  # an entry that loops: skipped as well
    (tmp_path / "file-root").write_text("")
    (tmp_path / "loop").symlink_to("loop")  # a root that is a link to itself: skipped, never an OSError
    roots = ["experiments/", "smoke", "missing", "file-root", "loop"]
    settings = LabFile.model_validate({"apiVersion": LAB_API, "name": "lab", "experiment_roots": roots})

    index = experiment_index(tmp_path, settings)

    assert list(index) == ["a", "b", "c"]
    assert index == {"a": ["experiments/a"], "b": ["experiments/b", "smoke/b"], "c": ["experiments/c"]}
