"""Semantic checks. Each rule has an id and a docstring (its user documentation, with a passing and a
failing example) and yields Problems. The registry below is explicit: a rule not listed does not run.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

from tuneplane.problems import Problem

if TYPE_CHECKING:  # the contexts load the lab's modules, which only a rule that runs pays for
    from tuneplane.check.rules.context import ExperimentContext
    from tuneplane.check.rules.runs import RunContext
    from tuneplane.check.rules.status import StatusContext
    from tuneplane.check.rules.sweeps import SweepContext
    from tuneplane.lab.load import Lab

# One rule per kind of thing checked: what it is given is what that registry's caller passes.
ExperimentRule = Callable[["ExperimentContext"], Iterator[Problem]]
LabRule = Callable[["Lab"], Iterator[Problem]]
RunRule = Callable[["RunContext"], Iterator[Problem]]
SweepRule = Callable[["SweepContext"], Iterator[Problem]]
StatusRule = Callable[["StatusContext"], Iterator[Problem]]


def experiment_rules() -> list[ExperimentRule]:
    # lazy: each rule module is loaded only when its kind of file is checked
    from tuneplane.check.rules import (
        checkpoints,
        code,
        config,
        entrypoint,
        launch,
        lint,
        lock,
        native,
        plugins_lock,
        reporting,
        requires,
    )

    return [
        lock.check,
        config.check,
        requires.check,
        entrypoint.check,
        plugins_lock.check,
        lint.check,
        reporting.check,
        checkpoints.check,
        code.check,
        launch.check,
        native.check,
    ]


def lab_rules() -> list[LabRule]:
    from tuneplane.check.rules import cluster, settings  # lazy: as above, loaded when the lab's settings are checked

    return [cluster.check, settings.check]


def run_rules() -> list[RunRule]:
    # lazy: each rule module is loaded only when its kind of file is checked
    from tuneplane.check.rules import launch, runs

    return [runs.check, launch.check_run]


def sweep_rules() -> list[SweepRule]:
    from tuneplane.check.rules import sweeps  # lazy: loaded only when the lab has sweep files

    return [sweeps.check]


def status_rules() -> list[StatusRule]:
    from tuneplane.check.rules import status  # lazy: loaded only when `--changed` touches status/

    return [status.check]
