"""Rules `code-python-syntax`, `code-shell-syntax` and `run-id-duplicate` through `tp validate`."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

RUN_ID = "20260101-120000-abcdef"
URL = "https://wandb.example.org/team/proj"


def write(root: Path, rel: str, text: str) -> Path:
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


def report(tp: Any, *args: str) -> tuple[int, list[dict[str, Any]], str]:
    result = tp("validate", "--format", "json", *args)
    assert "Traceback" not in result.output
    data = json.loads(result.out)
    return result.code, data["problems"], data["checked"]


@pytest.fixture()
def byo(lab: Path, tp: Any) -> Path:
    assert tp("new", "byo", "--method", "custom/custom").code == 0
    write(lab, "experiments/byo/train.sh", '#!/usr/bin/env bash\nexec python "${TUNEPLANE_EXP_DIR}/train.py"\n')
    write(lab, "experiments/byo/train.py", "print('training')\n")
    return lab


def test_a_missing_paren_in_train_py_fails_validate_at_its_line(byo: Path, tp: Any) -> None:
    write(byo, "experiments/byo/train.py", "import os\n\nprint('training'\nx = 1\n")
    code, problems, _ = report(tp, "byo")
    found = [p for p in problems if p["rule"] == "code-python-syntax"]
    assert code == 1 and len(found) == 1 and found[0]["severity"] == "error"
    assert (found[0]["file"], found[0]["line"]) == ("experiments/byo/train.py", 3)
    assert "never closed" in found[0]["message"]


def test_a_syntax_error_in_a_helper_module_and_in_shared_code_is_found(byo: Path, tp: Any) -> None:
    write(byo, "experiments/byo/lib/helpers.py", "def f(:\n    pass\n")
    write(byo, "common/util.py", "class X\n")
    text = (byo / "tuneplane.yaml").read_text(encoding="utf-8")
    (byo / "tuneplane.yaml").write_text(text + "shared_code: [common]\n", encoding="utf-8")
    code, problems, _ = report(tp, "byo")
    files = sorted(p["file"] for p in problems if p["rule"] == "code-python-syntax")
    assert code == 1 and files == ["common/util.py", "experiments/byo/lib/helpers.py"]


def test_a_shell_syntax_error_in_train_sh_fails_validate_at_its_line(byo: Path, tp: Any) -> None:
    write(
        byo,
        "experiments/byo/train.sh",
        '#!/usr/bin/env bash\nif [ -n "$X" ]; then\n  echo x\nexec python "${TUNEPLANE_EXP_DIR}/train.py"\n',
    )
    code, problems, _ = report(tp, "byo")
    found = [p for p in problems if p["rule"] == "code-shell-syntax"]
    assert code == 1 and len(found) == 1 and found[0]["file"] == "experiments/byo/train.sh"
    assert found[0]["line"] >= 2 and "bash -n" in found[0]["message"]


def test_good_code_and_a_script_for_another_interpreter_pass(byo: Path, tp: Any) -> None:
    write(byo, "experiments/byo/tools/run.sh", "#!/usr/bin/env zsh\nfor f in *(.); do echo $f; done\n")
    write(byo, "experiments/byo/tools/ok.py", "async def f():\n    return [x async for x in g()]\n")
    code, problems, _ = report(tp, "byo")
    assert [p for p in problems if p["rule"].startswith("code-")] == []


NEWER_SYNTAX = {  # Python 3.12 grammar (PEP 695 type parameters and aliases, PEP 701 f-strings)
    "alias.py": "type Vector = list[float]\n",
    "generic.py": "def first[T](items: list[T]) -> T:\n    return items[0]\n",
    "klass.py": "class Box[T]:\n    item: T\n",
    "fstring.py": 'names = ["a"]\nprint(f"{", ".join(names)}")\n',
}


@pytest.mark.parametrize("name", sorted(NEWER_SYNTAX))
def test_newer_python_syntax_is_never_an_error(byo: Path, tp: Any, name: str) -> None:
    """The job's image may run a newer Python than tp: 3.12 syntax passes a 3.11 tp, with a warning."""
    write(byo, f"experiments/byo/tools/{name}", NEWER_SYNTAX[name])
    code, problems, _ = report(tp, "byo")
    found = [p for p in problems if p["rule"] == "code-python-syntax"]
    assert code == 0 and all(p["severity"] == "warning" for p in found), found
    if sys.version_info < (3, 12):
        assert len(found) == 1 and f"{sys.version_info[0]}.{sys.version_info[1]}" in found[0]["message"], found
    else:
        assert found == []


def request(lab: Path, exp: str, run_id: str = RUN_ID) -> str:
    rel = f"runs/{exp}/{run_id}.yaml"
    write(
        lab,
        rel,
        f"apiVersion: tuneplane/run/v1\nkind: RunRequest\nexperiment: {exp}\nrun_id: {run_id}\n"
        f"profile: h200\nimage: registry.example.com/team/x:1.0\nobservability_url: {URL}\n",
    )
    return rel


def test_one_run_id_in_two_experiments_is_an_error_on_the_second_file(byo: Path, tp: Any) -> None:
    assert tp("new", "zzz", "--method", "custom/custom").code == 0
    write(byo, "experiments/zzz/train.sh", 'exec python "${TUNEPLANE_EXP_DIR}/train.py"\n')
    first, second = request(byo, "byo"), request(byo, "zzz")
    code, problems, _ = report(tp)
    found = [p for p in problems if p["rule"] == "run-id-duplicate"]
    assert code == 1 and [(p["file"], p["line"]) for p in found] == [(second, 4)] and first in found[0]["message"]
    code, problems, _ = report(tp, second)
    assert code == 1 and [p["file"] for p in problems if p["rule"] == "run-id-duplicate"] == [second]
    code, problems, _ = report(tp, first)  # the other file is not checked now: this one is named
    assert code == 1 and [p["file"] for p in problems if p["rule"] == "run-id-duplicate"] == [first]


def test_a_script_fixed_or_broken_after_a_check_is_checked_again(byo: Path, tp: Any) -> None:
    assert [p for p in report(tp, "byo")[1] if p["rule"] == "code-shell-syntax"] == []
    write(byo, "experiments/byo/train.sh", "#!/bin/bash\nfor x in a b; do\n  echo $x\n")
    for _ in range(2):
        assert [p["line"] for p in report(tp, "byo")[1] if p["rule"] == "code-shell-syntax"] == [4]
    write(byo, "experiments/byo/train.sh", "#!/bin/bash\nfor x in a b; do\n  echo $x\ndone\n")
    assert [p for p in report(tp, "byo")[1] if p["rule"] == "code-shell-syntax"] == []
