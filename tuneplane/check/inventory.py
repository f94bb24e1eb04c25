"""What the lab holds, one row per experiment: method, framework version and lock state."""

from __future__ import annotations

from tuneplane.check.rules.lock import check as lock_check
from tuneplane.check.validate import load_experiment
from tuneplane.lab.catalog import load_catalog
from tuneplane.lab.load import Lab


def experiment_rows(lab: Lab) -> list[dict[str, str]]:
    catalog = load_catalog()
    rows = []
    for name in lab.experiment_names():
        ctx = load_experiment(lab, catalog, name)
        problems = ctx.problems + list(lock_check(ctx))
        state = "current"
        if any(p.is_error for p in problems):
            state = "blocked: " + next(p.message for p in problems if p.is_error)
        elif problems:
            state = "upgrade available"
        rows.append(
            {
                "name": name,
                "method": ctx.method or "?",
                "framework_version": ctx.lock.framework.version if ctx.lock else "?",
                "lock": state,
            }
        )
    return rows
