"""A user's training script that passes `callbacks=[TunePlaneCallback()]` to transformers' Trainer
type-checks under `mypy --strict`, while at run time the callback stays duck-typed."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
USER_SCRIPT = """\
from transformers import Trainer, TrainerCallback, TrainingArguments

from tuneplane.report import TunePlaneCallback

callbacks: list[TrainerCallback] = [TunePlaneCallback(), TunePlaneCallback(monitor_hardware=False, prefix="sft")]
trainer = Trainer(args=TrainingArguments(output_dir="out"), callbacks=[TunePlaneCallback()])
trainer.add_callback(TunePlaneCallback())
"""


@pytest.mark.slow
def test_a_users_script_with_the_callback_passes_mypy_strict(tmp_path: Path, pytestconfig: pytest.Config) -> None:
    """transformers ships `py.typed`, so the Trainer's `callbacks: list[TrainerCallback]` is checked:
    a callback that is not a TrainerCallback to mypy failed with `List item 0 has incompatible type`."""
    pytest.importorskip("mypy")
    pytest.importorskip("transformers")
    script = tmp_path / "train.py"
    script.write_text(USER_SCRIPT, encoding="utf-8")
    # Analysing transformers takes a minute and a half the first time: its cache is kept between runs.
    cache = pytestconfig.cache.mkdir("mypy-user-script") if pytestconfig.cache else tmp_path / ".mypy_cache"
    # tuneplane found as an installed package would be: by path, under the user's own (empty) mypy config
    env = {**os.environ, "MYPYPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--cache-dir", str(cache), "--config-file", "", str(script)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "Success: no issues found" in done.stdout


def test_at_run_time_the_callback_is_not_a_trainer_callback() -> None:
    """Duck-typed as the contract says: only a type checker sees transformers' base class."""
    transformers = pytest.importorskip("transformers")
    from tuneplane.report import TunePlaneCallback

    assert TunePlaneCallback.__mro__ == (TunePlaneCallback, object)
    assert not isinstance(TunePlaneCallback(), transformers.TrainerCallback)
