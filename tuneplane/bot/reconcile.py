"""`tp bot reconcile`: submit the committed run requests that have no status, cancel what asks for it.

Only what the commit holds counts (see `snapshot`): a request is read from git's objects, never from
the work tree, and an entry that is no regular file is refused. The cluster is the truth for
cancellation: a committed `cancel: true` deletes the job object of every run the bot has not seen end,
whatever its status file claims. One request that cannot be read or parsed becomes one Failed status
(`InvalidRequest`, with the file and line) and the bot goes on with the others.

Safe to kill at any point and to run several at once: a job object's name is derived from the run
(and from the attempt, for the bot's retries: see `runs.retry`), and backends adopt an existing
object of that name, so submitting again never starts a second job.
"""

from __future__ import annotations

import contextlib
import time
from pathlib import Path
from typing import TYPE_CHECKING

from tuneplane.backends.base import BackendError, BackendRef, SubmitRefused
from tuneplane.backends.factory import backend_name
from tuneplane.bot.passes import (
    MAX_BACKEND_FAILURES,
    BackendFactory,
    Backends,
    BotOptions,
    BotPass,
    BotReport,
    checkpoint,
    run_pass,
)
from tuneplane.bot.pulls import read_pulls, submitted_for
from tuneplane.bot.scan import Scan
from tuneplane.constants import CANCELLED, FAILED, TERMINAL, utc_now
from tuneplane.errors import UsageError
from tuneplane.lab.gitrepo import CommitUnavailable, GitRepo
from tuneplane.lab.load import LAB_FILE, Lab
from tuneplane.lab.runs import RunKey, parse_request, status_from
from tuneplane.models.run import RunRequest, RunStatus, Transition
from tuneplane.problems import location
from tuneplane.record.batch import Batch
from tuneplane.record.ledger import AWAITING
from tuneplane.runs.observe import RETRY_WAIT, backend_object, backend_ref, elsewhere
from tuneplane.runs.retry import attempt_run, kept_attempts, next_attempt, resubmitted, retry_at
from tuneplane.runtime.reporter import Echo, plain

if TYPE_CHECKING:  # the submit pipeline loads only for a run to submit
    from tuneplane.plan.resolve import PreparedExperiment
    from tuneplane.runs.prepare import PreparedRun


def reconcile(
    root: Path, opts: BotOptions | None = None, backends: BackendFactory | None = None, echo: Echo = plain.line
) -> BotReport:
    """Cancel what asks for it, submit what is new (and retry what failed); commit and push what changed."""
    return run_pass(root, opts, backends, "submit", _reconcile, echo)


def _reconcile(bot: BotPass, echo: Echo) -> None:
    work, report = bot.work, bot.report
    cancel, retry = _plan(work, report, echo)
    checkpoint("scanned")
    for key, status, request in cancel:
        _cancel(bot.pool, bot.batch, key, status, request, report, echo)
    left = _submit_all(bot.repo, bot.lab, bot.pool, bot.batch, work, retry, report, echo)
    for exp in work.listed:
        if not any(k.experiment == exp for k in left):
            work.ledger.requests[exp] = work.runs_trees[exp]
    for exp in list(work.ledger.requests):
        if exp not in work.runs_trees:
            work.ledger.requests.pop(exp)


def _plan(
    work: Scan, report: BotReport, echo: Echo
) -> tuple[list[tuple[RunKey, RunStatus, RunRequest]], list[tuple[RunKey, RunStatus]]]:
    """From the runs the bot watches: which to cancel, which submissions to retry."""
    for exp in sorted(work.blocked):
        if exp in work.runs_trees:
            report.errors.append(
                f"status/{exp} is a symbolic link or no directory: the runs of {exp} are "
                "not handled until it is a directory again (git rm it and commit)"
            )
    cancel: list[tuple[RunKey, RunStatus, RunRequest]] = []
    retry: list[tuple[RunKey, RunStatus]] = []
    for key, raw in sorted(work.active.items()):
        if raw is None or work.ledger.active.get(str(key), "").endswith(AWAITING):
            continue  # unreadable, or ended with only its metrics left to read (sync does that)
        try:
            status = status_from(raw, key.status_rel)
            text = work.request_text(key)
            request = parse_request(text, key.request_rel) if text is not None else None
        except (UsageError, RecursionError, ValueError) as exc:
            report.errors.append(f"{key}: {exc}")
            echo(f"  ! {key}: {exc}")
            continue
        if request is not None and request.cancel:
            cancel.append((key, status, request))
        elif status.backend is None and status.reason == "SubmitFailed" and status.phase not in TERMINAL:
            retry.append((key, status))
        elif (due := retry_at(status)) is not None and due <= time.time():  # the bot's next attempt
            retry.append((key, status))
    return cancel, retry


