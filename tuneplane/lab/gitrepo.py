"""The one module that talks to git, with a clean git environment.

Git variables inherited from a hook or CI (GIT_DIR, GIT_INDEX_FILE, …) would point our commands at the
wrong repository, so every command runs with them removed, as pre-commit does. Commands run as `git`
processes with that scrubbed environment (GitPython can only add to the environment it passes, and
importing it costs ~30 ms that `tp render` and `tp validate --changed` should not pay); GitPython
creates repositories and is there, lazily, for callers that want its object model (`raw`).
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import threading
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from tuneplane.errors import UsageError

_KEEP = {
    "GIT_EXEC_PATH",
    "GIT_SSH",
    "GIT_SSH_COMMAND",
    "GIT_SSL_CAINFO",
    "GIT_SSL_NO_VERIFY",
    "GIT_CONFIG_GLOBAL",
    "GIT_CONFIG_NOSYSTEM",
    "GIT_TERMINAL_PROMPT",
    "GIT_ASKPASS",
}
# Refs only the bot writes (its authority): no branch, so no merged pull request can move one.
BOT_REFS = "refs/tuneplane/"
# A fetch never recurses into submodules: a committed `.gitmodules` (an `update = !cmd`, a URL) is the
# lab's content, never an instruction to the bot's git.
BOT_FETCH = ("--no-recurse-submodules",)
# The bot's files take no attribute from the lab's `.gitattributes` (`merge=union` joins two bots'
# statuses into invalid JSON, `filter=lfs` commits a pointer): the clone's `info/attributes` wins.
BOT_ATTRIBUTES = (
    "# tuneplane: the bot's files take no attribute from the lab's .gitattributes\n"
    "status/** -merge -filter -text -eol -ident -diff -working-tree-encoding -export-subst\n"
)
FALLBACK_NAME = "TunePlane"
FALLBACK_EMAIL = "tuneplane@localhost"
# What `git push` says when another writer got there first (or holds the ref lock right now).
_RACE_MARKS = (
    "[rejected]",
    "non-fast-forward",
    "fetch first",
    "cannot lock ref",
    "failed to update ref",
    "failed to lock",
    "unable to create",
    "remote ref does not exist",  # a ref deleted by another writer first: the next fetch no longer lists it
)


# A shallow clone (the bot's CI checkout holds the tip commit only) fetches what it lacks on demand:
# one commit by id, or history deepened this many commits at a time, then all of it (bounded).
DEEPEN_STEPS = (50, 500)
NETWORK_TIMEOUT = 600  # seconds for one fetch or push: a host that stops answering is an error, not a hang
_FULL_ID = re.compile(r"[0-9a-f]{40}(?:[0-9a-f]{24})?\Z")  # a SHA-1 or SHA-256 commit id
# What `git fetch` says when the remote answered and has no such object (anything else: it could not ask).
_NOT_THERE = (
    "not our ref",
    "couldn't find remote ref",
    "no such remote ref",
    "unadvertised object",
    "not a valid object",
    "no such commit",
)


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
            raise UsageError(
                f"{root} is not a git repository", hint="run `git init` (or `tp init`), or pass --no-git where offered"
            )

    @classmethod
    def init(cls, root: Path, branch: str = "main") -> GitRepo:
        import git  # lazy: GitPython is a heavy import; only creating a repository uses it

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

    def _run(self, args: tuple[str, ...] | list[str], timeout: float | None = None) -> bytes:
        if timeout is not None:
            return self._run_bounded(args, timeout)
        return run_git(self.root, args)

    def _run_bounded(self, args: tuple[str, ...] | list[str], timeout: float) -> bytes:
        """A command that talks to a remote: in its own process group, which is killed whole (git and its
        transport helper) when the remote has not finished answering within `timeout` seconds, and when
        this process is interrupted or terminated meanwhile (its own group is not git's, so a Ctrl-C or a
        cancelled CI job would otherwise leave a push running on its own)."""
        proc = subprocess.Popen(
            ["git", *args],
            cwd=self.root,
            env=no_git_env(),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,
        )
        try:
            with _terminate_raises():
                out, err = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            _kill_group(proc)
            raise GitFailed(tuple(args), "timeout", f"no answer within {timeout:g} s") from None
        except BaseException:
            _kill_group(proc)
            raise
        if proc.returncode:
            raise GitFailed(tuple(args), proc.returncode, err.decode("utf-8", "replace").strip())
        return out

    def guard_attributes(self) -> None:
        """The bot's files immune to the lab's `.gitattributes` in this clone (the rest of it stays)."""
        path = Path(self.git("rev-parse", "--git-path", "info/attributes"))
        path = path if path.is_absolute() else self.root / path
        try:
            text = path.read_text(encoding="utf-8")
        except FileNotFoundError:
            text = ""
        if BOT_ATTRIBUTES in text:
            return
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text + ("" if not text or text.endswith("\n") else "\n") + BOT_ATTRIBUTES, encoding="utf-8")

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
        hint = f"pass a branch, a tag or a commit id, e.g. {what} origin/main"
        if self.is_shallow():
            hint += (
                "; this clone is shallow (it holds recent commits only): fetch the ref first, e.g. "
                "git fetch --deepen=50 origin main, or check out with fetch-depth: 0"
            )
        raise UsageError(f"{what} {ref!r} is not a commit of this repository", hint=hint)

    def changed_files(self, base: str | None) -> list[str]:
        """Files changed since `base` (default: merge base with the default branch), plus uncommitted ones."""
        ref = self.verify_commit(base) if base is not None else self.default_merge_base()
        out = set()
        if ref:
            out.update(self.git("diff", "--name-only", "--no-renames", "--end-of-options", ref, "--").splitlines())
        out.update(
            self.git("diff", "--name-only", "--no-renames", "HEAD", "--").splitlines() if self.has_commits() else []
        )
        out.update(self.git("ls-files", "--others", "--exclude-standard").splitlines())
        return sorted(p for p in out if p)

    def default_merge_base(self) -> str:
        for candidate in ("origin/HEAD", "origin/main", "origin/master", "main", "master"):
            try:
                return self.git("merge-base", "HEAD", candidate)
            except GitFailed:
                if self.has_commit(candidate) and self.is_shallow():
                    # the merge base may be older than the clone: never fall back to "no changes"
                    raise UsageError(
                        f"this clone is shallow, and the commit where HEAD and {candidate} meet is not in it, "
                        "so the changed files are unknown",
                        hint=f"pass --base {candidate}, fetch more history (git fetch --deepen=50 origin), "
                        "or check out with fetch-depth: 0",
                    ) from None
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
            # the bot's refs (`refs/tuneplane/*`, its authority) come along: a glob matching none is no
            # error; --prune: a ref deleted there (a heartbeat no run needs) leaves no copy here
            self._run(
                [
                    "fetch",
                    "-q",
                    "--prune",
                    *BOT_FETCH,
                    "--end-of-options",
                    remote,
                    f"+refs/heads/{branch}:refs/remotes/{remote}/{branch}",
                    f"+{BOT_REFS}*:{upstream_prefix(remote)}*",
                ],
                timeout=NETWORK_TIMEOUT,
            )
        except GitFailed as exc:
            if "couldn't find remote ref" in exc.stderr.lower():  # git says a missing branch only in words
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

    # ---- shallow clones: what the bot's CI checkout (`fetch-depth: 1`) lacks, fetched on demand --------

    def is_shallow(self) -> bool:
        try:
            return self.git("rev-parse", "--is-shallow-repository") == "true"
        except GitFailed:
            return False

    def shallow_roots(self) -> set[str]:
        """The commits a shallow clone holds without their parents (its history stops there)."""
        path = Path(self.git("rev-parse", "--absolute-git-dir")) / "shallow"
        try:
            return set(path.read_text(encoding="ascii").split())
        except (OSError, UnicodeDecodeError):
            return set()

    def has_commit(self, rev: str) -> bool:
        try:
            self.rev_parse(rev)
            return True
        except GitFailed:
            return False

    def fetch_more(self, *args: str) -> None:
        """One bounded `git fetch -q --no-tags ARGS` (the caller verified what it passes)."""
        self._run(["fetch", "-q", "--no-tags", *BOT_FETCH, *args], timeout=NETWORK_TIMEOUT)

    def ensure_commit(self, rev: str, remote: str = "origin") -> str:
        """The full id of commit `rev`, fetched from `remote` when this clone lacks it.

        A shallow clone holds its tip only, so a commit missing here is no proof that it does not exist.
        A full id is fetched alone (`git fetch --depth=1 REMOTE ID`: upload-pack under protocol v2, git's
        default, serves any commit it stores; git hosts serve the commits their branches reach). A host
        that refuses that (protocol v0 serves branch tips only), a name or a short id cost the whole
        history (`--unshallow`), which holds the commit if the remote's branches reach it.
        `CommitUnavailable` says which it was: the remote has no such commit (`transient` False), or it
        could not be asked (True: the same may work later).
        """
        if not rev or rev != rev.strip() or rev.startswith("-") or any(c in rev for c in "\0\n\r"):
            raise CommitUnavailable(f"{rev!r} is not a commit id", hint="give a full commit id", transient=False)
        if self.has_commit(rev):
            return self.rev_parse(rev)
        if not self.has_remote(remote):
            raise CommitUnavailable(
                f"commit {rev} is not in this repository, and it has no remote {remote!r} to fetch it from",
                hint=f"fetch the commit into this clone, or add the remote (git remote add {remote} URL)",
                transient=False,
            )
        shallow = self.is_shallow()
        by_id = bool(_FULL_ID.match(rev.lower()))
        try:
            if by_id:
                self.fetch_more(*(["--depth=1"] if shallow else []), "--end-of-options", remote, rev.lower())
            elif shallow:
                self.fetch_more("--unshallow", "--end-of-options", remote)
            else:
                self.fetch_more("--end-of-options", remote)
        except GitFailed as exc:
            if not any(mark in exc.stderr.lower() for mark in _NOT_THERE):
                raise CommitUnavailable(
                    f"commit {rev} is not in this clone, and fetching it from {remote} failed: "
                    f"{_last_line(exc.stderr)}",
                    hint=f"check that {remote} can be reached, then run the command again",
                    transient=True,
                ) from None
            if by_id and shallow:  # a host that serves branch tips only: the history holds it, if anything
                try:
                    self.fetch_more("--unshallow", "--end-of-options", remote)
                except GitFailed as again:
                    raise CommitUnavailable(
                        f"commit {rev} is not in this clone, and fetching the history from {remote} failed: "
                        f"{_last_line(again.stderr)}",
                        hint=f"check that {remote} can be reached, then run the command again",
                        transient=True,
                    ) from None
        if self.has_commit(rev):
            return self.rev_parse(rev)
        raise CommitUnavailable(
            f"commit {rev} is not in this clone, and {remote} has no such commit",
            hint=f"push the branch or tag that holds it to {remote}, or name a commit that {remote} has",
            transient=False,
        )

    def merge_base_deepening(self, upstream: str, remote: str, branch: str) -> str:
        """The merge base of HEAD and `upstream` ("" when they share no commit). A shallow clone that lacks
        it fetches more of `branch`'s history, `DEEPEN_STEPS` commits at a time, then all of it."""
        refspec = f"+refs/heads/{branch}:refs/remotes/{remote}/{branch}"
        steps = [*DEEPEN_STEPS, 0]
        while True:
            try:
                return self.git("merge-base", "--end-of-options", "HEAD", upstream)
            except GitFailed as exc:
                if exc.status != 1:  # 1: none found; anything else is an error to report
                    raise
            if not steps or not self.is_shallow():
                return ""
            step = steps.pop(0)
            self.fetch_more(f"--deepen={step}" if step else "--unshallow", "--end-of-options", remote, refspec)

    def added_in(self, path: str, remote: str = "origin", first_parent: bool = False) -> str:
        """The newest commit of HEAD's history that added `path` ("" when none did); `first_parent`: of
        the branch's own commits (a merge, not the merged branch's commit). In a shallow clone the oldest
        commit it holds seems to add every file: history is fetched until the answer is no such commit
        (`DEEPEN_STEPS`, then all of it)."""
        log = ("log", *(["--first-parent"] if first_parent else []), "--diff-filter=A", "--format=%H", "-1", "--")
        for step in (*DEEPEN_STEPS, 0):
            found = self.git(*log, path)
            if not found or found not in self.shallow_roots():
                return found
            if not self.has_remote(remote):
                raise UsageError(
                    f"this clone is shallow, so the commit that added {path} is not in it",
                    hint="fetch the history (git fetch --unshallow) and run the command again",
                )
            self.fetch_more(f"--deepen={step}" if step else "--unshallow", "--end-of-options", remote)
        return self.git(*log, path)

    def rebase(self, upstream: str, since: str = "") -> list[str]:
        """Replay local commits onto `upstream` (only those after `since`, when given); returns the
        conflicted paths ([] when it finished)."""
        if since:
            return self._rebase_step("rebase", "-q", "--autostash", "--onto", upstream, "--end-of-options", since)
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

    def push(self, remote: str, branch: str, also: Sequence[str] = ()) -> bool:
        """Push HEAD to `remote`/`branch` with `also`, all or none; False when the remote moved on."""
        atomic = ["--atomic"] if also else []
        try:
            self._run(
                [
                    "push",
                    "-q",
                    "--no-recurse-submodules",
                    *atomic,
                    "--end-of-options",
                    remote,
                    f"HEAD:refs/heads/{branch}",
                    *also,
                ],
                timeout=NETWORK_TIMEOUT,
            )
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
        """Unpack the tree of `commit` into `dest` (the job package), never the working tree: every
        file as committed (see `gittrees.package`). `exclude` names top-level paths."""
        from tuneplane.lab.gittrees import package  # lazy: only a job package needs it

        package(self, self.ensure_commit(commit), dest, exclude)

    def close(self) -> None:
        if self._raw is not None:
            self._raw.close()


