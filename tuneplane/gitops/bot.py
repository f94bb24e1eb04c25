"""The bot: make the backends match the run requests in git, and write what happened back into git.

`reconcile` submits every run request that has no status (or whose submission must be retried),
cancels runs whose request says `cancel: true`, writes their status files and the dashboard, commits
them in one commit and (with `push`) publishes it with fetch–rebase–retry. `sync` refreshes every
run that has not finished from its backend and the metrics ingest.

Safe to kill at any point and to run several at once:
- a job object's name is derived from the run, and backends adopt an existing object of that name,
  so submitting again never starts a second job;
- status files are written atomically; a status left uncommitted by a killed bot is committed by
  the next one, an interrupted rebase is aborted and redone;
- each run has its own status file, so racing bots conflict only on the same run's file (the more
  advanced status wins) or on the dashboard (regenerated).

Crash testing: `TUNEPLANE_BOT_CRASH_AT=<step>` makes the bot die (`os._exit(CRASH_EXIT)`, as `kill -9`
would) at that step; see `STEPS`. It exists for the crash-injection tests and changes nothing else.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tuneplane.backends.base import Backend, BackendError, BackendRef, SubmitRefused
from tuneplane.backends.factory import ClusterAccess, make_backend
from tuneplane.constants import INGEST_SECRET_ENV, TERMINAL, utc_now
from tuneplane.errors import UsageError
from tuneplane.gitops.observe import backend_object, backend_ref, observe_run, transition, with_artifacts, with_metrics
from tuneplane.gitops.submit import backend_request, lab_at, lab_dirty, prepare_run, primary_metrics
from tuneplane.gitops.writeback import (
    cancelled_before_submit,
    commit_status,
    publish,
    pull,
    read_raw,
    recover,
    refused_status,
    resolve_target,
    submitted_status,
    waiting_status,
    write_dashboard,
)
from tuneplane.ingest import mint_token
from tuneplane.ingest.client import fetch_series, fetch_summary
from tuneplane.lab.catalog import load_catalog
from tuneplane.lab.gitrepo import GitRepo
from tuneplane.lab.load import Lab, load_lab
from tuneplane.lab.runs import RunKey, read_request, read_status, request_keys, status_keys, write_status
from tuneplane.models.run import RunRequest, RunStatus, Transition
from tuneplane.plan.resolve import prepare_experiment

CRASH_ENV = "TUNEPLANE_BOT_CRASH_AT"
CRASH_EXIT = 197
STEPS = (
    "recovered",  # after cleaning up what an earlier, killed bot left
    "scanned",  # after deciding what to do, before touching a backend
    "submitted",  # right after the first backend submission, before its status is written
    "cancelled",  # right after the first backend cancellation, before its status is written
    "status-written",  # status files written, not committed
    "committed",  # committed, not pushed
    "rebasing",  # in a rebase that stopped on conflicts, before resolving them
    "pushed",  # after the push
)
MAX_BACKEND_FAILURES = 3  # in a row: the backend is down, leave the rest for the next run
Echo = Callable[[str], None]


def checkpoint(step: str) -> None:
    """Die here when asked to (crash-injection tests); otherwise nothing."""
    if os.environ.get(CRASH_ENV) == step:
        os._exit(CRASH_EXIT)


@dataclass
class BotReport:
    submitted: list[str] = field(default_factory=list)
    cancelled: list[str] = field(default_factory=list)
    refused: list[str] = field(default_factory=list)
    waiting: list[str] = field(default_factory=list)  # the backend refused for now; retried next time
    updated: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    commit: str | None = None
    pushed: bool = False
    push_attempts: int = 0

    @property
    def changed(self) -> bool:
        return bool(self.submitted or self.cancelled or self.refused or self.waiting or self.updated)


@dataclass
class BotOptions:
    push: bool = False
    remote: str | None = None
    branch: str | None = None
    kubeconfig: str | None = None
    context: str | None = None
    in_cluster: bool = False


class Backends:
    """The backends a bot run needs, built on first use (the kubernetes client costs a second)."""

    def __init__(self, lab: Lab, opts: BotOptions, factory: Callable[[str], Backend] | None = None) -> None:
        self.lab = lab
        self.opts = opts
        self._factory = factory
        self._made: dict[str, Backend] = {}

    def get(self, name: str) -> Backend:
        if name not in self._made:
            self._made[name] = self._factory(name) if self._factory else self._build(name)
        return self._made[name]

    def _build(self, name: str) -> Backend:

        access = ClusterAccess(self.opts.kubeconfig, self.opts.context, self.opts.in_cluster)
        return make_backend(name, self.lab, access)

    def close(self) -> None:
        for backend in self._made.values():
            close = getattr(backend, "close", None)
            if close is not None:
                close()


# ── reconcile ────────────────────────────────────────────────────────────────────────────────────


def reconcile(
    root: Path,
    opts: BotOptions | None = None,
    backends: Callable[[str], Backend] | None = None,
    echo: Echo = print,
) -> BotReport:
    opts = opts or BotOptions()
    repo, lab, target = _start(root, opts)
    report = BotReport()
    work = _plan(lab.root)
    checkpoint("scanned")
    pool = Backends(lab, opts, backends)
    try:
        _cancel_all(lab, pool, work.cancel, report, echo)
        _submit_all(repo, lab, pool, work.submit, report, echo)
    finally:
        pool.close()
    checkpoint("status-written")
    touched = {str(k) for k in (*report.submitted, *report.cancelled, *report.refused, *report.waiting)}
    known = {key: raw for key, raw in work.known.items() if str(key) not in touched}
    return _finish(repo, lab, target, report, _summary_title("submit", report), echo, known)


@dataclass
class _Work:
    submit: list[tuple[RunKey, RunStatus | None]] = field(default_factory=list)
    cancel: list[tuple[RunKey, RunStatus, RunRequest]] = field(default_factory=list)
    known: dict[RunKey, dict[str, Any] | None] = field(default_factory=dict)  # status files as read


def _plan(root: Path) -> _Work:
    """What to do, from file names and plain JSON first: only unfinished runs are parsed fully."""
    work = _Work()
    work.known = {key: read_raw(root, key) for key in status_keys(root)}
    for key in request_keys(root):
        if key not in work.known:
            work.submit.append((key, None))
            continue
        raw = work.known[key]
        if raw is None or raw.get("phase") in TERMINAL:
            continue  # finished, or damaged (`tp job status` says so): the bot leaves it alone
        try:
            status = read_status(root, key)
        except UsageError:
            continue
        if status is None:
            continue
        request = _request_or_none(root, key)
        if request is not None and request.cancel:
            work.cancel.append((key, status, request))
        elif status.backend is None and status.reason == "SubmitFailed":
            work.submit.append((key, status))
    return work


def _request_or_none(root: Path, key: RunKey) -> RunRequest | None:
    try:
        return read_request(root, key)
    except UsageError:
        return None


def _cancel_all(
    lab: Lab, pool: Backends, items: list[tuple[RunKey, RunStatus, RunRequest]], report: BotReport, echo: Echo
) -> None:

    first = True
    for key, status, _request in items:
        ref = backend_ref(status)
        if ref is not None:
            try:
                pool.get(ref.backend).cancel(ref)
            except BackendError as exc:
                report.errors.append(f"{key}: could not cancel: {exc}")
                echo(f"  ! {key}: could not cancel: {exc}")
                continue
            if first:
                checkpoint("cancelled")
                first = False
        now = utc_now()
        write_status(
            lab.root,
            transition(
                status,
                "Cancelled",
                now,
                reason="CancelRequested",
                finished_at=now,
                message="cancelled: the run request says `cancel: true`",
            ),
        )
        report.cancelled.append(str(key))
        echo(f"  cancelled {key}")


def _submit_all(
    repo: GitRepo,
    lab: Lab,
    pool: Backends,
    items: list[tuple[RunKey, RunStatus | None]],
    report: BotReport,
    echo: Echo,
) -> None:
    with _Submitter(repo, lab, pool, report, echo) as submitter:
        for done, (key, status) in enumerate(items):
            if submitter.failures >= MAX_BACKEND_FAILURES:
                report.errors.append(
                    f"{len(items) - done} run(s) left for the next run: "
                    "the backend failed several times in a row"
                )
                break
            submitter.one(key, status)


class _Submitter:
    """Submits run requests one by one, sharing what runs of one experiment have in common."""

    def __init__(self, repo: GitRepo, lab: Lab, pool: Backends, report: BotReport, echo: Echo) -> None:

        self.repo, self.lab, self.pool, self.report, self.echo = repo, lab, pool, report, echo
        self.head = repo.head()
        self.dirty = lab_dirty(repo, lab)
        self.failures = 0
        self.first = True
        self._experiments: dict[tuple[str, str], Any] = {}
        self._pinned: dict[str, Lab] = {}
        self._stack = contextlib.ExitStack()  # the pinned labs' temporary checkouts

    def __enter__(self) -> _Submitter:
        return self

    def __exit__(self, *exc: object) -> None:
        self._stack.close()

    def one(self, key: RunKey, previous: RunStatus | None) -> None:

        now = utc_now()
        try:
            request = read_request(self.lab.root, key)
            _check_names(key, request)
        except UsageError as exc:
            write_status(self.lab.root, _invalid_status(key, str(exc), now))
            self._note(self.report.refused, key, f"refused: {exc.message}")
            return
        if request.cancel:
            write_status(self.lab.root, cancelled_before_submit(request, now))
            self._note(self.report.cancelled, key, "cancelled before submission")
            return
        try:
            run = self._prepare(request)
        except UsageError as exc:
            write_status(self.lab.root, refused_status(request, now, _refusal_text(exc)))
            self._note(self.report.refused, key, f"refused: {exc.message}")
            return
        self._hand_over(key, request, run, previous)

    def _hand_over(self, key: RunKey, request: RunRequest, run: Any, previous: RunStatus | None) -> None:

        try:
            backend = self.pool.get("local" if run.spec.spec.resources.local else cluster_backend(self.lab))
            ref = backend.submit(backend_request(self.lab.root, self.lab, run))
        except SubmitRefused as exc:  # refused as written: retrying cannot help
            write_status(self.lab.root, refused_status(request, utc_now(), _located(self.lab, exc),
                                                       "SubmitRefused", run.spec))
            self._note(self.report.refused, key, f"refused: {exc}")
            return
        except BackendError as exc:
            self.failures += 1
            status = waiting_status(request, run.spec, utc_now(), str(exc))
            write_status(self.lab.root, status if previous is None else _retried(previous, status))
            self._note(self.report.waiting, key, f"not submitted: {exc}")
            return
        self.failures = 0
        if self.first:
            checkpoint("submitted")
            self.first = False
        write_status(self.lab.root, _submitted(request, run, ref, previous))
        self._note(self.report.submitted, key, f"submitted as {ref.kind} {ref.name}")

    def _prepare(self, request: RunRequest) -> Any:

        lab, commit, dirty = self.lab, self.head, self.dirty
        if request.commit:
            lab, commit, dirty = self._lab_at(request.commit), request.commit, False
        cache_key = (request.commit, request.experiment)
        if cache_key not in self._experiments:
            try:
                self._experiments[cache_key] = prepare_experiment(lab, request.experiment, load_catalog())
            except UsageError as exc:
                self._experiments[cache_key] = exc
        prepared = self._experiments[cache_key]
        if isinstance(prepared, UsageError):
            raise prepared
        return prepare_run(
            lab, request, commit=commit, dirty=dirty, allow_dirty=True, prepared_experiment=prepared
        )

    def _lab_at(self, commit: str) -> Lab:

        if commit not in self._pinned:
            self._pinned[commit] = self._stack.enter_context(lab_at(self.repo, commit))
        return self._pinned[commit]

    def _note(self, bucket: list[str], key: RunKey, text: str) -> None:
        bucket.append(str(key))
        self.echo(f"  {key}: {text}")


def _located(lab: Lab, exc: SubmitRefused) -> str:
    """A refusal that names a tuneplane.yaml setting, with the setting's line and column."""
    setting = exc.setting.split(" ")[0]
    if not setting.startswith(("cluster.", "profiles.")) or lab.doc is None:
        return str(exc)
    line, col = lab.doc.where("/" + setting.replace(".", "/"))
    return f"tuneplane.yaml:{line}:{col}: {exc}"


