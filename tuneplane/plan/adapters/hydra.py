"""Hydra-style `key=value` overrides shared by verl and NeMo-RL. Pure.

Order: the bound inputs, the validated hyperparameters, then the keys the platform owns (topology,
checkpoint and log directories), so the platform's values always win.
"""

from __future__ import annotations

from tuneplane.models.jobspec import JobSpec
from tuneplane.plan.adapters.base import hydra_value, trainer_hyperparams


def input_overrides(spec: JobSpec) -> list[str]:
    bindings, inputs = spec.spec.recipe.adapter.bindings, spec.spec.inputs
    return [
        f"{bindings[name]}={hydra_value(getattr(inputs, name))}"
        for name in ("model", "train_data", "validation_data")
        if name in bindings and getattr(inputs, name)
    ]


def param_overrides(spec: JobSpec) -> list[str]:
    return [f"{path}={hydra_value(value)}" for path, value in trainer_hyperparams(spec).items()]


def topology_overrides(spec: JobSpec, nodes_key: str, gpus_key: str) -> list[str]:
    topology, res = spec.spec.recipe.adapter.topology, spec.spec.resources
    return [
        f"{topology.get('nodes', nodes_key)}={res.nodes}",
        f"{topology.get('gpus_per_node', gpus_key)}={res.gpus_per_node}",
    ]