def _cancel(
    pool: Backends,
    batch: Batch,
    key: RunKey,
    status: RunStatus,
    request: RunRequest,
    report: BotReport,
    echo: Echo,
) -> None:
    ref = backend_ref(status)
    if ref is not None:
        try:
            backend = pool.get(ref.backend)
            if elsewhere(backend, ref):  # a process on another machine: only that machine can stop it
                echo(
                    f"  {key}: a local run of another machine (no {ref.run_dir} here): cancel it there "
                    f"(`tp job cancel {key.run_id}` on that machine), which commits its end"
                )
                return
            backend.cancel(ref)
        except BackendError as exc:
            report.errors.append(f"{key}: could not cancel: {exc}")
            echo(f"  ! {key}: could not cancel: {exc}")
            return
        checkpoint("cancelled")
    batch.status(cancelled(status, utc_now()))
    report.cancelled.append(str(key))
    echo(f"  cancelled {key}")


def cancelled(status: RunStatus, now: str) -> RunStatus:
    """Cancelled by its request; a status that claimed an end the cluster denied is corrected."""
    message = "cancelled: the run request says `cancel: true`"
    history = list(status.history)
    if status.phase in TERMINAL and status.phase != CANCELLED:
        message += f" (the status said {status.phase}, but the job object still existed)"
    if status.phase != CANCELLED:
        history.append(Transition(phase=CANCELLED, at=now))
    attempts = list(status.attempts)
    if attempts and not attempts[-1].reason:  # the attempt under way ends with the run
        attempts[-1] = attempts[-1].model_copy(update={"reason": CANCELLED, "finished_at": now})
    return status.model_copy(
        update={
            "phase": CANCELLED,
            "reason": "CancelRequested",
            "finished_at": now,
            "message": message,
            "history": history,
            "attempts": attempts,
        }
    )


def _submit_all(
    repo: GitRepo,
    lab: Lab,
    pool: Backends,
    batch: Batch,
    work: Scan,
    retry: list[tuple[RunKey, RunStatus]],
    report: BotReport,
    echo: Echo,
) -> list[RunKey]:
    """Submit new requests (then retries); returns the keys left for the next run."""
    now = utc_now()
    for key, why in sorted(work.bad_requests.items()):
        batch.status(_invalid_status(key, why, now))
        report.refused.append(str(key))
        echo(f"  {key}: refused: {why}")
    items: list[tuple[RunKey, str | RunStatus]] = [(k, oid) for k, oid in sorted(work.new.items())]
    items += [(k, s) for k, s in retry]
    if not items:
        return []
    with _Submitter(repo, lab, pool, batch, work, report, echo) as submitter:
        for done, (key, what) in enumerate(items):
            if submitter.failures >= MAX_BACKEND_FAILURES:
                report.errors.append(
                    f"{len(items) - done} run(s) left for the next run: the backend failed several times in a row"
                )
                return [k for k, _ in items[done:]] + submitter.left
            submitter.one(key, what if isinstance(what, RunStatus) else None, what if isinstance(what, str) else None)
    return submitter.left


