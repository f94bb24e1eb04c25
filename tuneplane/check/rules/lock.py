"""Rule `lock-*`: recipe.lock.json parses, has the right shape, and the current catalog admits it.

Passing: a lock written by `tp new` against this catalog.
Failing: `"digest": "sha256:000…"` edited by hand → `lock-tampered`; a recipe whose framework version
was removed from the catalog → `lock-blocking`; a changed template → `lock-drift` (a warning).
"""

from __future__ import annotations

from collections.abc import Iterator

from tuneplane.check.rules.context import ExperimentContext
from tuneplane.lab.locks import admit
from tuneplane.problems import Problem


def check(ctx: ExperimentContext) -> Iterator[Problem]:
    if ctx.lock is None or ctx.lock_doc is None:
        return
    yield from admit(ctx.lock, ctx.lock_doc, ctx.catalog, ctx.name, starforge_lab=ctx.lab.legacy)
