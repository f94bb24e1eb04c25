"""`tp export` of a NeMo-RL run: the newest step is converted by NeMo-RL's converter and published whole.

NeMo-RL does not install here (its only PyPI release is a placeholder), so its converter is stood in
for by a module that does what the real one must: read the shards it is pointed at, write a folder.
"""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path

import pytest

from tuneplane.lifecycle import nemo_rl_export

CONVERTER = """
import json
from pathlib import Path

def convert_dcp_to_hf(*, dcp_ckpt_path, hf_ckpt_path, model_name_or_path, tokenizer_name_or_path, overwrite):
    weights = Path(dcp_ckpt_path)
    if not (weights / ".metadata").is_file():
        raise FileNotFoundError(f"not a distributed checkpoint: {weights}")
    out = Path(hf_ckpt_path)
    if out.exists() and not overwrite:
        raise FileExistsError(out)
    out.mkdir(parents=True)
    (out / "config.json").write_text(json.dumps({"from": str(weights), "model": model_name_or_path,
                                                 "tokenizer": tokenizer_name_or_path}))
"""


@pytest.fixture()
def converter(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """NeMo-RL's newer module path only (`automodel_checkpoint`): the older one is missing, as in 0.7."""
    root = tmp_path / "site"
    pkg = root / "nemo_rl" / "utils"
    pkg.mkdir(parents=True)
    (root / "nemo_rl" / "__init__.py").write_text("")
    (pkg / "__init__.py").write_text("")
    (pkg / "automodel_checkpoint.py").write_text(textwrap.dedent(CONVERTER))
    monkeypatch.syspath_prepend(str(root))
    for name in [m for m in sys.modules if m.startswith("nemo_rl")]:
        monkeypatch.delitem(sys.modules, name)


def _step(base: Path, n: int, tokenizer: bool = True) -> Path:
    step = base / f"step_{n}"
    (step / "policy" / "weights").mkdir(parents=True)
    (step / "policy" / "weights" / ".metadata").write_text("dcp")
    if tokenizer:
        (step / "policy" / "tokenizer").mkdir()
    (step / "config.yaml").write_text("policy:\n  model_name: Qwen/Qwen3-0.6B\n")
    return step


def _exported(out: Path) -> dict[str, str]:
    import json

    return json.loads((out / "hf_export" / "config.json").read_text())


def test_the_newest_step_is_converted_numerically_and_published(tmp_path: Path, converter: None):
    out = tmp_path / "out"
    _step(out, 9)
    newest = _step(out / "checkpoints", 10, tokenizer=False)  # 10 > 9, in either folder NeMo-RL uses
    assert nemo_rl_export.main(["--output-dir", str(out)]) == 0
    exported = _exported(out)
    assert exported["from"] == str(newest / "policy" / "weights")
    assert exported["tokenizer"] == "Qwen/Qwen3-0.6B"  # no tokenizer folder: the model's own
    assert not (out / "hf_export.partial").exists()


def test_a_named_checkpoint_and_its_tokenizer_are_used(tmp_path: Path, converter: None):
    out = tmp_path / "out"
    _step(out, 20)
    chosen = _step(out, 3)
    assert nemo_rl_export.main(["--output-dir", str(out), "--checkpoint", str(chosen)]) == 0
    assert _exported(out)["tokenizer"] == str(chosen / "policy" / "tokenizer")


def test_a_failed_conversion_leaves_the_last_export(tmp_path: Path, converter: None):
    out = tmp_path / "out"
    _step(out, 1)
    assert nemo_rl_export.main(["--output-dir", str(out)]) == 0
    before = _exported(out)
    broken = _step(out, 2)
    (broken / "policy" / "weights" / ".metadata").unlink()
    with pytest.raises(FileNotFoundError):
        nemo_rl_export.main(["--output-dir", str(out)])
    assert _exported(out) == before


def test_no_checkpoint_says_what_to_do(tmp_path: Path, converter: None):
    with pytest.raises(SystemExit, match="no step_<n> checkpoint under .*train first, or pass --checkpoint"):
        nemo_rl_export.main(["--output-dir", str(tmp_path / "out")])
