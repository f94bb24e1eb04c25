"""The lint rules on code people really write: every Python and shell file of an experiment and of
the lab's shared code, with prose (docstrings, comments) never taken for code."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from conftest import write_tree
from support.repos import git

DOCSTRING_PY = '''"""Train a classifier.

The platform starts this file with --output-dir --overrides-json and a config; the checkpoints go to
./checkpoints under the out dir (see the README), never /tmp/scratch.
"""
import argparse

# --output-dir ./checkpoints is what the old launcher passed
parser = argparse.ArgumentParser(description="Train a classifier")
parser.add_argument("--output-dir")
'''
CODE_PY = 'import os\nOUT = "./checkpoints"\n'
STARFORGE_RUN = "from starforge.report import StarForgeCallback\n\ncallbacks = [StarForgeCallback()]\n"


def _problems(result: Any) -> list[dict[str, Any]]:
    assert "Traceback" not in result.output, result.output
    return list(json.loads(result.out)["problems"])


def test_output_path_lint_ignores_docstrings_and_comments(lab: Path, tp: Any) -> None:
    assert tp("new", "cls", "--method", "pytorch/image-classification", cwd=lab).code == 0
    (lab / "experiments/cls/train.py").write_text(DOCSTRING_PY, encoding="utf-8")
    problems = _problems(tp("validate", "cls", "--format", "json", cwd=lab))
    assert [p for p in problems if p["rule"] == "lint-output-dir"] == []


def test_output_path_lint_still_fires_on_code(lab: Path, tp: Any) -> None:
    assert tp("new", "cls", "--method", "pytorch/image-classification", cwd=lab).code == 0
    (lab / "experiments/cls/train.py").write_text(CODE_PY, encoding="utf-8")
    problems = _problems(tp("validate", "cls", "--format", "json", cwd=lab))
    assert [(p["line"], p["col"]) for p in problems if p["rule"] == "lint-output-dir"] == [(2, 8)]


SEARCH_PATHS_SH = """#!/usr/bin/env bash
export PYTHONPATH="/tmp/deps:${PYTHONPATH:-}"
PATH=/opt/bin:/tmp/tools/bin:$PATH exec python "${TUNEPLANE_EXP_DIR}/train.py" > /tmp/train.log
"""
SEARCH_PATHS_PY = 'import os, sys\nsys.path.insert(0, "/tmp/deps")\nos.environ["PYTHONPATH"] = "/tmp/deps"\n'


def test_a_search_path_under_tmp_is_not_an_output_but_a_write_there_is(lab: Path, tp: Any) -> None:
    """Code found under /tmp loses nothing when the container exits; a log written there does."""
    assert tp("new", "byo", "--method", "custom/custom", cwd=lab).code == 0
    write_tree(lab, {"experiments/byo/train.sh": SEARCH_PATHS_SH, "experiments/byo/train.py": SEARCH_PATHS_PY})
    problems = _problems(tp("validate", "byo", "--format", "json", cwd=lab))
    found = [(p["file"], p["line"]) for p in problems if p["rule"] == "lint-output-dir"]
    assert found == [("experiments/byo/train.sh", 3)], found


def test_starforge_callback_anywhere_in_the_experiment_fails_strict(lab: Path, tp: Any) -> None:
    assert tp("new", "sft", "--method", "trl/sft", cwd=lab).code == 0
    write_tree(lab, {"experiments/sft/helpers/callbacks.py": STARFORGE_RUN})
    git(lab, "add", "-A")
    git(lab, "commit", "-q", "-m", "x")
    problems = _problems(tp("validate", "sft", "--format", "json", cwd=lab))
    found = sorted({(p["file"], p["line"]) for p in problems if p["rule"] == "lint-legacy-env"})
    assert found == [("experiments/sft/helpers/callbacks.py", 1), ("experiments/sft/helpers/callbacks.py", 3)]
    hints = " ".join(p["hint"] for p in problems if p["rule"] == "lint-legacy-env")
    assert "TunePlaneCallback" in hints and "tuneplane.report" in hints
    strict = tp("validate", "sft", "--strict", cwd=lab)
    assert strict.code == 1 and "experiments/sft/helpers/callbacks.py:1" in strict.out


def test_starforge_use_in_shared_code_is_flagged(lab: Path, tp: Any) -> None:
    path = lab / "tuneplane.yaml"
    path.write_text(path.read_text(encoding="utf-8") + "shared_code: [common]\n", encoding="utf-8")
    write_tree(lab, {"common/__init__.py": "", "common/report.py": STARFORGE_RUN})
    problems = _problems(tp("validate", "--format", "json", cwd=lab))
    assert ("common/report.py", 1) in {(p["file"], p["line"]) for p in problems if p["rule"] == "lint-legacy-env"}
