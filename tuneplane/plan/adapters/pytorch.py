"""pytorch (image-classification): torchrun running the experiment's train.py. Train only.

    torchrun … -m tuneplane.launcher <exp>/train.py --config <exp>/config.yaml \
        --output-dir $TUNEPLANE_OUT_DIR --overrides-json '<validated hyperparams>'
"""

from __future__ import annotations

from tuneplane.models.jobspec import JobSpec
from tuneplane.plan.adapters.base import check_common, config_path, entry_flags, out, overrides_json, python_entry
from tuneplane.plan.adapters.launch import torchrun
from tuneplane.plan.launchplan import LaunchPlan


class PyTorchAdapter:
    name = "pytorch"

    def compile(self, spec: JobSpec) -> LaunchPlan:
        check_common(spec, self.name)
        recipe = spec.spec.recipe
        entry = python_entry(spec, recipe.entrypoint_kind, recipe.entrypoint)
        flags = [
            ("--config", config_path(spec)),
            ("--output-dir", out(spec)),
            ("--overrides-json", overrides_json(spec)),
        ]
        return torchrun(spec, [*entry, *entry_flags(spec, flags)])
