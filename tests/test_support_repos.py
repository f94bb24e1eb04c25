"""`support.repos`: its `git` is the tests' one way to run git, and no test file runs git another way.

Every test's git then gets the same environment (no `GIT_DIR` of a hook that started the suite points
it at another repository) and the same failure: git's stderr in the assertion, not a bare exit status.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from support.repos import git, git_result

TESTS = Path(__file__).resolve().parent
# support/ holds the one git(); githttp.py serves repositories through `git http-backend` (a server's
# plumbing, not a test's git).
OWN_GIT_ALLOWED = ("support/", "githttp.py")
RUNNERS = ("subprocess.run", "subprocess.Popen", "subprocess.check_output", "subprocess.check_call", "os.system")


def test_git_result_answers_a_failure_with_its_status_and_stderr(tmp_path: Path) -> None:
    done = git_result(tmp_path, "rev-parse", "--verify", "HEAD")
    assert done.returncode != 0 and "not a git repository" in done.stderr.lower()
    with pytest.raises(AssertionError, match="git rev-parse --verify HEAD in .* failed"):
        git(tmp_path, "rev-parse", "--verify", "HEAD")


def test_git_runs_in_its_folder_whatever_git_dir_the_shell_set(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    here, elsewhere = tmp_path / "here", tmp_path / "elsewhere"
    for root in (here, elsewhere):
        root.mkdir()
        git(root, "init", "-q")
    monkeypatch.setenv("GIT_DIR", str(elsewhere / ".git"))
    assert Path(git(here, "rev-parse", "--absolute-git-dir")) == here / ".git"


def _hands_out_the_helper(node: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    """A fixture whose whole work is to return `support.repos.git` (conftest's `git`)."""
    fixture = any("fixture" in ast.unparse(d) for d in node.decorator_list)
    last = node.body[-1]
    return (
        fixture and isinstance(last, ast.Return) and ast.unparse(last.value or ast.Constant(None)).endswith("repos.git")
    )


def _git_command(items: list[ast.expr]) -> bool:
    """`"git", SUBCOMMAND, ...`: a git command line, as an argv or as the arguments of a runner (a
    mapping's `get("git", [])` names a key, not a command)."""
    return (
        len(items) > 1
        and isinstance(items[0], ast.Constant)
        and items[0].value == "git"
        and isinstance(items[1], ast.Constant | ast.JoinedStr | ast.Starred)
    )


def _git_through_a_shell(call: ast.Call) -> bool:
    first = call.args[0] if call.args else None
    return (
        ast.unparse(call.func) in RUNNERS
        and isinstance(first, ast.Constant)
        and isinstance(first.value, str)
        and first.value.startswith("git ")
    )


def own_git(source: str) -> list[int]:
    """The lines of `source` that run git themselves or define a `git`/`_git` of their own."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            if node.name in {"git", "_git"} and not _hands_out_the_helper(node):
                found.append(node.lineno)
        elif isinstance(node, ast.List | ast.Tuple) and _git_command(node.elts):
            found.append(node.lineno)
        elif isinstance(node, ast.Call) and (_git_command(node.args) or _git_through_a_shell(node)):
            found.append(node.lineno)
    return sorted(found)


@pytest.mark.parametrize(
    ("source", "flagged"),
    [
        ('subprocess.run(["git", "add", "-A"], cwd=lab, check=True)', True),
        ('subprocess.Popen(("git", "fetch"), cwd=lab)', True),
        ('for argv in (["git", "init"], ["git", "add", "-A"]):\n    subprocess.run(argv)', True),
        ('_run("git", "commit", "-m", "x", cwd=root)', True),
        ('subprocess.run("git status", shell=True)', True),
        ('os.system("git log -1")', True),
        ("def git(root, *args):\n    return run(root, *args)", True),
        ("def _git(*args):\n    pass", True),
        ('git(lab, "add", "-A")', False),
        ('git_result(root, "commit", "-m", "x", env=env)', False),
        ('shutil.which("git")', False),
        ('argv[:1] == ["git"]', False),
        ('entry.get("git", [])', False),
        ('_run("git", *args, cwd=root)', True),
        ("script = \"subprocess.run(['git', 'show'])\"", False),
        ("@pytest.fixture()\ndef git():\n    return support.repos.git", False),
    ],
)
def test_the_check_sees_git_run_in_every_spelling(source: str, flagged: bool) -> None:
    assert bool(own_git(source)) is flagged, source


def test_no_test_file_runs_git_but_through_support_repos() -> None:
    """The issue's ask: one git helper. A test that needs git's exit status and stderr (a hook refusing a
    commit) takes `git_result`; every other takes `git` (`from support.repos import git`)."""
    found = [
        f"{rel}:{line}"
        for path in sorted(TESTS.rglob("*.py"))
        if not (rel := path.relative_to(TESTS).as_posix()).startswith(OWN_GIT_ALLOWED)
        for line in own_git(path.read_text(encoding="utf-8"))
    ]
    assert not found, f"run git through support.repos.git (or git_result), not by hand: {found}"


def test_support_defines_git_once() -> None:
    """A helper module that needs another identity passes `env=` to `repos.git`; it keeps no wrapper."""
    defining = [
        path.name
        for path in sorted((TESTS / "support").glob("*.py"))
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
        if isinstance(node, ast.FunctionDef) and node.name in {"git", "_git"}
    ]
    assert defining == ["repos.py"]