class GitFailed(UsageError):
    def __init__(self, args: tuple[str, ...], status: Any, stderr: str) -> None:
        super().__init__(f"git {' '.join(args)} failed ({status}): {stderr}")
        self.status = status
        self.stderr = stderr


class CommitUnavailable(UsageError):
    """A commit this clone lacks and could not fetch: the remote has none (`transient` False), or it
    could not be asked now (True: the same request may work on the next run)."""

    def __init__(self, message: str, hint: str, transient: bool) -> None:
        super().__init__(message, hint=hint)
        self.transient = transient


def _last_line(text: str) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[-1] if lines else "no message"


def run_git(
    root: Path, args: Sequence[str], stdin: bytes | None = None, extra_env: dict[str, str] | None = None
) -> bytes:
    """`git <args>` in `root`, in the clean environment (plus `extra_env`), `stdin` its input (else
    none): its output, or GitFailed. Every git command of tp runs here (a remote's through `GitRepo`,
    bounded in time)."""
    feed: dict[str, Any] = {"stdin": subprocess.DEVNULL} if stdin is None else {"input": stdin}
    done: subprocess.CompletedProcess[bytes] = subprocess.run(
        ["git", *args], cwd=root, env={**no_git_env(), **(extra_env or {})}, capture_output=True, check=False, **feed
    )
    if done.returncode:
        raise GitFailed(tuple(args), done.returncode, done.stderr.decode("utf-8", "replace").strip())
    return done.stdout


def upstream_prefix(remote: str) -> str:
    """Where a fetch from `remote` keeps its copy of the bot's refs."""
    return f"refs/tuneplane-upstream/{remote}/"


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.communicate()


@contextlib.contextmanager
def _terminate_raises() -> Iterator[None]:
    """SIGTERM raises SystemExit(143) meanwhile, so the caller can stop its child first; only in the
    main thread, and only where nobody else handles SIGTERM."""
    if (
        threading.current_thread() is not threading.main_thread()
        or signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL
    ):
        yield
        return

    def terminated(signum: int, _frame: object) -> None:
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, terminated)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)


def checkout_origin(path: Path) -> tuple[str, str] | None:
    """(`origin` URL, HEAD commit) of the checkout at `path`, or None when it has no such remote."""
    try:
        repo = GitRepo(path)
        return repo.git("remote", "get-url", "origin"), repo.head()
    except (UsageError, OSError):
        return None
