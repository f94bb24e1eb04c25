"""One final-answer parser: `tp eval`'s answer_accuracy, TRL's rewards and every verl template's
compute_score read a response the same way, so a run is trained towards what it is scored on."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.test_catalog_content import CATALOG, load_module
from tuneplane.lifecycle import answers, hf_eval, trl_rewards

CASES = [  # (response, reference, score)
    ("so the answer is \\boxed{42}", "42", 1.0),
    ("\\boxed{41} no wait, \\boxed{ 42. }", "#### 42", 1.0),  # the last box, normalised
    ("about 1,250 apples", "1250", 1.0),
    ("the answer is 41", "#### 42", 0.0),
    ("forty-two", "42", 0.0),  # nothing readable is wrong, even against a text reference
    ("forty-two", "forty-two", 0.0),
    ("\\boxed{Paris}", "paris", 1.0),
    ("-3.5 then 7", "7", 1.0),
    ("", "0", 0.0),
]


@pytest.mark.parametrize(("response", "reference", "score"), CASES)
def test_every_consumer_scores_a_response_alike(response: str, reference: str, score: float) -> None:
    assert answers.answer_score(response, reference) == score
    assert trl_rewards.accuracy_reward([response], answer=[reference]) == [score]
    for path in sorted(CATALOG.glob("verl/*/template/reward.py")):
        verl = load_module(path, f"verl_reward_{path.parts[-3]}")
        assert verl.compute_score("gsm8k", response, reference) == score, path
    if answers.final_answer(response) is not None:  # `tp eval` compares a text with no answer whole
        assert (hf_eval.final_answer(response) == hf_eval.final_answer(reference)) == (score == 1.0)


def test_verl_templates_are_one_file_that_imports_the_parser() -> None:
    texts = {p.read_text() for p in CATALOG.glob("verl/*/template/reward.py")}
    assert len(texts) == 1 and "from tuneplane.lifecycle.answers import" in texts.pop()


def test_the_parser_needs_only_the_standard_library() -> None:
    code = (
        "import sys; import tuneplane.lifecycle.answers; "
        "bad = {m.split('.')[0] for m in sys.modules} & {'pydantic', 'yaml', 'torch', 'transformers', 'jinja2'}; "
        "assert not bad, bad"
    )
    subprocess.run([sys.executable, "-c", code], check=True, cwd=Path(__file__).parent.parent)
