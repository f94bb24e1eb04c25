"""Bad situations, every command: a lab whose tuneplane.yaml cannot be used gets the same one error from
each command that works in the lab (exit 2, the file and its line, no traceback, nothing written), from
the lab root and from a folder inside it; `tp validate` lists the same problem at the same place."""

from __future__ import annotations

import re
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from support.repos import git

FLAGS = ("--profile", "local", "--image", "python:3.12", "--observability-url", "https://track.example.org/p")


def _yaml_error(path: Path) -> str:
    path.write_text(path.read_text(encoding="utf-8") + "profiles: [\n", encoding="utf-8")
    return "tuneplane.yaml:"


def _unknown_key(path: Path) -> str:
    text = path.read_text(encoding="utf-8")
    path.write_text(text + "colour: blue\n", encoding="utf-8")
    return f"tuneplane.yaml:{text.count(chr(10)) + 1}:1: unknown key 'colour'"


def _wrong_type(path: Path) -> str:
    lines = path.read_text(encoding="utf-8").splitlines(keepends=True)
    (at,) = [i for i, line in enumerate(lines) if line.startswith("name:")]
    lines[at] = "name: [1, 2]\n"
    path.write_text("".join(lines), encoding="utf-8")
    return f"tuneplane.yaml:{at + 1}:"


def _directory(path: Path) -> str:
    path.unlink()
    path.mkdir()
    return "tuneplane.yaml: is a directory"


BREAK: dict[str, Callable[[Path], str]] = {
    "yaml error": _yaml_error,
    "unknown key": _unknown_key,
    "wrong type": _wrong_type,
    "a directory": _directory,
}


def _commands(run_id: str) -> dict[str, tuple[str, ...]]:
    return {
        "ls": ("ls",),
        "new": ("new", "second", "--method", "custom/custom"),
        "render EXP": ("render", "demo", *FLAGS),
        "render --all": ("render", "--all"),
        "render a request": ("render", f"runs/demo/{run_id}.yaml"),
        "submit": ("submit", "demo", *FLAGS),
        "rerun": ("rerun", run_id),
        "export": ("export", "demo", "--checkpoint", run_id),
        "recipe upgrade": ("recipe", "upgrade", "--all"),
        "plugin new": ("plugin", "new", "opsd"),
        "plugin lock": ("plugin", "lock", "demo", "alice/opsd"),
        "job ls": ("job", "ls"),
        "job status": ("job", "status", run_id),
        "job logs": ("job", "logs", run_id),
        "job cancel": ("job", "cancel", run_id),
        "bot reconcile": ("bot", "reconcile"),
        "bot sync": ("bot", "sync"),
    }


@pytest.fixture()
def requested_lab(demo_lab: Path, tp: Any) -> tuple[Path, str]:
    """`demo_lab` with one committed run request (so run commands find a run)."""
    submitted = tp("submit", "demo", *FLAGS)
    assert submitted.code == 0, submitted.output
    (request,) = (demo_lab / "runs" / "demo").glob("*.yaml")
    return demo_lab, request.stem


def _snapshot(root: Path) -> dict[str, bytes | None]:
    return {
        p.relative_to(root).as_posix(): p.read_bytes() if p.is_file() else None
        for p in sorted(root.rglob("*"))
        if ".git" not in p.relative_to(root).parts
    }


@pytest.mark.parametrize("where", ["root", "subfolder"])
@pytest.mark.parametrize("broken", list(BREAK))
def test_every_lab_command_refuses_an_unusable_lab_file_alike(
    requested_lab: tuple[Path, str], tp: Any, broken: str, where: str
) -> None:
    lab, run_id = requested_lab
    place = BREAK[broken](lab / "tuneplane.yaml")
    cwd = lab if where == "root" else lab / "experiments" / "demo"
    before = _snapshot(lab)
    head = git(lab, "rev-parse", "HEAD")
    errors = {}
    for name, args in _commands(run_id).items():
        result = tp(*args, cwd=cwd)
        assert "Traceback" not in result.output, (name, result.output)
        assert result.code == 2, (name, result.code, result.output)
        lines = [line for line in result.err.splitlines() if line.startswith("error:")]
        assert len(lines) == 1, (name, result.output)
        errors[name] = lines[0]
    assert len(set(errors.values())) == 1, errors  # the same situation, the same message
    (message,) = set(errors.values())
    assert message.startswith("error: the lab settings cannot be read: ") and place in message, message
    assert _snapshot(lab) == before and git(lab, "rev-parse", "HEAD") == head  # nothing written

    report = tp("validate", cwd=cwd)
    assert "Traceback" not in report.output and place.split(": ")[0] in report.output, report.output
    assert report.code in (1, 2) and report.code == (2 if broken in ("yaml error", "a directory") else 1)


def test_a_subfolder_works_as_the_lab_root(requested_lab: tuple[Path, str], tp: Any) -> None:
    lab, run_id = requested_lab
    inside = lab / "experiments" / "demo"
    for args in (
        ("ls",),
        ("job", "ls"),
        ("job", "status", run_id),
        ("render", str(lab / "runs" / "demo" / f"{run_id}.yaml")),
    ):
        here, there = tp(*args, cwd=lab), tp(*args, cwd=inside)
        assert (here.code, here.out) == (there.code, there.out), args
    shutil.rmtree(lab / "experiments" / "second", ignore_errors=True)
    made = tp("new", "second", "--method", "custom/custom", cwd=inside)
    assert made.code == 0, made.output
    assert (lab / "experiments" / "second" / "train.sh").is_file()  # in the lab's experiment root


def test_a_broken_run_request_is_named_once_at_its_line_by_render_as_by_rerun(
    requested_lab: tuple[Path, str], tp: Any
) -> None:
    lab, run_id = requested_lab
    request = lab / "runs" / "demo" / f"{run_id}.yaml"
    request.write_text(request.read_text(encoding="utf-8") + "profile: [\n", encoding="utf-8")
    rendered, rerun = tp("render", f"runs/demo/{run_id}.yaml"), tp("rerun", run_id)
    assert "Traceback" not in rendered.output + rerun.output
    found = re.search(rf"runs/demo/{run_id}\.yaml:\d+:\d+", rerun.err)
    assert found and rerun.err.startswith(f"error: {found[0]}: not valid YAML"), rerun.err
    assert rendered.err.count(f"runs/demo/{run_id}.yaml") == 1, rendered.err
    assert f"{found[0]}: refused: not valid YAML" in rendered.err, rendered.err
