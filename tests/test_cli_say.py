"""What tp says is coloured on a terminal only: errors red, warnings yellow, ok green; NO_COLOR or a
pipe gives the same text without a colour code."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tuneplane.cli.say import paint

RED, YELLOW, RESET = "\033[31m", "\033[33m", "\033[0m"


def _on_a_terminal(args: list[str], cwd: Path, **env: str) -> tuple[int, str, str]:
    """`tp ARGS` with standard output and standard error each on its own pseudo-terminal."""
    out_main, out_side = os.openpty()
    err_main, err_side = os.openpty()
    environment = {k: v for k, v in os.environ.items() if k != "NO_COLOR"}
    environment.update(TERM="xterm", **env)
    done = subprocess.run(
        [sys.executable, "-m", "tuneplane", *args],
        cwd=cwd,
        stdout=out_side,
        stderr=err_side,
        env=environment,
        timeout=120,
        check=False,
    )
    os.close(out_side)
    os.close(err_side)
    texts = []
    for fd in (out_main, err_main):
        chunks = []
        while True:
            try:
                chunk = os.read(fd, 65536)
            except OSError:  # the terminal's other side is closed: all of it was read
                break
            if not chunk:
                break
            chunks.append(chunk)
        os.close(fd)
        texts.append(b"".join(chunks).decode().replace("\r\n", "\n"))
    return done.returncode, texts[0], texts[1]


def test_a_terminal_gets_colour_and_no_color_the_same_text_without(demo_lab: Path, tp):
    code, out, err = _on_a_terminal(["job", "status", "nope"], demo_lab)
    assert code == 2 and err.startswith(f"{RED}error:{RESET} no run 'nope' in this lab"), repr(err)
    code, out, err = _on_a_terminal(["validate", "demo"], demo_lab)
    assert f": {YELLOW}warning{RESET} [lint-scaffold]" in out, repr(out)
    plain = tp("validate", "demo")
    assert out.replace(YELLOW, "").replace(RESET, "") == plain.out
    code, out, err = _on_a_terminal(["job", "status", "nope"], demo_lab, NO_COLOR="1")
    assert err.startswith("error: no run 'nope' in this lab"), repr(err)


def test_a_pipe_gets_no_colour(demo_lab: Path):
    done = subprocess.run(
        [sys.executable, "-m", "tuneplane", "job", "status", "nope"],
        cwd=demo_lab,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env={**os.environ, "TERM": "xterm"},
    )
    assert done.stderr.startswith("error: no run 'nope'") and "\033[" not in done.stderr


@pytest.mark.parametrize(
    ("line", "painted"),
    [
        ("error: x", f"{RED}error:{RESET} x"),
        ("a.yaml:1:2: error [rule] x", f"a.yaml:1:2: {RED}error{RESET} [rule] x"),
        ("a.yaml:1:2: warning [rule] x", f"a.yaml:1:2: {YELLOW}warning{RESET} [rule] x"),
        ("ok: 3 experiments", "\033[32mok:\033[0m 3 experiments"),
        ("run 1: Succeeded", "run 1: Succeeded"),
    ],
)
def test_only_the_severity_word_is_painted(line: str, painted: str):
    assert paint(line) == painted
