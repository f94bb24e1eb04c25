"""Plain-text tables for the terminal (no rich: it costs start-up time).

Cells are cut and padded by display width (`tuneplane.views.textcols`): a CJK name takes two
columns a character and the columns stay aligned. A table fits the terminal's width (`COLUMNS`, else
the terminal's own size): the widest columns give way first, each cut cell ending in `…`. Output to a
pipe or a file with no `COLUMNS` set is never cut.
"""

from __future__ import annotations

import shutil
from collections.abc import Sequence

from tuneplane.views.textcols import columns, cut_columns, ljust, printable

GAP = 2  # columns between two cells
NARROWEST = 12  # a column is never cut below this (or its header, when wider)


def terminal_width() -> int | None:
    """The width to fit: `COLUMNS`, else the terminal's; None when writing to neither (never cut)."""
    width = shutil.get_terminal_size(fallback=(0, 0)).columns
    return width or None


def fit(widths: list[int], total: int, floors: list[int]) -> list[int]:
    """`widths` narrowed, widest first and never below `floors`, until they and the gaps fit `total`."""
    widths = list(widths)
    while sum(widths) + GAP * (len(widths) - 1) > total:
        excess = sum(widths) + GAP * (len(widths) - 1) - total
        shrinkable = [i for i, w in enumerate(widths) if w > floors[i]]
        if not shrinkable:
            break
        widest = max(shrinkable, key=lambda i: widths[i])
        widths[widest] = max(floors[widest], widths[widest] - excess)
    return widths


def table(headers: Sequence[str], rows: Sequence[Sequence[object]], width: int | None = -1) -> str:
    """The table as lines; `width` the columns to fit (-1: the terminal's, None: never cut)."""
    limit = terminal_width() if width == -1 else width
    cells = [[printable(str(c)) for c in row] for row in rows]
    natural = [max([columns(h)] + [columns(r[i]) for r in cells]) for i, h in enumerate(headers)]
    widths = (
        natural
        if limit is None
        else fit(natural, limit, [max(columns(h), min(n, NARROWEST)) for h, n in zip(headers, natural, strict=True)])
    )
    cells = [[cut_columns(c, w) for c, w in zip(row, widths, strict=True)] for row in cells]
    lines = [
        "  ".join(ljust(h, w) for h, w in zip(headers, widths, strict=True)).rstrip(),
        "  ".join("-" * w for w in widths),
    ]
    lines += ["  ".join(ljust(c, w) for c, w in zip(row, widths, strict=True)).rstrip() for row in cells]
    return "\n".join(lines)
