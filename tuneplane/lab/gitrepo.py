"""The one module that talks to git, with a clean git environment.

Git variables inherited from a hook or CI (GIT_DIR, GIT_INDEX_FILE, …) would point our commands at the
wrong repository, so every command runs with them removed, as pre-commit does. Commands run as `git`
processes with that scrubbed environment (GitPython can only add to the environment it passes, and
importing it costs ~30 ms that `tp render` and `tp validate --changed` should not pay); GitPython
creates repositories and is there, lazily, for callers that want its object model (`raw`).
"""

from __future__ import annotations

import io
import os
import subprocess
import tarfile
from pathlib import Path
from typing import Any

from tuneplane.errors import UsageError

_KEEP = {"GIT_EXEC_PATH", "GIT_SSH", "GIT_SSH_COMMAND", "GIT_SSL_CAINFO", "GIT_SSL_NO_VERIFY",
         "GIT_CONFIG_GLOBAL", "GIT_CONFIG_NOSYSTEM", "GIT_TERMINAL_PROMPT", "GIT_ASKPASS"}
FALLBACK_NAME = "TunePlane"
FALLBACK_EMAIL = "tuneplane@localhost"
# What `git push` says when another writer got there first (or holds the ref lock right now).
_RACE_MARKS = ("[rejected]", "non-fast-forward", "fetch first", "cannot lock ref", "failed to update ref",
               "failed to lock", "unable to create")


def no_git_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_") or k in _KEEP}
    env.setdefault("GIT_TERMINAL_PROMPT", "0")
    return env


