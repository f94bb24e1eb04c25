"""One batch of writes, committed together: status files, charts, the pages they change, the ledger.

The bot collects a whole pass in one; `tp submit --local` commits one run's status through one.

Every write goes through `safe_write`, which refuses a path with a symbolic link (or any non-directory)
anywhere below the lab root and never follows one: a committed `status -> /elsewhere` cannot make the
bot write outside the lab. Only the files written are staged and committed, so whatever else lies in
the work tree (an untracked request, an uncommitted edit) stays out of the bot's commits.
"""

from __future__ import annotations

import os
import stat
from collections import Counter
from pathlib import Path

from tuneplane.constants import TERMINAL
from tuneplane.errors import UsageError
from tuneplane.lab.fs import atomic_write, atomic_write_all
from tuneplane.lab.gitrepo import GitRepo
from tuneplane.lab.runs import DASHBOARD, STATUS_DIR, RunKey, read_unchecked, status_text, unchecked_status
from tuneplane.lab.sweeps import read_sweep, sweep_files
from tuneplane.models.run import RunStatus
from tuneplane.record.authority import Authority
from tuneplane.record.ledger import LEDGER, Ledger
from tuneplane.views import dashboard
from tuneplane.views.sweep import (
    SWEEP_FOLDER,
    SWEEP_PAGES,
    sweep_chart,
    sweep_chart_rel,
    sweep_page,
    sweep_page_rel,
    trial_ids,
    view_of,
)

# The bot's CI checkout (`git sparse-checkout set --no-cone`, one pattern a line): every file but the run
# files, which a no-op pass never reads (it reads the commit) and which are most of a big lab's files.


def widen(repo: GitRepo) -> bool:
    """Check out every file of a sparse checkout (the bot's CI checkout: `lab.runs.SPARSE_CHECKOUT`) before
    the bot writes or renders anything: the pages are rendered from the status files, requests and charts beside
    them. True when the checkout was sparse. A pass with nothing to write never gets here, so it pays for
    none of those files."""
    if repo.git("config", "--bool", "--default", "false", "core.sparseCheckout").strip() != "true":
        return False
    repo.git("sparse-checkout", "disable")
    return True


def safe_write(root: Path, rel: str, text: str) -> Path:
    """Atomically write `root/rel`, creating directories; refuse any link or non-directory on the way."""
    target = safe_path(root, rel)
    atomic_write(target, text)
    return target


def safe_path(root: Path, rel: str, make: bool = True, replace_link: bool = False) -> Path:
    """`root/rel` once every directory on the way is checked (and made, unless `make` is False: then a
    missing one ends the check, and the path returned does not exist): no link, nothing else. With
    `replace_link`, a link or a non-directory at `rel` itself is accepted: an atomic write renames over
    the entry (never through it)."""
    parts = [p for p in rel.split("/") if p]
    if not parts or any(p in (".", "..") for p in parts):
        raise UsageError(f"refusing to write {rel!r}: not a plain path inside the lab")
    here = Path(root)
    for index, part in enumerate(parts[:-1]):
        here = here / part
        try:
            info = os.lstat(here)
        except FileNotFoundError:
            if not make:  # nothing to look at or remove there, and nothing made to find that out
                return Path(root, *parts)
            os.mkdir(here)
            continue
        if stat.S_ISLNK(info.st_mode) or not stat.S_ISDIR(info.st_mode):
            what = "a symbolic link" if stat.S_ISLNK(info.st_mode) else "not a directory"
            shown = "/".join(parts[: index + 1])
            raise UsageError(
                f"{shown} is {what}: the bot never writes through it (it would write {rel} outside the lab)",
                hint=f"git rm {shown} && git commit, then run the bot again",
            )
    target = here / parts[-1]
    if replace_link and (target.is_symlink() or not target.is_dir()):
        return target
    if target.is_symlink() or (target.exists() and not target.is_file()):
        raise UsageError(
            f"{rel} is a symbolic link or no regular file: the bot never writes through it",
            hint=f"git rm {rel} && git commit, then run the bot again",
        )
    return target


