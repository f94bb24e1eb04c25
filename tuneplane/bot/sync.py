"""`tp bot sync`: refresh the runs the bot has not seen end from their backend and the metrics ingest.

Only the ledger's active runs are looked at (see `ledger`), so a lab of 20,000 finished runs syncs in
the time of two `git ls-tree`s. The cluster is the truth: a status that claims an end (a hand edit to
`Succeeded`, an old attempt's exit marker) while the backend runs the job again is reopened with what
the backend reports, so `cancel: true` and `tp job cancel` work on it again; only what the bot itself
decided (a cancel, a spent retry budget) stays ended. A failed attempt the run's retry policy covers
leaves the run Pending for `tp bot reconcile` to submit the next attempt. When a run ends, its
metrics are charted into `status/<exp>/<run-id>.svg`, under the recipe's canonical names, primary
metrics first.

Metric points alone are news the history can wait for: a run that only reported new points is written
with the pass's other news (a phase change, an end, a new run), or once `bot.metrics_every` seconds have
passed since the last commit of metrics (the ledger's `metrics_at`); otherwise the pass commits nothing
and the next one reads the points again (the receiver and the run directory keep them).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tuneplane.backends.base import (
    NO_HEARTBEAT,
    Backend,
    BackendError,
    BackendRef,
    CleansUp,
    HasArtifacts,
    HasMetrics,
    HasTimedMetrics,
    Observation,
    Requeues,
)
from tuneplane.bot.passes import BackendFactory, Backends, BotOptions, BotPass, BotReport, run_pass
from tuneplane.constants import INGEST_SECRET_ENV, RUNNING, TERMINAL, UNKNOWN, epoch_of, utc_now, wire_second
from tuneplane.errors import UsageError
from tuneplane.lab.heartbeats import PublishedHeartbeats
from tuneplane.lab.load import Lab
from tuneplane.lab.runs import RunKey, status_from
from tuneplane.models.run import RunStatus
from tuneplane.record.batch import Batch
from tuneplane.record.ledger import AWAITING
from tuneplane.runs.observe import (
    BOT_DECIDED,
    CANCEL_REQUESTED,
    RETRIES_SPENT,
    Overrun,
    apply_observation,
    backend_ref,
    elsewhere,
    overrun,
    reopened,
    with_artifacts,
    with_metrics,
)
from tuneplane.runtime.reporter import Echo, plain
from tuneplane.views.runmetrics import Timed, chart_svg, vocabulary_of

PATIENCE = 7 * 86400  # seconds after a run's end the bot keeps asking an unreachable receiver for them
REQUEUE_WATCH = 3600  # seconds after a run's end the bot still asks its engine for a later attempt
Series = dict[str, list[tuple[int, float]]]


def sync(
    root: Path, opts: BotOptions | None = None, backends: BackendFactory | None = None, echo: Echo = plain.line
) -> BotReport:
    """Refresh every run the bot watches; commit and push what changed."""
    return run_pass(root, opts, backends, "sync", _sync_all, echo)


def _sync_all(bot: BotPass, echo: Echo) -> None:
    metrics = IngestReader.from_env(bot.lab)
    published = PublishedHeartbeats(bot.repo.root)  # fetched on the first run that needs it, once
    held: list[RunStatus] = []
    for key, raw in sorted(bot.work.active.items()):
        if raw is not None:
            _sync_one(
                bot.pool,
                metrics,
                bot.batch,
                key,
                raw,
                bot.report,
                echo,
                float(bot.lab.config.cluster.local.lost_after),
                published,
                held,
            )
    _metric_points(bot, held, echo)
    if metrics.refused:  # once per sync, not once per run: every run's metrics are refused alike
        bot.report.errors.append(f"metrics of the runs that ended were not read: {metrics.refused}")


def _sync_one(
    pool: Backends,
    metrics: IngestReader,
    batch: Batch,
    key: RunKey,
    raw: dict[str, Any],
    report: BotReport,
    echo: Echo,
    lost_after: float | None = None,
    published: PublishedHeartbeats | None = None,
    held: list[RunStatus] | None = None,
) -> None:
    """Refresh one run; a running run whose only news is metric points goes to `held` (see `_metric_points`)."""
    try:
        status = status_from(raw, key.status_rel)
    except UsageError as exc:
        report.errors.append(str(exc))
        return
    ref = backend_ref(status)
    if ref is None:
        return  # never submitted: reconcile retries it
    try:
        backend = pool.get(ref.backend)
    except BackendError as exc:  # e.g. no kubeconfig: every run of that backend says the same
        report.errors.append(f"{key}: cannot reach the {ref.backend} backend: {exc}")
        return
    if elsewhere(backend, ref) and status.phase not in TERMINAL:
        # Still watched: its machine may commit its end, or its storage may be back on the next pass
        # (a mount missing for once, another runner); either way no sync may forget it. A backend that
        # knows the run's heartbeat says so (`NO_HEARTBEAT`): silent past `lost_after`, the run is Lost.
        lost, unheard = _heartbeat(backend, ref, status, lost_after, published)
        if lost is not None:
            batch.status(lost)
            report.updated.append(str(key))
            echo(f"  {key}: {status.phase} → {lost.phase}: no heartbeat from its machine")
            return
        echo(
            f"  {key}: a local run of another machine, or one whose storage is out of sight (no "
            f"{ref.run_dir} here): its status is left as committed; the machine that runs it commits its "
            f"end, or the next sync that sees it does{unheard}"
        )
        return
    if awaiting_metrics(batch.ledger.active.get(str(key), "")) and status.phase in TERMINAL:
        # it ended: its metrics may be left to read, and its engine may yet start a later attempt
        new: RunStatus | None = _reopened(backend, ref, status, _observation(backend, ref), utc_now()) or status
    else:
        new = _observed(batch, backend, ref, key, status, lost_after)
    if new is None:
        return
    new = _with_results(new, backend, ref, metrics, status, batch, key)
    late = new.phase in TERMINAL and metrics.unreachable and not isinstance(backend, HasMetrics)
    _record(batch, report, echo, status, new, held)
    # A backend whose engine may requeue a job after its end was recorded (`requeues`: Slurm after a node
    # failure) may show a later attempt yet: a run that ended by itself, or at its retry budget, is looked
    # at again for a while (a requeue past the budget is then stopped); a cancel is not.
    watch = (
        isinstance(backend, Requeues)
        and backend.requeues
        and new.phase in TERMINAL
        and new.reason != CANCEL_REQUESTED
        and not _past(new.finished_at, REQUEUE_WATCH)
    )
    if (late and not _past(new.finished_at, PATIENCE)) or watch:
        batch.ledger.active[str(key)] = new.phase + AWAITING  # asked again on the next sync
        if late:
            echo(f"  {key}: its metrics could not be read from the receiver yet; the next sync asks again")
    elif awaiting_metrics(batch.ledger.active.get(str(key), "")):
        batch.ledger.active.pop(str(key), None)  # read at last, or given up on
    if new.phase in TERMINAL and str(key) not in batch.ledger.active:
        _clean_up(backend, ref, batch, key, new, report)


def _clean_up(backend: Backend, ref: BackendRef, batch: Batch, key: RunKey, new: RunStatus, report: BotReport) -> None:
    """Delete what the run left in its engine now that its end is recorded and no sync reads it again. A
    deletion that fails leaves the recorded status as it is and the run watched (as one awaiting its
    metrics), so the next sync tries again, for as long as it would wait for the metrics."""
    if not isinstance(backend, CleansUp):
        return
    try:
        backend.clean_up(ref)
    except BackendError as exc:
        again = not _past(new.finished_at, PATIENCE)
        if again:
            batch.ledger.active[str(key)] = new.phase + AWAITING
        then = "the next sync tries again" if again else "delete it by hand"
        report.errors.append(
            f"{key}: what the run left on {ref.backend} ({ref.kind} {ref.name}) was not deleted: {exc}; {then}"
        )


def _record(
    batch: Batch, report: BotReport, echo: Echo, status: RunStatus, new: RunStatus, held: list[RunStatus] | None
) -> None:
    """Write a run's new status, or hold it when its only news is metric points (see `_metric_points`)."""
    if new == status:
        return
    key = RunKey(status.experiment, status.run_id)
    if held is not None and metric_points_only(status, new):
        held.append(new)
        return
    batch.status(new)
    report.updated.append(str(key))
    echo(f"  {key}: {status.phase} → {new.phase}" if new.phase != status.phase else f"  {key}: updated")


