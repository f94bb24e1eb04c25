"""Rules `plugins-lock-*`: plugins.lock.json is well formed and every locked plugin matches its digest.

The lock's plugins are checked against it here too: `plugin-requires-core`, `plugin-framework`,
`plugin-module-collision`.

Passing: a lock written by `tp plugin lock EXP alice/opsd`, with `plugins/opsd/` unchanged since.
Failing: a file under `plugins/opsd/` edited after locking → the digest differs; an algorithm plugin
locked by a custom or evalkit experiment → refused; a recipe's required plugin with no lock entry.
"""

from __future__ import annotations

from collections.abc import Iterator

from tuneplane import __version__
from tuneplane.check.rules.context import ExperimentContext
from tuneplane.lab.fs import present
from tuneplane.problems import Problem


def check(ctx: ExperimentContext) -> Iterator[Problem]:
    if ctx.lock is None:
        return
    if not present(ctx.dir / "plugins.lock.json") and not (ctx.recipe and ctx.recipe.plugins):
        return
    # lazy: plugin lock checks load only for experiments with a plugins.lock.json
    from tuneplane.check.plugin_locks import check_experiment_plugins

    required = list(ctx.recipe.plugins) if ctx.recipe else []
    yield from check_experiment_plugins(ctx.lab.root, ctx.dir, ctx.framework, required, __version__)
