"""A `tp` process and the cyclic garbage collector: fewer young passes, and a command's pipeline imported
with the collector paused and then frozen (tuneplane.cli.collector)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

# a command, and the module whose presence says its pipeline was imported before
COMMANDS = {
    "validate": (["validate", "exp"], "tuneplane.check.validate"),
    "new": (["new", "exp2", "--method", "custom/custom"], "tuneplane.author.scaffold"),
    "render": (
        ["render", "exp", "--profile", "local", "--allow-dirty"]
        + ["--image", "example/custom:1", "--observability-url", "https://example.org/dash"],
        "tuneplane.runs.review",
    ),
}


def _python(code: str, cwd: Path) -> str:
    done = subprocess.run([sys.executable, "-c", code], cwd=cwd, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return done.stdout.splitlines()[-1]


@pytest.mark.parametrize("command", COMMANDS)
@pytest.mark.parametrize(
    ("before", "expect"),
    [
        ("", "enabled True frozen True"),  # the first import: paused, then frozen, then collecting again
        ("import {module}", "enabled True frozen False"),  # imported before: left as it is
        ("gc.disable()", "enabled False frozen False"),  # the caller's choice stands
    ],
)
def test_a_command_s_pipeline_loads_with_the_collector_paused_once(
    command: str, before: str, expect: str, lab: Path, tp
):
    assert tp("new", "exp", "--method", "custom/custom").code == 0
    argv, module = COMMANDS[command]
    # Python 3.12 starts with objects in the permanent generation already: frozen means more of them
    code = (
        f"import gc\nstart = gc.get_freeze_count()\n{before.format(module=module)}\n"
        f"from tuneplane.cli.main import run\nrc = run({argv!r})\n"
        "print('enabled', gc.isenabled(), 'frozen', gc.get_freeze_count() > start, rc)"
    )
    assert _python(code, lab) == f"{expect} 0"


def test_a_failed_import_still_turns_the_collector_back_on(tmp_path: Path):
    code = (
        "import gc\nfrom tuneplane.cli.collector import PausedWhileLoading\n"
        "try:\n    with PausedWhileLoading('no_such_module_here'):\n        import no_such_module_here\n"
        "except ImportError:\n    pass\nprint('enabled', gc.isenabled())"
    )
    assert _python(code, tmp_path) == "enabled True"


@pytest.mark.parametrize(
    ("call", "young"),
    [
        ("sys.argv = ['tp', '--version']; run()", "50000"),  # the process is tp: fewer young passes
        ("run(['--version'])", "700"),  # a program calling tp keeps its own collector setting
    ],
)
def test_only_a_tp_process_collects_less_often(call: str, young: str, tmp_path: Path):
    code = (
        "import atexit, gc, sys\ngc.set_threshold(700, 10, 10)\n"
        "atexit.register(lambda: print('threshold', *gc.get_threshold()))\n"
        f"from tuneplane.cli.main import run\n{call}\n"
    )
    done = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert done.stdout.splitlines()[-1] == f"threshold {young} 10 10", done.stdout + done.stderr
