"""experiment.yaml: an experiment declares native metric outputs of its own, merged with its recipe's.

The end-to-end case is a custom trainer that writes TensorBoard events (the real `SummaryWriter`)
to a directory only its experiment.yaml names; `tp submit --local` must chart them.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from support.labs import new_lab
from support.repos import git

from tuneplane.models.experiment import ExperimentManifest
from tuneplane.models.recipe import NativeOutput, merge_native

TB_TRAIN_PY = """
import os
import time
from torch.utils.tensorboard import SummaryWriter

writer = SummaryWriter(os.path.join(os.environ["TUNEPLANE_OUT_DIR"], "mine", "tb"))
start = time.time()
for step in range(8):
    writer.add_scalar("train/loss", 1.0 / (step + 1), step)
    writer.add_scalar("train/lr", 0.1, step)
    writer.add_scalar("hw/cpu_util", float(step % 3), step, walltime=start + 30 * step)  # a sample per 30 s
writer.close()
print("wrote 8 steps", flush=True)
"""
TRAIN_SH = '#!/usr/bin/env bash\nset -euo pipefail\nexec python "${TUNEPLANE_EXP_DIR}/train.py"\n'
EXPERIMENT_YAML = """apiVersion: tuneplane/experiment/v1
metrics:
  native:
    - {format: tensorboard, path: mine/tb}
"""
SUBMIT = ("--profile", "local", "--image", "python:3.12", "--observability-url", "https://track.example.org/p")


def _out(fmt: str, path: str, **kw: str) -> NativeOutput:
    return NativeOutput.model_validate({"format": fmt, "path": path, **kw})


def test_the_experiment_extends_the_recipe_and_wins_on_the_same_path() -> None:
    recipe = [_out("tensorboard", "logs/tb"), _out("jsonl", "logs/m.jsonl", key="name")]
    experiment = [_out("jsonl", "./logs/m.jsonl/", values="data"), _out("tensorboard", "mine")]
    merged = merge_native(recipe, experiment)
    assert [(o.format, o.path, o.key, o.values) for o in merged] == [
        ("tensorboard", "logs/tb", None, None),
        ("jsonl", "./logs/m.jsonl/", None, "data"),  # the experiment's entry replaced the recipe's
        ("tensorboard", "mine", None, None),
    ]
    assert merge_native(recipe, []) == recipe and merge_native([], experiment) == experiment


@pytest.mark.parametrize("path", ["../up", "logs/../../up", "/abs/tb", "~/tb", "a\\..\\b"])
def test_a_path_outside_the_out_dir_is_refused_at_its_line(tmp_path: Path, tp, path: str) -> None:
    root = tmp_path / "lab"
    new_lab(root, "x")
    assert tp("new", "scr", "--method", "custom/custom", cwd=root).code == 0
    (root / "experiments/scr/experiment.yaml").write_text(
        "apiVersion: tuneplane/experiment/v1\nmetrics:\n  native:\n"
        f"    - format: tensorboard\n      path: {json.dumps(path)}\n"
    )
    result = tp("validate", "scr", cwd=root)
    assert result.code != 0
    assert "experiments/scr/experiment.yaml:5:" in result.output, result.output
    assert "must stay inside the out dir" in result.output


def test_a_newer_or_unknown_file_says_what_to_do(tmp_path: Path, tp) -> None:
    root = tmp_path / "lab"
    new_lab(root, "x")
    assert tp("new", "scr", "--method", "custom/custom", cwd=root).code == 0
    manifest = root / "experiments/scr/experiment.yaml"
    manifest.write_text("apiVersion: tuneplane/experiment/v9\n")
    result = tp("validate", "scr", cwd=root)
    assert result.code != 0 and "experiment.yaml:1:" in result.output
    assert "upgrade tp the way tool.requirement" in result.output
    manifest.write_text("apiVersion: tuneplane/experiment/v1\nmetrics:\n  nativ: []\n")
    result = tp("validate", "scr", cwd=root)
    assert result.code != 0 and "experiment.yaml:3:" in result.output and "native" in result.output


def test_the_merged_list_reaches_the_jobspec_and_the_job(tmp_path: Path) -> None:
    from support.render import INPUTS, build, make_lab, request, resolve_run

    from tuneplane.plan.environment import spec_to_env

    extra = (
        "apiVersion: tuneplane/experiment/v1\nmetrics:\n  native:\n"
        "    - {format: jsonl, path: logs/rewards.jsonl, key: name, step: it, value: val}\n"
        "    - {format: tensorboard, path: logs/tensorboard, prefix: verl/}\n"
    )
    lab = make_lab(
        tmp_path / "lab",
        {"verl-grpo-exp": "verl/grpo", "plain": "verl/grpo"},
        files={"experiments/verl-grpo-exp/experiment.yaml": extra},
    )
    spec = resolve_run(lab, request("verl-grpo-exp"))
    declared = spec.spec.recipe.adapter.native_metrics
    assert [(d["format"], d["path"], d["prefix"]) for d in declared] == [
        ("jsonl", "logs/rewards.jsonl", ""),
        ("tensorboard", "logs/tensorboard", "verl/"),
    ]
    env = spec_to_env(spec)
    assert json.loads(env["TUNEPLANE_METRICS_NATIVE"]) == declared  # what every backend's collector reads
    _, _, manifests = build(lab, request("verl-grpo-exp"))  # the cluster's pods get the same list
    found = [e["value"] for m in manifests for e in _container_env(m) if e.get("name") == "TUNEPLANE_METRICS_NATIVE"]
    assert found and all(json.loads(v) == declared for v in found)
    plain = resolve_run(lab, request("plain", inputs=dict(INPUTS)))
    assert plain.spec.recipe.adapter.native_metrics == [
        {"format": "tensorboard", "path": "logs/tensorboard", "prefix": "", "step": "step", "value": "value"}
    ]


def _container_env(node: object) -> list[dict[str, str]]:
    """Every `env` list entry of every container anywhere in a manifest."""
    out: list[dict[str, str]] = []
    if isinstance(node, dict):
        if isinstance(node.get("env"), list) and "image" in node:
            out += [e for e in node["env"] if isinstance(e, dict)]
        for value in node.values():
            out += _container_env(value)
    elif isinstance(node, list):
        for value in node:
            out += _container_env(value)
    return out


def test_tensorboard_events_only_the_experiment_declares_are_charted(tmp_path: Path, tp, tp_subprocess) -> None:
    pytest.importorskip("torch.utils.tensorboard", reason="torch with tensorboard writes the events")
    root = tmp_path / "lab"
    new_lab(root, "tb")
    assert tp("new", "scr", "--method", "custom/custom", cwd=root).code == 0
    exp = root / "experiments/scr"
    (exp / "train.py").write_text(TB_TRAIN_PY)
    (exp / "train.sh").write_text(TRAIN_SH)
    (exp / "experiment.yaml").write_text(EXPERIMENT_YAML)
    assert ExperimentManifest.model_validate({"apiVersion": "tuneplane/experiment/v1"}).metrics.native == []
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "a script that writes TensorBoard events")
    env = {k: v for k, v in os.environ.items() if k != "TUNEPLANE_METRICS_NATIVE"}
    result = tp_subprocess("submit", "scr", *SUBMIT, "--local", cwd=root, env=env)
    assert result.code == 0, result.output
    [status_path] = (root / "status/scr").glob("*.json")
    status = json.loads(status_path.read_text())
    assert status["phase"] == "Succeeded", status
    assert status["metrics"]["train/loss"] == pytest.approx(1 / 8)
    assert len(status["metric_history"]["train/loss"]) == 8
    shown = tp_subprocess("job", "metrics", status_path.stem, cwd=root)
    assert shown.code == 0, shown.output
    first = shown.out.splitlines()[1].split()
    assert first[:2] == ["train/loss", "0.125"] and first[4] == "8"  # primary first, every step once
    svg = (root / f"status/scr/{status_path.stem}.svg").read_text()
    assert "train/loss" in svg and "train/lr = 0.1" in svg
    assert "hw/cpu_util (wall time)" in svg  # the event's wall time reached the store and the chart
    assert ">1m<" in svg and ">3m<" in svg  # 210 s of samples, ticked on whole minutes


# torch.utils.tensorboard's own documentation names scalars `Loss/train`, `Loss/test`, `Accuracy/test`.
TUTORIAL_TRAIN_PY = """
import os
from torch.utils.tensorboard import SummaryWriter

