"""`lint-checkpoint-dir`: weights written under the out dir but outside `checkpoints/`, where the
platform neither collects them nor resumes from them."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from conftest import write_tree

HEAD = "import os\nimport torch\nfrom trl import SFTConfig\n"


def _found(lab: Path, tp: Any, train_py: str) -> list[tuple[int, int, str]]:
    assert tp("new", "byo", "--method", "custom/custom").code == 0
    write_tree(lab, {"experiments/byo/train.py": HEAD + train_py})
    result = tp("validate", "byo", "--format", "json")
    assert "Traceback" not in result.output, result.output
    found = [p for p in json.loads(result.out)["problems"] if p["rule"] == "lint-checkpoint-dir"]
    assert all(p["file"] == "experiments/byo/train.py" and p["severity"] == "warning" for p in found)
    return [(p["line"], p["col"], p["message"]) for p in found]


@pytest.mark.parametrize(
    "code,where,says",
    [
        ("args = SFTConfig(output_dir=args.output_dir)\n", (4, 18), "SFTConfig(output_dir=...) is the out dir itself"),
        (
            'out = os.environ["TUNEPLANE_OUT_DIR"]\nSFTConfig(output_dir=out, save_steps=10)\n',
            (5, 11),
            "checkpoint-<step>",
        ),
        (
            'out = os.getenv("TUNEPLANE_OUT_DIR")\ntorch.save(model.state_dict(), os.path.join(out, "model.pt"))\n',
            (5, 1),
            "torch.save() writes under $TUNEPLANE_OUT_DIR but outside checkpoints/",
        ),
        ('model.save_pretrained(f"{args.output_dir}/final")\n', (4, 1), "save_pretrained() writes"),
    ],
    ids=["trl-config-from-argparse", "config-from-the-environment", "torch-save", "save-pretrained"],
)
def test_weights_beside_checkpoints_are_warned(
    lab: Path, tp: Any, code: str, where: tuple[int, int], says: str
) -> None:
    [(line, col, message)] = _found(lab, tp, code)
    assert (line, col) == where and says in message


@pytest.mark.parametrize(
    "code",
    [
        'SFTConfig(output_dir=os.path.join(args.output_dir, "checkpoints"))\n',
        'ckpt = os.path.join(os.environ["TUNEPLANE_OUT_DIR"], "checkpoints")\ntorch.save(state, f"{ckpt}/step-3.pt")\n',
        'model.save_pretrained(os.path.join(args.output_dir, "hf_export"))\n',
        'SFTConfig(output_dir=args.output_dir, save_strategy="no")\n',
        'torch.save(state, "/data/elsewhere.pt")\n',  # outside the out dir: lint-output-dir's business
        '"""torch.save(state, os.environ["TUNEPLANE_OUT_DIR"] + "/m.pt")"""\n',
    ],
    ids=["config-checkpoints", "torch-save-checkpoints", "hf-export", "saves-nothing", "not-the-out-dir", "prose"],
)
def test_checkpoints_under_checkpoints_pass(lab: Path, tp: Any, code: str) -> None:
    assert _found(lab, tp, code) == []


def test_two_experiments_with_the_same_file_are_each_warned_at_their_own_path(lab: Path, tp: Any) -> None:
    """A file's findings are computed once per text (a lab's experiments share their template's files);
    each experiment's copy is still warned under its own path, and a later edit is seen."""
    code = HEAD + "args = SFTConfig(output_dir=args.output_dir)\n"
    for name in ("one", "two"):
        assert tp("new", name, "--method", "custom/custom").code == 0
        write_tree(lab, {f"experiments/{name}/train.py": code})

    def warned() -> list[tuple[str, int]]:
        result = tp("validate", "--format", "json")
        problems = json.loads(result.out)["problems"]
        return sorted((p["file"], p["line"]) for p in problems if p["rule"] == "lint-checkpoint-dir")

    assert warned() == [("experiments/one/train.py", 4), ("experiments/two/train.py", 4)]
    write_tree(lab, {"experiments/two/train.py": "\n" + code})
    assert warned() == [("experiments/one/train.py", 4), ("experiments/two/train.py", 5)]
