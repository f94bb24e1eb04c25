"""Every trl recipe's scaffold trains to `Succeeded` through `tp submit --local` on CPU.

The test builds a one-layer Qwen2 model, a word-level tokenizer and a few rows of each data format
locally (no hub download), scaffolds each recipe with `tp new`, fills in only model and data at
submission, and keeps each run to two optimizer steps with `--set` (four where its metrics are charted).
"""

from __future__ import annotations

import json
import os
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest
import yaml
from support.labs import new_lab
from support.repos import git
from support.resume import save_tiny_qwen

CATALOG = Path(__file__).resolve().parents[1] / "catalog"
REQUIRED = os.environ.get("CI") == "true"  # in CI a missing framework is a failure, not a skip


def _require(module: str) -> Any:
    if REQUIRED:
        return __import__(module)
    return pytest.importorskip(module, reason=f"{module} is not installed")


ROWS = [
    ("what is one plus two", "three", "3"),
    ("what is two plus two", "four", "4"),
    ("what is three plus one", "four", "4"),
    ("what is one plus one", "two", "2"),
]
DATA = {  # the file each recipe trains on, in the row format its TRL trainer reads
    "sft": "sft.jsonl",
    "dpo": "pairs.jsonl",
    "rm": "pairs.jsonl",
    "kto": "kto.jsonl",
    "grpo": "prompts.jsonl",
    "rloo": "prompts.jsonl",
    "grpo-judge": "prompts.jsonl",
    "opsd": "prompts.jsonl",
}
TINY = {  # the --set values that keep a run to seconds on CPU, where the recipe declares the key
    "max_steps": 2,
    "bf16": False,
    "gradient_checkpointing": False,
    "per_device_train_batch_size": 2,
    "per_device_eval_batch_size": 2,
    "gradient_accumulation_steps": 1,
    "logging_steps": 1,
    "max_length": 32,
    "num_generations": 2,
    "max_completion_length": 4,
    "use_vllm": False,
    "judge_max_length": 64,
}


@pytest.fixture(scope="module")
def assets(tmp_path_factory: pytest.TempPathFactory) -> Path:
    _require("trl")
    _require("torch")
    root = tmp_path_factory.mktemp("trl-assets")
    words = "the a is what answer question yes no reference correct reply or plus so".split()
    save_tiny_qwen(root / "model", words + " ".join(" ".join(row) for row in ROWS).split() + list("0123456789"))
    formats = {
        "sft.jsonl": [{"prompt": p, "completion": c} for p, c, _ in ROWS],
        "pairs.jsonl": [{"prompt": p, "chosen": c, "rejected": "no"} for p, c, _ in ROWS],
        "kto.jsonl": [
            {"prompt": p, "completion": c if i % 2 == 0 else "no", "label": i % 2 == 0}
            for i, (p, c, _) in enumerate(ROWS)
        ],
        "prompts.jsonl": [{"prompt": p, "answer": a} for p, _, a in ROWS],
    }
    for name, rows in formats.items():
        (root / name).write_text("".join(json.dumps(r) + "\n" for r in rows))
    return root


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return new_lab(tmp_path_factory.mktemp("trl-lab") / "lab", "trl-lab")


def _train(method: str, name: str, assets: Path, lab: Path, tp: Any, tp_subprocess: Any, *extra: str) -> Path:
    """Scaffold `method` as experiment `name`, train it through `tp submit --local`; its checkpoints/final."""
    assert tp("new", name, "--method", f"trl/{method}", cwd=lab).code == 0
    git(lab, "add", "-A")
    git(lab, "commit", "-q", "-m", f"experiment {name}")
    params = yaml.safe_load((CATALOG / "trl" / method / "recipe.yaml").read_text())["params"]
    given = {item.split("=", 1)[0] for item in extra}  # what the test sets itself wins over TINY
    sets = [
        f"{key}={str(value).lower() if isinstance(value, bool) else value}"
        for key, value in TINY.items()
        if key in params and key not in given
    ]
    data = str(assets / DATA[method])
    args = [
        "submit",
        name,
        "--profile",
        "local",
        "--model",
        str(assets / "model"),
        "--train-data",
        data,
        "--validation-data",
        data,
        "--local",
    ]
    for item in [*sets, *extra]:
        args += ["--set", item]
    result = tp_subprocess(*args, cwd=lab, timeout=600)

    assert result.code == 0, result.output[-4000:]
    [status_path] = (lab / "status" / name).glob("*.json")
    status = json.loads(status_path.read_text())
    assert status["phase"] == "Succeeded" and status["exit_code"] == 0
    return Path(status["out_dir"]) / "checkpoints" / "final"


