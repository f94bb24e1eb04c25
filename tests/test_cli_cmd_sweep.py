"""`tp sweep`'s own lines go through the CLI's reporter: on standard output, in the edition's words."""

from __future__ import annotations

from pathlib import Path

import pytest
from support.repos import make_remote, seed_lab

from tuneplane.cli.main import run as tp
from tuneplane.cli.say import say

FLAGS = ["--profile", "local", "--image", "python:3.12", "--observability-url", "https://track.example.org/p"]


@pytest.fixture
def lab(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    root = seed_lab(make_remote(tmp_path), tmp_path / "lab", {"demo": "#!/usr/bin/env bash\ntrue\n"})
    monkeypatch.chdir(root)
    return root


def test_the_sweep_s_lines_are_said_by_the_reporter(
    lab: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(say, "translate", lambda text: text.replace(": 2 runs;", ": 2 个运行;"))
    assert tp(["sweep", "demo", "--grid", "lr=1e-5,3e-5", *FLAGS]) == 0
    out, err = capsys.readouterr()
    (name,) = (p.stem for p in (lab / "sweeps").glob("*.yaml"))
    assert f"sweep {name}: 2 个运行; `tp sweep show {name}` lists them\n" in out, out + err
    assert "next: push it" in out and "2 runs" not in out + err
    assert tp(["sweep", "show", name]) == 0
    shown = capsys.readouterr()
    assert shown.out.count("\n") >= 2 and shown.err == ""
