"""What the bot acts on: the run requests and statuses of one commit, read from git's objects.

The bot never reads `runs/` or `status/` from its work tree: an untracked request, an uncommitted
`cancel: true` or a symlink in a clone is not what was merged. Everything comes from `git ls-tree`
and `git cat-file` of the commit it reconciles. Entries that are not regular files (symbolic links,
submodules) are refused with a message naming them, never followed; blobs are size-checked before
they are read.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from tuneplane.constants import BLOB_LIMIT
from tuneplane.errors import UsageError
from tuneplane.lab.gitrepo import run_git
from tuneplane.models.base import NAME
from tuneplane.models.run import RUN_ID
from tuneplane.runtime.records import FrozenRecord, Record, field

REGULAR = ("100644", "100755")
SYMLINK = "120000"
GITLINK = "160000"
TREE = "040000"


class Entry(FrozenRecord):
    mode: str
    oid: str
    path: str

    @property
    def regular(self) -> bool:
        return self.mode in REGULAR

    def what(self) -> str:
        return {SYMLINK: "a symbolic link", GITLINK: "a submodule", TREE: "a directory"}.get(
            self.mode, "not a regular file"
        )


class Listing(Record):
    """Run files of one kind (requests or statuses) in a commit: key → blob id, and what was refused."""

    found: dict[tuple[str, str], str] = field(default_factory=dict)  # (experiment, run id) → blob id
    refused: dict[tuple[str, str], str] = field(default_factory=dict)  # a run's file that is no file
    problems: list[str] = field(default_factory=list)  # refused entries that name no run
    stray: list[str] = field(default_factory=list)  # files under runs/<exp>/ that look like requests, and are not


class Snapshot:
    """One commit of the lab's repository (default: HEAD), read through git's object database."""

    def __init__(self, root: Path, commit: str = "HEAD") -> None:
        self.root = Path(root)
        self.commit = self.git("rev-parse", "--verify", "-q", "--end-of-options", f"{commit}^{{commit}}").strip()

    def git(self, *args: str, stdin: bytes | None = None) -> str:
        return self._run(list(args), stdin).decode("utf-8", "replace")

    def _run(self, args: list[str], stdin: bytes | None = None) -> bytes:
        return run_git(self.root, args, stdin)

    # ── trees ────────────────────────────────────────────────────────────────────────────────

    def entries(self, path: str, recursive: bool = False) -> list[Entry]:
        """`git ls-tree` of `path` in the commit: its children (or, when it is no tree, itself)."""
        spec = path.rstrip("/") + "/"
        args = ["ls-tree", "-z", *(["-r"] if recursive else []), self.commit, "--", spec]
        out = self._run(args)
        if not out and not recursive:
            out = self._run(["ls-tree", "-z", self.commit, "--", path.rstrip("/")])
        return [_entry(item) for item in out.decode("utf-8", "replace").split("\0") if item]

    def top(self, path: str) -> tuple[dict[str, str], list[str]]:
        """Subdirectories of `path` (name → tree id) and the entries there that are refused."""
        trees: dict[str, str] = {}
        problems: list[str] = []
        for entry in self.entries(path):
            if entry.path == path.rstrip("/"):  # `path` itself is no directory
                if entry.mode != TREE:
                    problems.append(f"{entry.path} is {entry.what()} in commit {self.commit[:12]}")
                continue
            name = entry.path.rsplit("/", 1)[-1]
            if entry.mode == TREE:
                trees[name] = entry.oid
            elif entry.mode in (SYMLINK, GITLINK) and NAME.match(name):
                problems.append(
                    f"{entry.path} is {entry.what()}: run files must be committed in this "
                    "repository; ignored (remove it with git rm)"
                )
        return trees, problems

    def runs(self, path: str, suffix: str, experiments: Iterable[str] | None = None) -> Listing:
        """The run files `path/<exp>/<run id><suffix>` of the commit (of some experiments only)."""
        listing = Listing()
        trees, listing.problems = self.top(path)
        wanted = sorted(trees if experiments is None else set(experiments) & set(trees))
        if not wanted:
            return listing
        specs = [f"{path}/{exp}/" for exp in wanted]
        out = self._run(["ls-tree", "-z", self.commit, "--", *specs]).decode("utf-8", "replace")
        for item in out.split("\0"):
            if not item:
                continue
            entry = _entry(item)
            parts = entry.path.split("/")
            if len(parts) == 3 and path == "runs" and NAME.match(parts[1]):
                self._stray(entry, listing)
            if len(parts) != 3 or not parts[2].endswith(suffix) or not NAME.match(parts[1]):
                continue
            stem = parts[2][: -len(suffix)]
            if not RUN_ID.match(stem):
                continue
            key = (parts[1], stem)
            if entry.regular:
                listing.found[key] = entry.oid
            else:
                listing.refused[key] = f"{entry.path} is {entry.what()}: refused (run files must be regular files)"
        return listing

    @staticmethod
    def _stray(entry: Entry, listing: Listing) -> None:
        """A file under `runs/<exp>/` that looks meant as a request but is none the bot reads: said so,
        rather than never run without a word (notes such as a README are left alone)."""
        name = entry.path.rsplit("/", 1)[-1]
        stem, dot, ext = name.rpartition(".")
        fix = "a run request is runs/<experiment>/<run id>.yaml, as tp submit writes it; submit it with tp submit"
        if entry.mode == TREE:
            listing.stray.append(f"{entry.path}/ is a folder: the bot reads no request inside it ({fix})")
        elif dot and ext in ("yaml", "yml") and not (ext == "yaml" and RUN_ID.match(stem)):
            why = "ends in .yml" if ext == "yml" else f"{stem!r} is not a run id (YYYYMMDD-HHMMSS-hex)"
            listing.stray.append(f"{entry.path} is not read as a run request: its name {why} ({fix})")

    # ── blobs ────────────────────────────────────────────────────────────────────────────────

    def blobs(self, oids: Iterable[str], limit: int = BLOB_LIMIT) -> dict[str, bytes | None]:
        """Contents of blobs by id; None for one larger than `limit` (never read)."""
        wanted = sorted(set(oids))
        if not wanted:
            return {}
        sizes: dict[str, int] = {}
        check = self._run(
            ["cat-file", "--batch-check=%(objectname) %(objecttype) %(objectsize)"], ("\n".join(wanted) + "\n").encode()
        )
        for line in check.decode("ascii", "replace").splitlines():
            parts = line.split()
            if len(parts) == 3 and parts[1] == "blob":
                sizes[parts[0]] = int(parts[2])
        small = [oid for oid in wanted if sizes.get(oid, limit + 1) <= limit]
        out: dict[str, bytes | None] = dict.fromkeys(wanted)
        if small:
            data = self._run(["cat-file", "--batch"], ("\n".join(small) + "\n").encode())
            at = 0
            for oid in small:
                header_end = data.index(b"\n", at)
                size = int(data[at:header_end].split()[2])
                out[oid] = data[header_end + 1 : header_end + 1 + size]
                at = header_end + 1 + size + 1
        return out

    def text(self, oid: str, rel: str, limit: int = BLOB_LIMIT) -> str:
        """One blob as UTF-8 text; a clear UsageError when it is too large or not text."""
        data = self.blobs([oid], limit).get(oid)
        if data is None:
            raise UsageError(
                f"{rel} is larger than {limit // 1024} KiB; refused unread", hint="a run request is a few lines of YAML"
            )
        try:
            return data.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise UsageError(f"{rel}: byte {exc.start} is not UTF-8", hint="save the file as UTF-8") from None


def _entry(item: str) -> Entry:
    meta, _, path = item.partition("\t")
    mode, _kind, oid = meta.split()
    return Entry(mode, oid, path)
