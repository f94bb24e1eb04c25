"""`sf`, StarForge's command kept for its users: it says what it maps to and runs tp, with tp's exit
codes and the wording the StarForge edition's guide quotes; and that edition's image allowlist variable.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tomllib
from importlib import import_module
from pathlib import Path
from typing import Any

import pytest
from conftest import TpResult
from support.repos import git

from tuneplane.check.images import LEGACY_ALLOWLIST_ENV

ROOT = Path(__file__).resolve().parents[1]
URL = ("--observability-url", "https://track.example.org/p")


def sf(*args: str, cwd: Path, env: dict[str, str] | None = None) -> TpResult:
    """The `sf` console script's function, in a child process as the script runs it."""
    done = subprocess.run(
        [sys.executable, "-c", "from tuneplane.cli.sf import run; run()", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    return TpResult(done.returncode, done.stdout, done.stderr)


@pytest.fixture()
def custom_lab(lab: Path, tp: Any) -> Path:
    assert tp("new", "mine", "--method", "custom/custom", cwd=lab).code == 0
    git(lab, "add", "-A")
    git(lab, "commit", "-q", "-m", "a custom experiment")
    return lab


def test_sf_is_a_console_script_of_the_package() -> None:
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]["scripts"]
    module, _, function = scripts["sf"].partition(":")
    assert callable(getattr(import_module(module), function))


def test_sf_says_what_it_runs_and_speaks_the_edition_s_words(custom_lab: Path, tp_subprocess: Any) -> None:
    (custom_lab / "experiments/mine/train.sh").unlink()
    said = sf("validate", "mine", cwd=custom_lab)
    plain = tp_subprocess("validate", "mine", cwd=custom_lab)
    assert said.code == plain.code == 1
    assert "sf is tp, StarForge's name kept for it: running `tp validate mine`" in said.err
    assert "error [entrypoint] custom 入口不存在或越界" in said.out, said.output
    # tp itself keeps its own words
    assert "error [entrypoint] custom entrypoint is missing or escapes the experiment directory" in plain.out
    assert "入口" not in plain.output


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (
            ("submit", "mine", "--profile", "local", "--image", "python:3.12"),
            "custom external observability 要求 spec.framework.observability_url",
        ),
        (
            ("export", "mine", "--checkpoint", "out/checkpoints/1", "--profile", "local"),
            "custom adapter 尚不支持 'export'",
        ),
    ],
)
def test_sf_refusals_are_the_guide_s_and_exit_as_tp_does(
    custom_lab: Path, tp_subprocess: Any, args: tuple[str, ...], words: str
) -> None:
    said = sf(*args, cwd=custom_lab)
    plain = tp_subprocess(*args, cwd=custom_lab)
    assert said.code == plain.code == 2, said.output
    assert f"error: {words}" in said.err, said.err
    assert words not in plain.output


def test_sf_renames_what_tp_spells_differently_and_refuses_what_tp_has_not(custom_lab: Path) -> None:
    stopped = sf("job", "stop", "no-such-run", cwd=custom_lab)
    assert "running `tp job cancel no-such-run`" in stopped.err and "no run 'no-such-run'" in stopped.err
    login = sf("login", cwd=custom_lab)
    assert login.code == 2 and "`sf login` has no tp counterpart" in login.err
    assert "running `tp" not in login.err


def test_an_empty_starforge_allowlist_refuses_a_custom_image(custom_lab: Path) -> None:
    """StarForge's variable set but empty refuses every custom image, as its guide says; the message names
    the registry host and the variable, and nothing is committed."""
    head = git(custom_lab, "rev-parse", "HEAD")
    env = {k: v for k, v in os.environ.items() if not k.startswith("TUNEPLANE_ALLOWED")}
    refused = sf(
        "submit",
        "mine",
        "--profile",
        "local",
        "--image",
        "registry.example.com/team/x:1",
        *URL,
        cwd=custom_lab,
        env={**env, LEGACY_ALLOWLIST_ENV: ""},
    )
    assert refused.code != 0, refused.output
    assert "image registry 'registry.example.com' is not allowed" in refused.err, refused.err
    assert f"add 'registry.example.com' to {LEGACY_ALLOWLIST_ENV}" in refused.err
    assert git(custom_lab, "rev-parse", "HEAD") == head
