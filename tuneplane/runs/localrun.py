"""`tp submit --local`: a run on this machine that every terminal can see, follow and stop.

The run is registered before it starts: as soon as its job package exists, its status file (phase
`Submitted`, with the local backend's reference) is written, so `tp job ls|status|logs|metrics|cancel`
find it from any terminal. One process owns the run and records its end: `tp submit --local` itself in
the foreground, or with `--detach` a background owner (`python -m tuneplane.runs.localrun RUN_DIR
LAB_ROOT`) that outlives the command. The owner supervises the job and commits the final status before
it lets go of the run's supervisor lock, so a canceller knows exactly whom to wait for.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Mapping
from pathlib import Path

from tuneplane.backends.base import (
    Backend,
    BackendError,
    BackendRef,
    HasMetrics,
    HasTimedMetrics,
    RunsHere,
    SubmitRequest,
)
from tuneplane.backends.factory import backend_kind, local_backend
from tuneplane.constants import EXIT_OK, EXIT_USAGE, TERMINAL, utc_now
from tuneplane.errors import UsageError
from tuneplane.lab.gitrepo import GitRepo, no_git_env
from tuneplane.lab.load import Lab, load_lab
from tuneplane.lab.runs import RunKey, read_status, write_status
from tuneplane.models.jobspec import JobSpec
from tuneplane.models.run import RunRequest, RunStatus
from tuneplane.record.batch import record_status
from tuneplane.runs.observe import apply_observation, backend_ref, with_artifacts, with_metrics
from tuneplane.runs.status import refused_status, submitted_status
from tuneplane.runtime.jsonvalue import JSONObject
from tuneplane.runtime.reporter import Echo, plain
from tuneplane.views.runmetrics import chart_svg, vocabulary_of

STOP_WAIT = 60.0  # seconds a canceller waits for the run's owner to record the end


def commit_run_status(
    repo: GitRepo, status: RunStatus, backend: Backend | None = None, ref: BackendRef | None = None
) -> str | None:
    """Commit a local run's status, and its chart once it ended. The dashboard pages go with them only in a
    lab with no remote: with one, they are the bot's (see `record_status`)."""
    svg = run_chart(backend, ref, status) if backend is not None and ref is not None else None
    message = f"Status of run {status.run_id} of {status.experiment}: {status.phase}\n\nWritten by tp submit --local."
    return record_status(repo, status, message, svg, pages=not repo.git("remote").strip())


def run_chart(backend: Backend, ref: BackendRef, status: RunStatus) -> str | None:
    """The chart of a finished local run (`tp submit --local`), or None when it reported nothing."""
    if status.phase not in TERMINAL or not isinstance(backend, HasMetrics):
        return None
    summary, _recent = backend.metrics(ref)
    if not summary:
        return None
    series = backend.timed_metrics(ref, summary) if isinstance(backend, HasTimedMetrics) else {}
    return chart_svg(RunKey(status.experiment, status.run_id), series, vocabulary_of(status.method))


def watch_hint(run_id: str) -> str:
    return f"watch it from another terminal: tp job status {run_id} · tp job logs -f {run_id} · tp job cancel {run_id}"


def run_local(
    repo: GitRepo,
    lab: Lab,
    request: RunRequest,
    spec: JobSpec,
    packed: SubmitRequest,
    echo: Echo,
    say: Echo,
    detach: bool = False,
    config: Mapping[str, object] | None = None,
) -> tuple[RunStatus, str | None]:
    """Register the run, then supervise it here (or in a detached owner) and commit how it ended.

    `packed` is what the local backend gets (its `LocalRun`), made from `request` and `spec`;
    `config` the configuration the job gets (`PreparedRun.config`), whose hyperparameters the status keeps.
    """
    backend = local_backend(lab)
    try:
        run_dir, ref = backend.prepare(packed)
    except BackendError as exc:
        commit_run_status(repo, refused_status(request, utc_now(), str(exc), "SubmitFailed", spec))
        raise UsageError(f"the run could not start: {exc}", hint="fix the cause, then tp rerun it") from None
    initial = submitted_status(request, spec, ref, utc_now(), config)
    write_status(lab.root, initial)  # from now on every terminal sees the run
    say(watch_hint(request.run_id))
    if detach:
        backend.spawn(run_dir, [sys.executable, "-m", __name__, str(run_dir), str(lab.root)], no_git_env())
        return initial, None
    recorded: list[tuple[RunStatus, str | None]] = []

    def record(_state: JSONObject) -> None:
        recorded.append(finish(repo, backend, initial, ref))

    try:
        backend.supervise(run_dir, echo=echo, on_end=record)
    except KeyboardInterrupt:
        # Interrupted before the supervisor took over the signals: the job never started.
        backend.cancel(ref)
        finish(repo, backend, initial, ref)
        raise
    if not recorded:  # someone else supervises this run: report what it says now
        return finish(repo, backend, initial, ref)
    return recorded[0]


def finish(repo: GitRepo, backend: RunsHere, initial: RunStatus, ref: BackendRef) -> tuple[RunStatus, str | None]:
    """The final status from what the run directory says, written and committed with the dashboard."""
    status = apply_observation(initial, backend.observe(ref), utc_now())
    summary, series = backend.metrics(ref)
    vocab = vocabulary_of(initial.method)
    status = with_metrics(status, summary, series, list(vocab.primary), vocab)
    status = with_artifacts(status, backend.artifacts(ref))
    return status, commit_run_status(repo, status, backend, ref)


def stop_local(repo: GitRepo, lab: Lab, status: RunStatus) -> str:
    """Stop a local run (its whole process group) and see its end recorded, by its owner or here."""
    ref = backend_ref(status)
    if ref is None or not backend_kind(ref.backend).runs_here:
        raise UsageError("not a local run")
    backend = local_backend(lab)
    run_dir = backend.run_dir(ref)
    backend.cancel(ref)
    deadline = time.monotonic() + STOP_WAIT
    while backend.supervised(run_dir) and time.monotonic() < deadline:
        time.sleep(0.2)
    key = RunKey(status.experiment, status.run_id)
    current = read_status(lab.root, key) or status
    if current.phase in TERMINAL:  # the owner recorded it (and committed it)
        return f"stopped: {current.phase} (status recorded by the run's owner)"
    if backend.supervised(run_dir):
        return f"asked the run to stop; it has not ended after {STOP_WAIT:.0f} s (see tp job logs {status.run_id})"
    final, commit = finish(repo, backend, current, ref)
    return f"stopped: {final.phase}" + (f" (status committed {commit[:12]})" if commit else "")


def _own(run_dir: Path, lab_root: Path) -> int:
    """The detached owner: supervise the registered run and commit its final status."""
    lab = load_lab(lab_root)
    backend = local_backend(lab)
    key = RunKey(*backend.run_key(run_dir))
    initial = read_status(lab.root, key)
    ref = backend_ref(initial) if initial is not None else None
    if initial is None or ref is None:
        plain.note(f"{run_dir}: no registered status for run {key}; nothing to own")
        return EXIT_USAGE
    repo = GitRepo(lab.root)
    backend.supervise(run_dir, on_end=lambda _state: plain.line(finish(repo, backend, initial, ref)[0].phase))
    return EXIT_OK


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) != 2:
        plain.note("usage: python -m tuneplane.runs.localrun RUN_DIR LAB_ROOT")
        return EXIT_USAGE
    return _own(Path(args[0]), Path(args[1]))


if __name__ == "__main__":
    sys.exit(main())
