"""`tp recipe upgrade`: a lock it cannot read is refused as every other command refuses that file."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

FLAGS = ("--profile", "local", "--image", "python:3.12", "--observability-url", "https://track.example.org/p")


def _directory(lock: Path) -> None:
    lock.unlink()
    lock.mkdir()


def _not_json(lock: Path) -> None:
    lock.write_text('{"apiVersion": "tuneplane/recipe-lock/v1",\n  "recipe": {oops}\n}\n', encoding="utf-8")


def _outside(lock: Path) -> None:
    target = lock.parents[3] / "elsewhere.json"
    target.write_text(lock.read_text(encoding="utf-8"), encoding="utf-8")
    lock.unlink()
    os.symlink(target, lock)


@pytest.mark.parametrize("spoil", [_directory, _not_json, _outside], ids=["directory", "not json", "link out"])
def test_an_unreadable_lock_gets_the_message_submit_gives(demo_lab: Path, tp: Any, spoil: Any) -> None:
    lock = demo_lab / "experiments" / "demo" / "recipe.lock.json"
    spoil(lock)
    submitted = tp("submit", "demo", *FLAGS)
    upgraded = tp("recipe", "upgrade", "demo")
    assert submitted.code == upgraded.code == 2, submitted.output + upgraded.output
    assert "Traceback" not in upgraded.output
    first = [line for line in upgraded.err.splitlines() if line.startswith("error:")]
    assert first and first[0].startswith("error: experiments/demo/recipe.lock.json"), upgraded.output
    assert first[0] in submitted.err.splitlines(), (first, submitted.err)
    assert not list((demo_lab / "runs").glob("*/*.yaml"))


def test_method_locks_only_an_experiment_without_a_lock(demo_lab: Path, tp: Any) -> None:
    lock = demo_lab / "experiments" / "demo" / "recipe.lock.json"
    before = lock.read_bytes()
    refused = tp("recipe", "upgrade", "demo", "--method", "trl/sft")
    assert refused.code == 2 and "demo is locked to custom/custom" in refused.err, refused.output
    assert lock.read_bytes() == before
    lock.unlink()
    assert tp("recipe", "upgrade", "demo", "--method", "custom/custom").code == 0
    assert json.loads(lock.read_text(encoding="utf-8"))["recipe"]["name"] == "custom/custom"
    assert tp("validate", "demo").code == 0


def test_no_experiment_and_an_unknown_method_are_refused_by_name(demo_lab: Path, tp: Any) -> None:
    missing = tp("recipe", "upgrade", "nope")
    assert missing.code == 2 and "no experiment 'nope'" in missing.err, missing.output
    (demo_lab / "experiments" / "demo" / "recipe.lock.json").unlink()
    unknown = tp("recipe", "upgrade", "demo", "--method", "trl/stf")
    assert unknown.code == 2 and "trl/sft" in unknown.err, unknown.output
    assert not (demo_lab / "experiments" / "demo" / "recipe.lock.json").exists()
