"""What every bot run shares: options, the report, the backends, crash points, start and finish.

A run starts by opening the lab's repository, cleaning up after a killed bot and catching up with
the remote; it scans the commit (`scan`), acts, collects its writes in one `Batch`, and finishes by
rendering the pages that changed, committing once and (with `push`) publishing with
fetch–rebase–retry. `run_pass` is that sequence; `reconcile` and `sync` hand it what they do. The
options, the report and the crash points live in `report` (the idle check uses them without this
module's imports); they are re-exported here.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from tuneplane.backends.base import Backend, Closable
from tuneplane.bot.notify import Notifier, notifier_for
from tuneplane.bot.report import (
    CRASH_ENV,
    CRASH_EXIT,
    MAX_BACKEND_FAILURES,
    STEPS,
    BotOptions,
    BotReport,
    checkpoint,
)
from tuneplane.bot.scan import Scan, scan
from tuneplane.errors import UsageError
from tuneplane.lab.gitrepo import GitRepo
from tuneplane.lab.load import Lab, load_lab
from tuneplane.lab.runs import RunKey, unchecked_from
from tuneplane.record.batch import Batch
from tuneplane.runtime.records import Record, field
from tuneplane.runtime.reporter import Echo
from tuneplane.views.dashboard import shows_notices

if TYPE_CHECKING:  # publishing loads only on a pass that pushes
    from tuneplane.record.publish import Target

BackendFactory = Callable[[str], Backend]  # a backend's name → the backend (tests pass fakes)

__all__ = [
    "CRASH_ENV",
    "CRASH_EXIT",
    "MAX_BACKEND_FAILURES",
    "STEPS",
    "BackendFactory",
    "Backends",
    "BotOptions",
    "BotPass",
    "BotReport",
    "checkpoint",
    "finish",
    "run_pass",
    "start",
    "waiting_list",
]


class Backends:
    """The backends a bot run needs, built on first use (the kubernetes client costs a second)."""

    def __init__(self, lab: Lab, opts: BotOptions, factory: BackendFactory | None = None) -> None:
        self.lab = lab
        self.opts = opts
        self._factory = factory
        self._made: dict[str, Backend] = {}

    def get(self, name: str) -> Backend:
        if name not in self._made:
            self._made[name] = self._factory(name) if self._factory else self._build(name)
        return self._made[name]

    def _build(self, name: str) -> Backend:
        from tuneplane.backends.factory import ClusterAccess, make_backend  # lazy: backends cost start-up time

        access = ClusterAccess(self.opts.kubeconfig, self.opts.context, self.opts.in_cluster)
        return make_backend(name, self.lab, access)

    def close(self) -> None:
        for backend in self._made.values():
            if isinstance(backend, Closable):
                backend.close()


def start(root: Path, opts: BotOptions) -> tuple[GitRepo, Lab, Target | None, bool]:
    """Open the lab's repository, clean up after a killed bot, and catch up with the remote; last, whether
    the clean-up committed what a killed bot left (`finish` makes it one commit with the run's own)."""
    from tuneplane.record.publish import pull, recover, resolve_target  # lazy: not on an idle pass

    lab = load_lab(root)
    lab.require_settings()
    repo = GitRepo(lab.root)
    repo.ensure_identity()
    repo.guard_attributes()  # the lab's .gitattributes never reach the bot's files
    recovered = recover(repo) is not None
    checkpoint("recovered")
    target = resolve_target(repo, opts.remote, opts.branch) if opts.push else None
    if target is not None:
        pull(repo, target, checkpoint)
    return repo, lab, target, recovered


class BotPass(Record):
    """One bot run between `start` and `finish`: the repository, the scanned commit, its writes, the backends."""

    repo: GitRepo
    lab: Lab
    target: Target | None
    work: Scan
    batch: Batch
    pool: Backends
    report: BotReport = field(default_factory=BotReport)


def run_pass(
    root: Path,
    opts: BotOptions | None,
    backends: BackendFactory | None,
    verb: str,
    act: Callable[[BotPass, Echo], None],
    echo: Echo,
) -> BotReport:
    """Start, scan the commit, `act` on it, close the backends, then finish: one commit, and the push."""
    opts = opts or BotOptions()
    repo, lab, target, recovered = start(root, opts)
    work = scan(lab.root)
    bot = BotPass(repo, lab, target, work, Batch(repo, work.ledger, work.authority), Backends(lab, opts, backends))
    try:
        act(bot, echo)
    finally:
        bot.pool.close()
    notifier = notifier_for(repo, lab.config)
    return finish(repo, work, bot.batch, target, bot.report, verb, echo, notifier, recovered)


def waiting_list(work: Scan, report: BotReport) -> list[tuple[RunKey, str]]:
    """Requests not yet run, for the dashboard: new ones and those the backend could not take yet."""
    done = {*report.submitted, *report.cancelled, *report.refused}
    out = [(key, "merged, not yet submitted") for key in work.new if str(key) not in done]
    for text in sorted(work.ledger.active):
        exp, _, run_id = text.partition("/")
        status = unchecked_from(work.active.get(RunKey(exp, run_id)))
        if str(RunKey(exp, run_id)) in report.waiting or (
            status and status.reason == "SubmitFailed" and status.backend is None and text not in done
        ):
            out.append((RunKey(exp, run_id), "the backend could not take it yet; retried"))
    return out


def finish(
    repo: GitRepo,
    work: Scan,
    batch: Batch,
    target: Target | None,
    report: BotReport,
    verb: str,
    echo: Echo,
    notifier: Notifier | None = None,
    recovered: bool = False,
) -> BotReport:
    """Render what changed, commit once, push (then notify); the dashboard lists what is waiting and what
    was refused. With `recovered` (`start` committed what a killed bot left) the two are one commit."""
    problems = [*work.problems, *work.bad_requests.values()]
    report.problems = problems
    for text in [*problems, *work.notes]:
        echo(f"  ! {text}")
    _apply_removals(work, batch, report)
    for exp in work.refusing:  # listed again by the next run, so its refusal stays until it is fixed
        batch.ledger.requests.pop(exp, None)
    for exp, rows in work.changed_statuses.items():
        if exp in work.status_trees:
            batch.ledger.statuses.setdefault(exp, work.status_trees[exp])
            if batch.ledger.statuses[exp] != work.status_trees[exp]:
                batch.ledger.statuses[exp] = work.status_trees[exp]
            batch.changed_by_others(exp, [r for r, _, _ in rows])
    for exp, names in work.pages.items():
        batch.pages_changed_by_others(exp, names)
    waiting = waiting_list(work, report)
    notices = bool(waiting or problems) or shows_notices(batch.root)  # the index lists them, or must stop
    batch.sweeps_changed = batch.ledger.sweeps != work.sweeps_tree
    if (
        batch.written
        or batch.touched
        or work.changed_statuses
        or work.index_changed
        or batch.sweeps_changed
        or notices
        or not work.ledger.found
    ):
        batch.render(waiting, problems, refresh=not work.ledger.found)
    batch.ledger.sweeps = work.sweeps_tree
    checkpoint("status-written")
    title = summary_title(verb, report)
    message = title + body(report)
    report.commit = batch.commit(notifier.mark(message) if notifier is not None else message)
    if report.commit and recovered:
        report.commit = _one_commit(repo)
    report.errors += [f"{why} (not written; the other experiments were)" for why in batch.refused.values()]
    if report.commit:
        echo(f"committed {report.commit[:12]}: {title}")
    checkpoint("committed")
    _publish_and_notify(repo, target, report, echo, notifier)
    return report


def _publish_and_notify(
    repo: GitRepo, target: Target | None, report: BotReport, echo: Echo, notifier: Notifier | None
) -> None:
    """Push (when asked: the branch, or only the bot's record or a stale heartbeat's deletion), then send the
    notifications this run owns: the push race decides which those are. A webhook's failure is
    reported, never raised: by then the statuses are committed and pushed."""
    from tuneplane.record.authority import Authority  # lazy: not on an idle pass
    from tuneplane.record.publish import ended_heartbeats, publish, record_published  # lazy: as above

    if target is not None and (
        report.commit
        or not _published(repo, target)
        or not record_published(repo, Authority(repo), target.remote)
        or ended_heartbeats(repo, Authority(repo), target.remote)  # a beat that came after the end was pushed
    ):
        report.push_attempts = publish(repo, target, checkpoint=checkpoint)
        report.pushed = True
        echo(
            f"pushed to {target.remote}/{target.branch}"
            + (f" (attempt {report.push_attempts})" if report.push_attempts > 1 else "")
        )
        if notifier is not None and report.commit:
            notifier.queue()
        checkpoint("pushed")
    elif notifier is not None and report.commit and target is None:
        notifier.queue()
    if notifier is not None:
        try:
            sent = notifier.send(echo)
        except OSError as exc:  # the outbox could not be written: said, and tried again next run
            echo(f"  ! notify: {exc}")
            return
        if sent:
            echo(f"notified {sent} phase change{'s' if sent != 1 else ''}")


def _apply_removals(work: Scan, batch: Batch, report: BotReport) -> None:
    """What others removed: statuses whose request stays are put back, rows of removed requests lose
    their link, an experiment whose statuses all went leaves the ledger (and the index)."""
    for key, data in sorted(work.restored.items()):
        if key.status_rel in batch.written:  # a sync of the run already wrote a newer status
            batch.changed_by_others(key.experiment, [key.run_id])
        else:
            batch.restore(key, data)
            report.restored.append(str(key))
    for exp, run_ids in sorted(work.orphaned.items()):
        batch.touch(exp, run_ids)
    for exp, rows in sorted(work.changed_statuses.items()):
        for run_id, _old, new in rows:
            if not new and RunKey(exp, run_id) not in work.restored:
                batch.forget(RunKey(exp, run_id))
    for exp in sorted(work.gone):
        if not any(k.experiment == exp for k in work.restored):
            batch.ledger.statuses.pop(exp, None)
            batch.ledger.counts.pop(exp, None)


def _one_commit(repo: GitRepo) -> str:
    """The run's commit and the one before it, the statuses a killed bot left (`start`), as one commit with
    the run's message: one bot run, one commit. Both are this clone's own, not yet pushed."""
    from tuneplane.record.publish import RECOVERED  # lazy: as in `start`

    if repo.git("log", "-1", "--format=%s", "HEAD~1").strip() != RECOVERED:
        return repo.head()  # not the commit `start` made (nothing to join)
    title, _, rest = repo.git("log", "-1", "--format=%B", "HEAD").rstrip("\n").partition("\n")
    note = "Also keeps the statuses an interrupted bot run wrote."  # before the body: trailers stay last
    repo.git("reset", "-q", "--soft", "HEAD~2")
    repo.git("commit", "-q", "-m", f"{title}\n\n{note}" + (f"\n{rest}" if rest else ""))
    return repo.head()


def _published(repo: GitRepo, target: Target) -> bool:
    try:
        return repo.rev_parse(f"refs/remotes/{target.remote}/{target.branch}") == repo.head()
    except UsageError:
        return False


def summary_title(verb: str, report: BotReport) -> str:
    parts = []
    for label, _, items in report.outcomes():
        if items:
            parts.append(f"{label} {len(items)} run{'s' if len(items) != 1 else ''}")
    return "tp bot: " + (", ".join(parts) if parts else f"{verb}: refresh the dashboard and the ledger")


def body(report: BotReport) -> str:
    lines = []
    for _, heading, items in report.outcomes():
        lines += [f"{heading}: {item}" for item in items]
    return ("\n\n" + "\n".join(lines)) if lines else ""
