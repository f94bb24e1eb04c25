"""The job package is the commit, every file as committed: the lab's `.gitattributes` cannot drop or
rewrite a file of it (`export-ignore` and `export-subst` are for release tarballs). Real git."""

from __future__ import annotations

import os
from pathlib import Path

from support.repos import configure, git

from tuneplane.lab.gitrepo import GitRepo


def _repo(tmp_path: Path) -> tuple[GitRepo, str]:
    root = tmp_path / "lab"
    root.mkdir()
    git(root, "init", "-q", "-b", "main")
    configure(root)
    (root / "experiments/demo").mkdir(parents=True)
    (root / "experiments/demo/train.py").write_text("print('training')\n")
    (root / "experiments/demo/run.sh").write_text("#!/bin/sh\n")
    os.chmod(root / "experiments/demo/run.sh", 0o755)
    (root / "VERSION").write_text("$Format:%H$\n")
    (root / "link").symlink_to("VERSION")
    (root / "status").mkdir()
    (root / "status/x.json").write_text("{}\n")
    (root / ".gitattributes").write_text("experiments/demo/train.py export-ignore\nVERSION export-subst\n")
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "lab")
    repo = GitRepo(root)
    return repo, repo.head()


def test_the_package_keeps_files_the_lab_marks_export_ignore(tmp_path: Path) -> None:
    repo, commit = _repo(tmp_path)
    dest = tmp_path / "package"

    repo.archive(commit, dest, exclude=("status",))

    assert (dest / "experiments/demo/train.py").read_text() == "print('training')\n"
    assert (dest / "VERSION").read_text() == "$Format:%H$\n"  # as committed, not substituted
    assert os.access(dest / "experiments/demo/run.sh", os.X_OK)
    assert os.readlink(dest / "link") == "VERSION"
    assert not (dest / "status").exists()


def test_the_bots_files_take_no_attribute_from_the_lab(tmp_path: Path) -> None:
    repo, _ = _repo(tmp_path)
    (repo.root / ".gitattributes").write_text("status/** merge=union filter=lfs text eol=crlf\n")

    repo.guard_attributes()
    repo.guard_attributes()  # once is enough: nothing is added twice

    said = git(repo.root, "check-attr", "merge", "filter", "eol", "--", "status/demo/r.json")
    assert "union" not in said and "lfs" not in said and "crlf" not in said, said
    attributes = Path(git(repo.root, "rev-parse", "--absolute-git-dir")) / "info/attributes"
    assert attributes.read_text().count("status/**") == 1
