"""The pytorch/image-classification template trains for real, alone and under torchrun.

train.py runs as a subprocess on CPU against its own config.yaml with small overrides, the way the
platform starts it (`--config --output-dir --overrides-json`); the tests read back the checkpoints
and the metrics it wrote. The config parser it falls back on without PyYAML is checked against
PyYAML on the shipped config.
"""

from __future__ import annotations

import importlib.util
import json
import math
import os
import subprocess
import sys
from importlib.util import find_spec
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import yaml

# torch is imported by the one test that reads a checkpoint: importing it here would cost every test
# process that collects this module (the fast lane too) a couple of CPU seconds
pytestmark = pytest.mark.skipif(find_spec("torch") is None, reason="torch is not installed")

TEMPLATE = Path(__file__).resolve().parents[1] / "catalog" / "pytorch" / "image-classification" / "template"
TRAIN = TEMPLATE / "train.py"
CONFIG = TEMPLATE / "config.yaml"
# Small enough for a couple of seconds on one CPU core, large enough that learning shows.
SMALL = {"synthetic_train_samples": 512, "synthetic_val_samples": 256, "batch_size": 32, "log_interval": 4}


def run_env() -> dict[str, str]:
    """No ingest credentials (the SDK stays silent), no bytecode in the catalog, one thread."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("TUNEPLANE_")}
    env.update({"PYTHONDONTWRITEBYTECODE": "1", "OMP_NUM_THREADS": "1"})
    return env


def train(out: Path, overrides: dict[str, Any], launcher: list[str]) -> subprocess.CompletedProcess[str]:
    command = [
        *launcher,
        str(TRAIN),
        "--config",
        str(CONFIG),
        "--output-dir",
        str(out),
        "--overrides-json",
        json.dumps({**SMALL, **overrides}),
    ]
    return subprocess.run(command, env=run_env(), capture_output=True, text=True, timeout=120)


def read_points(out: Path) -> list[dict[str, Any]]:
    lines = (out / "logs" / "metrics.jsonl").read_text(encoding="utf-8").splitlines()
    return [json.loads(line) for line in lines]


def load_train_module() -> ModuleType:
    spec = importlib.util.spec_from_file_location("catalog_pytorch_train", TRAIN)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while the class is built
    saved, sys.dont_write_bytecode = sys.dont_write_bytecode, True  # no __pycache__ in the catalog
    try:
        spec.loader.exec_module(module)
    finally:
        sys.dont_write_bytecode = saved
    return module


def test_single_process_run_learns_and_checkpoints(tmp_path: Path) -> None:
    out = tmp_path / "out"
    result = train(out, {"epochs": 2}, [sys.executable])
    assert result.returncode == 0, result.stderr
    assert sorted(p.name for p in (out / "checkpoints").iterdir()) == ["epoch-1", "epoch-2"]

    points = read_points(out)
    train_losses = [p["train/loss"] for p in points if "train/loss" in p]
    val_losses = [p["validation/loss"] for p in points if "validation/loss" in p]
    assert len(val_losses) == 2 and all(math.isfinite(v) for v in train_losses + val_losses)
    assert train_losses[-1] < train_losses[0]
    assert val_losses[-1] < val_losses[0]

    import torch

    state = torch.load(out / "checkpoints" / "epoch-2" / "state.pt", map_location="cpu", weights_only=False)
    assert state["epoch"] == 2 and state["step"] == 2 * (512 // 32)
    assert state["config"]["batch_size"] == 32  # the override, not the file's value
    assert state["metrics"]["validation/loss"] == pytest.approx(val_losses[-1])
    model = load_train_module().build_model(state["config"])
    model.load_state_dict(state["model"])  # the saved weights fit the model train.py builds

    summary = json.loads((out / "logs" / "summary.json").read_text())
    assert summary["world_size"] == 1 and summary["steps"] == state["step"]


def test_max_steps_caps_the_run(tmp_path: Path) -> None:
    out = tmp_path / "out"
    result = train(out, {"epochs": 5, "max_steps": 6}, [sys.executable])
    assert result.returncode == 0, result.stderr
    summary = json.loads((out / "logs" / "summary.json").read_text())
    assert summary["steps"] == 6
    assert [p.name for p in (out / "checkpoints").iterdir()] == ["epoch-1"]


def test_two_process_torchrun_writes_one_checkpoint_set(tmp_path: Path) -> None:
    out = tmp_path / "out"
    launcher = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2"]
    result = train(out, {"epochs": 1}, launcher)
    assert result.returncode == 0, result.stderr + result.stdout
    assert [p.name for p in (out / "checkpoints").iterdir()] == ["epoch-1"]

    summary = json.loads((out / "logs" / "summary.json").read_text())
    assert summary["world_size"] == 2
    assert summary["steps"] == 512 // (32 * 2)  # the sampler splits the data between the ranks
    steps = [p["step"] for p in read_points(out) if "train/loss" in p]
    assert len(steps) == len(set(steps))  # rank 0 alone reports
    assert all(math.isfinite(p.get("train/loss", 0.0)) for p in read_points(out))


LEAVE = """
import atexit, importlib.util, sys
spec = importlib.util.spec_from_file_location("template_train", sys.argv[1])
train = sys.modules[spec.name] = importlib.util.module_from_spec(spec)
spec.loader.exec_module(train)
atexit.register(lambda: print("the interpreter shut down"))
print("the summary is written", end="")
sys.stderr.write("and said")
train.leave(7)
"""


@pytest.mark.parametrize("world", ["2", None])
def test_a_distributed_rank_ends_without_the_interpreters_shutdown(world: str | None) -> None:
    """Under load, gloo's worker thread may still be releasing the last collective's tensors when a rank
    ends; if that happens during the interpreter's shutdown the rank aborts (SIGABRT) after a finished
    training, seen on the two-node Slurm test. A distributed rank therefore ends at once, its output
    flushed and its code kept; a single process ends normally."""
    env = {k: v for k, v in run_env().items() if k != "WORLD_SIZE"}
    if world is not None:
        env["WORLD_SIZE"] = world
    done = subprocess.run(
        [sys.executable, "-c", LEAVE, str(TRAIN)], env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 7, done.stderr
    assert done.stdout.startswith("the summary is written")
    assert done.stderr.endswith("and said")
    assert ("the interpreter shut down" in done.stdout) is (world is None)


def test_unknown_override_is_refused(tmp_path: Path) -> None:
    result = train(tmp_path / "out", {"learning_rte": 0.1}, [sys.executable])
    assert result.returncode != 0
    assert "learning_rte" in result.stderr and not (tmp_path / "out" / "checkpoints").exists()


def test_fallback_parser_reads_the_config_like_pyyaml() -> None:
    module = load_train_module()
    text = CONFIG.read_text(encoding="utf-8")
    assert module.parse_simple_yaml(text) == yaml.safe_load(text)
    nested = "a:\n  b: 1  # note\n  c:\n    d: 'x # y'\ne: [1, 2.5, off]\nf: ~\ng: 1.0e-3\n"
    assert module.parse_simple_yaml(nested) == yaml.safe_load(nested)


def test_overrides_set_dotted_paths_and_refuse_unknown_ones() -> None:
    module = load_train_module()
    config = {"epochs": 1, "opt": {"lr": 0.1}}
    module.apply_overrides(config, {"epochs": 3, "opt.lr": 0.01})
    assert config == {"epochs": 3, "opt": {"lr": 0.01}}
    with pytest.raises(SystemExit, match="opt.momentum"):
        module.apply_overrides(config, {"opt.momentum": 0.9})


# ── a closed config: a key train.py does not read stops the run ─────────────────────────────────────


def _config_with(tmp_path: Path, extra: str, lock: dict[str, Any] | None = None) -> Path:
    config = tmp_path / "exp" / "config.yaml"
    config.parent.mkdir()
    text = CONFIG.read_text(encoding="utf-8")
    if extra.startswith("extra:"):  # in place of the template's empty one
        text = text.replace("extra: {}\n", "")
    config.write_text(text + extra, encoding="utf-8")
    if lock is not None:
        (config.parent / "plugins.lock.json").write_text(json.dumps(lock), encoding="utf-8")
    return config


def test_the_keys_train_py_reads_are_the_recipe_parameters() -> None:
    recipe = yaml.safe_load((TEMPLATE.parent / "recipe.yaml").read_text(encoding="utf-8"))
    assert recipe["config"]["mode"] == "closed"
    assert load_train_module().CONFIG_KEYS == {p["path"] for p in recipe["params"].values()}
    assert set(yaml.safe_load(CONFIG.read_text(encoding="utf-8"))) == {*load_train_module().CONFIG_KEYS, "extra"}


def test_a_typo_in_config_yaml_stops_the_run_with_did_you_mean(tmp_path: Path) -> None:
    config = _config_with(tmp_path, "learnig_rate: 0.1\n")
    out = tmp_path / "out"
    command = [sys.executable, str(TRAIN), "--config", str(config), "--output-dir", str(out)]
    result = subprocess.run(command, env=run_env(), capture_output=True, text=True, timeout=120)
    assert result.returncode != 0
    assert "'learnig_rate'" in result.stderr and "did you mean 'learning_rate'?" in result.stderr, result.stderr
    assert not out.exists()


@pytest.mark.parametrize(
    ("extra", "lock"),
    [
        ("", None),
        ("extra: {data_dir: /data/images}\n", None),
        ("opsd:\n  scale: 2.0\n", {"plugins": [{"id": "alice/opsd", "version": "0.1.0", "digest": "sha256:0"}]}),
    ],
    ids=["the template's config", "keys of your own under extra", "a locked plugin's parameters"],
)
def test_the_keys_it_may_hold_pass(tmp_path: Path, extra: str, lock: dict[str, Any] | None) -> None:
    config = _config_with(tmp_path, extra, lock)
    module = load_train_module()
    module.check_keys(module.load_config(config), config)


def test_an_unknown_plugin_section_and_a_missing_key_are_refused(tmp_path: Path) -> None:
    module = load_train_module()
    config = _config_with(tmp_path, "opsd:\n  scale: 2.0\n")
    with pytest.raises(SystemExit, match="'opsd'"):
        module.check_keys(module.load_config(config), config)
    values = module.load_config(config)
    del values["opsd"], values["seed"]
    with pytest.raises(SystemExit, match="missing seed"):
        module.check_keys(values, config)
