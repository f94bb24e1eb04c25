"""`tp export` of ms-swift and OpenRLHF runs, run for real on this machine (`--local`).

A full-weights checkpoint (a tiny GPT-2 built here, with the optimizer and DeepSpeed state a
checkpoint carries) is copied into hf_export without that state and loads with transformers; a
folder that is no checkpoint is refused with what to pass. The LoRA merge runs the framework's own
tool, whose flags tests/test_catalog_framework_parsers.py checks against the framework's parser.
"""

from __future__ import annotations

import os
import subprocess
import sys
from importlib.util import find_spec
from pathlib import Path
from typing import Any

import pytest
from support.repos import git

# transformers is imported where a model is built or loaded, not when this module is collected
pytestmark = pytest.mark.skipif(find_spec("transformers") is None, reason="transformers is a test extra")

MODULES = {"ms-swift/sft": "tuneplane.lifecycle.swift_export", "openrlhf/sft": "tuneplane.lifecycle.openrlhf_export"}


def tiny_checkpoint(folder: Path) -> Path:
    import transformers

    config = transformers.GPT2Config(n_layer=1, n_head=2, n_embd=8, vocab_size=64, n_positions=16)
    transformers.GPT2LMHeadModel(config).save_pretrained(folder)
    (folder / "optimizer.pt").write_bytes(b"state")
    (folder / "trainer_state.json").write_text("{}", encoding="utf-8")
    (folder / "global_step5").mkdir()
    (folder / "global_step5" / "mp_rank_00_model_states.pt").write_bytes(b"state")
    return folder


@pytest.mark.parametrize("method", sorted(MODULES))
def test_tp_export_local_copies_a_full_weights_checkpoint(lab: Path, tp_subprocess: Any, method: str) -> None:
    assert tp_subprocess("new", "exp", "--method", method, cwd=lab).code == 0
    settings = lab / "tuneplane.yaml"  # neither framework publishes an image for its default version
    text = settings.read_text(encoding="utf-8")
    image = f'  defaults: {{{method.split("/")[0]}: "registry.example/fw:1"}}'
    settings.write_text(text.replace("  defaults: {}", image, 1), encoding="utf-8")
    git(lab, "add", "-A")
    git(lab, "commit", "-q", "-m", "exp")
    storage = Path(os.environ["TUNEPLANE_STORAGE_ROOT"])
    checkpoint = tiny_checkpoint(storage / "runs" / "alice" / "exp" / "trained" / "out" / "checkpoints" / "c-5")
    result = tp_subprocess("export", "exp", "--checkpoint", str(checkpoint), "--local", cwd=lab)
    assert result.code == 0, result.output
    [export] = [p for p in storage.glob("runs/*/exp/*/out/hf_export") if "trained" not in p.parts]
    names = {p.name for p in export.iterdir()}
    assert {"config.json", "model.safetensors"} <= names
    assert not names & {"optimizer.pt", "trainer_state.json", "global_step5"}
    import transformers

    model = transformers.AutoModelForCausalLM.from_pretrained(export)
    assert model.config.n_embd == 8


@pytest.mark.parametrize("module", sorted(MODULES.values()))
def test_a_folder_that_is_no_checkpoint_is_refused(tmp_path: Path, module: str) -> None:
    (tmp_path / "ckpt").mkdir()
    done = subprocess.run(
        [sys.executable, "-m", module, "--checkpoint", str(tmp_path / "ckpt"), "--output-dir", str(tmp_path / "out")],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode != 0
    assert "neither a LoRA adapter (adapter_config.json) nor a Hugging Face model folder" in done.stderr
    assert not (tmp_path / "out" / "hf_export").exists()
    missing = subprocess.run(
        [sys.executable, "-m", module, "--checkpoint", str(tmp_path / "nope")],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert missing.returncode != 0 and "no such folder" in missing.stderr


CLI_RECIPES = sorted(
    p.parent.relative_to(p.parents[2]).as_posix()
    for p in (Path(__file__).resolve().parents[1] / "catalog").glob("*/*/recipe.yaml")
    if p.parent.parent.name in ("ms-swift", "openrlhf") and "megatron" not in p.parent.name
)


@pytest.mark.parametrize("method", CLI_RECIPES)
def test_export_and_eval_run_the_recipes_lifecycle_scripts(lab: Path, tp: Any, method: str) -> None:
    assert tp("new", "exp", "--method", method).code == 0
    assert len(CLI_RECIPES) == 15
    settings = lab / "tuneplane.yaml"
    text = settings.read_text(encoding="utf-8")
    settings.write_text(
        text.replace("  defaults: {}", f'  defaults: {{{method.split("/")[0]}: "r.example/fw:1"}}', 1), encoding="utf-8"
    )
    git(lab, "add", "-A")
    git(lab, "commit", "-q", "-m", "exp")
    ckpt = "runs/alice/exp/r/out/checkpoints/checkpoint-5"
    exported = tp("export", "exp", "--checkpoint", ckpt, "--dry-run")
    assert exported.code == 0, exported.output
    assert "experiments/exp/export.py --output-dir" in exported.out and "--checkpoint" in exported.out
    evaluated = tp("eval", "exp", "--checkpoint", ckpt, "--data", "data/test.jsonl", "--dry-run")
    assert evaluated.code == 0, evaluated.output
    assert "experiments/exp/eval.py --data data/test.jsonl --report" in evaluated.out
    train_module = "swift.cli" if method.startswith("ms-swift/") else "openrlhf.cli"
    assert train_module not in exported.out + evaluated.out


def test_a_failed_merge_keeps_the_previous_export(tmp_path: Path) -> None:
    """The merge writes into a temporary folder; failing (here: OpenRLHF is not installed), it leaves
    hf_export as it was and no temporary folder behind."""
    checkpoint = tmp_path / "adapter"
    checkpoint.mkdir()
    (checkpoint / "adapter_config.json").write_text('{"base_model_name_or_path": "org/base"}', encoding="utf-8")
    (tmp_path / "out" / "hf_export").mkdir(parents=True)
    (tmp_path / "out" / "hf_export" / "keep").write_text("good", encoding="utf-8")
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            MODULES["openrlhf/sft"],
            "--checkpoint",
            str(checkpoint),
            "--output-dir",
            str(tmp_path / "out"),
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode != 0 and "openrlhf" in done.stderr
    assert (tmp_path / "out" / "hf_export" / "keep").read_text(encoding="utf-8") == "good"
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["hf_export"]