def write_all(root: Path, files: dict[str, str]) -> None:
    """Many files atomically at one durability cost: temporary files, one `sync`, then the renames.

    A reader (or a bot killed half way) sees each file old or new, never half written, and a power
    loss cannot leave a renamed file without its bytes."""
    atomic_write_all({safe_path(root, rel, replace_link=True): text for rel, text in files.items()})


class Batch:
    """Collects one bot run's writes; `commit` renders the pages they touch and commits it all."""

    def __init__(self, repo: GitRepo, ledger: Ledger | None = None, authority: Authority | None = None) -> None:
        self.repo = repo
        self.root = repo.root
        self.ledger = ledger if ledger is not None else committed_ledger(repo)
        self.authority = authority  # the bot's record (the bot's batches only: what it wrote is its own)
        self.refused: dict[str, str] = {}  # path → why it could not be written (its experiment is reported)
        self.base = dict(self.ledger.statuses)  # tree ids as the ledger had them
        self.written: set[str] = set()
        self.touched: dict[str, set[str]] = {}  # exp → runs whose rows changed
        self.fresh: dict[str, set[str]] = {}  # exp → runs that had no status before (they may shift pages)
        self.deltas: dict[str, Counter[str]] = {}  # exp → phase count changes
        self.extra_changed: set[str] = set()  # experiments changed by others (recount them)
        self.pending: dict[str, str] = {}  # written on `flush`, all at once
        self.removed: set[str] = set()  # pages removed (staged on `commit`)
        self.repaged: dict[str, set[str]] = {}  # exp → names of its pages others edited or removed
        self.sweeps_changed = False  # a sweep file was added, changed or removed: every sweep page again
        self.whole = False  # the work tree holds every file (see `widen`)

    def whole_tree(self) -> None:
        """Every file in the work tree before the first write or read of one (a sparse CI checkout: `widen`)."""
        if not self.whole:
            self.whole = True
            widen(self.repo)

    # ── writes ───────────────────────────────────────────────────────────────────────────────

    def status(self, status: RunStatus, *, watch: bool | None = None) -> None:
        """Write a run's status; `watch` keeps it in the ledger's active runs (default: not ended)."""
        self.whole_tree()
        key = RunKey(status.experiment, status.run_id)
        if key.status_rel in self.pending:
            before = unchecked_status(self.pending[key.status_rel])
        else:
            before = read_unchecked(self.root, key) if (self.root / key.status_rel).exists() else None
        text = status_text(status)
        if not self._put(key.status_rel, text):
            return
        delta = self.deltas.setdefault(key.experiment, Counter())
        if before is not None:
            delta[dashboard.counted_phase(before)] -= 1
        else:
            self.fresh.setdefault(key.experiment, set()).add(key.run_id)
        delta[status.phase] += 1
        self.touched.setdefault(key.experiment, set()).add(key.run_id)
        if watch if watch is not None else status.phase not in TERMINAL:
            self.ledger.active[str(key)] = status.phase
        else:
            self.ledger.active.pop(str(key), None)

    def restore(self, key: RunKey, data: bytes) -> None:
        """Put back a status someone deleted, byte for byte as it was last committed (its pages are
        recounted: `changed_by_others`)."""
        self.whole_tree()
        if self._put(key.status_rel, data.decode("utf-8", "replace")):
            self.changed_by_others(key.experiment, [key.run_id])

    def touch(self, exp: str, run_ids: list[str]) -> None:
        """Render the pages of these runs again (their request went away: the row loses its link)."""
        self.whole_tree()
        self.touched.setdefault(exp, set()).update(run_ids)

    def chart(self, key: RunKey, svg: str) -> None:
        self.whole_tree()
        if self._put(dashboard.chart_rel(key), svg):
            self.touched.setdefault(key.experiment, set()).add(key.run_id)

    def _put(self, rel: str, text: str) -> bool:
        """Queue a write; False (and the path in `refused`) when the path cannot be written safely. One
        bad path (a link or a file where a folder belongs) stops that write only, never the pass: every
        other experiment's statuses are still written. A link or a file at the path itself is replaced."""
        try:
            safe_path(self.root, rel, replace_link=True)  # refused now, before anything is written
        except (UsageError, OSError) as exc:
            self.refused[rel] = str(exc)
            return False
        if self.authority is not None and rel.endswith(".json"):
            self.authority.record(rel)
        self.pending[rel] = text
        self.written.add(rel)
        return True

    def writable(self, rel: str) -> str:
        """Why `rel` cannot be written ("" when it can), found without writing or making anything."""
        try:
            safe_path(self.root, rel, make=False, replace_link=True)
        except (UsageError, OSError) as exc:
            return str(exc)
        return ""

    def flush(self) -> None:
        write_all(self.root, self.pending)
        self.pending = {}

    def changed_by_others(self, exp: str, run_ids: list[str]) -> None:
        """Status files someone else committed: their pages are rendered again, counts recounted."""
        self.whole_tree()
        self.extra_changed.add(exp)
        self.touched.setdefault(exp, set()).update(run_ids)
        self.fresh.setdefault(exp, set()).update(run_ids)  # added or removed by others: pages may shift

    def pages_changed_by_others(self, exp: str, names: set[str]) -> None:
        """Pages of `exp` someone else edited or removed: rendered again (the bot owns them)."""
        self.whole_tree()
        self.repaged.setdefault(exp, set()).update(names)
        self.touched.setdefault(exp, set())

    # ── pages and commit ─────────────────────────────────────────────────────────────────────

    def render(self, waiting: list[tuple[RunKey, str]], problems: list[str], refresh: bool = False) -> None:
        """Write the pages the batch changed (every page when `refresh`)."""
        self.whole_tree()
        self.flush()
        exps = set(self.touched) - {SWEEP_FOLDER}
        known = self.ledger.counts
        for exp in sorted(exps | (set(dashboard_exps(self.root)) if refresh else set())):
            if self.writable(f"{STATUS_DIR}/{exp}/README.md") and not (self.root / STATUS_DIR / exp).is_dir():
                continue  # no folder of its own (a file, a link): reported by the scan, its pages wait
            if not dashboard.run_ids(self.root, exp):  # every status of it was removed: so are its pages
                self._drop_pages(exp)
                continue
            if exp in known and exp not in self.extra_changed and not refresh:
                merged = Counter(known[exp])
                merged.update(self.deltas.get(exp, Counter()))
                known[exp] = {k: v for k, v in merged.items() if v > 0}
            else:
                known[exp] = dict(dashboard.phase_counts(self.root, exp))
            self._bot_page(dashboard.experiment_page_rel(exp), dashboard.experiment_page(self.root, exp, known[exp]))
            self._month_pages(exp, refresh)
        for exp in [e for e in known if not dashboard.run_ids(self.root, e)]:
            known.pop(exp)
        for exp in dashboard_exps(self.root):
            if exp not in known:
                counted = dict(dashboard.phase_counts(self.root, exp))
                if counted:  # a folder whose statuses all went (its pages too) is no experiment of the index
                    known[exp] = counted
        sweeps = self._sweep_pages(refresh or self.sweeps_changed or SWEEP_FOLDER in self.touched)
        self._page(DASHBOARD, dashboard.index_page(self.root, known, waiting, problems, sweeps))
        self.flush()

    def _sweep_pages(self, every: bool) -> dict[str, str]:
        """Write the page and chart of each sweep one of whose trials changed (of every sweep when `every`:
        a sweep file or a page changed by others), remove those of sweeps whose file is gone, and return the
        sweeps with a page (name → link from the index). A sweep file that does not load keeps its page
        as it was: `tp validate` says what is wrong with it. A page or chart is written only when its text
        changed, so a trial's status changing without its points leaves the chart as it was."""
        names = [p.stem for p in sweep_files(self.root)]
        runs = {(exp, run) for exp, ids in self.touched.items() for run in ids}
        for name in names:
            rel = sweep_page_rel(name)
            # a page or chart missing (a new sweep; a page from before sweeps had charts) is written
            missing = not all(os.path.lexists(self.root / r) for r in (rel, sweep_chart_rel(name)))
            if not (every or runs or missing):
                continue
            try:
                sweep = read_sweep(self.root, name)
            except UsageError:
                continue
            if every or missing or runs & {(sweep.experiment, r) for r in trial_ids(sweep)}:
                page, chart = view_of(self.root, sweep)
                self._bot_page(rel, page)
                self._bot_chart(sweep_chart_rel(name), chart)
        for rel in self._sweep_page_files():
            if rel.removeprefix(SWEEP_PAGES + "/").rsplit(".", 1)[0] not in names and self._bots(rel):
                self._drop(rel)
        shown = {n: sweep_page_rel(n) for n in names}
        return {
            n: rel.removeprefix(STATUS_DIR + "/")
            for n, rel in shown.items()
            if rel in self.pending or (rel not in self.removed and _regular(self.root / rel))
        }

    def _sweep_page_files(self) -> list[str]:
        """The pages and charts in the sweep pages' folder now (none when it is a link or no folder: never
        listed through one; a write there is refused and reported)."""
        if self.writable(f"{SWEEP_PAGES}/page.md"):
            return []
        try:
            found = [e.name for e in os.scandir(self.root / SWEEP_PAGES) if e.is_file(follow_symlinks=False)]
        except (FileNotFoundError, NotADirectoryError):
            return []
        return sorted(f"{SWEEP_PAGES}/{n}" for n in found if n.endswith((".md", ".svg")))

    def _month_pages(self, exp: str, refresh: bool) -> None:
        """The month pages whose runs changed, each a part of at most `dashboard.PAGE` runs. Every part
        but the newest month's last, unfilled one has a page (the experiment page shows that one);
        a part is written when it fills or its month ends, and again only when one of its runs changes,
        so a batch of new runs writes no month page until a part fills, in a month of any size."""
        ids = dashboard.run_ids(self.root, exp)
        newest = dashboard.month_of(ids[-1]) if ids else ""
        touched, fresh = self.touched.get(exp, set()), self.fresh.get(exp, set())
        repaged = self.repaged.get(exp, set())
        gone = fresh.difference(ids)  # statuses others removed: the runs after them move to earlier parts
        kept: set[str] = set()
        for month, month_ids in dashboard.by_month(ids).items():
            parts = dashboard.parts(month_ids)
            shifted = False  # a run added or removed mid-month moves the runs after it to other parts
            for number, part in enumerate(parts, 1):
                shifted = shifted or any(dashboard.month_of(r) == month and r < part[-1] for r in gone)
                if month == newest and number == len(parts) and len(part) < dashboard.PAGE:
                    continue  # still filling: it would go stale with every new run (the experiment page has it)
                rel = dashboard.month_page_rel(exp, month, number)
                kept.add(rel)
                shifted = shifted or bool(fresh.intersection(part))
                again = refresh or shifted or rel.rsplit("/", 1)[1] in repaged
                if again or touched.intersection(part) or not (self.root / rel).exists():
                    self._bot_page(rel, dashboard.month_page(self.root, exp, month, number))
        for page in dashboard.month_pages(self.root, exp):
            if page not in kept and self._bots(page):
                self._drop(page)  # the newest month's unfilled part, or a part a removal emptied

    def _drop_pages(self, exp: str) -> None:
        """The pages of an experiment with no status left. Any other file there is a person's and
        stays, and so does a page without the bot's note: a folder of `status/` with no status in it
        may be no experiment's (a team's notes)."""
        for page in [dashboard.experiment_page_rel(exp), *dashboard.month_pages(self.root, exp)]:
            if self._bots(page):
                self._drop(page)

    def forget(self, key: RunKey) -> None:
        """A run others took out of the lab (its status removed): its chart goes with it."""
        self.whole_tree()
        self._drop(dashboard.chart_rel(key))

    def _bots(self, rel: str) -> bool:
        """Whether `rel` is a page (or a chart) the bot wrote (a path behind a link or a file is nobody's)."""
        try:
            path = safe_path(self.root, rel, make=False)
        except UsageError:
            return False
        return _written_by_bot(path)

    def _drop(self, rel: str) -> None:
        """Remove a page (or a chart) the dashboard no longer has (committed with the batch)."""
        try:
            path = safe_path(self.root, rel, make=False, replace_link=True)
        except UsageError as exc:
            self.refused[rel] = str(exc)
            return
        if path.is_file() or path.is_symlink():
            path.unlink()
            self.removed.add(rel)

    def _bot_chart(self, rel: str, svg: str) -> None:
        """A chart beside a page, as `_bot_page` writes a page: only over a chart tp wrote (another SVG
        there is a person's and stays); with no chart to draw, one the bot wrote there is removed."""
        path = self.root / rel
        if not svg:
            if self._bots(rel):
                self._drop(rel)
        elif path.is_symlink() or not path.exists() or _written_by_bot(path):
            self._page(rel, svg)

    def _bot_page(self, rel: str, text: str) -> None:
        """A page of an experiment folder, written only where it is missing or is the bot's (carries
        its note): a file of the same name without the note is a person's and stays."""
        path = self.root / rel
        if path.is_symlink() or not path.exists() or _written_by_bot(path):
            self._page(rel, text)

    def _page(self, rel: str, text: str) -> None:
        path = self.root / rel
        try:
            if not path.is_symlink() and path.read_text(encoding="utf-8") == text:
                return
        except OSError:
            pass
        self._put(rel, text)

    def commit(self, message: str) -> str | None:
        """Stage exactly what was written, record the tree ids in the ledger, and commit (the bot's
        batch: and make what it committed its record)."""
        self.flush()
        self.ledger.index = self._index_blob()
        if not self.written and not self.removed and not self._ledger_learned():
            if self.authority is not None and (self.authority.pending or self._record_behind()):
                self.authority.record(LEDGER)  # the branch's ledger is already what the bot would write
                self.authority.save("tp bot: its record", "HEAD")
            return None
        paths = sorted(self.written)
        if paths:
            self.repo.git("add", "--", *paths)
        gone = sorted(self.removed - self.written)
        if gone:
            self.repo.git("rm", "-q", "--cached", "--ignore-unmatch", "--", *gone)
            paths = sorted({*paths, *gone})
        head = _head_trees(self.repo)
        for exp in sorted({p.split("/")[1] for p in paths if p.count("/") >= 2}):
            if self.ledger.statuses.get(exp) != head.get(exp) and exp not in self.extra_changed:
                # someone else changed this experiment since the ledger was written: let the bot look
                self.ledger.statuses.pop(exp, None)
                continue
            try:
                self.ledger.statuses[exp] = self.repo.git("write-tree", f"--prefix={STATUS_DIR}/{exp}/")
            except UsageError:
                self.ledger.statuses.pop(exp, None)
        safe_write(self.root, LEDGER, self.ledger.dump())
        self.repo.git("add", "--", LEDGER)
        if self.authority is not None:  # recorded first: see `Authority.save`
            self.authority.record(LEDGER)
            self.authority.save("tp bot: " + message.splitlines()[0].removeprefix("tp bot: "))
        return self.repo.commit_staged(message, [*paths, LEDGER])

    def _index_blob(self) -> str:
        """The blob id the index page has in the commit being made ("" when it has none)."""
        if DASHBOARD in self.written:
            return self.repo.git("hash-object", "--", DASHBOARD).strip()
        if DASHBOARD in self.removed or not self.repo.has_commits():
            return ""
        try:
            return self.repo.git("rev-parse", "-q", "--verify", f"HEAD:{DASHBOARD}").strip()
        except UsageError:
            return ""

    def _record_behind(self) -> bool:
        """Whether the bot's record holds another ledger than the branch (which holds the right one)."""
        assert self.authority is not None
        try:
            ours = self.repo.git("rev-parse", "-q", "--verify", f"HEAD:{LEDGER}")
        except UsageError:
            return False
        return self.authority.oids([LEDGER]).get(LEDGER) != ours

    def _ledger_learned(self) -> bool:
        """The ledger learned something though no file changed (requests that all have a status, a run
        seen to end): committed, or every later run would have to look again."""
        committed = self.repo.show("HEAD", LEDGER) if self.repo.has_commits() else None
        return committed is None or committed.rstrip("\n") != self.ledger.dump().rstrip("\n")


