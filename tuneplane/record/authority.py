"""The bot's authority: which cluster object, run directory or process belongs to which run.

A status file names the Kubernetes Job, Slurm job or local run directory of its run. Status files live
in the lab's branch, and a merged pull request can write any of them: one that copies another team's
`backend` block would have the bot read that team's logs into git, or delete its job. So the bot keeps
its own copy of every status it writes, and of its ledger, in a commit that no merge can move: the ref
`refs/tuneplane/authority` (`REF`), which only the bot writes and pushes, atomically with its commits.
Its tree mirrors the bot's part of `status/`: `status/<exp>/<run-id>.json`, byte for byte as the bot
last wrote it (the same blobs as the branch, so it costs no storage), and `status/index.json`.

The bot reads a run's backend reference (to observe it, read its log, list its artifacts, cancel it)
only from there. A status in the branch that differs from the bot's copy was changed by someone else:
it is put back and reported. A status the bot has no copy of names a run the bot did not start (a
`tp submit --local` run of a laptop, or a forgery): the bot never acts on it.

A lab whose bot ran before this record existed has none: the first run adopts the statuses of the
commit it sees (those of the cluster backends, and local runs whose directory is on the bot's machine),
says so, and pushes the record from then on. Two bots that raced merge their records as they merge
their branches: each run's more advanced status, the ledgers merged.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterable, Iterator
from pathlib import Path

from tuneplane.constants import PHASE_RANK
from tuneplane.errors import UsageError
from tuneplane.lab.gitrepo import BOT_REFS, GitRepo, upstream_prefix
from tuneplane.lab.gittrees import read_blobs, with_index, write_blob
from tuneplane.lab.runs import unchecked_status
from tuneplane.models.backendkinds import backend_kind
from tuneplane.record.ledger import LEDGER, merge

REF = BOT_REFS + "authority"
STATUS_PREFIX = "status/"
_CHUNK = 500  # paths per `ls-tree` (bounded command lines)


def upstream(remote: str) -> str:
    """The last fetched copy of `remote`'s authority."""
    return upstream_prefix(remote) + "authority"


