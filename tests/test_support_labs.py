"""support.labs: the one lab builder of the tests."""

from __future__ import annotations

from pathlib import Path

from support.labs import new_lab
from support.repos import git


def test_two_labs_made_in_the_same_second_share_no_history(tmp_path: Path) -> None:
    """Each lab's first commit is its own, even when two are copied from one template within the same
    second (git dates are whole seconds): a test of unrelated histories (a force-pushed orphan) needs
    that."""
    first, second = (new_lab(tmp_path / name, "same-lab", backend="kubernetes") for name in ("a", "b"))
    roots = [git(lab, "rev-list", "--max-parents=0", "HEAD") for lab in (first, second)]
    assert roots[0] != roots[1]
    assert git(first, "log", "-1", "--format=%s") == git(second, "log", "-1", "--format=%s")  # as tp init wrote it
    git(second, "fetch", "-q", str(first), "HEAD")
    assert git(second, "merge-base", "HEAD", "FETCH_HEAD", check=False) == ""
