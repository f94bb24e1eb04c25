#!/usr/bin/env python3
"""Image classification with a plain PyTorch loop (the pytorch/image-classification recipe).

The platform starts this file under torchrun:

    torchrun ... train.py --config <exp>/config.yaml --output-dir $TUNEPLANE_OUT_DIR \
        --overrides-json '{"learning_rate": 0.001}'

It runs as one process or as several (gloo on CPU, NCCL on GPU) with DistributedDataParallel.
Only rank 0 writes checkpoints, logs and metric points, so a run leaves one set of files whatever
its process count. The model and the input pipeline are yours to replace: `build_model` and
`build_datasets` are the two places to start.

Outputs under --output-dir:
    checkpoints/epoch-<n>/state.pt   model, optimizer and schedule state, epoch and step; the folder is
                                     marked complete (.tuneplane-complete.json) once state.pt is whole
    logs/metrics.jsonl               one JSON object per reported point
    logs/summary.json                the final metrics and the run's shape

A new attempt of the run (a requeue, a replaced pod, a retry) resumes from $TUNEPLANE_RESUME_FROM,
which the platform's launcher sets to the newest complete checkpoint: the model, the optimizer, the
schedule and the step continue from there, and the epochs after it are trained as they would have been.
"""

from __future__ import annotations

import argparse
import difflib
import json
import math
import os
import re
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset


def _load_sdk() -> Any:
    """tuneplane.report when the image has a usable one; without it metrics go to logs/ and stdout."""
    try:
        from tuneplane import report
    except ImportError:
        return None
    usable = all(callable(getattr(report, name, None)) for name in ("init", "log", "finish"))
    return report if usable else None


_report = _load_sdk()


# ---------------------------------------------------------------------------------------------
# Configuration
# ---------------------------------------------------------------------------------------------

_INT = re.compile(r"^[-+]?\d+$")
_FLOAT = re.compile(r"^[-+]?(\d+\.\d*|\.\d+|\d+)([eE][-+]?\d+)?$|^[-+]?\.(inf|Inf|INF)$|^\.(nan|NaN|NAN)$")
_TRUE = {"true", "yes", "on"}
_FALSE = {"false", "no", "off"}


def load_config(path: Path) -> dict[str, Any]:
    """Read the YAML config, with PyYAML when the image has it and a small parser otherwise."""
    text = path.read_text(encoding="utf-8")
    try:
        import yaml
    except ImportError:
        return parse_simple_yaml(text)
    data = yaml.safe_load(text)
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise SystemExit(f"{path}: the config must be a mapping of keys to values")
    return data


def parse_simple_yaml(text: str) -> dict[str, Any]:
    """Parse nested `key: value` blocks (the subset this template uses) without PyYAML."""
    root: dict[str, Any] = {}
    stack: list[tuple[int, dict[str, Any]]] = [(-1, root)]
    for lineno, raw in enumerate(text.splitlines(), start=1):
        line = _strip_comment(raw).rstrip()
        if not line.strip():
            continue
        indent = len(line) - len(line.lstrip(" "))
        key, sep, value = line.strip().partition(":")
        if not sep or not key:
            raise SystemExit(f"config line {lineno}: expected `key: value`, got {raw.strip()!r}")
        while indent <= stack[-1][0]:
            stack.pop()
        parent = stack[-1][1]
        if value.strip():
            parent[_unquote(key.strip())] = parse_scalar(value.strip())
        else:
            child: dict[str, Any] = {}
            parent[_unquote(key.strip())] = child
            stack.append((indent, child))
    return root


def _strip_comment(line: str) -> str:
    """Drop a `#` comment that starts the line or follows whitespace, outside quotes."""
    quote = ""
    for index, char in enumerate(line):
        if quote:
            quote = "" if char == quote else quote
        elif char in "'\"":
            quote = char
        elif char == "#" and (index == 0 or line[index - 1].isspace()):
            return line[:index]
    return line


def _unquote(text: str) -> str:
    if len(text) >= 2 and text[0] == text[-1] and text[0] in "'\"":
        return text[1:-1]
    return text


