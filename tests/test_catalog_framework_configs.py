"""verl and NeMo-RL templates hold only keys the framework knows.

verl: each template is composed with Hydra over verl's own config tree, read from the verl wheel
(downloaded with pip, no dependencies, into pytest's cache); a key that verl's defaults do not
define is an error. NeMo-RL is not installable from a package index, so its templates are checked
against the config keys of its v0.7.0 example configs (tests/data/nemo_rl_0.7.0_config_keys.txt).
"""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from support.yamlfiles import load_yaml

CATALOG = Path(__file__).resolve().parents[1] / "catalog"
VERL = "verl==0.9.1"
REQUIRED = os.environ.get("CI") == "true"
NEMO_KEYS = {
    line
    for line in (Path(__file__).parent / "data" / "nemo_rl_0.7.0_config_keys.txt").read_text().split("\n")
    if line and not line.startswith("#")
}


def leaves(node: Any, prefix: str = "") -> Iterator[str]:
    if isinstance(node, dict) and node:
        for key, value in node.items():
            yield from leaves(value, f"{prefix}.{key}" if prefix else str(key))
    else:
        yield prefix


def template(method: str) -> dict[str, Any]:
    data = load_yaml(CATALOG / method / "template" / "config.yaml")
    assert isinstance(data, dict)
    return data


@pytest.fixture(scope="module")
def verl_config_dir(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Path:
    if not REQUIRED:
        pytest.importorskip("hydra", reason="hydra-core is not installed")
    cache = Path(request.config.cache.mkdir("verl-wheel"))
    wheels = sorted(cache.glob("verl-0.9.1-*.whl"))
    if not wheels:
        done = subprocess.run(
            [sys.executable, "-m", "pip", "download", "--no-deps", "-q", "-d", str(cache), VERL],
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
        wheels = sorted(cache.glob("verl-0.9.1-*.whl"))
        if not wheels:
            if REQUIRED:
                pytest.fail(f"cannot download {VERL}: {done.stderr[-500:]}")
            pytest.skip(f"cannot download {VERL} (no package index?)")
    out = tmp_path_factory.mktemp("verl")
    with zipfile.ZipFile(wheels[-1]) as wheel:
        wheel.extractall(out, [n for n in wheel.namelist() if n.startswith("verl/trainer/config/")])
    return out / "verl" / "trainer" / "config"


_DEFAULTS: dict[tuple[Path, str], set[str]] = {}


def _compose(config_dir: Path, name: str, config: dict[str, Any]) -> set[str]:
    from hydra import compose, initialize_config_dir
    from omegaconf import OmegaConf

    (config_dir / f"{name}.yaml").write_text(yaml.safe_dump(config))
    with initialize_config_dir(str(config_dir), version_base=None):
        return set(leaves(OmegaConf.to_container(compose(name), resolve=False)))


def verl_default_keys(config_dir: Path, defaults: list[str]) -> set[str]:
    """Every key of verl's composed defaults for this `defaults` list (composed once per list)."""
    key = (config_dir, repr(defaults))
    if key not in _DEFAULTS:
        _DEFAULTS[key] = _compose(config_dir, "tp_defaults", {"defaults": defaults})
    return _DEFAULTS[key]


def unknown_verl_keys(config_dir: Path, config: dict[str, Any]) -> list[str]:
    """Keys of `config` that verl's composed defaults do not have (Hydra composes, not resolves)."""
    own = {k: v for k, v in config.items() if k not in ("hydra", "defaults")}
    composed = _compose(config_dir, "tp_experiment", {**own, "defaults": config["defaults"]})
    assert set(leaves(own)) <= composed  # composition kept every key of the template
    return sorted(set(leaves(own)) - verl_default_keys(config_dir, config["defaults"]))


VERL_METHODS = sorted(p.parent.relative_to(CATALOG).as_posix() for p in CATALOG.glob("verl/*/recipe.yaml"))
NEMO_METHODS = sorted(p.parent.relative_to(CATALOG).as_posix() for p in CATALOG.glob("nemo-rl/*/recipe.yaml"))


@pytest.mark.parametrize("method", VERL_METHODS)
def test_verl_template_composes_with_verls_defaults(method: str, verl_config_dir: Path) -> None:
    config = template(method)
    assert config["hydra"] == {"searchpath": ["pkg://verl.trainer.config"]}
    assert unknown_verl_keys(verl_config_dir, config) == []
    recipe = load_yaml(CATALOG / method / "recipe.yaml")
    known = verl_default_keys(verl_config_dir, config["defaults"])
    assert sorted(p["path"] for p in recipe["params"].values() if p["path"] not in known) == []


@pytest.mark.parametrize("method", VERL_METHODS)
def test_verl_knows_the_keys_the_platform_resumes_with(method: str, verl_config_dir: Path) -> None:
    """The adapter sets trainer.default_local_dir and trainer.resume_mode=auto (resume from the iteration
    latest_checkpointed_iteration.txt names there); both are keys of this trainer's own defaults."""
    known = verl_default_keys(verl_config_dir, template(method)["defaults"])
    assert {"trainer.default_local_dir", "trainer.resume_mode"} <= known


def test_a_key_verl_does_not_know_is_found(verl_config_dir: Path) -> None:
    config = template("verl/grpo")
    config["actor_rollout_ref"]["actor"]["learnin_rate_typo_zz"] = 1
    config["bogus_key"] = 1
    assert unknown_verl_keys(verl_config_dir, config) == ["actor_rollout_ref.actor.learnin_rate_typo_zz", "bogus_key"]


@pytest.mark.parametrize("method", NEMO_METHODS)
def test_nemo_rl_template_keys_are_nemo_rls(method: str) -> None:
    config = template(method)
    assert str(config["defaults"]).startswith("/opt/nemo-rl/examples/configs/")
    keys = {k for k in leaves({k: v for k, v in config.items() if k != "defaults"}) if not k.endswith("._override_")}
    recipe = load_yaml(CATALOG / method / "recipe.yaml")
    keys |= {p["path"] for p in recipe["params"].values()}
    assert sorted(keys - NEMO_KEYS) == []
