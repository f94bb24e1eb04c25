"""TunePlaneCallback inside TRL's preference and RL trainers (DPO, GRPO) on CPU: a tiny randomly
initialised GPT-2 built in the test, a real receiver, and the catalog recipe's vocabulary reading what
was stored, so the recipe's primary metrics are found under their canonical names, evaluation is
validation, each evaluation once, and the end-of-training summary is apart."""

from __future__ import annotations

from pathlib import Path

import pytest
from support.installed import needs
from test_report_hf import SETUP, run_trainer

from tuneplane.ingest import series, summary
from tuneplane.lab.catalog import load_catalog
from tuneplane.metrics.vocab import Vocabulary, counts

DPO = (
    SETUP
    + r"""
import copy
from datasets import Dataset
from trl import DPOConfig, DPOTrainer
pairs = {"prompt": ["the cat", "a dog", "the mat", "a cat"] * 3,
         "chosen": [" sat on a mat", " ran far", " sat", " ran"] * 3,
         "rejected": [" far", " mat", " dog ran", " the"] * 3}
data = Dataset.from_dict(pairs)
trainer = DPOTrainer(model=model, ref_model=copy.deepcopy(model), processing_class=tokenizer,
                     train_dataset=data, eval_dataset=data, args=DPOConfig(**common, max_length=16),
                     callbacks=[callback])
trainer.train()
trainer.evaluate()
"""
)
GRPO = (
    SETUP
    + r"""
from datasets import Dataset
from trl import GRPOConfig, GRPOTrainer
data = Dataset.from_dict({"prompt": ["the cat", "a dog", "the mat", "a cat"] * 3})
def length(completions, **kwargs):
    return [float(len(c)) for c in completions]
trainer = GRPOTrainer(model=model, processing_class=tokenizer, reward_funcs=length, train_dataset=data,
                      eval_dataset=data, args=GRPOConfig(**common, num_generations=2, max_completion_length=4),
                      callbacks=[callback])
trainer.train()
trainer.evaluate()
"""
)
# What each trainer logs that its recipe names primary (TRL leaves `kl` out while beta is 0, its default).
CASES = {
    "dpo": (
        DPO,
        "trl/dpo",
        [
            "train/loss",
            "validation/loss",
            "train/reward_margin",
            "train/reward_accuracy",
            "train/grad_norm",
            "train/lr",
        ],
    ),
    "grpo": (
        GRPO,
        "trl/grpo",
        [
            "train/reward",
            "validation/reward",
            "train/reward_std",
            "train/entropy",
            "train/response_length",
            "train/loss",
            "train/grad_norm",
        ],
    ),
}


@pytest.mark.slow
@pytest.mark.parametrize("trainer", list(CASES))
def test_trl_preference_and_rl_trainers_show_their_recipes_primary_metrics(tmp_path: Path, trainer: str) -> None:
    needs("trl")
    needs("datasets")
    script, recipe, shown_first = CASES[trainer]
    server, done = run_trainer(tmp_path, script, f"run-{trainer}")
    stored = summary(server.store.path, f"run-{trainer}")
    metrics = load_catalog().recipe(recipe).metrics
    names = Vocabulary.of(metrics.aliases, metrics.primary).pick(stored, counts(stored))
    assert list(names)[: len(shown_first)] == shown_first, list(names)
    # every evaluation once, by on_evaluate, at the step it ran (3 in training, 4 from evaluate())
    assert names["validation/loss"] == "validation/loss"
    assert [step for step, _ in series(server.store.path, f"run-{trainer}", "validation/loss")] == [3, 4]
    assert not [key for key in stored if key.startswith("eval") or key in ("loss", "validation/epoch")]
    assert "summary/train_loss" in stored and "train/train_loss" not in stored
    assert "after finish()" not in done.stderr