def now() -> float:
    """The clock `bot.metrics_every` is measured by."""
    return time.time()


def metric_points_only(old: RunStatus, new: RunStatus) -> bool:
    """Whether `new` is `old` with newer metric values and nothing else (the run goes on as it was)."""
    if new.phase in TERMINAL:
        return False
    return new.model_copy(update={"metrics": old.metrics, "metric_history": old.metric_history}) == old


def _metric_points(bot: BotPass, held: list[RunStatus], echo: Echo) -> None:
    """Write the held runs' new metric points when the pass writes statuses anyway or `bot.metrics_every`
    seconds have passed since the last sync that wrote any (its statuses carried their runs' newest
    points: `metrics_at`); otherwise leave them for a later pass, which reads them again."""
    every = bot.lab.config.bot.metrics_every
    last = bot.batch.ledger.metrics_at
    then = epoch_of(last) if last else None
    due = not every or bool(bot.batch.written) or then is None or now() - then >= every
    if bot.batch.written or (held and due):
        bot.batch.ledger.metrics_at = wire_second(int(now())) + "Z"  # a status file's time format
    for status in held:
        key = f"{status.experiment}/{status.run_id}"
        if due:
            bot.batch.status(status)
            bot.report.updated.append(key)
            echo(f"  {key}: updated")
        else:
            bot.report.held.append(key)
    if held and not due:
        echo(
            f"  new metric points of {len(held)} running run{'s' if len(held) != 1 else ''} wait: the last were "
            f"committed at {last}, and bot.metrics_every is {every} s"
        )


