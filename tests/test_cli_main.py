"""The CLI builds only the invoked command's module; the command table must match what modules register."""

from __future__ import annotations

import os
import subprocess
import sys
from importlib import import_module
from pathlib import Path

import pytest
import typer

from tuneplane.cli.app import COMMANDS, load_module_commands


def _registered(module_name: str) -> dict[str, str]:
    app = typer.Typer()
    import_module(f"tuneplane.cli.{module_name}").register(app)
    names = {c.name or c.callback.__name__: c.help or "" for c in app.registered_commands}
    names |= {g.name or g.typer_instance.info.name: g.typer_instance.info.help for g in app.registered_groups}
    return names


def test_the_table_names_every_command_its_module_and_its_help():
    modules = {module for module, _help in COMMANDS.values()}
    registered = {name: (module, text) for module in modules for name, text in _registered(module).items()}
    assert registered == COMMANDS


def test_a_module_builds_only_its_own_commands():
    assert sorted(load_module_commands("cmd_lifecycle")) == ["eval", "export"]


def _loaded_after(args: list[str], cwd: Path | None = None) -> list[str]:
    code = (
        f"import sys; from tuneplane.cli.main import run; run({args!r}); "
        "print('OTHERS', sorted(m for m in sys.modules if m.startswith('tuneplane.cli.cmd_')))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=cwd).stdout
    return eval(out.rpartition("OTHERS ")[2])  # our own probe's printed list


def test_a_single_command_does_not_import_the_others():
    assert _loaded_after(["validate", "--help"]) == ["tuneplane.cli.cmd_validate"]


def test_the_command_list_imports_no_command_module():
    assert _loaded_after(["--help"]) == []


def test_pydantic_uses_its_plugin_loader_only_for_get_plugins():
    """`cli.main` answers `get_plugins()` for pydantic's plugin loader when plugins are disabled; any
    other use of that module in a new pydantic would find the stand-in wanting."""
    import re
    from pathlib import Path

    import pydantic

    uses = set()
    for path in Path(pydantic.__file__).parent.rglob("*.py"):
        if path.name == "_loader.py":
            continue
        for line in path.read_text(encoding="utf-8").splitlines():
            if re.search(r"\b_loader\b", line):
                uses.add(line.strip())
    assert uses == {"from ._loader import get_plugins"}


def test_tp_does_not_import_pydantic_s_plugin_loader_unless_plugins_are_wanted(tmp_path):
    code = (
        "import sys; from tuneplane.cli.main import run; run(['validate']); "
        "print('METADATA', 'importlib.metadata' in sys.modules)"
    )
    env = {k: v for k, v in __import__("os").environ.items() if k != "PYDANTIC_DISABLE_PLUGINS"}
    lab = tmp_path / "lab"
    subprocess.run(
        [sys.executable, "-m", "tuneplane", "init", str(lab), "--no-git", "--yes"],
        check=True,
        capture_output=True,
        env=env,
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=lab, capture_output=True, text=True, env=env).stdout
    assert "METADATA False" in out, out
    # a user who wants pydantic's plugins gets the real loader
    out = subprocess.run(
        [sys.executable, "-c", code],
        cwd=lab,
        capture_output=True,
        text=True,
        env={**env, "PYDANTIC_DISABLE_PLUGINS": ""},
    ).stdout
    assert "METADATA True" in out, out


def _with_stdout(argv: list[str], stdout: int, cwd) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", *argv],
        stdout=stdout,
        stderr=subprocess.PIPE,
        text=True,
        cwd=cwd,
        timeout=120,
        check=False,
    )


COMMANDS_THAT_PRINT = [["tuneplane", "--help"], ["tuneplane", "methods"], ["tuneplane.launcher", "--help"]]


@pytest.mark.parametrize("argv", COMMANDS_THAT_PRINT, ids=" ".join)
def test_a_reader_that_went_away_ends_the_command_quietly(argv, tmp_path):
    """`tp methods | head -1`: the reader has what it wanted and closed the pipe; the command ends
    without a traceback or a "bug in tp" (the read end is closed before it starts, so the first write
    fails every time)."""
    read, write = os.pipe()
    os.close(read)
    try:
        done = _with_stdout(argv, write, tmp_path)
    finally:
        os.close(write)
    assert done.stderr == "", done.stderr


@pytest.mark.parametrize("argv", COMMANDS_THAT_PRINT, ids=" ".join)
def test_a_full_disk_under_the_output_is_said_in_one_line(argv, tmp_path):
    with open("/dev/full", "w") as full:
        done = _with_stdout(argv, full.fileno(), tmp_path)
    assert done.returncode == 1, done.stderr
    lines = done.stderr.splitlines()
    assert len(lines) == 1 and "No space left on device" in lines[0], done.stderr
    assert "Traceback" not in done.stderr and "bug in tp" not in done.stderr


def test_an_interrupt_and_a_missing_package_are_said_through_the_reporter(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The error handler speaks through `say` like every command, so the edition's words apply to it too
    and each message is one line or two on standard error, ending once."""
    from tuneplane.cli import main
    from tuneplane.cli.say import say
    from tuneplane.constants import EXIT_INTERRUPTED, EXIT_PROBLEMS

    def interrupted() -> int:
        raise KeyboardInterrupt

    def missing() -> int:
        raise ModuleNotFoundError("No module named 'ruamel'", name="ruamel.yaml")

    monkeypatch.setattr(say, "translate", lambda text: text.replace("interrupted", "已中断"))
    assert main._guarded(interrupted) == EXIT_INTERRUPTED
    assert main._guarded(missing) == EXIT_PROBLEMS
    out, err = capsys.readouterr()
    assert out == ""
    first, package, hint, rest = err.split("\n", 3)
    assert first == "已中断" and package.startswith("error: tp needs the Python package 'ruamel'"), err
    assert hint.startswith("  hint: install tp") and rest == "", err