class _Submitter:
    """Submits run requests one by one, sharing what runs of one experiment have in common."""

    def __init__(
        self, repo: GitRepo, lab: Lab, pool: Backends, batch: Batch, work: Scan, report: BotReport, echo: Echo
    ) -> None:
        from tuneplane.runs.submit import lab_dirty  # lazy: the submit pipeline is heavy

        self.repo, self.lab, self.pool, self.batch, self.work = repo, lab, pool, batch, work
        self.report, self.echo = report, echo
        self.head = work.snap.commit
        self.remote = pool.opts.remote or "origin"
        self.dirty = lab_dirty(repo, lab) or repo.head() != self.head
        self.pulls, unread = read_pulls(pool.opts.pull_requests)  # whom new runs are submitted for
        if unread:
            echo(f"  ! {unread}")
        self.failures = 0
        self.left: list[RunKey] = []  # requests skipped this run, to be taken up on the next one
        self.first = True
        self._experiments: dict[tuple[str, str], PreparedExperiment | UsageError] = {}
        self._pinned: dict[str, Lab | CommitUnavailable] = {}
        self._stack = contextlib.ExitStack()  # the pinned labs' temporary checkouts

    def __enter__(self) -> _Submitter:
        return self

    def __exit__(self, *exc: object) -> None:
        self._stack.close()

    def one(self, key: RunKey, previous: RunStatus | None, oid: str | None) -> None:
        # lazy: status records load only when a status is written
        from tuneplane.runs.status import cancelled_before_submit, refused_status

        now = utc_now()
        try:
            text = self.work.snap.text(oid, key.request_rel) if oid else self.work.request_text(key)
            if text is None:
                raise UsageError(f"{key.request_rel} is not in commit {self.head[:12]}")
            request = parse_request(text, key.request_rel)
            _check_names(key, request)
        except (UsageError, RecursionError, ValueError, MemoryError) as exc:
            message = _problem_text(key, exc)
            self.batch.status(_invalid_status(key, message, now))
            self._note(self.report.refused, key, f"refused: {message.splitlines()[0]}")
            return
        if request.cancel:
            self.batch.status(cancelled_before_submit(request, now))
            self._note(self.report.cancelled, key, "cancelled before submission")
            return
        try:
            run = self._prepare(request)
        except CommitUnavailable as exc:
            self._unavailable(key, request, exc, now)
            return
        except UsageError as exc:
            self.batch.status(refused_status(request, now, _refusal_text(exc)))
            self._note(self.report.refused, key, f"refused: {exc.message}")
            return
        self._hand_over(key, request, run, previous)

    def _hand_over(self, key: RunKey, request: RunRequest, run: PreparedRun, previous: RunStatus | None) -> None:
        # lazy: the submit pipeline (plan, render, Jinja2), most of a pass's imports, loads only for a run to submit
        from tuneplane.runs.prepare import backend_request
        from tuneplane.runs.status import waiting_status

        attempt = next_attempt(previous) if previous is not None and previous.reason == RETRY_WAIT else 1
        if attempt > 1:
            run = attempt_run(self.lab, run, attempt)
        try:
            backend = self.pool.get(backend_name(self.lab, run.spec.spec.resources.local))
            # the attempt's number travels with the request too: a backend that keeps one place per run
            # (the local run directory) starts the next attempt there instead of adopting the last one
            ref = backend.submit(backend_request(self.lab.root, self.lab, run).replace(attempt=attempt))
        except SubmitRefused as exc:  # refused as written: retrying cannot help
            from tuneplane.runs.status import refused_status  # lazy: as above

            refused = refused_status(request, utc_now(), _located(self.lab, exc), "SubmitRefused", run.spec)
            self.batch.status(refused if previous is None else kept_attempts(previous, refused))
            self._note(self.report.refused, key, f"refused: {exc}")
            return
        except BackendError as exc:
            self.failures += 1
            status = waiting_status(request, run.spec, utc_now(), str(exc))
            self.batch.status(self._owned(key, status) if previous is None else _retried(previous, status), watch=True)
            self._note(self.report.waiting, key, f"not submitted: {exc}")
            return
        self.failures = 0
        if self.first:
            checkpoint("submitted")
            self.first = False
        status = _submitted(request, run, ref, previous)
        self.batch.status(self._owned(key, status) if previous is None else status)
        self._note(self.report.submitted, key, f"submitted as {ref.kind} {ref.name}")

    def _owned(self, key: RunKey, status: RunStatus) -> RunStatus:
        """A new run's status with whom it is submitted for, when the workflow said (bot.pulls); a retry
        keeps what its first status recorded."""
        owner = submitted_for(self.repo, key.request_rel, self.pulls, self.remote)
        return status.model_copy(update={"submitted_for": owner}) if owner else status

    def _prepare(self, request: RunRequest) -> PreparedRun:
        # lazy: the submit pipeline (plan, render, Jinja2), most of a pass's imports, loads only for a run to submit
        from tuneplane.lab.catalog import load_catalog
        from tuneplane.plan.resolve import prepare_experiment
        from tuneplane.runs.prepare import prepare

        lab, commit, dirty = self.lab, self.head, False
        if request.commit:
            lab, commit = self._lab_at(request.commit), request.commit
        elif self.dirty:  # the work tree is not the commit: build from the commit, never the files here
            lab = self._lab_at(self.head)
        cache_key = (commit, request.experiment)
        if cache_key not in self._experiments:
            try:
                self._experiments[cache_key] = prepare_experiment(lab, request.experiment, load_catalog())
            except UsageError as exc:
                self._experiments[cache_key] = exc
        prepared = self._experiments[cache_key]
        if isinstance(prepared, UsageError):
            raise prepared
        return prepare(lab, request, commit=commit, dirty=dirty, allow_dirty=True, prepared_experiment=prepared)

    def _lab_at(self, commit: str) -> Lab:
        from tuneplane.runs.submit import lab_at  # lazy: as above

        if commit not in self._pinned:  # a commit that cannot be fetched is asked for once per run
            try:
                self._pinned[commit] = self._stack.enter_context(lab_at(self.repo, commit, self.remote))
            except CommitUnavailable as exc:
                self._pinned[commit] = exc
        pinned = self._pinned[commit]
        if isinstance(pinned, CommitUnavailable):
            raise pinned
        return pinned

    def _unavailable(self, key: RunKey, request: RunRequest, exc: CommitUnavailable, now: str) -> None:
        """A pinned commit this clone lacks and could not fetch: retried later when the remote could not
        be asked, refused (with the request, the commit and the fix) when it has no such commit."""
        from tuneplane.runs.status import refused_status  # lazy: status records load only when a status is written

        if exc.transient:
            self.left.append(key)  # no status: the request stays new, and its experiment unhandled
            self._note(self.report.waiting, key, f"not submitted: {exc.message} (retried on the next run)")
            return
        message = (
            f"{key.request_rel} pins `commit: {request.commit}`, which cannot be run: {exc.message}"
            f"\n  hint: {exc.hint}, or drop `commit:` from the request to run the commit the bot sees"
        )
        self.batch.status(refused_status(request, now, message, "CommitNotFound"))
        self._note(self.report.refused, key, f"refused: {exc.message}")

    def _note(self, bucket: list[str], key: RunKey, text: str) -> None:
        bucket.append(str(key))
        self.echo(f"  {key}: {text}")