def cluster_backend(lab: Lab) -> str:
    return "slurm" if lab.config.cluster.backend == "slurm" else "kubernetes"


def _check_names(key: RunKey, request: RunRequest) -> None:
    if request.experiment != key.experiment or request.run_id != key.run_id:
        raise UsageError(
            f"{key.request_rel} says experiment {request.experiment!r}, run_id {request.run_id!r}, "
            "which does not match its path",
            hint="file names and fields must agree (tp validate)",
        )


def _invalid_status(key: RunKey, message: str, now: str) -> RunStatus:

    return RunStatus(
        experiment=key.experiment,
        run_id=key.run_id,
        phase="Failed",
        reason="InvalidRequest",
        message=f"{message}\nThis request will not run; submit a corrected one with tp submit.",
        finished_at=now,
        history=[Transition(phase="Failed", at=now)],
    )


def _refusal_text(exc: UsageError) -> str:
    return f"{exc.message}\n  hint: {exc.hint}" if exc.hint else exc.message


def _submitted(request: RunRequest, run: Any, ref: BackendRef, previous: RunStatus | None) -> RunStatus:

    now = utc_now()
    fresh = submitted_status(request, run.spec, ref, now)
    if previous is None:
        return fresh
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
        }
    )


def _retried(previous: RunStatus, status: RunStatus) -> RunStatus:
    return previous.model_copy(update={"message": status.message, "provenance": status.provenance})


