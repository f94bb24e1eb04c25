"""Plain-text tables for the terminal (no rich: it costs start-up time)."""

from __future__ import annotations

from collections.abc import Sequence

from tuneplane.gitops.charts_legend import cut


def table(headers: Sequence[str], rows: Sequence[Sequence[object]], max_width: int = 60) -> str:
    cells = [[cut(str(c), max_width) for c in row] for row in rows]
    widths = [max([len(h)] + [len(r[i]) for r in cells]) for i, h in enumerate(headers)]
    lines = ["  ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True)).rstrip(),
             "  ".join("-" * w for w in widths)]
    lines += ["  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in cells]
    return "\n".join(lines)


