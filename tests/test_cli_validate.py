"""`tp validate EXP` runs on every pull request, hook and editor save: it loads only what it uses
(names, not timings), and the pipeline's first import runs with the cyclic collector paused."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

# What `tp validate EXP` must not load (names, not timings): each was on the path and is needed only
# by a rare branch (difflib, for a "did you mean", is Click's to import now: its parser suggests options);
# unicodedata: a key with a non-ASCII character; importlib.metadata and email: pydantic's plugin loader;
# rich: Typer's optional pretty output; the other command modules: `tp` builds the invoked command alone.
NOT_ON_THE_VALIDATE_PATH = (
    "unicodedata",
    "importlib.metadata",
    "email",
    "rich",
    "jinja2",
    "git",
    "kubernetes",
    "ruamel",
    "tuneplane.cli.cmd_job",
    "tuneplane.cli.cmd_submit",
    "tuneplane.bot",
    "tuneplane.runs",
)

_PROBE = """
import dataclasses, inspect, json, sys
from tuneplane.cli.main import run
rc = run(['validate', 'exp'])
ours = {name: module for name, module in sys.modules.items() if name.startswith('tuneplane')}
dataclasses_defined = sorted(f"{name}.{value.__qualname__}" for name, module in ours.items()
                             for value in vars(module).values()
                             if inspect.isclass(value) and value.__module__ == name and dataclasses.is_dataclass(value))
lazy = {f"{name}.{attr}": value.cache_info().currsize for name, module in ours.items()
        for attr, value in vars(module).items()
        if getattr(getattr(value, "__wrapped__", None), "__qualname__", "") == "lazy_pattern.<locals>.pattern"}
print(json.dumps({"rc": rc, "modules": sorted(sys.modules), "dataclasses": dataclasses_defined, "lazy": lazy}))
"""


def test_validate_loads_only_what_it_uses(lab: Path, tp):
    assert tp("new", "exp", "--method", "custom/custom").code == 0
    out = subprocess.run([sys.executable, "-c", _PROBE], cwd=lab, capture_output=True, text=True, check=True).stdout
    import json

    probe = json.loads(out.splitlines()[-1])
    assert probe["rc"] == 0
    loaded = set(probe["modules"])
    assert {"tuneplane.check.validate", "pydantic", "yaml"} <= loaded  # the probe ran the real command
    assert sorted(m for m in NOT_ON_THE_VALIDATE_PATH if m in loaded) == []
    assert probe["dataclasses"] == [], "records on the validate path are runtime.records classes"
    compiled = {name for name, size in probe["lazy"].items() if size}
    assert "tuneplane.check.images._REF" in probe["lazy"] and "tuneplane.check.images._REF" not in compiled
    assert "tuneplane.lab.starforge._KNOWN" in probe["lazy"] and "tuneplane.lab.starforge._KNOWN" not in compiled


@pytest.mark.parametrize(
    ("args", "code", "out", "err"),
    [
        (["exp"], 0, "experiments/exp/train.sh", ""),
        (["-f", "json", "exp"], 0, "{", ""),
        (["-fjson", "exp"], 0, "{", ""),
        (["--format=sarif", "exp"], 0, "{", ""),
        (["--bogus"], 2, "", "No such option: --bogus"),
        (["-f", "yaml"], 2, "", "'yaml' is not one of"),
        (["--help"], 0, "Usage: tp validate", ""),
    ],
)
def test_one_definition_reads_every_spelling(args: list[str], code: int, out: str, err: str, lab: Path, tp):
    """The options are Typer's alone: every spelling Click takes works, and every refusal is Click's."""
    assert tp("new", "exp", "--method", "custom/custom").code == 0
    result = tp("validate", *args)
    assert result.code == code, result.output
    assert result.out.startswith(out), result.output
    assert err in result.err, result.output