def _located(lab: Lab, exc: SubmitRefused) -> str:
    """A refusal that names a tuneplane.yaml setting, with the setting's line and column."""
    setting = exc.setting.split(" ")[0]
    if not setting.startswith(("cluster.", "profiles.")) or lab.doc is None:
        return str(exc)
    line, col = lab.doc.where("/" + setting.replace(".", "/"))
    return f"{location(LAB_FILE, line, col)}: {exc}"


def _check_names(key: RunKey, request: RunRequest) -> None:
    if request.experiment != key.experiment or request.run_id != key.run_id:
        raise UsageError(
            f"{key.request_rel} says experiment {request.experiment!r}, run_id {request.run_id!r}, "
            "which does not match its path",
            hint="file names and fields must agree (tp validate)",
        )


def _problem_text(key: RunKey, exc: BaseException) -> str:
    if isinstance(exc, RecursionError):
        return f"{key.request_rel}: nested too deeply to read"
    if isinstance(exc, MemoryError):
        return f"{key.request_rel}: too large to read"
    return str(exc)


def _invalid_status(key: RunKey, message: str, now: str) -> RunStatus:
    return RunStatus(
        experiment=key.experiment,
        run_id=key.run_id,
        phase=FAILED,
        reason="InvalidRequest",
        message=f"{message}\nThis request will not run; submit a corrected one with tp submit.",
        finished_at=now,
        history=[Transition(phase=FAILED, at=now)],
    )


def _refusal_text(exc: UsageError) -> str:
    return f"{exc.message}\n  hint: {exc.hint}" if exc.hint else exc.message


def _submitted(request: RunRequest, run: PreparedRun, ref: BackendRef, previous: RunStatus | None) -> RunStatus:
    from tuneplane.runs.status import submitted_status  # lazy: status records load only when a status is written

    now = utc_now()
    fresh = submitted_status(request, run.spec, ref, now, run.config)
    if previous is None:
        return fresh
    if previous.reason == RETRY_WAIT:
        return resubmitted(previous, ref, now)
    # A retried submission: the run stays Pending (phases never go back), now with its backend object.
    return previous.model_copy(
        update={
            "reason": "",
            "message": fresh.message,
            "submitted_at": now,
            "backend": backend_object(ref),
            "provenance": fresh.provenance,
            "out_dir": fresh.out_dir,
            "method": fresh.method,
            "hyperparameters": fresh.hyperparameters,
            "hyperparameters_left_out": fresh.hyperparameters_left_out,
        }
    )


def _retried(previous: RunStatus, status: RunStatus) -> RunStatus:
    return previous.model_copy(update={"message": status.message, "provenance": status.provenance})
