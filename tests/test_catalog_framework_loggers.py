"""The verl and NeMo-RL recipes turn on the framework's own TensorBoard logger into the folder their
recipe declares for the collector, and the framework's keys reach people under canonical names.

Each recipe is scaffolded and rendered as `tp new` + `tp render` do; the test then writes events the
way the framework's own code decides where they go, from the rendered job alone:

- verl (`verl/utils/tracking.py`): `trainer.logger` lists "tensorboard", and the tensorboard backend
  writes to `$TENSORBOARD_DIR` (else `tensorboard_log/<project>/<experiment>` under the working
  directory). In a Ray job its `TaskRunner` actor is kept off the head node, so every pod needs it.
- NeMo-RL (`nemo_rl/utils/logger.py`, `examples/run_*.py`): `logger.tensorboard_enabled`, and the
  events go to `get_next_experiment_dir(logger.log_dir)/tensorboard`, i.e. `<log_dir>/exp_001/tensorboard`.

The events are written with the real `SummaryWriter` under the framework's own tag names and read
back by the collector from the declaration the job receives (`TUNEPLANE_METRICS_NATIVE`).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
from support.render import INPUTS, build, env_values, main_container, make_lab, pod_templates, request
from support.yamlfiles import load_yaml

from tuneplane.collector import sources
from tuneplane.collector.run import Collector
from tuneplane.collector.sources import Point
from tuneplane.constants import METRICS_NATIVE_ENV
from tuneplane.views.runmetrics import vocabulary_of

CATALOG = Path(__file__).resolve().parents[1] / "catalog"
VERL = sorted(p.parent.relative_to(CATALOG).as_posix() for p in CATALOG.glob("verl/*/recipe.yaml"))
NEMO = sorted(p.parent.relative_to(CATALOG).as_posix() for p in CATALOG.glob("nemo-rl/*/recipe.yaml"))

# What the frameworks log (tag names from their trainers' code), and what people must see.
VERL_RL_TAGS = {
    "actor/pg_loss": 0.5,
    "actor/kl_loss": 0.01,
    "actor/entropy": 1.2,
    "actor/grad_norm": 0.3,
    "actor/pg_clipfrac": 0.02,
    "critic/rewards/mean": 0.4,
    "critic/score/mean": 0.4,
    "response_length/mean": 120.0,
    "val-core/openai/gsm8k/reward/mean@1": 0.6,
    "val-aux/openai/gsm8k/reward/std@1": 0.1,
    "timing_s/gen": 3.0,
}
VERL_RL_SHOWN = {
    "train/loss": "actor/pg_loss",
    "train/reward": "critic/rewards/mean",
    "train/kl": "actor/kl_loss",
    "train/entropy": "actor/entropy",
    "train/response_length": "response_length/mean",
    "validation/openai/gsm8k/reward/mean@1": "val-core/openai/gsm8k/reward/mean@1",
}
VERL_SFT_TAGS = {"train/loss": 1.5, "train/lr": 1e-5, "train/grad_norm": 2.0, "val/loss": 1.7}
VERL_SFT_SHOWN = {"train/loss": "train/loss", "validation/loss": "val/loss", "train/lr": "train/lr"}
# NeMo-RL's GPU monitor (`monitor_gpus`) logs under `ray/`, stepped by seconds since it started.
NEMO_GPU_TAGS = {"ray/node.0.gpu.0.util": 55.0, "ray/node.0.gpu.0.mem_gb": 20.0, "ray/node.0.mem_gb": 100.0}
NEMO_GPU_SHOWN = {"hw/node.0.gpu.0.util": "ray/node.0.gpu.0.util", "hw/node.0.mem_gb": "ray/node.0.mem_gb"}
NEMO_RL_TAGS = {
    "train/loss": 0.2,
    "train/reward": 0.3,
    "train/grad_norm": 0.5,
    "validation/accuracy": 0.7,
    "train/approx_entropy": 1.1,
    "timing/train/total_step_time": 9.0,
    **NEMO_GPU_TAGS,
}
NEMO_RL_SHOWN = {
    "train/loss": "train/loss",
    "train/reward": "train/reward",
    "validation/accuracy": "validation/accuracy",
    "train/entropy": "train/approx_entropy",
    **NEMO_GPU_SHOWN,
}
NEMO_SFT_TAGS = {"train/loss": 1.3, "train/grad_norm": 0.4, "validation/val_loss": 1.4, **NEMO_GPU_TAGS}
NEMO_SFT_SHOWN = {"train/loss": "train/loss", "validation/loss": "validation/val_loss", **NEMO_GPU_SHOWN}
SUPERVISED = {"verl/sft", "nemo-rl/sft", "nemo-rl/dpo", "nemo-rl/rm", "nemo-rl/distillation", "nemo-rl/opsd"}


class _Points:
    """The collector's sink, in memory: what would go to `tuneplane.report`."""

    def __init__(self) -> None:
        self.points: list[Point] = []

    def send(self, points: list[Point]) -> None:
        self.points.extend(points)

    def flush(self, timeout: float) -> bool:
        return True

    def summary(self) -> dict[str, dict[str, Any]]:
        out: dict[str, dict[str, Any]] = {}
        for _, _, values in self.points:
            for key, value in values.items():
                held = out.setdefault(key, {"count": 0})
                held.update(count=held["count"] + 1, last=value)
        return out