def parse_scalar(text: str) -> Any:
    """Turn one YAML 1.1 scalar (or a flat `[a, b]` list) into a Python value."""
    if text[0] in "'\"":
        return _unquote(text)
    if text.startswith("[") and text.endswith("]"):
        inner = text[1:-1].strip()
        return [parse_scalar(item.strip()) for item in inner.split(",")] if inner else []
    if text == "{}":
        return {}
    lowered = text.lower()
    if lowered in ("null", "~"):
        return None
    if lowered in _TRUE:
        return True
    if lowered in _FALSE:
        return False
    if _INT.match(text):
        return int(text)
    if _FLOAT.match(text) and ("." in text or "inf" in lowered or "nan" in lowered):
        return float(text)
    return text


# The keys this file reads, each a parameter of the recipe; `extra` is yours (see config.yaml). A key
# beyond these would be silently not applied, so it stops the run instead, as `tp validate` refuses it.
CONFIG_KEYS = frozenset(
    {
        "seed", "epochs", "max_steps", "batch_size", "optimizer", "learning_rate", "weight_decay", "momentum",
        "lr_scheduler", "max_grad_norm", "label_smoothing", "amp", "arch", "num_classes", "image_size",
        "input_pipeline", "num_workers", "synthetic_train_samples", "synthetic_val_samples", "synthetic_noise",
        "log_interval", "eval_interval_epochs",
    }
)  # fmt: skip
OWN_KEYS = "extra"


def check_keys(config: dict[str, Any], path: Path) -> None:
    """Refuse a key this file does not read ("did you mean …"), and a key it reads that is missing.

    The experiment's locked plugins may keep their parameters in the config, under their names.
    """
    allowed = CONFIG_KEYS | {OWN_KEYS} | locked_plugins(path.parent)
    for key in sorted(set(config) - allowed, key=str):
        close = difflib.get_close_matches(str(key), sorted(allowed), n=1)
        hint = f"did you mean {close[0]!r}? " if close else ""
        raise SystemExit(
            f"{path}: unknown key {key!r}: this train.py would not apply it. {hint}"
            f"Keys of your own go under `{OWN_KEYS}:`"
        )
    missing = sorted(CONFIG_KEYS - set(config))
    if missing:
        raise SystemExit(f"{path}: missing {', '.join(missing)}: the template's config.yaml has every key")


