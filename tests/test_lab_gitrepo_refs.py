"""User-supplied git refs reach git only as verified commits, never as options.

`--base` of `tp validate --changed` and `tp render --changed --diff` is checked with
`git rev-parse --verify --end-of-options REF^{commit}` before any other git call sees it; a value
that is an option, a range, a tree, a blob or nothing is refused with exit 2 and a message naming
`--base`, and nothing is written.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from support.hostile import ALLOW, RUN_REQUEST, assert_clear, build_base_lab, copy_lab, tp
from support.repos import git

HOSTILE_REFS = {
    "output-option": "--output={victim}",
    "output-short": "-o{victim}",
    "no-index": "--no-index",
    "ext-diff": "--ext-diff",
    "help": "--help",
    "patch": "-p",
    "dash": "-",
    "missing": "no-such-branch",
    "too-far-back": "HEAD~50",
    "blob": "HEAD:tuneplane.yaml",
    "tree": "HEAD^{tree}",
    "range": "HEAD..HEAD",
    "symmetric-range": "HEAD...HEAD",
    "newline": "HEAD\n",
    "empty": "",
    "upstream": "@{upstream}",
    "reflog-far": "@{99}",
    "pathspec-magic": ":(top)",
    "shell": "$(touch {victim})",
    "space-option": " --output={victim}",
}


@pytest.fixture(scope="module")
def base_lab(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_base_lab(tmp_path_factory.mktemp("hostile-git") / "lab")


@pytest.fixture()
def lab(base_lab: Path, tmp_path: Path) -> Path:
    root = copy_lab(base_lab, tmp_path / "lab")
    (root / RUN_REQUEST).write_text(
        (root / RUN_REQUEST).read_text(encoding="utf-8") + "message: changed\n", encoding="utf-8"
    )
    return root


def _check_refused(lab: Path, args: list[str], victim: Path) -> None:
    result = tp(*args, cwd=lab, env=ALLOW)
    assert_clear(result, says=["--base"], codes=(2,))
    assert not victim.exists(), f"git wrote {victim}: {result.output}"
    assert git(lab, "status", "--porcelain", strip=False) == f" M {RUN_REQUEST}\n"


@pytest.mark.parametrize("case", list(HOSTILE_REFS))
def test_validate_changed_refuses_a_hostile_base(lab: Path, tmp_path: Path, case: str) -> None:
    victim = tmp_path / "victim"
    ref = HOSTILE_REFS[case].replace("{victim}", str(victim))
    _check_refused(lab, ["validate", "--changed", f"--base={ref}"], victim)


@pytest.mark.parametrize(
    "case",
    ["output-option", "output-short", "no-index", "blob", "range", "missing", "newline", "empty", "help", "shell"],
)
def test_render_changed_diff_refuses_a_hostile_base(lab: Path, tmp_path: Path, case: str) -> None:
    victim = tmp_path / "victim"
    ref = HOSTILE_REFS[case].replace("{victim}", str(victim))
    _check_refused(lab, ["render", "--changed", "--diff", f"--base={ref}"], victim)


def test_render_changed_without_diff_refuses_an_option_base(lab: Path, tmp_path: Path) -> None:
    victim = tmp_path / "victim"
    _check_refused(lab, ["render", "--changed", f"--base=--output={victim}"], victim)


def test_the_refusal_is_before_any_other_git_call(lab: Path, tmp_path: Path) -> None:
    """A victim that exists is not truncated either."""
    victim = tmp_path / "victim"
    victim.write_text("keep me\n", encoding="utf-8")
    result = tp("validate", "--changed", f"--base=--output={victim}", cwd=lab, env=ALLOW)
    assert_clear(result, says=["--base"], codes=(2,))
    assert victim.read_text(encoding="utf-8") == "keep me\n"


@pytest.mark.parametrize("how", ["HEAD", "sha", "short-sha", "branch"])
def test_a_real_commit_is_accepted(lab: Path, how: str) -> None:
    head = git(lab, "rev-parse", "HEAD").strip()
    ref = {
        "HEAD": "HEAD",
        "sha": head,
        "short-sha": head[:10],
        "branch": git(lab, "symbolic-ref", "--short", "HEAD").strip(),
    }[how]
    result = tp("validate", "--changed", f"--base={ref}", cwd=lab, env=ALLOW)
    assert result.code == 0, result.output
    assert "1 run request" in result.output


def test_render_diff_against_a_real_commit(lab: Path) -> None:
    result = tp("render", "--changed", "--diff", "--base=HEAD", cwd=lab, env=ALLOW)
    assert result.code == 0, result.output
    assert RUN_REQUEST in result.out
