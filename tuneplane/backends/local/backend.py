"""The local backend: a run as a supervised process group on this machine, same contract as a cluster.

A run lives in `<storage root>/runs/<user>/<experiment>/<run_id>/`:

    work/            the job package: `git archive` of the run's commit (never the working tree),
                     plus `.tuneplane/jobspec.json` for the launcher
    out/             TUNEPLANE_OUT_DIR; `out/artifacts.json` is written when the run ends
    .tuneplane-local-run  the marker, written first: nothing is written into a folder without it
    launch.json      what to start (argv, env without secrets, timeout, GPUs, artifact globs)
    state.json       what happened (phase, pids, times, exit code, message, the current attempt and
                     every ended one): `observe` reads this and the launcher's attempt records
    run.log          the launch line, then everything the job printed (`run.<N>.log` for attempt N > 1)
    attempts/        the launcher's record of each attempt (`<attempt>-<node rank>.json`), when it writes one
    heartbeat        rewritten by the supervisor while it lives: which machine, and when it last said so
    metrics.sqlite   the run's ingest store (the receiver lives as long as the run)
    cancel           present once somebody asked the run to stop

A small supervisor process (`python -m tuneplane.backends.local supervise RUN_DIR`) owns the run: it
holds `supervisor.lock` for its whole life, allots GPUs, starts a per-run ingest receiver with a token
kept in memory, runs the launcher in its own session (so timeout and cancel kill the whole group),
and records the outcome. `tp submit --local` runs the same supervisor in the foreground; the bot starts
it detached, so the bot may exit (or be killed) while the job goes on.

Submitting is idempotent: the run directory is the object, claimed under a file lock; a second submit
of the same run adopts it, and a second supervisor for the same run exits without starting anything.
A submit of the next attempt (`SubmitRequest.attempt`, the bot's retry) of a run whose newest attempt
ended starts that attempt in the same run directory and out dir, so its checkpoints are found; two
submits of one attempt adopt one supervisor, as for the first.

Whose run it is: the supervisor's file lock is authoritative on the machine that holds it only. A run
supervised by another machine (shared storage, or a CI runner's disk) is never declared ended from here:
`observe` says `Unknown` (reason `NotReachable`) with the last heartbeat it can see, and whoever can
see that machine's heartbeat decides when it is lost. A run of this machine whose supervisor is gone is
`Failed` with reason `Lost`: that is the newest attempt's own evidence.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tuneplane.backends.base import (
    BackendError,
    BackendRef,
    NotReachable,
    Observation,
    SubmitRequest,
    TimedPoint,
)
from tuneplane.backends.local import supervisor
from tuneplane.backends.local.attempts import record_cancel
from tuneplane.backends.local.files import (
    API_VERSION,
    CANCEL,
    DB,
    JOBSPEC_PATH,
    KIND,
    LAUNCH,
    MARKER,
    REF_KIND,
    SUBMIT_LOCK,
    attempt_of,
    elsewhere,
    leads_out,
    log_name,
    not_ours,
    read_heartbeat,
    read_state,
    scrubbed_env,
    signal_group,
    supervisor_alive,
    this_machine,
    update_state,
)
from tuneplane.backends.local.observe import observe_run_dir
from tuneplane.backends.rundir import follow_log, locked
from tuneplane.constants import (
    CANCELLED,
    PENDING,
    TERMINAL,
    UNKNOWN,
    utc_now,
)
from tuneplane.errors import TunePlaneError
from tuneplane.lab.fs import publish_dir, write_json
from tuneplane.lab.gitrepo import GitRepo
from tuneplane.runtime.jsonvalue import JSONObject
from tuneplane.runtime.records import FrozenRecord

if TYPE_CHECKING:  # the prepared run's types: this module reads them, never builds them
    from tuneplane.lab.load import Lab
    from tuneplane.models.jobspec import JobSpec
    from tuneplane.plan.launchplan import LaunchPlan

NOT_OURS = "NotOurs"  # Observation.reason of a directory this backend did not make
LOG_POLL = 0.2  # seconds between looks at a followed log
END_GRACE = 30.0  # seconds a supervisor may take, after recording the end, to let go of its run

# ── what the pipeline hands to this backend ──────────────────────────────────────────────────────


class LocalRun(FrozenRecord):
    """What the local backend is sent for one run: everything its supervisor needs, secrets excepted
    (`env` is the job's contract without an ingest binding). `launch.json` keeps what the supervisor
    reads (`launch`); the rest makes the run directory and its job package."""

    name: str  # the run's object name
    experiment: str
    run_id: str
    repo: str  # the lab: its commit is archived into the work dir, its remote gets the heartbeat
    commit: str
    run_dir: str
    gpu_lock_dir: str
    work_dir: str
    out_dir: str
    plugins: list[str]  # the algorithm plugins' folders in the lab: only these travel
    jobspec: JSONObject  # `.tuneplane/jobspec.json`, for the launcher
    argv: list[str]
    plan_argv: list[str]
    env: dict[str, str]
    timeout: int | None
    gpus: int
    artifacts: list[dict[str, str]]

    def launch(self) -> JSONObject:
        """`launch.json`: what the supervisor starts, read back by a supervisor of this run that may
        be of another tuneplane version, so its keys stay as they are."""
        return {
            "repo": self.repo,
            "run_id": self.run_id,
            "experiment": self.experiment,
            "work_dir": self.work_dir,
            "out_dir": self.out_dir,
            "argv": [*self.argv],
            "plan_argv": [*self.plan_argv],
            "env": {**self.env},
            "timeout": self.timeout,
            "gpus": self.gpus,
            "gpu_lock_dir": self.gpu_lock_dir,
            "artifacts": [{**a} for a in self.artifacts],
        }

    def shown(self) -> tuple[str | None, list[JSONObject]]:
        """As a document: `tp render` shows a local run's JobSpec and process instead (`runs.review`)."""
        spec: JSONObject = {
            **self.launch(),
            "commit": self.commit,
            "run_dir": self.run_dir,
            "plugins": [*self.plugins],
            "jobspec": self.jobspec,
        }
        return None, [{"apiVersion": API_VERSION, "kind": KIND, "metadata": {"name": self.name}, "spec": spec}]


def local_run(
    spec: JobSpec, plan: LaunchPlan, jobspec_doc: JSONObject, repo_root: Path, env: dict[str, str]
) -> LocalRun:
    """The run as the local backend takes it (`env` is the job's contract without an ingest binding)."""
    body = spec.spec
    return LocalRun(
        name=spec.metadata.name,
        experiment=spec.metadata.experiment,
        run_id=spec.metadata.run_id,
        repo=str(repo_root),
        commit=spec.provenance.commit,
        run_dir=body.paths.run_dir,
        gpu_lock_dir=f"{body.paths.storage_root}/.locks/gpus",
        work_dir=body.paths.work_dir,
        out_dir=body.paths.out_dir,
        plugins=[p.source or f"plugins/{p.name}" for p in body.plugins if p.capability == "algorithm"],
        jobspec=jobspec_doc,
        argv=[sys.executable, "-m", "tuneplane.launcher"],
        plan_argv=list(plan.argv),
        env=env,
        timeout=body.timeout_seconds,
        gpus=body.resources.gpus_per_node,
        artifacts=[{"kind": a.kind, "pattern": a.pattern, "format": a.format} for a in plan.artifacts],
    )


def pack(spec: JobSpec, plan: LaunchPlan, lab: Lab, lab_root: Path) -> SubmitRequest:
    """The request for a local run of the lab at `lab_root`: no namespace, no Secret (the supervisor
    mints the run's token and keeps it in memory)."""
    # lazy: the JobSpec document and the job's environment come with the render pipeline
    from tuneplane.plan.environment import job_env
    from tuneplane.render.manifests import jobspec_document

    env = job_env(spec, plan.env, gpu_watchdog=lab.config.cluster.gpu_watchdog)
    return SubmitRequest(
        run_id=spec.metadata.run_id,
        experiment=spec.metadata.experiment,
        namespace="",
        object_name=spec.metadata.name,
        payload=local_run(spec, plan, jobspec_document(spec, plan), lab_root, env),
    )


def local_run_of(request: SubmitRequest) -> LocalRun:
    """The payload as this backend's own, or a refusal: another backend's payload starts no process here."""
    if not isinstance(request.payload, LocalRun):
        raise BackendError(
            f"run {request.run_id}: the local backend takes a {KIND} (the run packed for this machine), and "
            f"was handed {type(request.payload).__name__} (a run packed for another backend); submit it to the "
            "backend it was rendered for, or submit it with --local"
        )
    return request.payload


# ── the backend ──────────────────────────────────────────────────────────────────────────────────


class LocalBackend:
    """The Backend protocol for this machine. `root` is the local storage root."""

    name = "local"

    def __init__(self, root: Path, python: str | None = None) -> None:
        self.root = Path(root)
        self.python = python or sys.executable

    # ---- submit ----
    def submit(self, request: SubmitRequest) -> BackendRef:
        """Claim and materialise the run, then start its supervisor detached; adopts a claimed run."""
        run_dir, ref = self.prepare(request)
        if not (read_state(run_dir) or {}).get("supervisor_started"):
            self._spawn(run_dir)
        return ref

    def run(self, request: SubmitRequest, echo: Callable[[str], None] | None = None) -> tuple[BackendRef, Observation]:
        """Submit and supervise in this process (`tp submit --local`): returns when the run has ended."""
        run_dir, ref = self.prepare(request)
        self.supervise(run_dir, echo=echo)
        return ref, self.observe(ref)

    def prepare(self, request: SubmitRequest) -> tuple[Path, BackendRef]:
        """Claim the run directory for `request.attempt`: make it (attempt 1), start the next attempt of
        a run whose newest one ended, or adopt the attempt already there."""
        run = local_run_of(request)
        run_dir = Path(run.run_dir)
        self._claim(run_dir, run.run_id)
        with locked(run_dir / SUBMIT_LOCK):
            state = read_state(run_dir)
            if state is None:
                self._first(run_dir, run, request.attempt)
            elif request.attempt > attempt_of(state):
                self._next(run_dir, run.run_id, state, request.attempt)
            state = read_state(run_dir) or {}
        return run_dir, BackendRef(
            backend=self.name,
            kind=REF_KIND,
            name=request.object_name,
            run_dir=str(run_dir),
            uid=str(state.get("uid", "")),
        )

    def _claim(self, run_dir: Path, run_id: str) -> None:
        """Make the run directory with its marker, or check that an existing one is ours."""
        if leads_out(run_dir, self.root):
            raise BackendError(
                f"run {run_id}: {run_dir} leads out of the storage root {self.root} through "
                "a symbolic link; the local backend writes only inside it"
            )
        try:
            run_dir.mkdir(parents=True, exist_ok=True)
            if run_dir.is_dir() and not run_dir.is_symlink() and not any(run_dir.iterdir()):
                (run_dir / MARKER).touch()  # new (ours, or a concurrent submit's before its marker)
        except OSError as exc:
            raise BackendError(f"could not make the run directory of run {run_id} ({run_dir}): {exc}") from exc
        why = not_ours(run_dir, self.root)
        if why:
            raise BackendError(
                f"run {run_id}: {run_dir} {why}; the local backend writes only into run directories it made"
            )

    def _first(self, run_dir: Path, run: LocalRun, attempt: int) -> None:
        try:
            _materialise(run_dir, run)
        except (OSError, TunePlaneError) as exc:  # git archive failed, disk full, …
            raise BackendError(f"could not prepare the job package of run {run.run_id}: {exc}") from exc
        (run_dir / log_name(attempt)).touch()
        now = utc_now()
        update_state(
            run_dir,
            run_id=run.run_id,
            experiment=run.experiment,
            phase=PENDING,
            reason="Starting",
            message="waiting for the local supervisor",
            submitted_at=now,
            attempt=attempt,
            attempt_submitted_at=now,
            uid=secrets.token_hex(8),
            supervisor_started=False,
            **this_machine(),
        )

    def _next(self, run_dir: Path, run_id: str, state: dict[str, Any], attempt: int) -> None:
        """Start attempt `attempt` in place: only once the newest attempt has ended and nobody supervises it."""
        current = attempt_of(state)
        if str(state.get("phase")) in TERMINAL:
            _let_go(run_dir)  # the ended attempt's supervisor may still be closing its run (artifacts, owner)
        if str(state.get("phase")) not in TERMINAL or supervisor_alive(run_dir):
            raise BackendError(
                f"run {run_id}: attempt {attempt} cannot start while attempt {current} has not ended "
                f"(it is {state.get('phase')}); cancel it first, or wait for its end"
            )
        (run_dir / CANCEL).unlink(missing_ok=True)  # the earlier attempt's stop request is not this one's
        (run_dir / log_name(attempt)).touch()  # the earlier attempts' logs stay as they are
        update_state(
            run_dir,
            phase=PENDING,
            reason="Starting",
            message=f"attempt {attempt}: waiting for the local supervisor",
            attempt=attempt,
            attempt_submitted_at=utc_now(),
            started_at=None,
            finished_at=None,
            exit_code=None,
            pid=None,
            pgid=None,
            supervisor_started=False,
            **this_machine(),
        )

    def _spawn(self, run_dir: Path) -> None:
        self.spawn(
            run_dir,
            [self.python, "-m", "tuneplane.backends.local", "supervise", str(run_dir)],
            scrubbed_env(os.environ, keep_storage=True),
        )

    def spawn(self, run_dir: Path, argv: list[str], env: dict[str, str]) -> None:
        """Start a supervising process in its own session, with no tie to our stdio (we may exit first).

        `argv` ends up calling `supervise(run_dir)`: the bare supervisor, or an owner that records
        the outcome somewhere else too (`tp submit --local --detach` commits the status file).
        """
        with open(run_dir / "supervisor.log", "ab") as log:
            subprocess.Popen(  # our own interpreter and module
                argv,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=log,
                start_new_session=True,
                close_fds=True,
                cwd=run_dir,
                env=env,
            )

    # ---- supervise here (`RunsHere`) ----
    def supervise(
        self,
        run_dir: Path,
        echo: Callable[[str], None] | None = None,
        on_end: Callable[[JSONObject], None] | None = None,
    ) -> None:
        """Supervise the run in this process to its end (see `supervisor.supervise`)."""
        supervisor.supervise(run_dir, echo=echo, on_end=on_end)

    def supervised(self, run_dir: Path) -> bool:
        """Whether a supervisor on this machine holds the run's lock now."""
        return supervisor_alive(run_dir)

    def run_key(self, run_dir: Path) -> tuple[str, str]:
        """The experiment and run id of the run directory's state file."""
        state = read_state(run_dir) or {}
        return str(state.get("experiment", "")), str(state.get("run_id", ""))

    def run_dir(self, ref: BackendRef) -> Path:
        """The ref's run directory, a relative one under the storage root in force now."""
        path = Path(ref.run_dir)
        return path if path.is_absolute() else self.root / path

    # ---- observe ----
    def observe(self, ref: BackendRef) -> Observation:
        """The run as its directory says; a directory that is here but that this backend did not make (a
        status naming any folder) is not read: Unknown, with why."""
        run_dir = self.run_dir(ref)
        why = not_ours(run_dir, self.root) if run_dir.is_dir() or run_dir.is_symlink() else ""
        if why:
            return Observation(UNKNOWN, reason=NOT_OURS, message=f"{run_dir} {why}; its status is not read from it")
        return observe_run_dir(run_dir, ref.uid)

    def heartbeat(self, ref: BackendRef) -> dict[str, Any] | None:
        """The supervisor's last heartbeat (`host`, `machine`, `pid`, `attempt`, `at`), None if none is
        here. The bot publishes it from the machine that runs the job, for the machines that cannot see it."""
        run_dir = self.run_dir(ref)
        return read_heartbeat(run_dir) if not not_ours(run_dir, self.root) else None

    def metrics(self, ref: BackendRef) -> tuple[dict[str, dict[str, Any]], dict[str, list[float]]]:
        """The run's ingest summary and each key's values by step (empty when nothing was reported)."""
        try:  # lazy: the receiver's store loads only when a run's metrics are read
            from tuneplane.ingest import series, summary
        except ImportError:  # an install without the receiver: no metrics, not an error
            return {}, {}
        run_dir = self.run_dir(ref)
        db = run_dir / DB
        run_id = str((read_state(run_dir) or {}).get("run_id", ""))
        if not db.exists() or not run_id:
            return {}, {}
        found = summary(db, run_id)
        return found, {k: [v for _, v in series(db, run_id, k)] for k in found}

    def timed_metrics(self, ref: BackendRef, keys: Iterable[str]) -> dict[str, list[TimedPoint]]:
        """Every point of each key with its time, from the run's own store (for its chart)."""
        from tuneplane import ingest  # lazy: only when a run's chart is drawn

        run_dir = self.run_dir(ref)
        run_id = str((read_state(run_dir) or {}).get("run_id", ""))
        return {k: ingest.timed_series(run_dir / DB, run_id, k) for k in keys}

    def artifacts(self, ref: BackendRef) -> list[dict[str, Any]]:
        try:
            data = json.loads((self.run_dir(ref) / "out" / "artifacts.json").read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return []
        return list(data.get("artifacts") or []) if isinstance(data, dict) else []

    # ---- logs ----
    def logs(self, ref: BackendRef, tail: int | None = None, follow: bool = False) -> Iterator[str]:
        run_dir = self.run_dir(ref)
        path = run_dir / log_name(attempt_of(read_state(run_dir) or {}))  # the newest attempt's
        if not path.exists():
            raise BackendError(f"run {ref.name} has no log yet ({path})")
        return follow_log(path, tail, follow, lambda: _ended(run_dir), poll=LOG_POLL)

    # ---- cancel ----
    def cancel(self, ref: BackendRef) -> None:
        """Ask the supervisor to stop the run; kill the group ourselves when no supervisor is left.

        Raises `NotReachable` for a run this machine cannot stop (its run directory is not here, is not
        one this backend made, or its supervisor runs on another machine), saying what was done."""
        run_dir = self.run_dir(ref)
        why = not_ours(run_dir, self.root)
        if why:
            raise NotReachable(
                f"run {ref.name}: its run directory {run_dir} {why}, so nothing was stopped and no file was "
                "written; cancel it on the machine that runs it (`tp job cancel` there). If that machine is "
                "gone, so is the run: the bot records it as lost once its heartbeat is stale"
            )
        (run_dir / CANCEL).touch()
        state = read_state(run_dir) or {}
        if state.get("phase") in TERMINAL:
            return
        if supervisor_alive(run_dir):  # it sees the request within its poll and signals the run once
            return
        host = elsewhere(state)
        if host:
            beat = (read_heartbeat(run_dir) or {}).get("at") or "none seen"
            raise NotReachable(
                f"run {ref.name}: wrote its stop request {run_dir / CANCEL}, but its supervisor runs on {host} "
                f"(last heartbeat: {beat}), where this machine can neither signal nor kill it; that "
                f"supervisor stops the run when it sees the request, or run `tp job cancel` on {host}"
            )
        with locked(run_dir / SUBMIT_LOCK):
            signal_group(state.get("pgid"), signal.SIGKILL, state.get("pgid_start"))
            message, now = "cancelled (no supervisor was running)", utc_now()
            update_state(
                run_dir,
                phase=CANCELLED,
                reason="Cancelled",
                finished_at=now,
                message=message,
                supervisor_started=True,
                attempts=record_cancel(state, message, now),
            )


def _let_go(run_dir: Path) -> None:
    """Wait, a bounded time, for a supervisor that recorded its run's end to release the run."""
    deadline = time.monotonic() + END_GRACE
    while supervisor_alive(run_dir) and time.monotonic() < deadline:
        time.sleep(LOG_POLL)


def _materialise(run_dir: Path, run: LocalRun) -> None:
    """The job package at the run's commit, plugins where the launcher looks, and the JobSpec."""
    work = Path(run.work_dir)
    partial = work.with_name(work.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    if work.exists():  # a submitter died after unpacking: start over from the commit
        shutil.rmtree(work)
    repo = GitRepo(Path(run.repo))
    try:
        repo.archive(run.commit, partial, exclude=("runs", "status"))
    finally:
        repo.close()
    for rel in run.plugins:
        source, target = partial / rel, partial / "tuneplane_plugins" / Path(rel).name
        if source.is_dir() and not target.exists():
            shutil.copytree(source, target, symlinks=True)
    (partial / ".tuneplane").mkdir(exist_ok=True)
    (partial / JOBSPEC_PATH).write_text(json.dumps(run.jobspec, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    publish_dir(partial, work)
    Path(run.out_dir).mkdir(parents=True, exist_ok=True)
    # `tp job logs -f` may start following before the job does: the caller touches the attempt's log
    write_json(run_dir / LAUNCH, run.launch())


def _ended(run_dir: Path) -> bool:
    """The run is over, or nobody is left to run it (a killed supervisor never writes its end)."""
    state = read_state(run_dir) or {}
    if state.get("phase") in TERMINAL:
        return True
    return bool(state.get("supervisor_started")) and not supervisor_alive(run_dir)
