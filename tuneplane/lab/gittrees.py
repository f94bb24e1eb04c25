"""Trees and blobs of a commit read through git's objects, never the work tree: the job package, the
run statuses a change touches (for the PR check), and the bot's record's trees built in a scratch index.

The job package holds every file of the commit as committed. `git archive` would honour the lab's
`export-ignore` (a `train.py export-ignore` silently drops the script from the job) and
`export-subst` (rewrites a file): both are meant for release tarballs, not for running a commit, so
the package is built from `ls-tree` and `cat-file` instead.
"""

from __future__ import annotations

import io
import os
import tarfile
from pathlib import Path

from tuneplane.errors import UsageError
from tuneplane.lab.gitrepo import BOT_REFS, GitRepo, run_git, upstream_prefix
from tuneplane.runtime.records import FrozenRecord

STATUS = "status/"
RECORD = BOT_REFS + "authority"  # the bot's record (record.authority.REF; lab/ imports no record/)


def package(repo: GitRepo, commit: str, dest: Path, exclude: tuple[str, ...] = ()) -> None:
    """Unpack every file of `commit` (a verified id) into `dest`, but the top-level paths `exclude`."""
    listing = repo.git("ls-tree", "-r", "-z", "--full-tree", commit)
    entries = []
    for item in listing.split("\0"):
        meta, _, path = item.partition("\t")
        parts = meta.split()
        if len(parts) != 3 or parts[1] != "blob":
            continue  # a submodule is not part of this repository's commit
        if any(path == p or path.startswith(p.rstrip("/") + "/") for p in exclude):
            continue
        entries.append((parts[0], parts[2], path))
    data = read_blobs(repo, [oid for _m, oid, _p in entries])
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        for mode, oid, path in entries:
            info = tarfile.TarInfo(path)
            body = data[oid]
            if mode == "120000":
                info.type, info.linkname = tarfile.SYMTYPE, body.decode("utf-8", "surrogateescape")
                tar.addfile(info)
            else:
                info.size, info.mode = len(body), 0o755 if mode == "100755" else 0o644
                tar.addfile(info, io.BytesIO(body))
    buffer.seek(0)
    dest.mkdir(parents=True, exist_ok=True)
    with tarfile.open(fileobj=buffer, mode="r:") as tar:
        if hasattr(tarfile, "data_filter"):
            tar.extractall(dest, filter="data")  # refuses absolute paths and links leaving dest
        else:  # Python < 3.11.4: links leaving dest are left out by hand
            tar.extractall(
                dest,
                members=[
                    m for m in tar.getmembers() if not m.issym() or _inside(dest, Path(m.name).parent / m.linkname)
                ],
            )


def _inside(root: Path, path: Path) -> bool:
    return os.path.realpath(root / path).startswith(os.path.realpath(root) + os.sep)


class StatusChange(FrozenRecord):
    """A run status a change touches: its base version, and what the bot's record says of the run."""

    rel: str  # status/<exp>/<run-id>.json
    before: str | None  # its text at the base (None: new)
    recorded: bool | None  # in the bot's record (None: this clone holds no record)


def status_changes(repo: GitRepo, base: str | None, remote: str = "origin") -> list[StatusChange]:
    """The run statuses changed since `base` (default: the merge base with the default branch), work
    tree and untracked files included; [] outside a lab with statuses."""
    if not os.path.isdir(repo.root / "status"):
        return []
    ref = repo.verify_commit(base) if base is not None else repo.default_merge_base()
    if not ref:
        return []
    paths = set(repo.git("diff", "--name-only", "--no-renames", "--end-of-options", ref, "--", STATUS).splitlines())
    paths.update(repo.git("ls-files", "--others", "--exclude-standard", "--", STATUS).splitlines())
    runs = sorted(p for p in paths if p.count("/") == 2 and p.endswith(".json") and p != "status/index.json")
    record = next((r for r in (RECORD, upstream_prefix(remote) + "authority") if repo.has_commit(r)), "")
    return [StatusChange(rel, repo.show(ref, rel), _in(repo, record, rel) if record else None) for rel in runs]


def _in(repo: GitRepo, commit: str, rel: str) -> bool:
    try:
        repo.git("rev-parse", "-q", "--verify", f"{commit}:{rel}")
    except UsageError:
        return False
    return True


def read_blobs(repo: GitRepo, oids: list[str]) -> dict[str, bytes]:
    """Blob contents by id, in one `git cat-file --batch`."""
    wanted = sorted(set(oids))
    if not wanted:
        return {}
    out = run_git(repo.root, ["cat-file", "--batch"], ("\n".join(wanted) + "\n").encode())
    found: dict[str, bytes] = {}
    at = 0
    for oid in wanted:
        header_end = out.index(b"\n", at)
        size = int(out[at:header_end].split()[2])
        found[oid] = out[header_end + 1 : header_end + 1 + size]
        at = header_end + 1 + size + 1
    return found


def write_blob(repo: GitRepo, data: bytes) -> str:
    """Store `data` as a blob; its id."""
    return run_git(repo.root, ["hash-object", "-w", "--stdin"], data).decode("ascii").strip()


def with_index(repo: GitRepo, index: Path, *args: str, stdin: bytes | None = None) -> str:
    """`git ARGS` with its own index file `index`: trees built without touching the clone's index."""
    out = run_git(repo.root, args, stdin, extra_env={"GIT_INDEX_FILE": str(index)})
    return out.decode("utf-8", "replace").strip()
