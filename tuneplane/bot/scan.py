"""What a bot run has to look at, found from the commit and the ledger without reading every status.

`scan` lists `runs/` and `status/` one level deep (experiment → tree id), compares the tree ids with
the ledger, and only for experiments that changed lists their files: a request with no status is new;
a status file someone else wrote is read to learn whether its run is still going. Runs the ledger
calls active are read by path. A lab of 20,000 finished runs and no change costs two `ls-tree`s.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tuneplane.bot.snapshot import TREE, Snapshot
from tuneplane.bot.trust import check_writable, foreign, foreign_ok, misnamed, put_back
from tuneplane.constants import TERMINAL
from tuneplane.errors import UsageError
from tuneplane.lab.gitrepo import GitRepo
from tuneplane.lab.runs import DASHBOARD, RUNS_DIR, STATUS_DIR, RunKey, unchecked_status
from tuneplane.models.sweep import SWEEPS_DIR
from tuneplane.record.authority import REF, Authority
from tuneplane.record.ledger import LEDGER, Ledger
from tuneplane.runtime.records import Record, field

LEDGER_DEPTH = 50  # commits a shallow clone deepens to find the status trees the ledger names


class Scan(Record):
    snap: Snapshot
    ledger: Ledger
    authority: Authority
    runs_trees: dict[str, str] = field(default_factory=dict)
    status_trees: dict[str, str] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)  # refused entries, for the output and the dashboard
    blocked: set[str] = field(default_factory=set)  # experiments whose status/ entry is no directory
    new: dict[RunKey, str] = field(default_factory=dict)  # committed requests with no status → blob id
    bad_requests: dict[RunKey, str] = field(default_factory=dict)  # request entries that are no file
    listed: set[str] = field(default_factory=set)  # experiments whose requests were all listed
    refusing: set[str] = field(default_factory=set)  # listed experiments with a refused entry
    # status as committed, as JSON: reconcile and sync validate it, the rest reads it unchecked
    active: dict[RunKey, dict[str, Any] | None] = field(default_factory=dict)
    changed_statuses: dict[str, list[tuple[str, str, str]]] = field(default_factory=dict)  # exp → (run, old, new)
    gone: set[str] = field(default_factory=set)  # experiments whose status/ folder someone else removed
    restored: dict[RunKey, bytes] = field(default_factory=dict)  # statuses deleted while their request stays
    orphaned: dict[str, list[str]] = field(default_factory=dict)  # exp → runs whose request was just deleted
    notes: list[str] = field(default_factory=list)  # what the bot noticed and did about it, for the output
    pages: dict[str, set[str]] = field(default_factory=dict)  # exp → its pages others edited or removed
    earlier: dict[str, str] = field(default_factory=dict)  # no ledger to trust: the last one's status trees
    index_changed: bool = False  # the index page is not the one the ledger says the bot committed
    sweeps_tree: str = ""  # tree id of the commit's sweeps/ ("" when it has none)

    def request_text(self, key: RunKey) -> str | None:
        """The committed request of a run (None when there is none, or it is no regular file)."""
        entries = self.snap.entries(key.request_rel)
        entry = next((e for e in entries if e.path == key.request_rel), None)
        if entry is None or not entry.regular:
            return None
        return self.snap.text(entry.oid, key.request_rel)


def scan(root: Path) -> Scan:
    snap = Snapshot(root)
    authority = Authority(GitRepo(root))
    adopted = -1 if authority.known else authority.adopt(snap.commit)
    _refuse_linked_dir(root, STATUS_DIR)
    status_entries = snap.entries(STATUS_DIR)
    top = next((e for e in status_entries if e.path == STATUS_DIR), None)
    if top is not None and top.mode != TREE:
        raise UsageError(
            f"{STATUS_DIR} is {top.what()} in commit {snap.commit[:12]}: the bot writes status files "
            "only into a directory of this repository, never through a link",
            hint=f"git rm {STATUS_DIR} && git commit, then run the bot again (it recreates {STATUS_DIR}/)",
        )
    # the ledger the bot committed last, from its record: one a pull request rewrote (and digested
    # again) would hide the statuses it changed, or drop runs the bot watches
    in_branch = next((e.oid for e in status_entries if e.path == LEDGER and e.regular), None)
    ledger_oid = authority.oids([LEDGER]).get(LEDGER) or in_branch
    index_oid = next((e.oid for e in status_entries if e.path == DASHBOARD and e.regular), "")
    raw = snap.blobs([ledger_oid]).get(ledger_oid) if ledger_oid else None
    ledger = Ledger.parse(raw.decode("utf-8", "replace") if raw is not None else None)
    if ledger_oid and raw is None:
        ledger.problem = "it is larger than 1 MiB"
    work = Scan(snap, ledger, authority, index_changed=ledger.index != index_oid)
    if ledger.found and in_branch != ledger_oid:
        work.notes.append(
            f"{LEDGER} in this commit is not the one the bot recorded (a `tp submit --local`, "
            "an edit, a merge): the bot goes by its own and commits it again"
        )
    if adopted > 0:
        work.notes.append(
            f"the bot kept no record of its runs yet ({REF}): it takes the {adopted} statuses "
            "of this commit as its own from now on (a local run of another machine excepted)"
        )
    if not ledger.found:
        work.earlier = _earlier_trees(snap, deepen=top is None)
        if top is None and not work.earlier:
            _refuse_lost_records(snap)
    if ledger.problem:
        work.notes.append(
            f"{LEDGER} was not used: {ledger.problem}; it is rebuilt from the status files "
            "(the bot owns it: edit run requests instead, and delete it to have it rebuilt)"
        )
    work.status_trees, status_problems = snap.top(STATUS_DIR)
    for text in status_problems:
        name = text.split(" ", 1)[0].split("/", 1)[-1]
        work.blocked.add(name)
        work.problems.append(
            text.replace(
                "run files must be committed in this repository; ignored",
                "the bot never writes through it; its runs are not handled",
            )
        )
    work.sweeps_tree = _tree_id(snap, SWEEPS_DIR)
    work.runs_trees, run_problems = snap.top(RUNS_DIR)
    work.problems += run_problems
    _find_changed(work)
    _find_new(work)
    check_writable(work)
    _read_active(work)
    return work


def _tree_id(snap: Snapshot, path: str) -> str:
    """The tree id of a folder of the commit ("" when there is none, or it is no folder)."""
    out = snap.git("ls-tree", "-z", snap.commit, "--", path).split("\0")[0]
    meta, _, name = out.partition("\t")
    parts = meta.split()
    return parts[2] if name == path and len(parts) == 3 and parts[0] == TREE else ""


def _earlier_trees(snap: Snapshot, deepen: bool) -> dict[str, str]:
    """The status trees of the last good ledger before the commit that removed or damaged it: with the
    ledger, `git rm -r status` removes every record of the runs, and their requests, still committed,
    would be submitted again. A rebuild still reads every status; these trees only name what the
    commit removed, so it is put back. With `deepen` (`status/` is gone whole: every record with it), a
    shallow clone (the workflow's depth-1 checkout) that lacks the commit before is deepened once, as
    `_ensure_tree` does; empty when history still does not reach it. Without, a shallow clone stays
    as it is (a lab's first bot run, whose `status/` holds no ledger yet, fetches no history)."""
    found = _last_ledger(snap)
    if found is None and deepen and _deepen(snap, 1):  # the commit before, first: mostly the one that had it
        found = _last_ledger(snap)
        if found is None and not _had_status(snap) and _deepen(snap, LEDGER_DEPTH):
            found = _last_ledger(snap)
    if not found:
        return {}
    raw = snap.blobs([found]).get(found)
    earlier = Ledger.parse(raw.decode("utf-8", "replace") if raw is not None else None)
    return earlier.statuses if earlier.found else {}


def _last_ledger(snap: Snapshot) -> str | None:
    """The blob id of the ledger just before the last commit that changed it ("" when that commit
    added it, or none ever did; None when that commit's parent is not in this clone)."""
    try:
        last = snap.git("rev-list", "-1", snap.commit, "--", LEDGER).strip()
    except UsageError:
        return None
    if not last:  # no commit in this clone touched it: a new lab, or history cut short
        return None if _shallow(snap) else ""
    try:
        return snap.git("rev-parse", "-q", "--verify", f"{last}^:{LEDGER}").strip()
    except UsageError:  # that commit added it, or its parent is not in this clone
        return None if _shallow(snap) else ""


def _shallow(snap: Snapshot) -> bool:

    return GitRepo(snap.root).is_shallow()


def _had_status(snap: Snapshot) -> bool:
    """Whether the commit's first parent (in this clone) had a `status/` folder."""
    try:
        return bool(snap.git("ls-tree", f"{snap.commit}^", "--", STATUS_DIR).strip())
    except UsageError:
        return False


def _deepen(snap: Snapshot, depth: int, remote: str = "origin") -> bool:
    """Deepen a shallow clone once by `depth` commits; whether it was."""

    repo = GitRepo(snap.root)
    if not repo.is_shallow() or not repo.has_remote(remote):
        return False
    try:
        repo.fetch_more(f"--deepen={depth}", "--end-of-options", remote)
    except UsageError:
        return False
    return True


def _refuse_lost_records(snap: Snapshot) -> None:
    """The backstop when the commit holds neither the ledger nor `status/` and no earlier ledger was
    found (the parent's ledger damaged, so it names no trees): if its parent had the ledger, every committed
    request would look new and be submitted again. Refused, with what to do, rather than guessed."""
    try:
        parents = [
            line.split()[1]
            for line in snap.git("cat-file", "-p", snap.commit).splitlines()
            if line.startswith("parent ")
        ]
    except UsageError:
        return
    for parent in parents:
        try:
            had = bool(snap.git("ls-tree", parent, "--", LEDGER).strip())
        except UsageError:  # the parent is not in this clone (the remote unreachable): nothing to go by
            had = False
        if had:
            raise UsageError(
                f"commit {snap.commit[:12]} removes {STATUS_DIR}/ with its ledger ({LEDGER}), and the bot "
                "cannot find the records it held: every committed request would be submitted again, so "
                "nothing is submitted",
                hint=f"restore {STATUS_DIR}/ (git revert {snap.commit[:12]}, or git checkout "
                f"{snap.commit[:12]}^ -- {STATUS_DIR}), or run the bot in a clone with its history "
                "(git fetch --unshallow); to remove runs, delete their requests under runs/ too",
            )


def _refuse_linked_dir(root: Path, rel: str) -> None:
    path = Path(root) / rel
    if path.is_symlink() or (path.exists() and not path.is_dir()):
        raise UsageError(
            f"{rel} in the work tree is a symbolic link or no directory: the bot never writes through one",
            hint=f"remove it (git rm {rel}, or delete the link) and run the bot again",
        )


def _find_new(work: Scan) -> None:
    changed = [
        exp for exp, oid in work.runs_trees.items() if work.ledger.requests.get(exp) != oid and exp not in work.blocked
    ]
    if not changed:
        return
    requests = work.snap.runs(RUNS_DIR, ".yaml", changed)
    statuses = work.snap.runs(STATUS_DIR, ".json", changed)
    have = set(statuses.found) | set(statuses.refused)
    have |= {(k.experiment, k.run_id) for k in work.restored}
    for (exp, run_id), oid in requests.found.items():
        if (exp, run_id) not in have:
            work.new[RunKey(exp, run_id)] = oid
    for (exp, run_id), why in requests.refused.items():
        if (exp, run_id) not in have:
            work.bad_requests[RunKey(exp, run_id)] = why
    work.problems += [*requests.stray, *statuses.refused.values()]
    work.listed = set(changed)
    work.refusing = {k.experiment for k in work.bad_requests}
    work.refusing |= {exp for exp, _run in statuses.refused} | {_exp_of(text) for text in requests.stray}
    asked = set(requests.found) | set(requests.refused)
    for exp in changed:  # statuses whose request was just deleted: their rows lose the link to it
        old = work.ledger.requests.get(exp)
        if old and _has(work.snap, old):
            gone = {run for run, _old, new in _diff(work.snap, old, work.runs_trees[exp], ".yaml") if not new}
        else:  # no earlier tree (a shallow clone): any status without a request may have just lost it
            gone = {run for (e, run) in statuses.found if e == exp and (e, run) not in asked}
        orphans = sorted(run for run in gone if (exp, run) in have)
        if orphans:
            work.orphaned[exp] = orphans


def _exp_of(text: str) -> str:
    """The experiment a refusal of `runs/<exp>/…` names."""
    return text.split(" ", 1)[0].removeprefix(f"{RUNS_DIR}/").split("/", 1)[0]


def _find_changed(work: Scan) -> None:
    """Status files that changed since the bot last wrote them: runs that may have (re)started, and
    statuses someone deleted. A deleted status whose request is still committed is restored (the bot
    owns `status/`, and a request with no status would be submitted again), and so is one edited into
    something that is no JSON object (its run would never be looked at again); one deleted with its
    request (a run, an experiment removed) stays deleted."""
    exps = {e for e in work.status_trees if work.ledger.statuses.get(e) != work.status_trees[e]}
    exps -= work.blocked
    trees = work.ledger.statuses if work.ledger.found else work.earlier
    work.gone = {e for e in trees if e not in work.status_trees and e not in work.blocked}
    oids: dict[RunKey, str] = {}
    olds: dict[RunKey, str] = {}
    deleted: dict[RunKey, str] = {}
    for exp in sorted(exps | work.gone):
        old = trees.get(exp)
        if old:
            _ensure_tree(work.snap, old)
        rows = work.changed_statuses[exp] = _changed_rows(work, exp, old)
        for run_id, old_oid, new in rows:
            if new:
                oids[RunKey(exp, run_id)] = new
            if old_oid:
                olds[RunKey(exp, run_id)] = old_oid
            if old_oid and not new:
                deleted[RunKey(exp, run_id)] = old_oid
    blobs = work.snap.blobs(oids.values())
    recorded = work.authority.oids([k.status_rel for k in [*oids, *deleted]])
    for key, oid in oids.items():
        mine = recorded.get(key.status_rel)
        if mine and mine != oid:  # the bot's run, its status changed by someone else
            put_back(work, key, f"{key.status_rel} was changed outside the bot{misnamed(key, blobs.get(oid))}")
            continue
        status = unchecked_status(blobs.get(oid))
        if status is None and key in olds:  # edited into something that is no status: as good as deleted
            deleted[key] = olds[key]
        elif status is not None and not mine and not foreign_ok(work, key, status):
            continue
        elif status is not None and status.phase not in TERMINAL:
            work.ledger.active.setdefault(str(key), status.phase)
    _restore(work, deleted)


def _changed_rows(work: Scan, exp: str, old: str | None) -> list[tuple[str, str, str]]:
    """(run, old blob, new blob) of the statuses of `exp` that changed since the ledger's tree `old`
    (all of them without one); the bot's pages changed there are noted in `work.pages`."""
    if exp in work.gone:
        return [(run, oid, "") for run, _none, oid in _all_from_tree(work.snap, old or "")]
    if not work.ledger.found:  # a rebuild reads them all, and the last ledger's tree names those removed
        removed = [row for row in _diff(work.snap, old, work.status_trees[exp]) if not row[2]] if old else []
        return _all(work.snap, exp) + removed
    if not old:
        return _all(work.snap, exp)
    pages = {name + ".md" for name, _o, _n in _diff(work.snap, old, work.status_trees[exp], ".md")}
    if pages:  # the bot's pages, edited or removed by hand: rendered again
        work.pages[exp] = pages
    return _diff(work.snap, old, work.status_trees[exp])


def _ensure_tree(snap: Snapshot, oid: str, remote: str = "origin") -> None:
    """A tree the ledger names, fetched when a shallow clone lacks it (the bot's CI checkout holds the tip
    only, and a deleted status is known only from the tree the bot left). The bot's last commit is
    normally among the newest few: history is deepened once, by `LEDGER_DEPTH` commits, and given
    up on after that (a tree that only ever existed in a clone that rebased it away is in no history);
    the files are then read as they are."""

    if _has(snap, oid):
        return
    repo = GitRepo(snap.root)
    if not repo.is_shallow() or not repo.has_remote(remote):
        return
    try:
        repo.fetch_more(f"--deepen={LEDGER_DEPTH}", "--end-of-options", remote)
    except UsageError:
        return


def _has(snap: Snapshot, oid: str) -> bool:
    try:
        snap.git("cat-file", "-e", f"{oid}^{{tree}}")
        return True
    except UsageError:
        return False


def _restore(work: Scan, deleted: dict[RunKey, str]) -> None:
    """The deleted statuses to put back as they were last committed: those whose request the commit
    still holds, and those of runs that had not ended (the job goes on whatever the files say, and
    its end must be recorded, so the run stays watched even with its request gone)."""
    if not deleted:
        return
    requested = _existing(work.snap, [k.request_rel for k in deleted])
    blobs = work.snap.blobs(deleted.values())
    mine = work.authority.read([k.status_rel for k in deleted])  # the bot's own copy comes first
    for key, oid in sorted(deleted.items()):
        data = mine.get(key.status_rel, blobs.get(oid))
        status = unchecked_status(data)
        phase = status.phase if status is not None else ""
        going = status is not None and phase not in TERMINAL
        if key.request_rel not in requested and not going:
            continue  # removed with its request, after its end: a run taken out of the lab
        if data is not None and status is None:
            continue  # its last version was no status either: nothing better to put back
        if data is None:
            work.notes.append(
                f"{key.status_rel} was deleted, and its last version is not in this clone: "
                f"it cannot be restored (restore it with git, or delete {key.request_rel} too)"
            )
            continue
        work.restored[key] = data
        if going:
            work.ledger.active.setdefault(str(key), phase)
        if key.request_rel in requested:
            work.notes.append(
                f"{key.status_rel} was deleted or made unreadable outside the bot while "
                f"{key.request_rel} is still committed: restored as the bot last wrote it "
                "(the bot owns status/; to remove a run, delete its request with its status)"
            )
        else:
            work.notes.append(
                f"{key.status_rel} was deleted while its run is still {phase} "
                "(the job goes on): restored, and the run watched until it ends; remove the "
                "status after that, or stop the run first (tp job cancel)"
            )


def _existing(snap: Snapshot, paths: list[str]) -> set[str]:
    """Which of `paths` are regular files in the commit (bounded command lines)."""
    found: set[str] = set()
    for start in range(0, len(paths), 500):
        out = snap.git("ls-tree", "-z", "--name-only", snap.commit, "--", *paths[start : start + 500])
        found.update(p for p in out.split("\0") if p)
    return found


def _diff(snap: Snapshot, old: str, new: str, suffix: str = ".json") -> list[tuple[str, str, str]]:
    try:
        out = snap.git("diff-tree", "-z", "--no-renames", old, new)
    except UsageError:  # the old tree is not in this clone (a shallow clone): read them all
        return _all_from_tree(snap, new, suffix)
    items = [i for i in out.split("\0") if i]
    rows = []
    for meta, path in zip(items[::2], items[1::2], strict=False):
        parts = meta.lstrip(":").split()
        if len(parts) < 4 or not path.endswith(suffix) or "/" in path:
            continue
        old_oid = "" if set(parts[2]) == {"0"} else parts[2]
        new_oid = "" if set(parts[3]) == {"0"} or parts[1] not in ("100644", "100755") else parts[3]
        rows.append((path[: -len(suffix)], old_oid, new_oid))
    return rows


def _all(snap: Snapshot, exp: str) -> list[tuple[str, str, str]]:
    listing = snap.runs(STATUS_DIR, ".json", [exp])
    return [(run_id, "", oid) for (_e, run_id), oid in sorted(listing.found.items())]


def _all_from_tree(snap: Snapshot, tree: str, suffix: str = ".json") -> list[tuple[str, str, str]]:
    """Every run file of a tree as (run, "", blob id); none when the tree is not in this clone."""
    if not tree:
        return []
    try:
        out = snap.git("ls-tree", "-z", tree)
    except UsageError:
        return []
    rows = []
    for item in out.split("\0"):
        meta, _, name = item.partition("\t")
        parts = meta.split()
        if len(parts) == 3 and parts[0] in ("100644", "100755") and name.endswith(suffix):
            rows.append((name[: -len(suffix)], "", parts[2]))
    return rows


def _read_active(work: Scan) -> None:
    keys = []
    for text in sorted(work.ledger.active):
        exp, _, run_id = text.partition("/")
        if exp in work.blocked:
            continue
        keys.append(RunKey(exp, run_id))
    if not keys:
        return
    found: dict[RunKey, str] = {}
    for start in range(0, len(keys), 500):  # bounded command lines
        chunk = keys[start : start + 500]
        out = work.snap.git("ls-tree", "-z", work.snap.commit, "--", *(k.status_rel for k in chunk))
        for item in out.split("\0"):
            meta, _, path = item.partition("\t")
            parts = meta.split()
            if len(parts) == 3 and parts[0] in ("100644", "100755"):
                exp, name = path.split("/")[1:3]
                found[RunKey(exp, name.removesuffix(".json"))] = parts[2]
    blobs = work.snap.blobs(found.values())
    recorded = work.authority.oids([k.status_rel for k in keys if k not in work.restored])
    for key in keys:
        mine = recorded.get(key.status_rel)
        if key in work.restored:
            work.active[key] = _json(work.restored[key])
        elif key not in found:
            work.ledger.active.pop(str(key), None)  # its status is gone with its request: nothing to watch
        elif mine:  # the bot acts on its own copy only, whatever the branch says
            if mine != found[key]:
                put_back(work, key, f"{key.status_rel} differs from the bot's record")
            data = work.authority.read([key.status_rel]).get(key.status_rel)
            work.active[key] = _json(data)
        else:
            foreign(work, key, unchecked_status(blobs.get(found[key])))


def _json(data: bytes | None) -> dict[str, Any] | None:
    if data is None:
        return None
    try:
        value = json.loads(data)
    except (ValueError, RecursionError):
        return None
    return value if isinstance(value, dict) else None
