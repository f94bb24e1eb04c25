"""A `--local` run reads its inputs on this machine: a path that is not there is refused before the
request is written or committed (it used to be committed, then fail in the trainer 18 s later)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from support.repos import git

from tuneplane.errors import UsageError
from tuneplane.models.run import Inputs
from tuneplane.runs.requests import check_local_inputs


def _head(lab: Path) -> str:
    return git(lab, "rev-parse", "HEAD")


@pytest.fixture()
def sft(lab: Path, tp: Any) -> Path:
    assert tp("new", "sft", "--method", "trl/sft").code == 0
    git(lab, "add", "-A")
    git(lab, "commit", "-qm", "sft")
    return lab


@pytest.mark.parametrize("flag", ["--train-data", "--validation-data", "--model"])
def test_a_missing_local_input_is_refused_before_the_commit(sft: Path, tp: Any, tmp_path: Path, flag: str) -> None:
    (sft / "data").mkdir()
    (sft / "data" / "train.jsonl").write_text('{"text": "hi"}\n', encoding="utf-8")
    given = {"--model": "Qwen/Qwen3-0.6B", "--train-data": "data/train.jsonl", "--validation-data": "data/train.jsonl"}
    given[flag] = str(tmp_path / "nope.jsonl")
    before = _head(sft)
    args = [a for pair in given.items() for a in pair]
    result = tp("submit", "sft", "--profile", "local", *args, "--local")
    assert result.code == 2, result.output
    assert f"{flag} {tmp_path / 'nope.jsonl'}: no such file or folder" in result.err, result.err
    assert _head(sft) == before and not list((sft / "runs").rglob("*.yaml"))


def test_present_paths_and_hub_names_pass(tmp_path: Path) -> None:
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "train.jsonl").write_text("{}\n", encoding="utf-8")
    check_local_inputs(
        tmp_path,
        Inputs(model="Qwen/Qwen3-0.6B", train_data="data/train.jsonl", validation_data=str(tmp_path / "data")),
    )
    check_local_inputs(tmp_path, Inputs(model="org/model", train_data="trl-lib/Capybara"))


@pytest.mark.parametrize("value", ["data/missing.jsonl", "./here", "~/no-such-folder-of-tp-tests"])
def test_relative_and_home_paths_are_read_where_the_run_reads_them(tmp_path: Path, value: str) -> None:
    with pytest.raises(UsageError, match="no such file or folder"):
        check_local_inputs(tmp_path, Inputs(train_data=value))
