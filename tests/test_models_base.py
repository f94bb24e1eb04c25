"""The shared pieces of the models: default factories that are cheap to inspect and defaults that are
what calling the model would give."""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import types
from typing import Any

import pytest
from pydantic import BaseModel

import tuneplane.models
from tuneplane.models.base import defaults_of, empty_dict, empty_list
from tuneplane.models.lab import Cluster, LabFile, PodSecurity, Profile


def _models() -> list[type[BaseModel]]:
    found: dict[str, type[BaseModel]] = {}
    for info in pkgutil.iter_modules(tuneplane.models.__path__):
        module = importlib.import_module(f"tuneplane.models.{info.name}")
        for value in vars(module).values():
            if inspect.isclass(value) and issubclass(value, BaseModel) and value.__module__ == module.__name__:
                found[f"{value.__module__}.{value.__qualname__}"] = value
    return [found[k] for k in sorted(found)]


MODELS = _models()
FACTORIES = [
    (model, name, field.default_factory)
    for model in MODELS
    for name, field in model.model_fields.items()
    if field.default_factory is not None
]


def test_the_models_are_found():
    assert {LabFile, Cluster, PodSecurity} <= set(MODELS)
    assert len(FACTORIES) > 40


@pytest.mark.parametrize(("model", "name", "factory"), FACTORIES, ids=[f"{m.__name__}.{n}" for m, n, _ in FACTORIES])
def test_every_default_factory_is_a_python_function(model: type[BaseModel], name: str, factory: Any):
    """pydantic reads each factory's signature; a builtin (`list`, `dict`) or a model class is read
    the slow way (a text signature tokenized, a model's signature generated)."""
    assert isinstance(factory, types.FunctionType), f"{model.__name__}.{name}: use empty_list/empty_dict/defaults_of"


@pytest.mark.parametrize(("model", "name", "factory"), FACTORIES, ids=[f"{m.__name__}.{n}" for m, n, _ in FACTORIES])
def test_every_default_is_valid_and_what_the_model_would_make(model: type[BaseModel], name: str, factory: Any):
    value = factory()
    values = value.values() if isinstance(value, dict) else [value]
    for item in values:
        if not isinstance(item, BaseModel):
            continue
        again = type(item).model_validate(item.model_dump(by_alias=True, round_trip=True))
        assert again == item, f"{model.__name__}.{name}: the default does not validate to itself"
        if not item.model_fields_set:  # made from no values: exactly what calling the model gives
            made = type(item)()
            assert made == item and made.model_dump() == item.model_dump()
            assert made.model_fields_set == item.model_fields_set


def test_defaults_of_keeps_what_was_set_and_gives_a_new_value_each_time():
    local = defaults_of(Profile, local=True, gpus_per_node=0)
    assert local() == Profile(local=True, gpus_per_node=0)
    assert (
        local().model_fields_set == Profile(local=True, gpus_per_node=0).model_fields_set == {"local", "gpus_per_node"}
    )
    first, second = defaults_of(Cluster)(), defaults_of(Cluster)()
    assert first == second and first is not second
    assert first.image_pull_secrets is not second.image_pull_secrets
    assert empty_list() is not empty_list() and empty_dict() is not empty_dict()


def test_a_lab_file_that_leaves_every_section_out_gets_the_defaults():
    lab = LabFile.model_validate({"apiVersion": "tuneplane/project/v1", "name": "lab"})
    assert lab.cluster == Cluster() and lab.cluster.security == PodSecurity()
    assert lab.profiles == {"local": Profile(local=True, gpus_per_node=0)}
    assert lab.cluster.slurm.software.kind == "host"
    # a value people write is validated by the lab file's own validator, as before
    with pytest.raises(ValueError, match="run_as_user 0 is root"):
        LabFile.model_validate(
            {
                "apiVersion": "tuneplane/project/v1",
                "name": "lab",
                "cluster": {"security": {"run_as_non_root": True, "run_as_user": 0}},
            }
        )