# ── sync ─────────────────────────────────────────────────────────────────────────────────────────


def sync(
    root: Path,
    opts: BotOptions | None = None,
    backends: Callable[[str], Backend] | None = None,
    echo: Echo = print,
) -> BotReport:
    """Refresh every unfinished run from its backend and the ingest; commit and push what changed."""
    opts = opts or BotOptions()
    repo, lab, target = _start(root, opts)
    report = BotReport()
    pool = Backends(lab, opts, backends)
    metrics = _IngestReader.from_env(lab)
    try:
        for key in status_keys(lab.root):
            _sync_one(lab, pool, metrics, key, report, echo)
    finally:
        pool.close()
    checkpoint("status-written")
    return _finish(repo, lab, target, report, _summary_title("sync", report), echo)


def _sync_one(
    lab: Lab, pool: Backends, metrics: _IngestReader, key: RunKey, report: BotReport, echo: Echo
) -> None:

    try:
        status = read_status(lab.root, key)
    except UsageError as exc:
        report.errors.append(str(exc))
        return
    ref = backend_ref(status) if status is not None else None
    if status is None or ref is None or status.phase in TERMINAL:
        return
    try:
        backend = pool.get(ref.backend)
    except BackendError as exc:  # e.g. no kubeconfig: every run of that backend says the same
        report.errors.append(f"{key}: cannot reach the {ref.backend} backend: {exc}")
        return
    new = observe_run(backend, status, utc_now())
    summary, series = backend.metrics(ref) if hasattr(backend, "metrics") else metrics.read(status)
    if summary:
        new = with_metrics(new, summary, series, primary_metrics(status.method))
    if hasattr(backend, "artifacts") and new.phase in TERMINAL:
        new = with_artifacts(new, backend.artifacts(ref))
    if new != status:
        write_status(lab.root, new)
        report.updated.append(str(key))
        echo(f"  {key}: {status.phase} → {new.phase}" if new.phase != status.phase else f"  {key}: updated")


