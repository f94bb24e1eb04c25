"""The metric vocabulary's own rules, on the catalog's real recipes: a canonical name read again
names itself, aliases that chain are followed and a cycle ends, two keys for one name pick one and
keep both answerable, a namespace is found in any case, and odd keys (spaces, unicode) keep theirs."""

from __future__ import annotations

import pytest

from tuneplane.lab.catalog import load_catalog
from tuneplane.metrics.vocab import Vocabulary

# What TRL, transformers (with and without the callback's rewrite), verl, NeMo-RL, TensorBoard
# scripts and custom jobs log, in the spellings seen in the wild.
KEYS = (
    "loss",
    "eval_loss",
    "train_loss",
    "train/loss",
    "eval/loss",
    "validation/loss",
    "train/train_loss",
    "learning_rate",
    "lr",
    "grad_norm",
    "mean_token_accuracy",
    "eval_mean_token_accuracy",
    "rewards/chosen",
    "eval_rewards/margins",
    "rewards/margins",
    "train/rewards/margins",
    "approx_entropy",
    "train_approx_entropy",
    "train/approx_entropy",
    "kl_penalty",
    "train/kl_penalty",
    "mean_gen_tokens_per_sample",
    "val_reward",
    "validation/val_reward",
    "validation/eval_loss",
    "eval_val_reward",
    "validation/val_loss",
    "val_loss",
    "val/loss",
    "val-core/gsm8k/reward/mean@1",
    "val-aux/gsm8k/score",
    "Loss/train",
    "Loss/Train",
    "Train/Loss",
    "TRAIN/loss",
    "EVAL_LOSS",
    "Eval/Loss",
    "Validation/Loss",
    "Accuracy/val",
    "ray/node.0.gpu.0.util",
    "hw/gpu_util",
    "actor/kl",
    "critic/score/mean",
    "bench/score",
    "my loss",
    "损失",
    "train/损失",
    "a" * 300,
)


def vocabularies() -> dict[str, Vocabulary]:
    catalog = load_catalog()
    found = {
        rid: Vocabulary.of(catalog.recipe(rid).metrics.aliases, catalog.recipe(rid).metrics.primary)
        for rid in catalog.ids
    }
    assert any(v.aliases for v in found.values())  # the catalog declares aliases to test against
    found["custom"] = Vocabulary()
    return found


@pytest.mark.parametrize(("recipe", "vocab"), list(vocabularies().items()))
def test_a_canonical_name_read_again_names_itself(recipe: str, vocab: Vocabulary) -> None:
    """A status's keys, a chart's, a query for a shown name: read again, they must not move (NeMo-RL's
    `approx_entropy` was `train/approx_entropy`, which its recipe renames to `train/entropy`)."""
    moved = {key: (vocab.canonical(key), vocab.canonical(vocab.canonical(key))) for key in KEYS}
    assert {k: v for k, v in moved.items() if v[0] != v[1]} == {}
    for key in ("test_loss", "test/accuracy"):  # an evaluation job's own namespace is final
        assert vocab.canonical(key).startswith("eval/")


def test_aliases_that_chain_are_followed_to_their_end() -> None:
    nemo = vocabularies()["nemo-rl/grpo"]
    assert nemo.aliases["train/approx_entropy"] == "train/entropy"
    for logged in ("approx_entropy", "train_approx_entropy", "train/approx_entropy"):
        assert nemo.canonical(logged) == "train/entropy"
    assert nemo.canonical("validation/val_reward") == nemo.canonical("eval_val_reward") == "validation/reward"
    chain = Vocabulary.of({"loss": "train/objective", "train/objective": "train/total"})
    assert chain.canonical("loss") == chain.canonical("train/objective") == "train/total"
    assert chain.canonical("eval_loss") == "validation/total"  # the evaluation twin follows it too


def test_a_cycle_of_aliases_ends_and_answers_the_same_every_time() -> None:
    cycle = Vocabulary.of({"a": "train/b", "train/b": "a", "x": "train/y", "train/y": "train/z", "train/z": "train/y"})
    for key in ("a", "train/b", "x", "train/y", "train/z"):
        first = cycle.canonical(key)
        assert cycle.canonical(key) == first and cycle.canonical(first) == first
    long_chain = Vocabulary.of({f"train/k{i}": f"train/k{i + 1}" for i in range(100)})
    assert long_chain.canonical("train/k0").startswith("train/k")  # cut, not a hang


def test_two_keys_for_one_name_pick_one_and_both_stay_answerable() -> None:
    vocab = Vocabulary.of({"nll": "train/loss"})
    stored = ["loss", "nll", "train/loss"]
    # the key already spelled canonically answers; the others stay queryable by their own names
    assert vocab.pick(stored) == {"train/loss": "train/loss"}
    assert vocab.raw_keys("train/loss", stored) == ["train/loss"]
    assert vocab.raw_keys("train/loss", ["loss", "nll"]) == ["loss", "nll"]
    assert vocab.pick(["loss", "nll"], {"loss": 1, "nll": 50}) == {"train/loss": "nll"}  # heavier wins
    assert vocab.resolve("nll", ["loss", "nll"]) == "nll" and vocab.resolve("loss", ["loss", "nll"]) == "loss"


def test_a_namespace_is_found_in_any_case_and_a_title_reads_in_lower_case() -> None:
    vocab = Vocabulary()
    for key in ("Train/Loss", "TRAIN/loss", "Loss/Train", "Loss/train", "train_loss"):
        assert vocab.canonical(key) == "train/loss", key
    for key in ("EVAL_LOSS", "Eval/Loss", "Validation/Loss", "Loss/Val", "val_loss", "eval_loss"):
        assert vocab.canonical(key) == "validation/loss", key
    # a namespace written in lower case keeps the metric's own spelling
    assert vocab.canonical("train/F1_Macro") == "train/F1_Macro"
    assert vocab.canonical("eval/Loss") == "validation/Loss"


def test_keys_with_spaces_and_unicode_keep_their_names() -> None:
    vocab = Vocabulary()
    assert vocab.canonical("my loss") == "train/my loss"
    assert vocab.canonical("损失") == "train/损失" and vocab.canonical("train/损失") == "train/损失"
    assert vocab.canonical("eval_准确率") == "validation/准确率"
    assert vocab.order(["hw/gpu", "train/损失", "train/loss"]) == ["train/loss", "train/损失", "hw/gpu"]