def awaiting_metrics(phase: str) -> bool:
    """Whether a ledger entry is a run that ended with its metrics still to be read."""
    return phase.endswith(AWAITING)


def _past(when: str | None, seconds: float) -> bool:
    then = epoch_of(when)
    return then is None or time.time() - then > seconds


def _observed(
    batch: Batch, backend: Backend, ref: BackendRef, key: RunKey, status: RunStatus, lost_after: float | None = None
) -> RunStatus | None:
    """The status after asking the backend; None when there is nothing more to record."""
    now = utc_now()
    obs = _observation(backend, ref)
    if status.phase not in TERMINAL:
        over = _stopped(backend, ref, overrun(status, obs, now))
        return apply_observation(status, obs, now, retry=True, lost_after=lost_after, over=over)
    again = _reopened(backend, ref, status, obs, now)  # a later attempt: the run is not over
    if again is not None:
        return again
    if obs.phase in TERMINAL or status.reason in BOT_DECIDED:  # it ended: stop watching it
        batch.ledger.active.pop(str(key), None)
    return None


def _reopened(backend: Backend, ref: BackendRef, status: RunStatus, obs: Observation, now: str) -> RunStatus | None:
    """`reopened`: a run recorded ended that its engine shows going again; when it goes on past the run's
    retry policy it is stopped at once (see `_stopped`) and ends by the bot's decision."""
    if status.reason == RETRIES_SPENT:  # ended at its budget: an engine requeue after that is stopped
        return _stopped_after_budget(backend, ref, status, obs, now)
    again = reopened(status, obs, now, retry=True)
    if again is None:
        return None
    over = _stopped(backend, ref, overrun(again, obs, now))
    return again if over is None else apply_observation(again, obs, now, retry=True, over=over)


def _stopped_after_budget(
    backend: Backend, ref: BackendRef, status: RunStatus, obs: Observation, now: str
) -> RunStatus | None:
    """A run the bot ended at its retry budget that its engine started again anyway (Slurm requeues a job
    after a node failure it had reported as the end) is stopped as any overrun is; the status keeps the
    bot's decision, and says the job was stopped (or why not: the next sync tries again)."""
    over = _stopped(backend, ref, overrun(status, obs, now))
    if over is None:
        return None
    return apply_observation(status.model_copy(update={"phase": RUNNING}), obs, now, retry=True, over=over)


def _stopped(backend: Backend, ref: BackendRef, over: Overrun | None) -> Overrun | None:
    """An engine going on past the run's retry policy, stopped the way `cancel: true` stops a job (so
    nothing is left holding GPUs); when the stop fails the run is not ended: `over` says why, and the
    next sync, which sees the engine go on still, tries again."""
    if over is None:
        return None
    try:
        backend.cancel(ref)
    except BackendError as exc:
        return over.replace(outcome=f"stopping it failed ({exc}); the next sync tries again")
    return over.replace(stopped=True)


def _heartbeat(
    backend: Backend,
    ref: BackendRef,
    status: RunStatus,
    lost_after: float | None,
    published: PublishedHeartbeats | None = None,
) -> tuple[RunStatus | None, str]:
    """A run of another machine whose heartbeat the backend reports as older than `lost_after`, ended
    (or retried) as `Lost`; None while it is alive, or when the backend cannot tell, with why it cannot.

    A heartbeat the backend cannot see here (the run directory is on the machine that ran it) is read
    from the one its supervisor published to the lab's remote; a run that published none is not lost on
    a guess."""
    try:
        obs = backend.observe(ref)
    except BackendError:
        return None, ""
    if obs.reason != NO_HEARTBEAT or lost_after is None:
        return None, ""  # the backend cannot see the run at all: its own machine records its end
    if obs.heartbeat_at is None and published is not None:
        beat = published.at(status.experiment, status.run_id)
        if beat is None:
            why = published.error or "its machine published no heartbeat (a lab without a remote, or no push access)"
            return None, f"; no published heartbeat tells whether it is alive: {why}"
        obs = obs.replace(heartbeat_at=beat, message=f"{obs.message}; its published heartbeat is from {beat}")
    new = apply_observation(status, obs, utc_now(), retry=True, lost_after=lost_after)
    return (new if new.phase != status.phase or new.attempts != status.attempts else None), ""


