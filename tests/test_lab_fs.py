"""The one safe reader of lab files: what it refuses, it says why and how to mend it."""

from __future__ import annotations

import ast
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


def test_atomic_write_keeps_a_files_mode_or_takes_the_one_asked(tmp_path: Path) -> None:
    shared = tmp_path / "status" / "a.json"
    fs.atomic_write(shared, "{}\n")
    shared.chmod(0o640)
    fs.atomic_write(shared, '{"phase": "Running"}\n')
    assert shared.read_text() == '{"phase": "Running"}\n' and shared.stat().st_mode & 0o777 == 0o640
    secret = tmp_path / "run" / ".tuneplane" / "token"
    fs.atomic_write(secret, "s3cret", mode=0o600)
    assert secret.read_text() == "s3cret" and secret.stat().st_mode & 0o777 == 0o600


def test_atomic_write_all_changes_every_file_or_none(tmp_path: Path) -> None:
    (tmp_path / "a.md").write_text("old a\n")
    (tmp_path / "blocked").write_text("a file where a folder would go\n")
    with pytest.raises(OSError):
        fs.atomic_write_all({tmp_path / "a.md": "new a\n", tmp_path / "blocked" / "b.md": "new b\n"})
    assert (tmp_path / "a.md").read_text() == "old a\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.md", "blocked"]  # no temporary file left
    fs.atomic_write_all({tmp_path / "a.md": "new a\n", tmp_path / "d" / "b.md": "new b\n"})
    assert (tmp_path / "a.md").read_text() == "new a\n" and (tmp_path / "d" / "b.md").read_text() == "new b\n"


def test_the_developer_side_stages_files_only_through_lab_fs() -> None:
    """One atomic writer: `tempfile.mkstemp` and `os.replace` of a file appear in lab/fs.py alone. The
    job side (report, collector, lifecycle) cannot import it and keeps its own; moving a staged
    directory into place (a run's work tree) is no file write."""
    package = Path(__file__).resolve().parents[1] / "tuneplane"
    job_side = ("report/", "collector/", "lifecycle/", "runtime/", "launcher.py", "plugins.py")
    directory_swaps = {("backends/slurm/submit.py", "work")}
    found = []
    for path in sorted(package.rglob("*.py")):
        rel = path.relative_to(package).as_posix()
        if rel == "lab/fs.py" or rel.startswith(job_side):
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr in ("mkstemp", "replace", "NamedTemporaryFile")
                and getattr(node.func.value, "id", "") in ("os", "tempfile")
            ):
                target = ast.unparse(node.args[1]) if len(node.args) > 1 else ""
                if (rel, target) not in directory_swaps:
                    found.append(f"{rel}:{node.lineno}: {ast.unparse(node)}")
    assert not found, "write through tuneplane.lab.fs.atomic_write(_all):\n" + "\n".join(found)