# Recipes whose tiny run is long enough to chart (4 steps, an evaluation every 2): the keys TRL logs,
# the recipe's canonical names for them (primary first), and what makes the run that long.
CHARTED = {
    "sft": ("loss", ["train/loss", "validation/loss"], ("max_steps=4", "eval_steps=2")),
    "dpo": (
        "rewards/margins",
        ["train/loss", "validation/loss", "train/reward_margin", "train/reward_accuracy"],
        ("max_steps=4", "eval_steps=2", "eval_strategy=steps"),
    ),
    "grpo": ("reward", ["train/reward", "validation/reward"], ("max_steps=4", "eval_steps=2", "eval_strategy=steps")),
}


# Recipes whose scaffold run trains LoRA adapters (`use_peft`) rather than all weights: one run shows both
# that the recipe trains and that the shared LoRA settings reach its trainer.
LORA = {"sft": ("use_peft=true", "lora_r=4")}


@pytest.mark.slow
@pytest.mark.parametrize("method", sorted(set(DATA) - {"rm"}))  # rm: the reward-model tests below train it
def test_trl_scaffold_trains_to_succeeded_locally(method: str, assets: Path, lab: Path, tp, tp_subprocess) -> None:
    """Every recipe's scaffold trains to Succeeded and saves its model; the charted ones (SFT, DPO,
    GRPO) show TRL's own keys under the recipe's canonical names in the status, `tp job metrics`,
    `--plot` and the committed chart, primary first and hardware last, and the key as TRL logged it
    still answers `--key` (one run each: a run is the slow part). SFT trains with `use_peft`: the shared
    LoRA config (rank, task type) reaches the trainer, which saves an adapter (the reward model's LoRA
    run is the reward-model test's own)."""
    name = f"tiny-{method}"
    if method in LORA:
        _require("peft")
    extra = (*(CHARTED[method][2] if method in CHARTED else ()), *LORA.get(method, ()))
    final = _train(method, name, assets, lab, tp, tp_subprocess, *extra)
    if method in LORA:
        _saved_an_adapter(final, "CAUSAL_LM")
    else:
        assert (final / "config.json").is_file()
        assert any(final.glob("*.safetensors"))
    if method in CHARTED:
        raw, canonical, _ = CHARTED[method]
        _shows_primary_metrics_first(lab, tp, name, raw, canonical)


def _saved_an_adapter(final: Path, task_type: str) -> None:
    adapter = json.loads((final / "adapter_config.json").read_text())
    assert (adapter["r"], adapter["task_type"]) == (4, task_type)
    assert (final / "adapter_model.safetensors").is_file()


