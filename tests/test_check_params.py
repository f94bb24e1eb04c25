"""Hyperparameters: `--set` parsing, checking values against params, dotted config paths (CONTRACT §2)."""

from __future__ import annotations

from typing import Any

import pytest

from tuneplane.check.params import (
    Misfit,
    check_value,
    get_path,
    is_missing,
    leaf_paths,
    parse_set_value,
    parse_sets,
    resolve_name,
    unknown_name_message,
    value_misfit,
)
from tuneplane.errors import UsageError
from tuneplane.models.recipe import Param, Recipe


def param(**kw: Any) -> Param:
    return Param.model_validate({"path": "x", **kw})


RECIPE = Recipe.model_validate(
    {
        "name": "fw/demo",
        "version": "1",
        "framework": "fw",
        "entrypoint": {"kind": "module", "value": "demo.train"},
        "adapter_options": {"observability": "platform"},
        "runtime": {"default_version": "1", "versions": {"1": {"runtime_id": "fw-1"}}},
        "params": {
            "learning_rate": {"type": "float", "path": "optim.lr", "min": 0, "exclusive_min": True},
            "epochs": {"type": "int", "path": "epochs", "min": 1},
            "scheduler": {"type": "enum", "path": "optim.scheduler", "choices": ["cosine", "linear"]},
        },
    }
)


# ── --set values ────────────────────────────────────────────────────────────────────────────────────


@pytest.mark.parametrize(
    "text,expected",
    [
        ("true", True),
        ("YES", True),
        ("On", True),
        ("false", False),
        ("no", False),
        ("OFF", False),
        ("3", 3),
        ("-2", -2),
        ("0", 0),
        ("1.5", 1.5),
        ("1e-6", 1e-6),
        ("2.0E3", 2000.0),
        ("cosine", "cosine"),
        ("", ""),
        ("1.2.3", "1.2.3"),
        ("0x10", "0x10"),
        ("y", "y"),
        ("n", "n"),
        ("'3'", "3"),
        ('"yes"', "yes"),
        ("1_000", "1_000"),
        ("12\n", 12),
    ],
)
def test_cli_values_bool_then_int_then_float_then_text(text: str, expected: object) -> None:
    value = parse_set_value("k", text)
    assert value == expected and type(value) is type(expected)


@pytest.mark.parametrize("text", ["nan", "NaN", "inf", "-inf", "Infinity"])
def test_cli_nan_and_infinity_stay_text_so_numeric_params_refuse_them(text: str) -> None:
    value = parse_set_value("k", text)
    assert value == text
    assert check_value(param(type="float"), value) is not None


@pytest.mark.parametrize("text", ["[1,2]", "{a: 1}"])
def test_cli_lists_and_maps_are_refused(text: str) -> None:
    with pytest.raises(UsageError, match="not a single value"):
        parse_set_value("k", text)


@pytest.mark.parametrize(
    "text,expected",
    [
        ("lr=0.1", ("lr", 0.1)),
        (" lr = 3", ("lr", 3)),
        ("name=a=b", ("name", "a=b")),
        ("flag=", ("flag", "")),
        ("optim.lr=1e-4", ("optim.lr", 1e-4)),
    ],
)
def test_assignments(text: str, expected: tuple[str, object]) -> None:
    assert parse_sets([text]) == dict([expected])


@pytest.mark.parametrize("text", ["lr", "=3", " =3", ""])
def test_malformed_assignments_name_the_input(text: str) -> None:
    with pytest.raises(UsageError) as info:
        parse_sets([text])
    assert "KEY=VALUE" in str(info.value)


# ── values against params ───────────────────────────────────────────────────────────────────────────


@pytest.mark.parametrize(
    "spec,value",
    [
        ({"type": "float"}, 1),
        ({"type": "float"}, 1.5),
        ({"type": "int"}, -3),
        ({"type": "bool"}, False),
        ({"type": "str"}, "x"),
        ({"type": "enum", "choices": ["a", "b"]}, "b"),
        ({"type": "enum", "choices": [1, 2]}, 2),
        ({"type": "int", "min": 1, "max": 3}, 1),
        ({"type": "int", "min": 1, "max": 3}, 3),
        ({"type": "float", "min": 0, "exclusive_min": True}, 1e-12),
    ],
)
def test_accepted(spec: dict[str, Any], value: object) -> None:
    assert check_value(param(**spec), value) is None


