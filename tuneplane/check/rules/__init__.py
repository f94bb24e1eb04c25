"""Semantic checks. Each rule has an id and a docstring (its user documentation, with a passing and a
failing example) and yields Problems. The registry below is explicit: a rule not listed does not run.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from tuneplane.problems import Problem

Rule = Callable[[Any], Iterator[Problem]]


def experiment_rules() -> list[Rule]:
    # lazy: each rule module is loaded only when its kind of file is checked
    from tuneplane.check.rules import code, config, entrypoint, launch, lint, lock, native, plugins, requires

    return [lock.check, config.check, requires.check, entrypoint.check, plugins.check, lint.check, code.check,
            launch.check, native.check]


def lab_rules() -> list[Rule]:
    from tuneplane.check.rules import cluster, settings  # lazy: as above, loaded when the lab's settings are checked

    return [cluster.check, settings.check]


def run_rules() -> list[Rule]:
    # lazy: each rule module is loaded only when its kind of file is checked
    from tuneplane.check.rules import runs

    return [runs.check]


def sweep_rules() -> list[Rule]:
    from tuneplane.check.rules import sweeps  # lazy: loaded only when the lab has sweep files

    return [sweeps.check]


def status_rules() -> list[Rule]:
    from tuneplane.check.rules import status  # lazy: loaded only when `--changed` touches status/

    return [status.check]