@pytest.mark.slow
@pytest.mark.parametrize("lora", [False, True], ids=["full", "lora"])
def test_a_reward_model_exports_and_evaluates_as_a_reward_model(
    lora: bool, assets: Path, lab: Path, tp, tp_subprocess
) -> None:
    """trl/rm trains (a full model, or a LoRA adapter for a sequence classifier); `tp export` writes the
    reward model itself: the exported folder loads as a sequence classifier and scores a text exactly
    as the trained checkpoint does; `tp eval` reports how well it ranks held-out pairs."""
    torch = _require("torch")
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    name = f"rm-export-{'lora' if lora else 'full'}"
    final = _train("rm", name, assets, lab, tp, tp_subprocess, *(["use_peft=true", "lora_r=4"] if lora else []))
    if lora:
        _saved_an_adapter(final, "SEQ_CLS")
    else:
        assert (final / "config.json").is_file() and any(final.glob("*.safetensors"))
    result = tp_subprocess(
        "export", name, "--profile", "local", "--checkpoint", str(final), "--local", cwd=lab, timeout=600
    )
    assert result.code == 0, result.output[-4000:]
    statuses = [json.loads(p.read_text()) for p in (lab / "status" / name).glob("*.json")]
    [export] = [s for s in statuses if s["operation"] == "export"]
    assert export["phase"] == "Succeeded", result.output[-4000:]
    exported = Path(export["out_dir"]) / "hf_export"
    assert json.loads((exported / "config.json").read_text())["architectures"] == ["Qwen2ForSequenceClassification"]

    if lora:
        from peft import AutoPeftModelForSequenceClassification

        trained = AutoPeftModelForSequenceClassification.from_pretrained(str(final), num_labels=1).merge_and_unload()
    else:
        trained = AutoModelForSequenceClassification.from_pretrained(str(final))
    tokenizer = AutoTokenizer.from_pretrained(str(exported))
    batch = tokenizer(["what is two plus two four"], return_tensors="pt")
    with torch.no_grad():
        want = trained.eval()(**batch).logits
        got = AutoModelForSequenceClassification.from_pretrained(str(exported)).eval()(**batch).logits
    assert got.shape == (1, 1) and torch.allclose(got, want, atol=1e-5)

    # `tp eval` scores the reward model on preference pairs: the share of pairs it ranks right
    pairs = assets / DATA["rm"]
    result = tp_subprocess(
        "eval",
        name,
        "--profile",
        "local",
        "--checkpoint",
        str(final),
        "--data",
        str(pairs),
        "--local",
        cwd=lab,
        timeout=600,
    )
    assert result.code == 0, result.output[-4000:]
    statuses = [json.loads(p.read_text()) for p in (lab / "status" / name).glob("*.json")]
    [evaluation] = [s for s in statuses if s["operation"] == "eval"]
    metrics = json.loads((Path(evaluation["out_dir"]) / "eval" / "report.json").read_text())["metrics"]
    rows = [json.loads(line) for line in pairs.read_text().splitlines()]
    margins = []
    with torch.no_grad():
        for row in rows:
            chosen, rejected = (
                tokenizer(row["prompt"] + row[k] + tokenizer.eos_token, return_tensors="pt")
                for k in ("chosen", "rejected")
            )
            margins.append(float(trained(**chosen).logits[0, 0] - trained(**rejected).logits[0, 0]))
    assert metrics["pairs"] == len(rows)
    assert metrics["accuracy"] == sum(m > 0 for m in margins) / len(rows)
    assert abs(metrics["margin"] - sum(margins) / len(rows)) < 1e-4


def _shows_primary_metrics_first(lab: Path, tp: Any, name: str, raw: str, canonical: list[str]) -> None:
    [status_path] = (lab / "status" / name).glob("*.json")
    run_id = status_path.stem
    status = json.loads(status_path.read_text())
    assert set(canonical) <= set(status["metrics"]), status["metrics"]
    assert raw not in status["metrics"], status["metrics"]  # renamed, not listed twice
    keys = _shown(lab, tp, run_id)
    assert keys[: len(canonical)] == canonical, keys
    hardware = [i for i, k in enumerate(keys) if k.startswith("hw/")]
    assert not hardware or hardware == list(range(len(keys) - len(hardware), len(keys))), keys  # hardware last
    assert _shown(lab, tp, run_id, "--key", raw) == [raw]  # the key as TRL logged it
    plot = lab.parent / f"{name}.svg"
    assert tp("job", "metrics", run_id, "--plot", str(plot), cwd=lab).code == 0
    for svg in (plot.read_text(), git(lab, "show", f"HEAD:status/{name}/{run_id}.svg")):
        panels, constants = _chart_names(svg)
        assert set(canonical) <= set(panels) | set(constants), (panels, constants)
        drawn = [c for c in canonical if c in panels]  # a constant series is one line under the panels
        assert panels[: len(drawn)] == drawn, panels
        assert [c for c in canonical if c in constants] == constants[: len(canonical) - len(drawn)], constants


def _shown(lab: Path, tp: Any, run_id: str, *args: str) -> list[str]:
    shown = tp("job", "metrics", run_id, *args, cwd=lab)
    assert shown.code == 0, shown.output
    return [line.split()[0] for line in shown.out.splitlines()[1:] if line.strip()]


def _chart_names(svg: str) -> tuple[list[str], list[str]]:
    """A chart's panel titles in order, and the names of the constant series listed below them."""
    texts = [
        (t.get("font-weight"), "".join(t.itertext()))
        for t in ET.fromstring(svg).iter("{http://www.w3.org/2000/svg}text")
    ]
    panels = [text.removesuffix(" (wall time)") for weight, text in texts if weight == "bold"]
    constants = [text.split(" = ")[0] for weight, text in texts if weight is None and " = " in text]
    return panels, constants
