"""The one module that talks to git (through GitPython), with a clean git environment.

Git variables inherited from a hook or CI (GIT_DIR, GIT_INDEX_FILE, …) would point our commands at the
wrong repository, so every command runs with them removed, as pre-commit does.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from tuneplane.errors import UsageError

_KEEP = {"GIT_EXEC_PATH", "GIT_SSH", "GIT_SSH_COMMAND", "GIT_SSL_CAINFO", "GIT_SSL_NO_VERIFY",
         "GIT_CONFIG_GLOBAL", "GIT_CONFIG_NOSYSTEM", "GIT_TERMINAL_PROMPT", "GIT_ASKPASS"}
FALLBACK_NAME = "TunePlane"
FALLBACK_EMAIL = "tuneplane@localhost"


def no_git_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_") or k in _KEEP}
    env.setdefault("GIT_TERMINAL_PROMPT", "0")
    return env


class GitRepo:
    """A working tree. Only the operations tp needs, each one git command where possible."""

    def __init__(self, root: Path) -> None:
        import git  # GitPython: ~50 ms to import, so only commands that touch git pay for it

        try:
            self._repo = git.Repo(root, search_parent_directories=False)
        except (git.InvalidGitRepositoryError, git.NoSuchPathError):
            raise UsageError(f"{root} is not a git repository",
                             hint="run `git init` (or `tp init`), or pass --no-git where offered") from None
        self._repo.git.update_environment(**no_git_env())
        self.root = Path(self._repo.working_tree_dir or root)

    @classmethod
    def init(cls, root: Path, branch: str = "main") -> GitRepo:
        import git

        repo = git.Repo.init(root, initial_branch=branch)
        repo.close()
        return cls(root)

    def git(self, *args: str) -> str:
        import git

        try:
            return str(self._repo.git.execute(["git", *args]))
        except git.GitCommandError as exc:
            raise GitFailed(args, exc.status, str(exc.stderr).strip()) from None

    def ensure_identity(self) -> None:
        """A commit needs an identity; give this repository a local one only when none is configured."""
        for key, fallback in (("user.name", FALLBACK_NAME), ("user.email", FALLBACK_EMAIL)):
            try:
                self.git("config", "--get", key)
            except GitFailed:
                self.git("config", "--local", key, fallback)

    def head(self) -> str:
        return self.git("rev-parse", "HEAD")

    def has_commits(self) -> bool:
        try:
            self.git("rev-parse", "--verify", "-q", "HEAD")
            return True
        except GitFailed:
            return False

    def is_dirty(self, paths: list[str] | None = None) -> bool:
        return bool(self.git("status", "--porcelain", "--untracked-files=normal", "--", *(paths or ["."])))

    def add_and_commit(self, paths: list[str], message: str) -> str:
        """Commit exactly `paths` (nothing else that happens to be staged)."""
        self.git("add", "--", *paths)
        self.git("commit", "-q", "-m", message, "--only", "--", *paths)
        return self.head()

    def changed_files(self, base: str | None) -> list[str]:
        """Files changed since `base` (default: merge base with the default branch), plus uncommitted ones."""
        ref = base or self.default_merge_base()
        out = set()
        if ref:
            out.update(self.git("diff", "--name-only", "--no-renames", ref, "--").splitlines())
        out.update(self.git("diff", "--name-only", "--no-renames", "HEAD", "--").splitlines()
                   if self.has_commits() else [])
        out.update(self.git("ls-files", "--others", "--exclude-standard").splitlines())
        return sorted(p for p in out if p)

    def default_merge_base(self) -> str:
        for candidate in ("origin/HEAD", "origin/main", "origin/master", "main", "master"):
            try:
                return self.git("merge-base", "HEAD", candidate)
            except GitFailed:
                continue
        return ""

    def show(self, rev: str, path: str) -> str | None:
        try:
            return self.git("show", f"{rev}:{path}")
        except GitFailed:
            return None

    def close(self) -> None:
        self._repo.close()

    @property
    def raw(self) -> Any:
        return self._repo


class GitFailed(UsageError):
    def __init__(self, args: tuple[str, ...], status: Any, stderr: str) -> None:
        super().__init__(f"git {' '.join(args)} failed ({status}): {stderr}")
        self.status = status
        self.stderr = stderr
