"""The one safe reader of lab files: what it refuses, it says why and how to mend it."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest

from tuneplane.lab import fs
from tuneplane.lab.yamlio import LoadFailed


def _refusal(path: Path, root: Path) -> LoadFailed:
    with pytest.raises(LoadFailed) as info:
        fs.read_text(path, root=root, rel=path.relative_to(root).as_posix())
    return info.value


def test_a_missing_file_says_so_and_names_no_permission(tmp_path: Path) -> None:
    problem = _refusal(tmp_path / "runs" / "demo" / "nope.yaml", tmp_path).problem
    assert problem.file == "runs/demo/nope.yaml"
    assert "no such file" in problem.message
    assert "permission" not in problem.hint and "path" in problem.hint


@pytest.mark.parametrize(("number", "says"), [(errno.EACCES, "permissions"), (errno.EIO, "the file")])
def test_other_failures_say_what_to_check(number: int, says: str) -> None:
    problem = fs.unreadable("status/demo/r.json", OSError(number, os.strerror(number))).problem
    assert problem.file == "status/demo/r.json" and os.strerror(number) in problem.message
    assert says in problem.hint


def test_a_directory_where_a_file_belongs_is_not_a_regular_file(tmp_path: Path) -> None:
    (tmp_path / "plugin.yaml").mkdir()
    problem = _refusal(tmp_path / "plugin.yaml", tmp_path).problem
    assert "not a regular file" in problem.message and problem.hint