def _rendered(
    tmp_path: Path, method: str, files: dict[str, str] | None = None
) -> tuple[Any, Any, list[dict[str, Any]]]:
    name = method.replace("/", "-")
    lab = make_lab(
        tmp_path / "lab",
        {name: method},
        files={f"experiments/{name}/{rel}": text for rel, text in (files or {}).items()},
    )
    return build(lab, request(name, inputs=dict(INPUTS)))


def _config(method: str) -> dict[str, Any]:
    data = load_yaml(CATALOG / method / "template" / "config.yaml")
    assert isinstance(data, dict)
    return data


def _collect(out: Path, native: str, tags: dict[str, float]) -> _Points:
    sink = _Points()
    collector = Collector(str(out), sink, sources.parse(native))
    collector.lock(5)
    try:
        collector.pass_once()
    finally:
        collector.unlock()
    got = sink.summary()
    assert {key: held["count"] for key, held in got.items()} == {tag: 3 for tag in tags}, sorted(got)
    return sink


def _write(folder: Path, tags: dict[str, float]) -> None:
    tensorboard = pytest.importorskip("torch.utils.tensorboard")
    writer = tensorboard.SummaryWriter(str(folder))
    for step in range(1, 4):
        for tag, value in tags.items():
            writer.add_scalar(tag, value * step, step)
    writer.close()


def _check_names(method: str, sink: _Points, shown: dict[str, str]) -> None:
    vocab = vocabulary_of(method)
    summary = sink.summary()
    names = vocab.pick(summary)
    for canonical, raw in shown.items():
        assert names.get(canonical) == raw, (canonical, names)
        assert vocab.resolve(raw, summary) == raw  # the raw key is still queryable
    present = [p for p in vocab.primary if p in names]
    assert list(names)[: len(present)] == present  # primary metrics first, in the recipe's order
    hardware = [n for n in names if n.startswith("hw/")]
    assert list(names)[len(names) - len(hardware) :] == hardware  # hardware last


@pytest.mark.parametrize("method", VERL)
def test_verl_writes_its_tensorboard_events_where_the_collector_reads(method: str, tmp_path: Path) -> None:
    spec, plan, manifests = _rendered(tmp_path, method)
    assert "tensorboard" in _config(method)["trainer"]["logger"]
    out_dir = spec.spec.paths.out_dir
    native = plan.env[METRICS_NATIVE_ENV]
    [declared] = sources.parse(native)
    templates = [t for doc in manifests for t in pod_templates(doc)]
    assert templates
    for template in templates:  # head, workers (where verl's TaskRunner runs) and the submitter alike
        env = env_values(main_container(template))
        assert env.get("TENSORBOARD_DIR") == f"{out_dir}/{declared.path}", template["metadata"]
        assert env.get(METRICS_NATIVE_ENV) == native
    where = plan.env["TENSORBOARD_DIR"]
    assert where.startswith(out_dir + "/")
    out = tmp_path / "out"
    tags = VERL_SFT_TAGS if method in SUPERVISED else VERL_RL_TAGS
    _write(out / os.path.relpath(where, out_dir), tags)
    _check_names(method, _collect(out, native, tags), VERL_SFT_SHOWN if method in SUPERVISED else VERL_RL_SHOWN)


@pytest.mark.parametrize("method", NEMO)
def test_nemo_rl_writes_its_tensorboard_events_where_the_collector_reads(method: str, tmp_path: Path) -> None:
    # An experiment whose config turned the TensorBoard logger off still gets it: the platform's
    # metrics depend on it (observability: platform), so the adapter passes it as an override.
    config = (CATALOG / method / "template" / "config.yaml").read_text()
    assert "  tensorboard_enabled: true\n" in config
    off = config.replace("  tensorboard_enabled: true\n", "  tensorboard_enabled: false\n")
    spec, plan, _ = _rendered(tmp_path, method, {"config.yaml": off})
    enabled = [a.split("=", 1)[1] for a in plan.argv if a.startswith("logger.tensorboard_enabled=")]
    assert enabled[-1:] == ["true"], plan.argv  # the last override wins
    out_dir = spec.spec.paths.out_dir
    log_dirs = [json.loads(a.split("=", 1)[1]) for a in plan.argv if a.startswith("logger.log_dir=")]
    assert log_dirs, plan.argv
    log_dir = log_dirs[-1]  # the last override wins
    assert log_dir.startswith(out_dir + "/")
    native = plan.env[METRICS_NATIVE_ENV]
    out = tmp_path / "out"
    # run_<method>.py: config.logger["log_dir"] = get_next_experiment_dir(log_dir); Logger: <that>/tensorboard
    tags = NEMO_SFT_TAGS if method in SUPERVISED else NEMO_RL_TAGS
    _write(out / os.path.relpath(log_dir, out_dir) / "exp_001" / "tensorboard", tags)
    _check_names(method, _collect(out, native, tags), NEMO_SFT_SHOWN if method in SUPERVISED else NEMO_RL_SHOWN)
