"""`tp validate` runs without Typer; it must take exactly the command line Typer's command takes and
answer it the same way, and leave to Typer everything it does not accept as written."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from tuneplane.cli import fastpath
from tuneplane.cli.app import build_app, run_typer


def _typer_options() -> dict[str, tuple[str, ...]]:
    """Each parameter of Typer's `validate` command: its option strings (empty for the arguments)."""
    import typer.main

    command = typer.main.get_command(build_app("validate")).commands["validate"]  # type: ignore[attr-defined]
    return {p.name: tuple(sorted(o for o in p.opts if o.startswith("-"))) for p in command.params
            if p.name != "help"}


def _fast_options() -> dict[str, tuple[str, ...]]:
    options: dict[str, list[str]] = {"targets": []}
    for table in (fastpath.FLAGS, fastpath.VALUED):
        for option, param in table.items():
            options.setdefault(param, []).append(option)
    return {param: tuple(sorted(opts)) for param, opts in options.items()}


def test_both_parsers_declare_the_same_options_and_choices():
    assert _fast_options() == _typer_options()
    from tuneplane.cli.cmd_validate import Format

    assert tuple(f.value for f in Format) == fastpath.FORMATS


def _both(args: list[str], cwd: Path) -> tuple[tuple[int, str, str], tuple[int, str, str]]:
    """(exit code, stdout, stderr) of `tp validate ARGS` by the fast path and by Typer."""
    results = []
    for via_typer in (False, True):
        with CliRunner().isolation() as streams:
            import os

            before = os.getcwd()
            os.chdir(cwd)
            try:
                fast = fastpath.command(["validate", *args])
                assert fast is not None, f"the fast path refused {args}"
                code = run_typer(["validate", *args]) if via_typer else fast()
            finally:
                os.chdir(before)
                sys.stdout.flush()
            results.append((code, streams[0].getvalue().decode(), streams[1].getvalue().decode()))
    return results[0], results[1]


@pytest.mark.parametrize("args", [
    [],
    ["exp"],
    ["--all"],
    ["exp", "--strict"],
    ["--strict", "exp", "missing-one"],
    ["-f", "json", "exp"],
    ["--format=sarif"],
    ["--format", "github", "--strict"],
    ["--all", "exp"],
    ["--", "exp"],
    ["--changed"],
    ["--changed", "--base", "HEAD"],
    ["--changed", "--base=HEAD", "--format", "json", "--format", "text"],
    ["exp", "-", "--strict", "--", "--all"],
])
def test_the_fast_path_answers_as_typer_does(args: list[str], lab: Path, tp):
    assert tp("new", "exp", "--method", "custom/custom").code == 0
    fast, typer_result = _both(args, lab)
    assert fast == typer_result
    assert fast[1], "validate printed nothing"


@pytest.mark.parametrize("args", [
    ["--help"], ["-h"], ["exp", "--help"], ["--bogus"], ["--str"], ["-f", "yaml"], ["-fyaml"], ["--base"],
    ["--all=yes"], ["-x"], ["-f"], ["-f=json"], ["--format="], ["--strict=1"], ["--All"],
])
def test_what_the_fast_path_does_not_take_goes_to_typer(args: list[str], lab: Path, tp):
    assert fastpath.command(["validate", *args]) is None
    result = tp("validate", *args)  # Typer's own answer: help (0) or a usage error (2)
    if result.code == 0:
        assert result.out.startswith("Usage: tp validate"), result.output
    else:
        assert result.code == 2 and "Error: " in result.err and not result.out, result.output


@pytest.mark.parametrize(("args", "starts"), [
    (["-fjson"], "{"),  # a value glued to -f
    (["--base", "--strict"], "ok: "),  # Click takes the next word as the value, whatever it looks like
])
def test_rare_spellings_are_typer_s_to_read(args: list[str], starts: str, lab: Path, tp):
    assert fastpath.command(["validate", *args]) is None
    result = tp("validate", *args)
    assert result.code == 0 and result.out.startswith(starts), result.output


def test_other_commands_are_never_taken():
    for args in (["ls"], ["new", "validate"], [], ["--version"], ["submit", "validate"]):
        assert fastpath.command(args) is None


def test_validate_does_not_import_typer_or_click(lab: Path, tp):
    assert tp("new", "exp", "--method", "custom/custom").code == 0
    code = ("import sys; from tuneplane.cli.main import run; rc = run(['validate', 'exp']); "
            "print('LOADED', sorted({m.split('.')[0] for m in sys.modules} & {'typer', 'click', 'rich'}), rc)")
    out = subprocess.run([sys.executable, "-c", code], cwd=lab, capture_output=True, text=True, check=True).stdout
    assert "LOADED [] 0" in out, out


# What `tp validate EXP` must not load (names, not timings): each was on the path and is needed only
# by a rare branch. difflib and heapq: a "did you mean" hint; unicodedata: a key with a non-ASCII
# character; importlib.metadata and email: pydantic's plugin loader; typer, click, rich: the CLI.
NOT_ON_THE_VALIDATE_PATH = ("difflib", "heapq", "unicodedata", "importlib.metadata", "email", "typer", "click",
                            "rich", "jinja2", "git", "kubernetes", "ruamel")

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


@pytest.mark.parametrize(("before", "expect"), [
    ("", "enabled True frozen True"),  # the first import: paused, then frozen, then collecting again
    ("import tuneplane.check.validate", "enabled True frozen False"),  # imported before: left as it is
    ("import gc; gc.disable()", "enabled False frozen False"),  # the caller's choice stands
])
def test_the_collector_is_paused_only_for_the_first_import_of_the_pipeline(before: str, expect: str, lab: Path, tp):
    assert tp("new", "exp", "--method", "custom/custom").code == 0
    # Python 3.12 starts with objects in the permanent generation already: frozen means more of them
    code = (f"import gc\nstart = gc.get_freeze_count()\n{before}\nfrom tuneplane.cli.main import run\n"
            "rc = run(['validate', 'exp'])\n"
            "print('enabled', gc.isenabled(), 'frozen', gc.get_freeze_count() > start, rc)")
    out = subprocess.run([sys.executable, "-c", code], cwd=lab, capture_output=True, text=True, check=True).stdout
    assert out.splitlines()[-1] == f"{expect} 0", out
