"""Text in terminal columns (tuneplane/views/textcols.py): what the metrics table and `cli.tables`
pad and cut by, so a CJK or fullwidth name keeps the columns aligned and a long one is cut."""

from __future__ import annotations

import pytest

from tuneplane.cli.tables import table
from tuneplane.views.textcols import columns, cut_columns, cut_middle, ljust, printable, rjust


def test_columns_count_wide_characters_twice_and_marks_not_at_all() -> None:
    assert columns("loss") == 4
    assert columns("损失") == 4 and columns("ｌｏｓｓ") == 8  # wide ideographs and fullwidth forms
    assert columns("e\u0301") == 1 and columns("a\u200db") == 2  # a combining accent, a zero-width joiner
    assert columns("▁█") == 2  # the sparkline's blocks are one column each


def test_cut_keeps_to_the_columns_with_the_ellipsis_and_never_splits_a_wide_character() -> None:
    assert cut_columns("short", 10) == "short"
    assert cut_columns("x" * 300, 48) == "x" * 47 + "…"
    assert cut_columns("损失损失损失", 6) == "损失…" and columns(cut_columns("损失损失损失", 6)) == 5
    assert cut_columns("a损失", 3) == "a…"


def test_padding_is_by_columns_and_control_characters_are_shown_escaped() -> None:
    assert ljust("损失", 6) == "损失  " and rjust("损失", 5) == " 损失"
    assert printable("a\nb\x1bc") == "a\\nb\\x1bc" and printable("损失 x") == "损失 x"


def test_cli_tables_align_wide_cells_and_cut_long_ones() -> None:
    """A table fits the width it is given (the terminal's): the widest column gives way, cut with `…`,
    and a CJK cell takes two columns a character, so the next column stays aligned."""
    lines = table(["name", "n"], [["损失", 1], ["loss", 2], ["x" * 100, 3]], width=20).splitlines()
    assert [columns(line[: line.rindex(" ") + 1]) for line in lines[2:]] == [19, 19, 19], lines
    assert all(columns(line) <= 20 for line in lines), lines
    assert lines[4].startswith("x" * 16 + "…")


@pytest.mark.parametrize(
    ("text", "cols"),
    [
        ("👩\u200d🔬", 2),  # a joined emoji is one picture
        ("❤\ufe0f", 2),  # the presentation selector draws the heart as an emoji
        ("👍🏽", 2),  # a skin tone modifies the emoji before it
        ("\u1100\u1161\u11a8", 2),  # decomposed Hangul: one syllable
        ("训练\u3000损失", 10),  # the ideographic space is a fullwidth space
        ("a\u00a0b", 3),
    ],
)
def test_emoji_sequences_and_spaces_stay_and_take_a_terminals_columns(text: str, cols: int) -> None:
    assert printable(text) == text
    assert columns(text) == cols


def test_a_bidi_override_is_escaped_so_the_row_reads_in_order() -> None:
    assert printable("loss\u202e/x") == "loss\\u202e/x"
    assert printable("a\u2066b") == "a\\u2066b"


def test_a_middle_cut_keeps_the_ends_that_tell_long_keys_apart() -> None:
    a = "validation/val-core/openai/gsm8k/reward_model_score/mean@16"
    b = "validation/val-core/openai/gsm8k/reward_model_score/best@16/std"
    cut_a, cut_b = cut_middle(a, 48), cut_middle(b, 48)
    assert cut_a != cut_b and columns(cut_a) == columns(cut_b) == 48
    assert cut_a.startswith("validation/") and cut_a.endswith("mean@16") and "…" in cut_a
    assert cut_b.endswith("best@16/std")
    wide = cut_middle("训练损失" * 20, 48)
    assert columns(wide) <= 48 and wide.endswith("损失")
    assert cut_middle("short", 48) == "short"
