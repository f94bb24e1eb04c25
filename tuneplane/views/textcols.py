"""Text in terminal columns: what a table pads and cuts by, so wide and long names keep it aligned.

A CJK ideograph or a fullwidth form takes two columns (`unicodedata.east_asian_width` W or F), a
combining mark or a zero-width format character none, an emoji sequence (a joiner, a skin tone, a
presentation selector) the columns of its first emoji, anything else one. A control character (a
newline in a metric name) is shown escaped (`\\n`), so one cell stays on one line. Pure and standard
library only.
"""

from __future__ import annotations

import unicodedata

ELLIPSIS = "…"

_BIDI = frozenset(range(0x202A, 0x202F)) | frozenset(range(0x2066, 0x206A))  # they reorder what follows them


def printable(text: str) -> str:
    """`text` with each control character (a newline, an escape, a bidi override) escaped (`\\n`, `\\x1b`),
    so a cell is one line that reads in order; spaces, joiners and variation selectors stay."""
    if text.isprintable():
        return text
    return "".join(
        ascii(ch)[1:-1] if unicodedata.category(ch) in ("Cc", "Zl", "Zp") or ord(ch) in _BIDI else ch for ch in text
    )


def char_columns(ch: str) -> int:
    if unicodedata.combining(ch) or unicodedata.category(ch) in ("Mn", "Me", "Cf"):
        return 0
    return 2 if unicodedata.east_asian_width(ch) in ("W", "F") else 1


def widths(text: str) -> list[int]:
    """The columns each character of `text` takes where it stands, as a terminal draws it: an emoji
    joined to the one before it (after U+200D), a skin tone and a decomposed Hangul vowel or final
    consonant take none, and U+FE0F draws the character before it as a two-column emoji."""
    out: list[int] = []
    joined = False
    for ch in text:
        code = ord(ch)
        if code == 0xFE0F:
            if out and out[-1] == 1:
                out[-1] = 2
            width = 0
        elif 0x1F3FB <= code <= 0x1F3FF or 0x1160 <= code <= 0x11FF or joined and char_columns(ch) == 2:
            width = 0
        else:
            width = char_columns(ch)
        joined = code == 0x200D
        out.append(width)
    return out


def columns(text: str) -> int:
    """The terminal columns `text` takes."""
    if text.isascii():
        return len(text)
    return sum(widths(text))


def _fit(chars: list[tuple[str, int]], budget: int) -> list[str]:
    """The leading `chars` that fit in `budget` columns (a zero-width one stays with the one before)."""
    kept: list[str] = []
    used = 0
    for ch, width in chars:
        if used + width > budget:
            break
        kept.append(ch)
        used += width
    return kept


def cut_columns(text: str, limit: int) -> str:
    """`text` in at most `limit` columns, the end replaced by an ellipsis when cut."""
    if columns(text) <= limit:
        return text
    return "".join(_fit(list(zip(text, widths(text), strict=True)), limit - 1)) + ELLIPSIS


def cut_middle(text: str, limit: int) -> str:
    """`text` in at most `limit` columns, an ellipsis for its middle when cut: metric names that share a
    long prefix (`validation/…/reward_model_score/mean@16`, `…/best@16/std`) differ at the end."""
    if columns(text) <= limit:
        return text
    chars = list(zip(text, widths(text), strict=True))
    head = _fit(chars, (limit - 1) // 3)
    tail = _fit(chars[::-1], limit - 1 - columns("".join(head)))[::-1]
    return "".join(head) + ELLIPSIS + "".join(tail)


def ljust(text: str, width: int) -> str:
    return text + " " * max(0, width - columns(text))


def rjust(text: str, width: int) -> str:
    return " " * max(0, width - columns(text)) + text