class _IngestReader:
    """Metrics of cluster runs from the lab's ingest receiver, with a token minted per run."""

    def __init__(self, endpoint: str, secret: bytes) -> None:
        self.endpoint, self.secret = endpoint, secret

    @classmethod
    def from_env(cls, lab: Lab) -> _IngestReader:

        return cls(lab.config.cluster.ingest.endpoint, os.environ.get(INGEST_SECRET_ENV, "").strip().encode())

    def read(self, status: RunStatus) -> tuple[dict[str, dict[str, Any]], dict[str, list[float]]]:
        if not self.endpoint or not self.secret:
            return {}, {}

        token = mint_token(self.secret, status.run_id)
        try:
            found = fetch_summary(self.endpoint, status.run_id, token)
            history = {
                k: [v for _, v in fetch_series(self.endpoint, status.run_id, k, token)[-20:]] for k in found
            }
        except Exception:  # metrics are a nicety: an unreachable receiver must not stop the sync
            return {}, {}
        return found, history


# ── shared start and finish ──────────────────────────────────────────────────────────────────────


def _start(root: Path, opts: BotOptions) -> tuple[GitRepo, Lab, Any]:
    """Open the lab's repository, clean up after a killed bot, and catch up with the remote."""
    lab = load_lab(root)
    if lab.settings is None:
        first = lab.problems[0] if lab.problems else None
        raise UsageError(
            f"the lab settings cannot be read: {first.message if first else 'tuneplane.yaml'}",
            hint="run `tp validate` and fix tuneplane.yaml",
        )
    repo = GitRepo(lab.root)
    repo.ensure_identity()
    recover(repo)
    checkpoint("recovered")
    target = resolve_target(repo, opts.remote, opts.branch) if opts.push else None
    if target is not None:
        pull(repo, target, checkpoint)
    return repo, lab, target


