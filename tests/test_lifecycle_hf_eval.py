"""The generic evaluation the catalog's eval.py files call: row formats and answer matching.

The model side needs torch and transformers (the training image's); what decides a score is here.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tuneplane.lifecycle.hf_eval import final_answer, normalise, pair_texts, split_row

ROOT = Path(__file__).resolve().parents[1]


class PlainTokenizer:
    chat_template = None


class ChatTokenizer:
    chat_template = "x"

    def apply_chat_template(self, messages, tokenize, add_generation_prompt):
        return "|".join(m["content"] for m in messages) + ("<gen>" if add_generation_prompt else "")


@pytest.mark.parametrize(
    "row, expected",
    [
        (
            {"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]},
            ("user: hi\nassistant:", "hello", None),
        ),
        ({"prompt": "2+2?", "completion": "4", "answer": 4}, ("2+2?", "4", "4")),
        ({"prompt": "q", "completion": [{"role": "assistant", "content": "a"}]}, ("q", "a", None)),
        ({"input": "capital of France", "output": "Paris"}, ("capital of France", "Paris", "Paris")),
        ({"text": "some text"}, ("", "some text", None)),
        ({"prompt": "q", "solution": "7"}, ("q", None, "7")),
    ],
)
def test_each_row_format(row, expected):
    assert split_row(row, PlainTokenizer()) == expected


def test_chat_rows_go_through_the_chat_template():
    row = {"messages": [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}]}
    assert split_row(row, ChatTokenizer()) == ("a<gen>", "b", None)


def test_an_unreadable_row_stops_with_its_keys():
    with pytest.raises(SystemExit, match=r"\['question'\]"):
        split_row({"question": "?"}, PlainTokenizer())


@pytest.mark.parametrize(
    "text, answer",
    [
        ("so the result is \\boxed{1,024}.", "1024"),
        ("first 3 then 17", "17"),
        ("The Answer.", "the answer"),
        ("-2.5 apples", "-2.5"),
    ],
)
def test_final_answers(text, answer):
    assert final_answer(text) == answer


def test_normalise_ignores_case_spacing_commas_and_a_final_period():
    assert normalise("  New   York, NY. ") == normalise("new york ny")


@pytest.mark.parametrize("template", sorted(ROOT.glob("catalog/*/*/template/eval.py")), ids=lambda p: p.parts[-4])
def test_template_eval_scripts_run_the_shared_evaluation(template, tmp_path):
    """Each template's eval.py is a thin, replaceable front to hf_eval: its --help is hf_eval's."""
    result = subprocess.run([sys.executable, str(template), "--help"], capture_output=True, text=True)
    assert result.returncode == 0 and "--report" in result.stdout and "--data" in result.stdout


class EosTokenizer(PlainTokenizer):
    eos_token = "<eos>"


@pytest.mark.parametrize(
    "row, expected",
    [
        ({"prompt": "2+2? ", "chosen": "4", "rejected": "5"}, ("2+2? 4<eos>", "2+2? 5<eos>")),
        ({"chosen": "good<eos>", "rejected": "bad"}, ("good<eos>", "bad<eos>")),  # an eos is not doubled
        (
            {
                "prompt": [{"role": "user", "content": "q"}],
                "chosen": [{"role": "assistant", "content": "a"}],
                "rejected": [{"role": "assistant", "content": "b"}],
            },
            ("user: q\nassistant: a", "user: q\nassistant: b"),
        ),
    ],
)
def test_a_reward_model_reads_preference_pairs_as_trl_joins_them(row, expected):
    assert pair_texts(row, EosTokenizer()) == expected


@pytest.mark.parametrize(
    "row, message",
    [
        (
            {"prompt": "q", "completion": "a"},
            r"rows need `chosen` and `rejected`, this one has \['completion', 'prompt'\]",
        ),
        (
            {"prompt": "q", "chosen": [{"role": "assistant", "content": "a"}], "rejected": []},
            "must all be text or all chat messages",
        ),
    ],
)
def test_a_row_that_is_no_preference_pair_stops_with_a_message(row, message):
    with pytest.raises(SystemExit, match=message):
        pair_texts(row, EosTokenizer())