def _regular(path: Path) -> bool:
    return path.is_file() and not path.is_symlink()


def _written_by_bot(page: Path) -> bool:
    """A page carries the bot's note; a chart begins as every chart tp draws (`is_chart`)."""
    try:
        if page.suffix == ".svg":
            from tuneplane.views.charts import is_chart  # lazy: the chart code loads only for a chart

            with page.open("rb") as data:
                return is_chart(data.read(512))
        with page.open(encoding="utf-8", errors="replace") as text:
            return dashboard.NOTE in text.read(4096)
    except OSError:
        return False


def committed_ledger(repo: GitRepo) -> Ledger:
    return Ledger.parse(repo.show("HEAD", LEDGER) if repo.has_commits() else None)


def _head_trees(repo: GitRepo) -> dict[str, str]:
    if not repo.has_commits():
        return {}
    out = repo.git("ls-tree", "HEAD", "--", f"{STATUS_DIR}/")
    trees = {}
    for line in out.splitlines():
        meta, _, path = line.partition("\t")
        parts = meta.split()
        if len(parts) == 3 and parts[1] == "tree":
            trees[path.split("/", 1)[1]] = parts[2]
    return trees


def render_page(root: Path, rel: str, counts: dict[str, dict[str, int]]) -> str:
    """Any dashboard page again, from the files beside it (a conflict in a rebase)."""
    parts = rel.split("/")
    if rel == DASHBOARD:
        known = {exp: counts.get(exp) or dict(dashboard.phase_counts(root, exp)) for exp in dashboard_exps(root)}
        pages = {p.stem: sweep_page_rel(p.stem) for p in sweep_files(root)}
        sweeps = {n: r.removeprefix(STATUS_DIR + "/") for n, r in pages.items() if _regular(root / r)}
        return dashboard.index_page(root, {e: c for e, c in known.items() if c}, sweeps=sweeps)
    if rel.startswith(SWEEP_PAGES + "/") and rel.endswith(".svg"):  # "" when none is drawn, or no sweep loads
        try:
            return sweep_chart(root, parts[-1].removesuffix(".svg"))
        except UsageError:
            return ""
    if rel.startswith(SWEEP_PAGES + "/"):
        return sweep_page(root, parts[-1].removesuffix(".md"))
    exp = parts[1]
    if parts[-1] == "README.md":
        return dashboard.experiment_page(root, exp, dashboard.phase_counts(root, exp))
    month, _, number = parts[-1].removesuffix(".md").partition("-p")
    return dashboard.month_page(root, exp, month, int(number) if number.isdigit() else 1)


