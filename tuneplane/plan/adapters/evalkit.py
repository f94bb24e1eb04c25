"""evalkit (benchmark): the runner module with `--model --suites --output-dir`, on one node. Train only.

    python3 -m <runner module> --model M --suites S --output-dir $OUT --config <exp>/config.yaml \
        --overrides-json '<validated hyperparams>'
Algorithm plugins are refused: an evaluation does not start through the algorithm bridge.
"""

from __future__ import annotations

from tuneplane.errors import UsageError
from tuneplane.models.jobspec import JobSpec
from tuneplane.plan.adapters.base import (
    check_common,
    config_path,
    entry_flags,
    out,
    overrides_json,
    python_entry,
    trainer_hyperparams,
)
from tuneplane.plan.adapters.launch import single
from tuneplane.plan.launchplan import LaunchPlan

SUITES_KEY = "suites"


class EvalkitAdapter:
    name = "evalkit"

    def compile(self, spec: JobSpec) -> LaunchPlan:
        check_common(spec, self.name, no_algorithm_plugins=True)
        if spec.spec.resources.nodes > 1:
            raise UsageError(
                f"{spec.spec.recipe.name} runs on one node; profile "
                f"{spec.spec.resources.profile} asks for {spec.spec.resources.nodes}",
                hint="ask for at most one node's GPUs, e.g. --profile <name>:1",
            )
        recipe = spec.spec.recipe
        suites = str(trainer_hyperparams(spec).get(SUITES_KEY, ""))
        if not suites:
            raise UsageError(
                f"{recipe.name} needs suites to run", hint="set suites in config.yaml or --set suites=gsm8k"
            )
        entry = python_entry(spec, recipe.entrypoint_kind, recipe.entrypoint)
        flags = [
            ("--model", spec.spec.inputs.model),
            ("--suites", suites),
            ("--output-dir", out(spec)),
            ("--config", config_path(spec)),
            ("--overrides-json", overrides_json(spec)),
        ]
        return single(spec, [*entry, *entry_flags(spec, flags)])
