"""One reporter for what tp says: results on standard output, the rest on standard error, a program's
text exactly as given; the CLI's `say` is one, and the code below the CLI defaults to `plain`."""

from __future__ import annotations

import pytest

from tuneplane.cli.say import say
from tuneplane.runs import localrun
from tuneplane.runtime.reporter import Reporter, plain


def test_each_message_goes_to_its_stream(capsys: pytest.CaptureFixture[str]) -> None:
    plain.line("result")
    plain.text("text\n")
    plain.data('{"a": 1}\n')
    plain.note("doing")
    plain.warn("careful")
    plain.error("broken")
    out, err = capsys.readouterr()
    assert out == 'result\ntext\n{"a": 1}\n'
    assert err == "doing\nwarning: careful\nerror: broken\n"


def test_the_cli_s_voice_is_a_reporter_and_keeps_a_program_s_text_exact(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """`tp validate --format json|github` goes through `say.data`: neither painted nor in the edition's
    words, though the same reporter translates a person's lines."""
    assert isinstance(say, Reporter)
    monkeypatch.setattr(say, "translate", lambda text: text.replace("x", "叉"))
    monkeypatch.setattr("tuneplane.cli.say.colour_on", lambda _stream: True)
    say.data("::error file=a.yaml,line=1,col=2::error: x\n")
    say.json({"error": "x"})
    say.line("error: x")
    out = capsys.readouterr().out
    assert out == '::error file=a.yaml,line=1,col=2::error: x\n{\n  "error": "x"\n}\n\033[31merror:\033[0m 叉\n'


def test_a_run_owner_speaks_through_the_reporter(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The detached owner of a local run (`python -m tuneplane.runs.localrun`) says its usage on
    standard error through `plain`, as every library default does."""
    said: list[str] = []
    monkeypatch.setattr(Reporter, "_write", lambda _self, _stream, text: said.append(text))
    assert localrun.main([]) != 0
    assert said == ["usage: python -m tuneplane.runs.localrun RUN_DIR LAB_ROOT\n"]
    assert capsys.readouterr().err == ""
