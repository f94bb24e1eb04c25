"""trl (sft, grpo): accelerate launch of the experiment's train.py; export and eval through lifecycle.

    accelerate launch … -m tuneplane.launcher <exp>/train.py --config <exp>/config.yaml \
        --model M --train-data D --validation-data V --output-dir $OUT \
        --overrides-json '<validated hyperparams>'

Only the flags the recipe says its entrypoint takes (`entrypoint.flags`) are passed: the TRL recipes
leave out `--logging-dir`, which a lab's own train.py may refuse; the templates log under
`$OUT/logs` without it.
"""

from __future__ import annotations

from tuneplane.models.jobspec import JobSpec
from tuneplane.plan.adapters.base import config_path, entry_flags, out, overrides_json
from tuneplane.plan.adapters.launch import accelerate
from tuneplane.plan.adapters.lifecycle import LifecycleAdapter
from tuneplane.plan.launchplan import LaunchPlan


class TrlAdapter(LifecycleAdapter):
    name = "trl"

    def train(self, spec: JobSpec, entry: list[str]) -> LaunchPlan:
        inputs = spec.spec.inputs
        flags = [
            ("--config", config_path(spec)),
            ("--model", inputs.model),
            ("--train-data", inputs.train_data),
            ("--validation-data", inputs.validation_data),
            ("--output-dir", out(spec)),
            ("--logging-dir", out(spec, "logs")),
            ("--overrides-json", overrides_json(spec)),
        ]
        return accelerate(spec, [*entry, *entry_flags(spec, flags)])
