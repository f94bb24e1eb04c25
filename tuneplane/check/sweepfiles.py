"""The sweep files `tp validate` checks: those of the experiments (and run requests) in its scope."""

from __future__ import annotations

from collections.abc import Collection

from tuneplane.check.rules import sweep_rules
from tuneplane.check.rules.context import ExperimentContext
from tuneplane.lab.catalog import Catalog
from tuneplane.lab.load import Lab
from tuneplane.lab.sweeps import load_sweep_doc, sweep_files
from tuneplane.lab.yamlio import LoadFailed
from tuneplane.problems import Problem


def validate_sweeps(
    lab: Lab, catalog: Catalog, experiments: Collection[str], contexts: dict[str, ExperimentContext]
) -> list[Problem]:
    """Problems of every sweep of `experiments`; a sweep whose experiment cannot be read is always checked."""
    paths = sweep_files(lab.root)
    if not paths:
        return []
    # lazy: the rule's context, and the experiment loader, load only when the lab has sweeps
    from tuneplane.check.rules.sweeps import SweepContext
    from tuneplane.check.validate import load_experiment

    known = set(lab.experiment_names())
    out: list[Problem] = []
    for path in paths:
        try:
            doc = load_sweep_doc(lab.root, path)
        except LoadFailed as exc:
            out.append(exc.problem)
            continue
        exp = doc.data.get("experiment") if isinstance(doc.data, dict) else None
        if isinstance(exp, str) and exp not in experiments and exp in known:
            continue  # a sweep of an experiment out of scope
        name = exp if isinstance(exp, str) and exp else path.stem
        if name not in contexts:
            contexts[name] = load_experiment(lab, catalog, name)
        ctx = SweepContext(lab, path, doc, contexts[name])
        out += doc.notes
        for rule in sweep_rules():
            out.extend(rule(ctx))
    return out