@pytest.mark.parametrize(
    "spec,value,says",
    [
        ({"type": "int"}, True, "boolean"),
        ({"type": "float"}, False, "boolean"),
        ({"type": "int"}, 1.5, "integer"),
        ({"type": "int"}, "3", "text"),
        ({"type": "float"}, "fast", "text"),
        ({"type": "float"}, "1e-6", "write it as 1.0e-6"),
        ({"type": "float"}, "5E3", "write it as 5.0e3"),
        ({"type": "bool"}, "true", "true or false"),
        ({"type": "bool"}, 1, "true or false"),
        ({"type": "str"}, 3, "text"),
        ({"type": "enum", "choices": ["a", "b"]}, "c", "a, b"),
        ({"type": "int", "min": 1}, 0, "minimum 1"),
        ({"type": "int", "max": 3}, 4, "maximum 3"),
        ({"type": "float", "min": 0, "exclusive_min": True}, 0, "(exclusive)"),
        ({"type": "float", "min": 0.5}, 0.25, "minimum 0.5"),
        ({"type": "int"}, [1], "list"),
        ({"type": "int"}, {"a": 1}, "mapping"),
    ],
)
def test_refused_with_the_reason(spec: dict[str, Any], value: object, says: str) -> None:
    message = check_value(param(**spec), value)
    assert message is not None and says in message


def test_enum_needs_choices() -> None:
    with pytest.raises(ValueError, match="choices"):
        param(type="enum")


# ── names and paths ─────────────────────────────────────────────────────────────────────────────────


def test_set_keys_resolve_by_name_or_config_path() -> None:
    assert resolve_name("learning_rate", RECIPE) == "learning_rate"
    assert resolve_name("optim.lr", RECIPE) == "learning_rate"
    assert resolve_name("lr", RECIPE) is None


def test_unknown_name_suggests_and_lists_the_known_ones() -> None:
    message, hint = unknown_name_message("learning_rte", RECIPE)
    assert "learning_rte" in message and "fw/demo" in message
    assert hint.startswith("did you mean 'learning_rate'?")
    assert "epochs, learning_rate, scheduler" in hint


def test_unknown_name_without_a_close_match_still_lists() -> None:
    _, hint = unknown_name_message("zzz", RECIPE)
    assert "did you mean" not in hint and "known: epochs" in hint


def test_get_path_and_missing() -> None:
    data = {"optim": {"lr": 0.1, "none": None}, "epochs": 3}
    assert get_path(data, "optim.lr") == 0.1
    assert get_path(data, "optim.none") is None and not is_missing(get_path(data, "optim.none"))
    assert is_missing(get_path(data, "optim.wd"))
    assert is_missing(get_path(data, "epochs.inner"))
    assert is_missing(get_path([1], "x"))


def test_leaf_paths() -> None:
    assert sorted(leaf_paths({"a": {"b": 1, "c": {}}, "d": [1, 2], "e": {"f": {"g": None}}})) == [
        "a.b",
        "a.c",
        "d",
        "e.f.g",
    ]


@pytest.mark.parametrize(
    ("spec", "value", "kind"),
    [
        ({"type": "float", "min": 0, "max": 1}, "maximum", "type"),
        ({"type": "float"}, float("nan"), "type"),
        ({"type": "bool"}, 1, "type"),
        ({"type": "int", "min": 1}, 0, "range"),
        ({"type": "float", "min": 0, "exclusive_min": True}, 0, "range"),
        ({"type": "float", "max": 1}, 2.0, "range"),
        ({"type": "enum", "choices": ["a", "b"]}, "minimum", "choice"),
    ],
)
def test_a_misfit_says_its_kind_beside_its_message(spec: dict[str, Any], value: object, kind: str) -> None:
    """Rules pick their id by the kind (`config-type`, `config-range`, `config-choice`), not the words."""
    misfit = value_misfit(param(**spec), value)
    assert misfit is not None and misfit[0] is Misfit(kind) and misfit[1] == check_value(param(**spec), value)