def _finish(
    repo: GitRepo, lab: Lab, target: Any, report: BotReport, title: str, echo: Echo, known: Any = None
) -> BotReport:

    write_dashboard(lab.root, known)
    report.commit = commit_status(repo, title + _body(report))
    if report.commit:
        echo(f"committed {report.commit[:12]}: {title}")
    checkpoint("committed")
    if target is not None and (report.commit or not _published(repo, target)):
        report.push_attempts = publish(repo, target, checkpoint=checkpoint)
        report.pushed = True
        echo(
            f"pushed to {target.remote}/{target.branch}"
            + (f" (attempt {report.push_attempts})" if report.push_attempts > 1 else "")
        )
        checkpoint("pushed")
    return report


def _published(repo: GitRepo, target: Any) -> bool:
    try:
        return repo.rev_parse(f"refs/remotes/{target.remote}/{target.branch}") == repo.head()
    except UsageError:
        return False


def _summary_title(verb: str, report: BotReport) -> str:
    parts = []
    for label, items in (
        ("submit", report.submitted),
        ("cancel", report.cancelled),
        ("refuse", report.refused),
        ("retry later", report.waiting),
        ("update", report.updated),
    ):
        if items:
            parts.append(f"{label} {len(items)} run{'s' if len(items) != 1 else ''}")
    return "tp bot: " + (", ".join(parts) if parts else f"{verb}: refresh the dashboard")


def _body(report: BotReport) -> str:
    lines = []
    for label, items in (
        ("Submitted", report.submitted),
        ("Cancelled", report.cancelled),
        ("Refused", report.refused),
        ("Not yet submitted", report.waiting),
        ("Updated", report.updated),
    ):
        lines += [f"{label}: {item}" for item in items]
    return ("\n\n" + "\n".join(lines)) if lines else ""
