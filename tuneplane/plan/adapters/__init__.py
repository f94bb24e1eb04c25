"""compile: JobSpec → LaunchPlan, through one FrameworkAdapter per framework (an explicit registry).

`compile_plan(spec)` is the stage's one function; each adapter module documents the command line it
produces with that framework's own launch conventions.
"""

from __future__ import annotations

from tuneplane.errors import UsageError
from tuneplane.models.jobspec import JobSpec
from tuneplane.plan.adapters.base import FrameworkAdapter
from tuneplane.plan.adapters.cli_flags import MsSwiftAdapter, OpenRlhfAdapter
from tuneplane.plan.adapters.custom import CustomAdapter
from tuneplane.plan.adapters.evalkit import EvalkitAdapter
from tuneplane.plan.adapters.nemo_rl import NemoRlAdapter
from tuneplane.plan.adapters.pytorch import PyTorchAdapter
from tuneplane.plan.adapters.trl import TrlAdapter
from tuneplane.plan.adapters.verl import VerlAdapter
from tuneplane.plan.launchplan import LaunchPlan

ADAPTERS: dict[str, FrameworkAdapter] = {
    adapter.name: adapter
    for adapter in (
        CustomAdapter(),
        PyTorchAdapter(),
        TrlAdapter(),
        VerlAdapter(),
        NemoRlAdapter(),
        MsSwiftAdapter(),
        OpenRlhfAdapter(),
        EvalkitAdapter(),
    )
}


def adapter_for(framework: str) -> FrameworkAdapter:
    try:
        return ADAPTERS[framework]
    except KeyError:
        raise UsageError(
            f"no adapter for framework {framework!r}",
            hint=f"frameworks this tp compiles: {', '.join(sorted(ADAPTERS))}",
        ) from None


def compile_plan(spec: JobSpec) -> LaunchPlan:
    """The LaunchPlan of the JobSpec's operation; UsageError with the adapter's refusal."""
    return adapter_for(spec.spec.framework.kind).compile(spec)


__all__ = ["ADAPTERS", "FrameworkAdapter", "adapter_for", "compile_plan"]