def _observation(backend: Backend, ref: BackendRef) -> Observation:
    try:
        return backend.observe(ref)
    except BackendError as exc:
        return Observation(phase=UNKNOWN, message=f"could not observe the run: {exc}")


def _with_results(
    new: RunStatus,
    backend: Backend,
    ref: BackendRef,
    metrics: IngestReader,
    status: RunStatus,
    batch: Batch,
    key: RunKey,
) -> RunStatus:
    """Metrics under their canonical names; artifacts and the chart once the run ended."""
    vocab = vocabulary_of(new.method)
    summary, recent = backend.metrics(ref) if isinstance(backend, HasMetrics) else metrics.read(status)
    if summary:
        new = with_metrics(new, summary, recent, list(vocab.primary), vocab)
    if new.phase in TERMINAL:
        if isinstance(backend, HasArtifacts):
            new = with_artifacts(new, backend.artifacts(ref))
        if summary:
            try:
                svg = chart_svg(key, full_series(backend, ref, metrics, status, summary), vocab)
            except (ArithmeticError, ValueError):  # a chart is a nicety: values it cannot draw leave none
                svg = ""
            if svg:
                batch.chart(key, svg)
    return new


def full_series(
    backend: Backend, ref: BackendRef, metrics: IngestReader, status: RunStatus, summary: dict[str, Any]
) -> Timed:
    """Every point of every key with its time, for the chart (local runs: their own store; cluster:
    the receiver)."""
    if isinstance(backend, HasTimedMetrics):
        return backend.timed_metrics(ref, summary)
    return metrics.timed(status, list(summary))


class IngestReader:
    """Metrics of cluster runs from the lab's ingest receiver, with a token minted per run.

    One reader serves one sync. A receiver that gives no answer (down, hanging) costs one `timeout`
    per sync, not one per run and key: once it has failed, the rest of the sync does not ask again and
    its runs wait for the next sync. A refusal (a 4xx: the bot's secret is not the receiver's) is
    reported once as an error of the sync, and its runs wait too: the secret may be fixed by then."""

    def __init__(self, endpoint: str, secret: bytes, timeout: float = 10.0) -> None:
        self.endpoint, self.secret, self.timeout = endpoint, secret, timeout
        self.unreachable = False  # the last read failed (no answer, an error): not the same as no metrics
        self.down = False  # no answer once in this sync: not asked again until the next one
        self.refused = ""  # what the receiver answered when it refused, with the hint

    @classmethod
    def from_env(cls, lab: Lab) -> IngestReader:
        return cls(lab.config.cluster.ingest.endpoint, os.environ.get(INGEST_SECRET_ENV, "").strip().encode())

    def read(self, status: RunStatus) -> tuple[dict[str, dict[str, Any]], dict[str, list[float]]]:
        self.unreachable = False
        found = self._call(status, lambda c, t: c.fetch_summary(self.endpoint, status.run_id, t, self.timeout)) or {}
        history = self.series(status, list(found))
        return found, {k: [v for _, v in points] for k, points in history.items()}

    def series(self, status: RunStatus, keys: list[str]) -> Series:
        return self._per_key(status, keys, "fetch_series")

    def timed(self, status: RunStatus, keys: list[str]) -> Timed:
        return self._per_key(status, keys, "fetch_timed_series")

    def _per_key(self, status: RunStatus, keys: list[str], reader: str) -> dict[str, list[Any]]:
        """Each key's points through the ingest client's `reader`; keys with none are left out."""
        out: dict[str, list[Any]] = {}
        for key in keys:

            def fetch(c: Any, t: str, k: str = key) -> Any:
                return getattr(c, reader)(self.endpoint, status.run_id, k, t, self.timeout)

            points = self._call(status, fetch)
            if points:
                out[key] = list(points)
        return out

    def _call(self, status: RunStatus, fn: Callable[[Any, str], Any]) -> Any:
        if not self.endpoint or not self.secret:
            return None
        if self.down or self.refused:  # not asked again in this sync; its runs wait for the next one
            self.unreachable = True
            return None
        from tuneplane.ingest import client, mint_token  # lazy: only cluster runs with a receiver

        try:
            return fn(client, mint_token(self.secret, status.run_id, status.experiment))
        except client.ReceiverError as exc:
            if exc.answered:  # said once per sync; the run still waits: a secret is fixed in an hour
                self.refused = (
                    f"{exc.message}; check that {INGEST_SECRET_ENV} is the receiver's secret and "
                    "cluster.ingest.endpoint in tuneplane.yaml is the receiver"
                )
            self.unreachable = self.down = True
            return None
        except Exception:  # metrics are a nicety: an unexpected failure must not stop the sync
            self.unreachable = self.down = True
            return None
