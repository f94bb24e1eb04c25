"""Text in terminal columns: what a table pads and cuts by, so wide and long names keep it aligned.

A CJK ideograph or a fullwidth form takes two columns (`unicodedata.east_asian_width` W or F), a
combining mark or a zero-width format character none, anything else one. A control character (a
newline in a metric name) is shown escaped (`\\n`), so one cell stays on one line. Pure and standard
library only.
"""

from __future__ import annotations

import unicodedata

from tuneplane.gitops.charts_legend import ELLIPSIS


def printable(text: str) -> str:
    """`text` with each control character escaped (`\\n`, `\\x1b`), so a cell is one line."""
    if text.isprintable():
        return text
    return "".join(ch if ch.isprintable() or ch == " " else ascii(ch)[1:-1] for ch in text)


def char_columns(ch: str) -> int:
    if unicodedata.combining(ch) or unicodedata.category(ch) in ("Mn", "Me", "Cf"):
        return 0
    return 2 if unicodedata.east_asian_width(ch) in ("W", "F") else 1


def columns(text: str) -> int:
    """The terminal columns `text` takes."""
    if text.isascii():
        return len(text)
    return sum(char_columns(ch) for ch in text)


def cut_columns(text: str, limit: int) -> str:
    """`text` in at most `limit` columns, the end replaced by an ellipsis when cut."""
    if columns(text) <= limit:
        return text
    kept: list[str] = []
    used = 0
    for ch in text:
        width = char_columns(ch)
        if used + width > limit - 1:  # one column for the ellipsis
            break
        kept.append(ch)
        used += width
    return "".join(kept) + ELLIPSIS


def ljust(text: str, width: int) -> str:
    return text + " " * max(0, width - columns(text))


def rjust(text: str, width: int) -> str:
    return " " * max(0, width - columns(text)) + text