writer = SummaryWriter(os.path.join(os.environ["TUNEPLANE_OUT_DIR"], "mine", "tb"))
for n_iter in range(6):
    writer.add_scalar("Loss/train", 1.0 / (n_iter + 1), n_iter)
    writer.add_scalar("Loss/test", 2.0 / (n_iter + 1), n_iter)
    writer.add_scalar("Accuracy/train", n_iter / 10, n_iter)
    writer.add_scalar("Accuracy/test", n_iter / 20, n_iter)
writer.close()
"""


def test_a_script_naming_scalars_as_pytorchs_tensorboard_docs_do_shows_canonical_names(
    tmp_path: Path, tp, tp_subprocess
) -> None:
    """The must-show run of a script writing TensorBoard events, named the way torch's SummaryWriter
    documentation names them (`Loss/train`, `Loss/test`): the status, `tp job metrics` and the
    committed chart show `train/loss` and `validation/loss` first; the tag as written still answers."""
    import xml.etree.ElementTree as ET

    pytest.importorskip("torch.utils.tensorboard", reason="torch with tensorboard writes the events")
    root = tmp_path / "lab"
    new_lab(root, "tb")
    assert tp("new", "scr", "--method", "custom/custom", cwd=root).code == 0
    exp = root / "experiments/scr"
    (exp / "train.py").write_text(TUTORIAL_TRAIN_PY)
    (exp / "train.sh").write_text(TRAIN_SH)
    (exp / "experiment.yaml").write_text(EXPERIMENT_YAML)
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "the tutorial's script")
    env = {k: v for k, v in os.environ.items() if k != "TUNEPLANE_METRICS_NATIVE"}
    result = tp_subprocess("submit", "scr", *SUBMIT, "--local", cwd=root, env=env)
    assert result.code == 0, result.output
    [status_path] = (root / "status/scr").glob("*.json")
    run_id = status_path.stem
    status = json.loads(status_path.read_text())
    assert set(status["metrics"]) == {"train/loss", "validation/loss", "train/accuracy", "validation/accuracy"}
    shown = tp_subprocess("job", "metrics", run_id, cwd=root)
    assert shown.code == 0, shown.output
    keys = [line.split()[0] for line in shown.out.splitlines()[1:]]
    assert keys == ["train/loss", "validation/loss", "train/accuracy", "validation/accuracy"], keys
    raw = tp_subprocess("job", "metrics", run_id, "--key", "Loss/train", cwd=root)
    assert raw.code == 0 and raw.out.splitlines()[1].split()[:2] == ["Loss/train", "0.1667"], raw.output
    svg = git(root, "show", f"HEAD:status/scr/{run_id}.svg")
    titles = [
        "".join(t.itertext())
        for t in ET.fromstring(svg).iter("{http://www.w3.org/2000/svg}text")
        if t.get("font-weight") == "bold"
    ]
    assert titles == ["train/loss", "validation/loss", "train/accuracy"], titles  # the bot commits 3 panels