def locked_plugins(exp_dir: Path) -> set[str]:
    """The names of the plugins locked in plugins.lock.json beside the config (none when it has none)."""
    try:
        lock = json.loads((exp_dir / "plugins.lock.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return set()
    entries = lock.get("plugins") if isinstance(lock, dict) else None
    ids = [e.get("id") for e in entries if isinstance(e, dict)] if isinstance(entries, list) else []
    return {i.rsplit("/", 1)[-1] for i in ids if isinstance(i, str)}


def apply_overrides(config: dict[str, Any], overrides: dict[str, Any]) -> None:
    """Set each dotted path of `overrides`; a path the config lacks is an error, not a silent no-op."""
    for dotted, value in overrides.items():
        node: Any = config
        parts = dotted.split(".")
        for part in parts[:-1]:
            node = node.get(part) if isinstance(node, dict) else None
        if not isinstance(node, dict) or parts[-1] not in node:
            known = ", ".join(sorted(config))
            raise SystemExit(f"override {dotted!r} names no key of the config (known: {known})")
        node[parts[-1]] = value


def read_overrides(text: str | None) -> dict[str, Any]:
    """Accept a JSON object inline, or `@path` to a file holding one."""
    if not text:
        return {}
    if text.startswith("@"):
        text = Path(text[1:]).read_text(encoding="utf-8")
    value = json.loads(text)
    if not isinstance(value, dict):
        raise SystemExit("--overrides-json must be a JSON object of dotted config paths to values")
    return value


# ---------------------------------------------------------------------------------------------
# Processes, data, model
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Topology:
    """Where this process sits in the job; world == 1 means no process group."""

    rank: int
    world: int
    device: torch.device

    @property
    def is_main(self) -> bool:
        return self.rank == 0


def world_size() -> int:
    """How many processes the launcher started for this run (torchrun sets WORLD_SIZE; alone: 1)."""
    return int(os.environ.get("WORLD_SIZE", "1"))


def setup_processes() -> Topology:
    """Join torchrun's process group when there is one: NCCL on GPUs, gloo on CPU."""
    world = world_size()
    rank = int(os.environ.get("RANK", "0"))
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    if torch.cuda.is_available():
        device = torch.device("cuda", local_rank)
        torch.cuda.set_device(device)
        backend = "nccl"
    else:
        device = torch.device("cpu")
        backend = "gloo"
    if world > 1:
        dist.init_process_group(backend=backend)
    return Topology(rank=rank, world=world, device=device)


def build_datasets(cfg: dict[str, Any]) -> tuple[TensorDataset, TensorDataset]:
    """Return (train, validation). Replace the body to read real images."""
    if cfg["input_pipeline"] != "synthetic":
        raise SystemExit(
            f"input_pipeline {cfg['input_pipeline']!r} is not implemented in this train.py; "
            "write its loader in build_datasets"
        )
    prototypes = _class_patterns(cfg)
    train = _noisy_samples(prototypes, cfg["synthetic_train_samples"], cfg, stream=1)
    val = _noisy_samples(prototypes, cfg["synthetic_val_samples"], cfg, stream=2)
    return train, val


def _class_patterns(cfg: dict[str, Any]) -> torch.Tensor:
    """One smooth random RGB pattern per class: coarse noise upsampled to the image size."""
    generator = torch.Generator().manual_seed(int(cfg["seed"]))
    size = int(cfg["image_size"])
    side = max(2, size // 4)
    coarse = torch.randn(int(cfg["num_classes"]), 3, side, side, generator=generator)
    return F.interpolate(coarse, size=(size, size), mode="bilinear", align_corners=False)


def _noisy_samples(prototypes: torch.Tensor, count: int, cfg: dict[str, Any], stream: int) -> TensorDataset:
    generator = torch.Generator().manual_seed(int(cfg["seed"]) * 7919 + stream)
    labels = torch.randint(0, prototypes.shape[0], (int(count),), generator=generator)
    noise = torch.randn((int(count), *prototypes.shape[1:]), generator=generator)
    return TensorDataset(prototypes[labels] + float(cfg["synthetic_noise"]) * noise, labels)


class SimpleCNN(nn.Module):
    """Two conv blocks and a linear head: small enough for CPU, enough for the synthetic task."""

    def __init__(self, num_classes: int) -> None:
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(3, 16, kernel_size=3, padding=1),
            nn.ReLU(inplace=True),
            nn.MaxPool2d(2),
            nn.Conv2d(16, 32, kernel_size=3, padding=1),
            nn.ReLU(inplace=True),
            nn.AdaptiveAvgPool2d(4),
        )
        self.head = nn.Linear(32 * 4 * 4, num_classes)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        return self.head(torch.flatten(self.features(images), 1))


def build_model(cfg: dict[str, Any]) -> nn.Module:
    """simple_cnn here; any other name is looked up in torchvision.models when it is installed."""
    if cfg["arch"] == "simple_cnn":
        return SimpleCNN(int(cfg["num_classes"]))
    try:
        from torchvision import models
    except ImportError:
        raise SystemExit(f"arch {cfg['arch']!r} needs torchvision, which this image lacks") from None
    return models.get_model(cfg["arch"], weights=None, num_classes=int(cfg["num_classes"]))


def build_optimizer(cfg: dict[str, Any], params: Iterator[nn.Parameter]) -> torch.optim.Optimizer:
    lr, decay = float(cfg["learning_rate"]), float(cfg["weight_decay"])
    if cfg["optimizer"] == "sgd":
        return torch.optim.SGD(params, lr=lr, momentum=float(cfg["momentum"]), weight_decay=decay)
    if cfg["optimizer"] == "adamw":
        return torch.optim.AdamW(params, lr=lr, weight_decay=decay)
    raise SystemExit(f"optimizer {cfg['optimizer']!r} is not one of adamw, sgd")


def lr_factor(kind: str, total_steps: int) -> Callable[[int], float]:
    """The schedule as a multiplier of the peak rate, for LambdaLR."""
    total = max(1, total_steps)
    if kind == "cosine":
        return lambda step: 0.5 * (1.0 + math.cos(math.pi * min(step, total) / total))
    if kind == "step":  # tenfold drops at half and three quarters of the run
        return lambda step: 0.1 ** ((step >= total // 2) + (step >= (3 * total) // 4))
    if kind == "constant":
        return lambda step: 1.0
    raise SystemExit(f"lr_scheduler {kind!r} is not one of constant, step, cosine")


# ---------------------------------------------------------------------------------------------
# Reporting and checkpoints (rank 0 only)
# ---------------------------------------------------------------------------------------------


class Reporter:
    """Sends points to tuneplane.report and mirrors them to logs/metrics.jsonl and stdout."""

    def __init__(self, out_dir: Path, topo: Topology, hparams: dict[str, Any]) -> None:
        self.enabled = topo.is_main
        self.path = out_dir / "logs" / "metrics.jsonl"
        if not self.enabled:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        if _report is not None:
            _report.init(hparams=hparams, monitor_hardware=True)

    def log(self, metrics: dict[str, float], step: int) -> None:
        if not self.enabled:
            return
        if _report is not None:
            _report.log(metrics, step=step)
        line = json.dumps({"step": step, **metrics}, sort_keys=True)
        with self.path.open("a", encoding="utf-8") as handle:
            handle.write(line + "\n")
        print(line, flush=True)

    def finish(self) -> None:
        if self.enabled and _report is not None:
            _report.finish()


STATE_FILE = "state.pt"
COMPLETE_MARKER = ".tuneplane-complete.json"  # what tuneplane.report.checkpoints looks for
RESUME_FROM_ENV = "TUNEPLANE_RESUME_FROM"


def save_checkpoint(folder: Path, state: dict[str, Any]) -> None:
    """Write state.pt beside its final name and rename it, then mark the folder complete.

    The marker comes last: a folder the job was killed while writing has none, and a new attempt
    never resumes from it.
    """
    folder.mkdir(parents=True, exist_ok=True)
    (folder / COMPLETE_MARKER).unlink(missing_ok=True)  # rewritten below once the state is whole
    partial = folder / (STATE_FILE + ".partial")
    torch.save(state, partial)
    os.replace(partial, folder / STATE_FILE)
    mark_complete(folder, int(state["step"]))


def mark_complete(folder: Path, step: int) -> None:
    """tuneplane.report.checkpoints.mark_complete, or the same marker written here without the SDK."""
    try:
        from tuneplane.report.checkpoints import mark_complete as platform_mark
    except ImportError:
        partial = folder / (COMPLETE_MARKER + ".partial")
        partial.write_text(json.dumps({"step": step}), encoding="utf-8")
        os.replace(partial, folder / COMPLETE_MARKER)
        return
    platform_mark(folder, step)


def load_resume_state(device: torch.device) -> dict[str, Any] | None:
    """The checkpoint named by $TUNEPLANE_RESUME_FROM (a folder with state.pt), or None to start afresh."""
    folder = os.environ.get(RESUME_FROM_ENV, "")
    if not folder:
        return None
    path = Path(folder) / STATE_FILE
    if not path.is_file():
        raise SystemExit(
            f"{RESUME_FROM_ENV}={folder} has no {STATE_FILE}: it is not a checkpoint of this "
            "train.py; remove it from the run's checkpoints/ folder to start afresh"
        )
    state: dict[str, Any] = torch.load(path, map_location=device, weights_only=False)
    return state


def keep_points_until(path: Path, step: int) -> None:
    """Drop the mirrored points after `step`: the resumed attempt reports those steps again."""
    if not path.is_file():
        return
    kept = [
        line
        for line in path.read_text(encoding="utf-8").splitlines()
        if line.strip() and json.loads(line).get("step", 0) <= step
    ]
    partial = path.with_name(path.name + ".partial")
    partial.write_text("".join(line + "\n" for line in kept), encoding="utf-8")
    os.replace(partial, path)


# ---------------------------------------------------------------------------------------------
# Training
# ---------------------------------------------------------------------------------------------


def mean_over_ranks(values: torch.Tensor, topo: Topology) -> torch.Tensor:
    """Sum a tensor over processes (world > 1) so every rank reports the same numbers."""
    if topo.world > 1:
        dist.all_reduce(values, op=dist.ReduceOp.SUM)
    return values


def autocast(cfg: dict[str, Any], topo: Topology) -> AbstractContextManager[Any]:
    if not cfg["amp"]:
        return nullcontext()
    return torch.autocast(device_type=topo.device.type, dtype=torch.bfloat16)


def evaluate(model: nn.Module, loader: DataLoader, cfg: dict[str, Any], topo: Topology) -> dict[str, float]:
    """Loss and accuracy over the validation split, summed across processes."""
    model.eval()
    totals = torch.zeros(3, device=topo.device)  # loss sum, correct, count
    with torch.no_grad():
        for images, labels in loader:
            images, labels = images.to(topo.device), labels.to(topo.device)
            with autocast(cfg, topo):
                logits = model(images)
            totals[0] += F.cross_entropy(logits.float(), labels, reduction="sum")
            totals[1] += (logits.argmax(dim=1) == labels).sum()
            totals[2] += labels.numel()
    totals = mean_over_ranks(totals, topo)
    model.train()
    count = max(1.0, float(totals[2]))
    return {"validation/loss": float(totals[0]) / count, "validation/accuracy": float(totals[1]) / count}


def make_loader(dataset: TensorDataset, cfg: dict[str, Any], topo: Topology, train: bool) -> DataLoader:
    sampler = None
    if topo.world > 1:
        sampler = DistributedSampler(
            dataset, num_replicas=topo.world, rank=topo.rank, shuffle=train, seed=int(cfg["seed"])
        )
    generator = torch.Generator().manual_seed(int(cfg["seed"]))
    return DataLoader(
        dataset,
        batch_size=int(cfg["batch_size"]),
        shuffle=train and sampler is None,
        sampler=sampler,
        num_workers=int(cfg["num_workers"]),
        generator=generator,
        drop_last=False,
    )


def train(cfg: dict[str, Any], out_dir: Path, topo: Topology) -> dict[str, Any]:
    """Run the whole schedule and return the final metrics."""
    torch.manual_seed(int(cfg["seed"]))
    train_set, val_set = build_datasets(cfg)
    train_loader = make_loader(train_set, cfg, topo, train=True)
    val_loader = make_loader(val_set, cfg, topo, train=False)
    model: nn.Module = build_model(cfg).to(topo.device)
    if topo.world > 1:
        device_ids = [topo.device.index] if topo.device.type == "cuda" else None
        model = DistributedDataParallel(model, device_ids=device_ids)
    optimizer = build_optimizer(cfg, model.parameters())
    epochs, max_steps = int(cfg["epochs"]), int(cfg["max_steps"])
    total_steps = epochs * len(train_loader) if max_steps <= 0 else min(max_steps, epochs * len(train_loader))
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lr_factor(cfg["lr_scheduler"], total_steps))
    start_epoch, step, final = resume(model, optimizer, scheduler, out_dir, topo)
    reporter = Reporter(out_dir, topo, hparams=cfg)
    for epoch in range(start_epoch + 1, epochs + 1):
        if 0 < max_steps <= step:
            break  # the checkpoint resumed from was the last one
        if isinstance(train_loader.sampler, DistributedSampler):
            train_loader.sampler.set_epoch(epoch)
        elif train_loader.generator is not None:
            # each epoch's order depends on the epoch alone, so a resumed run shuffles as an unbroken one
            train_loader.generator.manual_seed(int(cfg["seed"]) * 100_003 + epoch)
        for images, labels in train_loader:
            step += 1
            loss = train_step(model, optimizer, images, labels, cfg, topo)
            scheduler.step()
            if step == 1 or step % int(cfg["log_interval"]) == 0:
                mean_loss = float(mean_over_ranks(loss.detach().clone(), topo)) / topo.world
                reporter.log(
                    {"train/loss": mean_loss, "train/lr": scheduler.get_last_lr()[0], "train/epoch": float(epoch)}, step
                )
            if 0 < max_steps <= step:
                break
        stopping = epoch == epochs or 0 < max_steps <= step
        if epoch % int(cfg["eval_interval_epochs"]) == 0 or stopping:
            final = evaluate(model, val_loader, cfg, topo)
            reporter.log(final, step)
            if topo.is_main:
                save_checkpoint(
                    out_dir / "checkpoints" / f"epoch-{epoch}",
                    {
                        "model": unwrap(model).state_dict(),
                        "optimizer": optimizer.state_dict(),
                        "scheduler": scheduler.state_dict(),
                        "epoch": epoch,
                        "step": step,
                        "config": cfg,
                        "metrics": final,
                    },
                )
        if stopping:
            break
    reporter.finish()
    return {"steps": step, "world_size": topo.world, **final}


def resume(
    model: nn.Module, optimizer: torch.optim.Optimizer, scheduler: Any, out_dir: Path, topo: Topology
) -> tuple[int, int, dict[str, float]]:
    """(epoch, step, metrics) of the checkpoint this attempt resumes from, its state loaded; else (0, 0, {})."""
    state = load_resume_state(topo.device)
    if state is None:
        return 0, 0, {}
    unwrap(model).load_state_dict(state["model"])
    optimizer.load_state_dict(state["optimizer"])
    scheduler.load_state_dict(state["scheduler"])
    epoch, step = int(state["epoch"]), int(state["step"])
    if topo.is_main:
        keep_points_until(out_dir / "logs" / "metrics.jsonl", step)
        print(
            json.dumps({"event": "resumed", "from": os.environ[RESUME_FROM_ENV], "epoch": epoch, "step": step}),
            flush=True,
        )
    return epoch, step, dict(state.get("metrics") or {})


def train_step(
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    images: torch.Tensor,
    labels: torch.Tensor,
    cfg: dict[str, Any],
    topo: Topology,
) -> torch.Tensor:
    images, labels = images.to(topo.device), labels.to(topo.device)
    with autocast(cfg, topo):
        logits = model(images)
    loss = F.cross_entropy(logits.float(), labels, label_smoothing=float(cfg["label_smoothing"]))
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    if float(cfg["max_grad_norm"]) > 0:
        torch.nn.utils.clip_grad_norm_(model.parameters(), float(cfg["max_grad_norm"]))
    optimizer.step()
    return loss


def unwrap(model: nn.Module) -> nn.Module:
    return model.module if isinstance(model, DistributedDataParallel) else model


# ---------------------------------------------------------------------------------------------
# Entry point
# ---------------------------------------------------------------------------------------------


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    here = Path(__file__).resolve().parent
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", type=Path, default=here / "config.yaml", help="YAML config file")
    parser.add_argument(
        "--output-dir",
        type=Path,
        default=Path(os.environ.get("TUNEPLANE_OUT_DIR", "out")),
        help="where checkpoints/ and logs/ go (default: $TUNEPLANE_OUT_DIR)",
    )
    parser.add_argument("--overrides-json", default=None, help="JSON object of dotted config paths to values, or @file")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    cfg = load_config(args.config)
    check_keys(cfg, args.config)
    apply_overrides(cfg, read_overrides(args.overrides_json))
    topo = setup_processes()
    started = time.monotonic()
    try:
        summary = train(cfg, args.output_dir, topo)
        if topo.world > 1:
            dist.barrier()  # leave together: gloo aborts a rank whose peer tore the group down first
    finally:
        if topo.world > 1 and dist.is_initialized():
            dist.destroy_process_group()
    if topo.is_main:
        summary["seconds"] = round(time.monotonic() - started, 3)
        (args.output_dir / "logs").mkdir(parents=True, exist_ok=True)
        (args.output_dir / "logs" / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
        print(json.dumps({"event": "finished", **summary}, sort_keys=True), flush=True)
    return 0


def leave(code: int) -> NoReturn:
    """End the process with `code`. A rank of a distributed run skips the interpreter's shutdown: for a
    moment after a collective returns, gloo's worker thread still holds its tensors, and releasing them
    needs Python; a thread that asks for Python while the interpreter shuts down aborts the whole
    process (SIGABRT, "terminate called without an active exception"), and a finished training ends
    as a failed rank. `destroy_process_group` does not wait for those threads. So nothing registered
    with `atexit` runs in a distributed rank: close or flush what you open before `main` returns."""
    if world_size() > 1:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    sys.exit(code)


if __name__ == "__main__":
    leave(main())
