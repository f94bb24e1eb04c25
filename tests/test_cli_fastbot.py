"""An idle `tp bot reconcile|sync` is answered without Typer; it must take exactly the command line
Typer's commands take, answer an idle run as they do, and leave everything else to them."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner
from helpers_git import git
from test_bot_idle import _finished_lab

from tuneplane.cli import fastbot, fastpath
from tuneplane.cli.app import build_app, run_typer


def _typer_options(verb: str) -> dict[str, tuple[str, ...]]:
    import typer.main

    group = typer.main.get_command(build_app("bot")).commands["bot"]  # type: ignore[attr-defined]
    command = group.commands[verb]
    return {p.name: tuple(sorted(o for o in p.opts if o.startswith("-"))) for p in command.params
            if p.name != "help"}


@pytest.mark.parametrize("verb", fastbot.VERBS)
def test_both_parsers_declare_the_same_options(verb: str) -> None:
    fast = {a.dest: tuple(sorted(a.option_strings)) for a in fastbot._parser(verb)._actions}
    assert fast == _typer_options(verb)


def _run(args: list[str], cwd: Path, via_typer: bool) -> tuple[int, str, str]:
    with CliRunner().isolation() as streams:
        before = os.getcwd()
        os.chdir(cwd)
        try:
            if via_typer:
                code = run_typer(args)
            else:
                fast = fastpath.command(args)
                assert fast is not None, f"the fast path refused {args}"
                code = fast()
        finally:
            os.chdir(before)
            sys.stdout.flush()
        return code, streams[0].getvalue().decode(), streams[1].getvalue().decode()


@pytest.mark.parametrize("args", [
    ["bot", "reconcile"],
    ["bot", "sync"],
    ["bot", "sync", "--kubeconfig", "/nowhere", "--context", "c"],
    ["bot", "reconcile", "--in-cluster"],
])
def test_an_idle_run_is_answered_as_typer_answers_it(tmp_path: Path, args: list[str]) -> None:
    lab, _ids = _finished_lab(tmp_path, count=3)
    head = git(lab, "rev-parse", "HEAD")
    fast, typer_ = _run(args, lab, via_typer=False), _run(args, lab, via_typer=True)
    assert fast == typer_
    assert fast[0] == 0 and fast[1] == "nothing to do: every run request has its status\n"
    assert git(lab, "rev-parse", "HEAD") == head


def test_anything_else_goes_to_typer(tmp_path: Path) -> None:
    lab, _ids = _finished_lab(tmp_path, count=3)
    before = os.getcwd()
    os.chdir(lab)
    try:
        for args in (["bot", "reconcile", "--help"], ["bot", "sync", "-h"], ["bot", "sync", "--pus"],
                     ["bot", "reconcile", "--remote"], ["bot", "reconcile", "extra"], ["bot"],
                     ["bot", "reconcile", "--push", "--remote", "nowhere"]):
            assert fastpath.command(args) is None, args
        assert fastpath.command(["bot", "reconcile"]) is not None
        (lab / "status" / "demo" / "README.md").write_text("edited\n", encoding="utf-8")
        git(lab, "commit", "-q", "-am", "someone else wrote under status/")
        assert fastpath.command(["bot", "reconcile"]) is None  # work to do: the full run, through Typer
    finally:
        os.chdir(before)
    empty = tmp_path / "not-a-lab"
    empty.mkdir()
    os.chdir(empty)
    try:
        assert fastpath.command(["bot", "sync"]) is None  # no lab here: Typer's command says so
    finally:
        os.chdir(before)
