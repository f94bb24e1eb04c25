"""Plain-text tables for the terminal (no rich: it costs start-up time).

Cells are cut and padded by display width (`tuneplane.views.textcols`): a CJK name takes two
columns a character and the columns stay aligned; a cell over `max_width` columns ends in `…`.
"""

from __future__ import annotations

from collections.abc import Sequence

from tuneplane.views.textcols import columns, cut_columns, ljust, printable


def table(headers: Sequence[str], rows: Sequence[Sequence[object]], max_width: int = 60) -> str:
    cells = [[cut_columns(printable(str(c)), max_width) for c in row] for row in rows]
    widths = [max([columns(h)] + [columns(r[i]) for r in cells]) for i, h in enumerate(headers)]
    lines = ["  ".join(ljust(h, w) for h, w in zip(headers, widths, strict=True)).rstrip(),
             "  ".join("-" * w for w in widths)]
    lines += ["  ".join(ljust(c, w) for c, w in zip(row, widths, strict=True)).rstrip() for row in cells]
    return "\n".join(lines)
