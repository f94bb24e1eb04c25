"""`lifecycle.overrides`: one way to lay dotted overrides over a config, for the TRL templates and for
the CLI-flags runner of ms-swift and OpenRLHF."""

from __future__ import annotations

from typing import Any

import pytest

from tuneplane.lifecycle import cli_flags, trl_support
from tuneplane.lifecycle.overrides import apply_overrides


def test_overrides_create_nested_mappings_and_replace_leaves() -> None:
    config: dict[str, Any] = {"lr": 1.0, "opt": {"beta": 0.9}}
    apply_overrides(config, {"lr": 2.0, "opt.eps": 1e-8, "peft.lora.r": 16})
    assert config == {"lr": 2.0, "opt": {"beta": 0.9, "eps": 1e-8}, "peft": {"lora": {"r": 16}}}


def test_both_users_refuse_an_override_below_a_scalar_the_same_way() -> None:
    with pytest.raises(SystemExit) as trl:
        trl_support.apply_overrides({"lr": 1}, {"lr.x": 2})
    with pytest.raises(SystemExit) as flags:
        cli_flags.build_flags({"lr": 1}, {"lr.x": 2}, {}, "flat")
    assert str(trl.value) == str(flags.value) == "override 'lr.x': 'lr' is not a mapping in the config"


def test_the_platform_flags_are_laid_over_the_hyperparameters() -> None:
    argv = cli_flags.build_flags({"a": {"b": 1}}, {"a.b": 2, "c": True}, {"a.b": 3}, "dotted")
    assert argv == ["--a.b", "3", "--c"]