class Authority:
    """The bot's record in one clone: read by path, written by `record` + `save`."""

    def __init__(self, repo: GitRepo) -> None:
        self.repo = repo
        self.commit = _resolve(repo, REF)
        self.pending: set[str] = set()  # paths whose committed bytes become the record on `save`
        self._oids: dict[str, str] = {}

    @property
    def known(self) -> bool:
        return bool(self.commit)

    # ── reading ──────────────────────────────────────────────────────────────────────────────────

    def oids(self, paths: Iterable[str]) -> dict[str, str]:
        """Blob ids of the bot's copies of `paths` (those it has none of are left out)."""
        wanted = sorted({p for p in paths if p not in self._oids})
        if self.commit and wanted:
            for start in range(0, len(wanted), _CHUNK):
                out = self.repo.git("ls-tree", "-z", self.commit, "--", *wanted[start : start + _CHUNK])
                for item in out.split("\0"):
                    meta, _, path = item.partition("\t")
                    parts = meta.split()
                    if len(parts) == 3 and parts[1] == "blob":
                        self._oids[path] = parts[2]
        return {p: self._oids[p] for p in paths if p in self._oids}

    def read(self, paths: Iterable[str]) -> dict[str, bytes]:
        """The bot's copies of `paths`, as it wrote them."""
        found = self.oids(list(paths))
        data = read_blobs(self.repo, list(found.values()))
        return {p: data[oid] for p, oid in found.items()}

    # ── writing ──────────────────────────────────────────────────────────────────────────────────

    def record(self, rel: str) -> None:
        """`rel`, as the bot commits it next, becomes the record (on `save`)."""
        self.pending.add(rel)

    def save(self, message: str, commit: str | None = None) -> str:
        """The record with `pending` paths as `commit` holds them (None: as staged in the clone's index,
        before the commit is made, so a bot killed in between finds its record ahead of the branch, and
        its next run commits the same files); moves `REF`. Returns the new record."""
        if not self.pending:
            return self.commit
        paths = sorted(self.pending)
        lines = []
        for start in range(0, len(paths), _CHUNK):
            chunk = paths[start : start + _CHUNK]
            out = self.repo.git(*(["ls-tree", "-z", commit] if commit else ["ls-files", "-s", "-z"]), "--", *chunk)
            lines += [item for item in out.split("\0") if item and item.partition("\t")[2] in self.pending]
        with self._index(self.commit) as index:
            if lines:
                with_index(self.repo, index, "update-index", "--index-info", stdin=("\n".join(lines) + "\n").encode())
            tree = with_index(self.repo, index, "write-tree")
        self._move(tree, [self.commit] if self.commit else [], message)
        self.pending.clear()
        return self.commit

    def adopt(self, commit: str) -> int:
        """A first record, from the statuses of `commit` (a lab whose bot ran before records existed):
        the cluster runs, local runs whose directory is on this machine, and the ledger. Returns how
        many statuses it took."""
        out = self.repo.git("ls-tree", "-r", "-z", commit, "--", STATUS_PREFIX)
        rows = []
        for item in out.split("\0"):
            meta, _, path = item.partition("\t")
            parts = meta.split()
            if len(parts) == 3 and parts[0] in ("100644", "100755") and path.endswith(".json"):
                rows.append((parts[0], parts[2], path))
        data = read_blobs(self.repo, [oid for _m, oid, _p in rows])
        taken = [r for r in rows if r[2] == LEDGER or _adoptable(data.get(r[1], b""))]
        if not taken:
            return 0  # nothing to take: the record starts with the bot's first commit
        with self._index("") as index:
            if taken:
                lines = "".join(f"{mode} {oid}\t{path}\n" for mode, oid, path in taken)
                with_index(self.repo, index, "update-index", "--add", "--index-info", stdin=lines.encode())
            tree = with_index(self.repo, index, "write-tree")
        self._move(tree, [], f"tp bot: adopt the statuses of {commit[:12]} as its record")
        return sum(1 for r in taken if r[2] != LEDGER)

    def merge_upstream(self, remote: str) -> bool:
        """Take in the record another bot pushed (fetched as `upstream(remote)`); True when it changed ours."""
        theirs = _resolve(self.repo, upstream(remote))
        if not theirs or theirs == self.commit or _ancestor(self.repo, theirs, self.commit):
            return False
        if not self.commit or _ancestor(self.repo, self.commit, theirs):
            self.repo.git("update-ref", REF, theirs, *([self.commit] if self.commit else []))
            self.commit, self._oids = theirs, {}
            return True
        out = self.repo.git("diff-tree", "-r", "-z", "--no-renames", theirs, self.commit)
        items = [i for i in out.split("\0") if i]
        lines = []
        for meta, path in zip(items[::2], items[1::2], strict=False):
            parts = meta.lstrip(":").split()
            mine = "" if set(parts[3]) == {"0"} else parts[3]
            other = "" if set(parts[2]) == {"0"} else parts[2]
            chosen = self._pick(path, other, mine)
            if chosen and chosen != other:
                lines.append(f"100644 {chosen}\t{path}")
        with self._index(theirs) as index:
            if lines:
                with_index(
                    self.repo, index, "update-index", "--add", "--index-info", stdin=("\n".join(lines) + "\n").encode()
                )
            tree = with_index(self.repo, index, "write-tree")
        self._move(tree, [theirs, self.commit], "tp bot: merge the records of two bots")
        return True

    def push_spec(self) -> list[str]:
        """What `git push` adds to publish the record (nothing before there is one)."""
        return [f"{REF}:{REF}"] if self.commit else []

    # ── helpers ──────────────────────────────────────────────────────────────────────────────────

    def _pick(self, path: str, other: str, mine: str) -> str:
        """Of two bots' copies of one path, the one to keep (a blob id)."""
        if not other or not mine:
            return other or mine
        data = read_blobs(self.repo, [other, mine])
        if path == LEDGER:
            text = merge(data[other].decode("utf-8", "replace"), data[mine].decode("utf-8", "replace"))
            return write_blob(self.repo, text.encode("utf-8"))
        chosen = pick_status(data[other].decode("utf-8", "replace"), data[mine].decode("utf-8", "replace"))
        return mine if chosen == data[mine].decode("utf-8", "replace") else other

    @contextlib.contextmanager
    def _index(self, start: str) -> Iterator[Path]:
        """A scratch index in the git directory, holding the tree of `start` (empty: none)."""
        git_dir = Path(self.repo.git("rev-parse", "--absolute-git-dir"))
        index = git_dir / f"tuneplane-authority-{os.getpid()}.index"
        try:
            with_index(self.repo, index, "read-tree", *([start] if start else ["--empty"]))
            yield index
        finally:
            index.unlink(missing_ok=True)

    def _move(self, tree: str, parents: list[str], message: str) -> None:
        args = ["commit-tree", tree, *[a for p in parents for a in ("-p", p)], "-m", message]
        new = self.repo.git(*args)
        try:
            self.repo.git("update-ref", REF, new, *([self.commit] if self.commit else [""]))
        except UsageError as exc:  # another process of this clone moved it meanwhile
            raise UsageError(
                f"the bot's record ({REF}) moved while it was written: {exc.message}",
                hint="another bot runs in this clone; run the command again once it is done",
            ) from None
        self.commit, self._oids = new, {}


def pick_status(upstream: str | None, ours: str | None) -> str | None:
    """Of two versions of one status file, the more advanced; a tie keeps the one already published."""

    def rank(text: str | None) -> tuple[int, int, str]:
        status = unchecked_status(text)
        if status is None:
            return (-1, 0, "")
        return (PHASE_RANK.get(status.phase, -1), len(status.history), status.finished_at)

    if upstream is None or ours is None:
        return upstream if ours is None else ours
    return ours if rank(ours) > rank(upstream) else upstream


def _adoptable(data: bytes) -> bool:
    """A status a bot that kept no record may have written: any run but a local one of another machine."""
    status = unchecked_status(data)
    if status is None:
        return False
    backend = status.backend
    if backend is None or backend.backend is None or not backend_kind(backend.backend).runs_here:
        return True
    return os.path.isdir(backend.run_dir)


def _resolve(repo: GitRepo, ref: str) -> str:
    try:
        return repo.git("rev-parse", "--verify", "-q", f"{ref}^{{commit}}")
    except UsageError:
        return ""


def _ancestor(repo: GitRepo, ancestor: str, descendant: str) -> bool:
    return bool(ancestor and descendant) and repo.is_ancestor(ancestor, descendant)
