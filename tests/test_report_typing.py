"""A user's training script that passes `callbacks=[TunePlaneCallback()]` to transformers' Trainer
type-checks under `mypy --strict`, while at run time the callback stays duck-typed."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from support.installed import needs

ROOT = Path(__file__).resolve().parents[1]
USER_SCRIPT = """\
from transformers import Trainer, TrainerCallback, TrainingArguments

from tuneplane.report import TunePlaneCallback

callbacks: list[TrainerCallback] = [TunePlaneCallback(), TunePlaneCallback(monitor_hardware=False, prefix="sft")]
trainer = Trainer(args=TrainingArguments(output_dir="out"), callbacks=[TunePlaneCallback()])
trainer.add_callback(TunePlaneCallback())
"""
OTHER_SCRIPT = """\
from transformers import Trainer, TrainerCallback, TrainingArguments


class Other:
    pass


callbacks: list[TrainerCallback] = [Other()]
trainer = Trainer(args=TrainingArguments(output_dir="out"), callbacks=[Other()])
"""
MYPY_CONFIG = """\
[mypy]
follow_imports = skip
[mypy-tuneplane,tuneplane.*]
follow_imports = normal
[mypy-transformers,transformers.trainer,transformers.trainer_callback,transformers.training_args]
follow_imports = normal
"""


@pytest.mark.slow
def test_a_users_script_with_the_callback_passes_mypy_strict(tmp_path: Path, pytestconfig: pytest.Config) -> None:
    """transformers ships `py.typed`, so the Trainer's `callbacks: list[TrainerCallback]` is checked:
    a callback that is not a TrainerCallback to mypy failed with `List item 0 has incompatible type`."""
    needs("mypy", "transformers")  # mypy runs as its own process
    script = tmp_path / "train.py"
    script.write_text(USER_SCRIPT, encoding="utf-8")
    # the same lines with a class that is no TrainerCallback: proof that the Trainer's types are read
    (tmp_path / "other.py").write_text(OTHER_SCRIPT, encoding="utf-8")
    # Analysing all of transformers, and torch under it, takes minutes on a fresh machine (CI). Only
    # tuneplane and the modules that define what the script's lines are checked against are read whole:
    # the Trainer, its callback base (with TrainerState and TrainerControl) and TrainingArguments. Every
    # other module (the rest of transformers, torch, accelerate…) reads as untyped, which can only let
    # through what the check is not about.
    (tmp_path / "mypy.ini").write_text(MYPY_CONFIG, encoding="utf-8")
    cache = pytestconfig.cache.mkdir("mypy-user-script") if pytestconfig.cache else tmp_path / ".mypy_cache"
    # tuneplane found as an installed package would be: by path
    env = {**os.environ, "MYPYPATH": str(ROOT)}
    mypy = [sys.executable, "-m", "mypy", "--strict", "--cache-dir", str(cache), "--config-file", "mypy.ini"]
    done = subprocess.run(
        [*mypy, str(script), "other.py"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    errors = [line for line in done.stdout.splitlines() if ": error: " in line]
    assert [line.split(":")[0] for line in errors] == ["other.py", "other.py"], done.stdout + done.stderr
    assert all('List item 0 has incompatible type "Other"' in line for line in errors), done.stdout


def test_at_run_time_the_callback_is_not_a_trainer_callback() -> None:
    """Duck-typed as the contract says: only a type checker sees transformers' base class."""
    transformers = pytest.importorskip("transformers")
    from tuneplane.report import TunePlaneCallback

    assert TunePlaneCallback.__mro__ == (TunePlaneCallback, object)
    assert not isinstance(TunePlaneCallback(), transformers.TrainerCallback)