def record_status(
    repo: GitRepo, status: RunStatus, message: str, svg: str | None = None, pages: bool = False
) -> str | None:
    """Write and commit one run's own files, its status and (once it ended) its chart: `tp submit --local`.

    With `pages` (a lab with no remote, so no bot and nobody to pull from) the dashboard pages and the
    ledger are rendered and committed too. Otherwise never: they are the bot's, rendered from the statuses
    on its next pass (which sees this experiment's status tree changed). A person's branch so carries
    nothing the bot rewrites, and their `git pull --rebase` has nothing to conflict on however often the
    bot committed meanwhile."""
    key = RunKey(status.experiment, status.run_id)
    if pages:
        batch = Batch(repo)
        batch.status(status)
        if svg is not None:
            batch.chart(key, svg)
        batch.render([], [])
        return batch.commit(message)
    files = {key.status_rel: status_text(status)}
    if svg is not None:
        files[dashboard.chart_rel(key)] = svg
    write_all(repo.root, files)
    repo.git("add", "--", *files)
    return repo.commit_staged(message, list(files))


def refresh_dashboard(repo: GitRepo, message: str = "tp bot: render the dashboard") -> str | None:
    """Render every page from the status files (a lab written before the split dashboard)."""
    batch = Batch(repo)
    batch.render([], [], refresh=True)
    return batch.commit(message)


def dashboard_exps(root: Path) -> list[str]:
    base = Path(root) / "status"
    try:
        return sorted(e.name for e in os.scandir(base) if e.is_dir(follow_symlinks=False) and e.name != SWEEP_FOLDER)
    except (FileNotFoundError, NotADirectoryError):
        return []
