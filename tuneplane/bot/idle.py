"""Whether a bot run has anything to do, answered from the commit's top trees and the ledger alone.

Most bot runs follow a merge that added no run request, in a lab whose runs have all ended. Such a
run must cost about what `tp --help` costs, however many runs the lab holds: this module decides it
with one `rev-parse`, one `ls-tree` of `runs/` and `status/` (one line per experiment) and one
`cat-file` of the ledger, importing neither the models, the YAML readers nor the backends.

The run is idle when the ledger was found and watches no run (sync, reconcile), every `status/<exp>`
tree, the index page and the `sweeps/` tree are the ones the bot left (nobody else wrote a status or
a page, no sweep file changed: its page would have to follow), and, for
reconcile, every `runs/<exp>` tree is one whose requests all have a status. Anything else, or anything
unusual (no commit yet, a rebase left half done, a link where a folder belongs, a ledger too large to
trust, a remote that moved on), sends the bot down its full path, which handles and reports it. A
killed bot committed nothing, so the commit still shows the work it was doing and the next run takes
the full path and recovers. An idle run does not read `tuneplane.yaml` either: with nothing to submit
or watch it needs no settings (`tp validate` checks them on every pull request; the first run with work
reports them).
"""

from __future__ import annotations

import os
from pathlib import Path

from tuneplane.bot.report import NOTIFY_OUTBOX, BotOptions, BotReport
from tuneplane.errors import UsageError
from tuneplane.lab.gitrepo import GitFailed, GitRepo, run_git
from tuneplane.record.ledger import LEDGER, Ledger

RUNS = "runs"
STATUS = "status"
SWEEPS = "sweeps"  # the sweep files (models.sweep.SWEEPS_DIR, not imported: this module stays light)
INDEX = "status/README.md"  # the index page (lab.runs.DASHBOARD, not imported: this module stays light)
TREE = "040000"
REGULAR = ("100644", "100755")
AUTHORITY = "refs/tuneplane/authority"  # the bot's record (record.authority.REF, not imported: light)
LEDGER_LIMIT = 1 << 20  # the ledger of a large lab is a few KiB; a larger one is read by the full path


def idle(root: Path, verb: str, opts: BotOptions) -> BotReport | None:
    """An empty report when `tp bot VERB` has nothing to do in the lab at `root`; None when it must look."""
    head = _head(Path(root))
    if head is None:
        return None
    top = _top(Path(root), head)
    if top is None:
        return None
    runs, statuses, ledger_oid, index_oid, sweeps_oid = top
    recorded = _recorded_ledger(Path(root))
    if recorded is not None and recorded[0] != ledger_oid:
        return None  # the branch's ledger is not the one the bot recorded: someone rewrote it
    ledger = Ledger.parse(recorded[1] if recorded is not None else _blob(Path(root), ledger_oid))
    if not ledger.found or ledger.active:
        return None
    if ledger.index != index_oid:
        return None  # someone else edited or removed the index page: it is rendered again
    if ledger.sweeps != sweeps_oid:
        return None  # a sweep file was added, changed or removed: its page follows
    if ledger.statuses != statuses:
        return None  # someone else wrote or removed a status: the pages and the ledger must learn of it
    if verb == "reconcile" and ledger.requests != runs:
        return None  # a request is new (or an experiment went away)
    if opts.push and not _published(Path(root), opts, head):
        return None
    return BotReport()


def _git(root: Path, *args: str) -> str | None:
    try:
        return run_git(root, args).decode("utf-8", "replace")
    except GitFailed:
        return None


def _head(root: Path) -> str | None:
    """The commit to look at, when the repository is this lab's and no rebase was left half done."""
    work = root / STATUS
    if os.path.islink(work) or (os.path.lexists(work) and not os.path.isdir(work)):
        return None  # the full path refuses it with a message
    out = _git(root, "rev-parse", "--show-toplevel", "--absolute-git-dir", "--verify", "-q", "HEAD^{commit}")
    lines = (out or "").splitlines()
    if len(lines) != 3 or Path(lines[0]).resolve() != root.resolve():
        return None
    git_dir = Path(lines[1])
    if (git_dir / "rebase-merge").exists() or (git_dir / "rebase-apply").exists():
        return None
    if (git_dir / NOTIFY_OUTBOX).exists():
        return None  # notifications a killed or hindered run left to send
    return lines[2]


def _top(root: Path, head: str) -> tuple[dict[str, str], dict[str, str], str, str, str] | None:
    """`runs/<exp>` and `status/<exp>` tree ids, the ledger's and the index page's blob ids ("" for no
    index page) and the `sweeps/` tree id ("" for none); None when anything is unusual."""
    out = _git(root, "ls-tree", "-z", "-l", head, "--", RUNS, STATUS, SWEEPS, f"{RUNS}/", f"{STATUS}/")
    if out is None:
        return None
    trees: dict[str, dict[str, str]] = {RUNS: {}, STATUS: {}}
    ledger = index = ""
    items, sweeps = _take_sweeps([i for i in out.split("\0") if i])
    for item in items:
        meta, _, path = item.partition("\t")
        parts = meta.split()
        if len(parts) != 4:
            return None
        mode, _kind, oid, size = parts
        top, _, name = path.partition("/")
        if not name or top not in trees:
            return None  # `runs` or `status` itself is no folder
        if mode == TREE:
            trees[top][name] = oid
        elif mode not in REGULAR:
            return None  # a link or a submodule: the full path reports it
        elif path == LEDGER:
            if not size.isdigit() or int(size) > LEDGER_LIMIT:
                return None
            ledger = oid
        elif path == INDEX:
            index = oid
    if not ledger:
        return None
    return trees[RUNS], trees[STATUS], ledger, index, sweeps


def _take_sweeps(items: list[str]) -> tuple[list[str], str]:
    """The `sweeps` entry out of an `ls-tree` listing: the other entries, and its tree id ("" for none)."""
    rest, sweeps = [], ""
    for item in items:
        meta, _, path = item.partition("\t")
        if path != SWEEPS:
            rest.append(item)
            continue
        parts = meta.split()
        sweeps = parts[2] if len(parts) == 4 and parts[0] == TREE else ""
    return rest, sweeps


def _recorded_ledger(root: Path) -> tuple[str, str] | None:
    """The blob id and text of the ledger in the bot's record (`record.authority`), in one `cat-file`;
    None when this clone holds no record (a fresh CI clone: the full path fetches it)."""
    try:
        out = run_git(root, ["cat-file", "--batch"], f"{AUTHORITY}:{LEDGER}\n".encode())
    except GitFailed:
        return None
    header, _, body = out.partition(b"\n")
    parts = header.split()
    if len(parts) != 3 or parts[1] != b"blob" or int(parts[2]) > LEDGER_LIMIT:
        return None
    return parts[0].decode("ascii"), body[: int(parts[2])].decode("utf-8", "replace")


def _blob(root: Path, oid: str) -> str | None:
    return _git(root, "cat-file", "blob", oid)


def _published(root: Path, opts: BotOptions, head: str) -> bool:
    """With `--push`: the remote branch, fetched now, is this very commit (nothing to rebase or push)."""
    repo = GitRepo(root)
    remote = opts.remote or "origin"
    branch = opts.branch or repo.current_branch()
    if not branch or not repo.has_remote(remote):
        return False  # the full path says what is wrong
    try:
        return repo.fetch(remote, branch) == head
    except (UsageError, OSError):  # the full path reports it
        return False
