"""Shell completion: the scripts for bash, zsh and fish, and what a Tab offers (commands from the
table, experiment names and run ids read from the lab's folders), through the real `tp`."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest


def _complete(words: str, cwd: Path) -> list[str]:
    """What bash's completion asks `tp` for `words` (the last one being completed)."""
    parts = words.split(" ")
    env = {**os.environ, "_TP_COMPLETE": "complete_bash", "COMP_WORDS": words, "COMP_CWORD": str(len(parts) - 1)}
    code = "import sys; sys.argv = ['tp']; from tuneplane.cli.main import run; run()"
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=cwd, env=env, capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.split()


@pytest.mark.parametrize(
    ("shell", "marker"),
    [
        ("bash", "complete -o default -F _tp_completion tp"),
        ("zsh", "compdef _tp_completion tp"),
        ("fish", "complete --command tp"),
    ],
)
def test_each_shell_gets_its_script(shell: str, marker: str, tp_subprocess):
    result = tp_subprocess("--show-completion", shell)  # named: no detection of the shell running the tests
    assert result.code == 0, result.output
    assert marker in result.out and "_TP_COMPLETE" in result.out


def test_command_names_complete_from_the_table(tmp_path: Path):
    assert _complete("tp jo", tmp_path) == ["job"]
    assert _complete("tp v", tmp_path) == ["validate"]


def test_experiments_and_run_ids_complete_from_the_lab(demo_lab: Path, tp):
    assert tp("new", "other", "--method", "custom/custom").code == 0
    (demo_lab / "runs" / "demo").mkdir(parents=True)
    for run in ("20250102-100000-aaaaaaaaaa", "20250103-100000-bbbbbbbbbb"):
        (demo_lab / "runs" / "demo" / f"{run}.yaml").write_text("profile: p\n", encoding="utf-8")
    assert _complete("tp validate ", demo_lab) == ["demo", "other"]
    assert _complete("tp submit d", demo_lab) == ["demo"]
    assert _complete("tp job status 2025010", demo_lab) == ["20250103-100000-bbbbbbbbbb", "20250102-100000-aaaaaaaaaa"]
    assert _complete("tp job status demo/20250102", demo_lab) == ["demo/20250102-100000-aaaaaaaaaa"]
    assert _complete("tp job compare 20250102-100000-aaaaaaaaaa 20250103", demo_lab) == ["20250103-100000-bbbbbbbbbb"]


def test_outside_a_lab_nothing_is_offered(tmp_path: Path):
    assert _complete("tp job status 2025", tmp_path) == []


def test_install_writes_the_script_where_the_shell_reads_it(tmp_path: Path):
    env = {**os.environ, "HOME": str(tmp_path)}
    done = subprocess.run(
        [sys.executable, "-m", "tuneplane", "--install-completion", "bash"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "bash completion installed in" in done.stderr
    script = tmp_path / ".bash_completions" / "tp.sh"
    assert "_TP_COMPLETE=complete_bash" in script.read_text(encoding="utf-8")
    assert f"source '{script}'" in (tmp_path / ".bashrc").read_text(encoding="utf-8")


def test_an_unknown_shell_is_a_usage_error(tp):
    result = tp("--show-completion", "ksh")
    assert result.code == 2 and "no completion for shell 'ksh'" in result.err, result.output