class GitRepo:
    """A working tree. Only the operations tp needs, each one git command where possible."""

    def __init__(self, root: Path) -> None:
        self.root = Path(root)
        self._raw: Any = None
        try:
            top = self.git("rev-parse", "--show-toplevel")
        except (GitFailed, OSError):
            top = ""
        if not top or Path(top).resolve() != self.root.resolve():
            raise UsageError(f"{root} is not a git repository",
                             hint="run `git init` (or `tp init`), or pass --no-git where offered")

    @classmethod
    def init(cls, root: Path, branch: str = "main") -> GitRepo:
        import git  # lazy: GitPython costs ~30 ms to import; only creating a repository uses it

        env = no_git_env()
        saved = {k: os.environ.pop(k) for k in list(os.environ) if k.startswith("GIT_") and k not in env}
        try:
            git.Repo.init(root, initial_branch=branch).close()
        finally:
            os.environ.update(saved)
        return cls(root)

    def git(self, *args: str) -> str:
        out = self._run(args).decode("utf-8", errors="replace")
        return out[:-1] if out.endswith("\n") else out  # the one newline git ends its output with

    def _run(self, args: tuple[str, ...] | list[str]) -> bytes:
        result = subprocess.run(["git", *args], cwd=self.root, env=no_git_env(), capture_output=True,
                                stdin=subprocess.DEVNULL)
        if result.returncode:
            raise GitFailed(tuple(args), result.returncode, result.stderr.decode("utf-8", "replace").strip())
        return result.stdout

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

    def verify_commit(self, ref: str, what: str = "--base") -> str:
        """The full id of the commit `ref` names, checked before any other git command sees it.

        Anything else is refused: an option (`--output=…`), a range, a tree or blob, a ref that does
        not exist, text with a newline. The one git rule: a user value reaches git only after
        `--end-of-options`, and a user ref only once verified as a commit.
        """
        if ref and ref == ref.strip() and not ref.startswith("-") and not any(c in ref for c in "\0\n\r"):
            try:
                return self.git("rev-parse", "--verify", "-q", "--end-of-options", f"{ref}^{{commit}}")
            except GitFailed:
                pass
        raise UsageError(f"{what} {ref!r} is not a commit of this repository",
                         hint=f"pass a branch, a tag or a commit id, e.g. {what} origin/main")

    def changed_files(self, base: str | None) -> list[str]:
        """Files changed since `base` (default: merge base with the default branch), plus uncommitted ones."""
        ref = self.verify_commit(base) if base is not None else self.default_merge_base()
        out = set()
        if ref:
            out.update(self.git("diff", "--name-only", "--no-renames", "--end-of-options", ref, "--").splitlines())
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
            return self.git("show", "--end-of-options", f"{rev}:{path}")
        except GitFailed:
            return None

    # ---- remotes, rebase and push: what the bot needs to share one branch with other bots ----------

    def current_branch(self) -> str:
        """The checked-out branch, or "" on a detached HEAD (a CI checkout of a commit)."""
        try:
            return self.git("symbolic-ref", "--short", "-q", "HEAD")
        except GitFailed:
            return ""

    def has_remote(self, remote: str) -> bool:
        return remote in self.git("remote").split()

    def fetch(self, remote: str, branch: str) -> str:
        """Fetch one branch; returns the fetched commit ("" when the remote has no such branch yet)."""
        try:
            self.git("fetch", "-q", "--end-of-options", remote,
                     f"+refs/heads/{branch}:refs/remotes/{remote}/{branch}")
        except GitFailed as exc:
            if "couldn't find remote ref" in exc.stderr.lower():
                return ""
            raise
        return self.rev_parse(f"refs/remotes/{remote}/{branch}")

    def rev_parse(self, rev: str) -> str:
        return self.git("rev-parse", "--verify", "-q", "--end-of-options", f"{rev}^{{commit}}")

    def is_ancestor(self, ancestor: str, descendant: str = "HEAD") -> bool:
        try:
            self.git("merge-base", "--is-ancestor", "--end-of-options", ancestor, descendant)
            return True
        except GitFailed:
            return False

    def rebase(self, upstream: str) -> list[str]:
        """Replay local commits onto `upstream`; returns the conflicted paths ([] when it finished)."""
        return self._rebase_step("rebase", "-q", "--autostash", "--end-of-options", upstream)

    def rebase_continue(self) -> list[str]:
        """Go on after conflicts were resolved and staged; an emptied commit is skipped."""
        if not self.git("diff", "--cached", "--name-only"):
            return self._rebase_step("rebase", "--skip")
        return self._rebase_step("rebase", "--continue")

    def _rebase_step(self, *args: str) -> list[str]:
        try:
            # core.editor=true: --continue must not open an editor for the commit message
            self.git("-c", "core.editor=true", *args)
        except GitFailed:
            conflicts = self.conflicted_paths()
            if not conflicts or not self.rebase_in_progress():
                raise
            return conflicts
        return []

    def rebase_in_progress(self) -> bool:
        git_dir = Path(self.git("rev-parse", "--absolute-git-dir"))
        return (git_dir / "rebase-merge").exists() or (git_dir / "rebase-apply").exists()

    def rebase_abort(self) -> None:
        if self.rebase_in_progress():
            self.git("rebase", "--abort")

    def conflicted_paths(self) -> list[str]:
        return [p for p in self.git("diff", "--name-only", "--diff-filter=U").splitlines() if p]

    def show_stage(self, stage: int, path: str) -> str | None:
        """One side of a conflicted path: 2 is the branch being rebased onto, 3 the commit replayed."""
        return self.show(f":{stage}", path) if stage in (1, 2, 3) else None

    def push(self, remote: str, branch: str) -> bool:
        """Push HEAD to `remote`/`branch`; False when the remote moved on (fetch, rebase, try again)."""
        try:
            self.git("push", "-q", "--end-of-options", remote, f"HEAD:refs/heads/{branch}")
            return True
        except GitFailed as exc:
            text = exc.stderr.lower()
            if any(mark in text for mark in _RACE_MARKS):
                return False
            raise

    def stage(self, paths: list[str]) -> None:
        """`git add -A` for these paths (deletions included)."""
        self.git("add", "-A", "--", *paths)

    def commit_staged(self, message: str, paths: list[str]) -> str | None:
        """Commit what is staged under `paths`; None when nothing there changed."""
        if not self.git("diff", "--cached", "--name-only", "--", *paths):
            return None
        self.git("commit", "-q", "-m", message, "--", *paths)
        return self.head()

    def archive(self, commit: str, dest: Path, exclude: tuple[str, ...] = ()) -> None:
        """Unpack the tree of `commit` into `dest` (the job package), never the working tree."""
        specs = [".", *(f":(exclude){p}" for p in exclude)]
        commit = self.rev_parse(commit)  # archive takes no --end-of-options: give it a verified id
        data = self._run(["archive", "--format=tar", commit, "--", *specs])
        dest.mkdir(parents=True, exist_ok=True)
        with tarfile.open(fileobj=io.BytesIO(data), mode="r:") as tar:
            if hasattr(tarfile, "data_filter"):
                tar.extractall(dest, filter="data")  # refuses absolute paths and links leaving dest
            else:  # Python < 3.11.4; git archive of our own commit writes no such entries
                tar.extractall(dest)

    def identity(self) -> str:
        """`Name <email>` from git config, "" when unset."""
        parts = []
        for key in ("user.name", "user.email"):
            try:
                parts.append(self.git("config", "--get", key))
            except GitFailed:
                parts.append("")
        name, email = parts
        return f"{name} <{email}>" if name and email else name or email

    def close(self) -> None:
        if self._raw is not None:
            self._raw.close()

class GitFailed(UsageError):
    def __init__(self, args: tuple[str, ...], status: Any, stderr: str) -> None:
        super().__init__(f"git {' '.join(args)} failed ({status}): {stderr}")
        self.status = status
        self.stderr = stderr


def checkout_origin(path: Path) -> tuple[str, str] | None:
    """(`origin` URL, HEAD commit) of the checkout at `path`, or None when it has no such remote."""
    try:
        repo = GitRepo(path)
        return repo.git("remote", "get-url", "origin"), repo.head()
    except (UsageError, OSError):
        return None
