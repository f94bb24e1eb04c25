"""The local backend: a run as a supervised process group on this machine, same contract as a cluster.

A run lives in `<storage root>/runs/<user>/<experiment>/<run_id>/`:

    work/            the job package: `git archive` of the run's commit (never the working tree),
                     plus `.tuneplane/jobspec.json` for the launcher
    out/             TUNEPLANE_OUT_DIR; `out/artifacts.json` is written when the run ends
    launch.json      what to start (argv, env without secrets, timeout, GPUs, artifact globs)
    state.json       what happened (phase, pids, times, exit code, message): `observe` reads only this
    run.log          the launch line, then everything the job printed
    metrics.sqlite   the run's ingest store (the receiver lives as long as the run)
    cancel           present once somebody asked the run to stop

A small supervisor process (`python -m tuneplane.backends.local supervise RUN_DIR`) owns the run: it
holds `supervisor.lock` for its whole life, allots GPUs, starts a per-run ingest receiver with a token
kept in memory, runs the launcher in its own session (so timeout and cancel kill the whole group),
and records the outcome. `tp submit --local` runs the same supervisor in the foreground; the bot starts
it detached, so the bot may exit (or be killed) while the job goes on.

Submitting is idempotent: the run directory is the object, claimed under a file lock; a second submit
of the same run adopts it, and a second supervisor for the same run exits without starting anything.
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
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from tuneplane.backends.base import BackendError, BackendRef, Observation, SubmitRequest
from tuneplane.backends.local.files import (
    API_VERSION,
    CANCEL,
    DB,
    JOBSPEC_PATH,
    KIND,
    LAUNCH,
    LOG,
    REF_KIND,
    START_GRACE,
    SUBMIT_LOCK,
    read_state,
    scrubbed_env,
    signal_group,
    supervisor_alive,
    update_state,
)
from tuneplane.backends.local.supervisor import supervise
from tuneplane.backends.rundir import follow_log, locked
from tuneplane.constants import CANCELLED, FAILED, PENDING, TERMINAL, epoch_of, observed_phase, utc_now
from tuneplane.errors import TunePlaneError
from tuneplane.lab.fs import publish_dir, write_json
from tuneplane.lab.gitrepo import GitRepo

LOG_POLL = 0.2  # seconds between looks at a followed log

# ── what the pipeline hands to this backend ──────────────────────────────────────────────────────


def local_manifest(
    spec: Any, plan: Any, jobspec_doc: dict[str, Any], repo_root: Path, env: dict[str, str]
) -> dict[str, Any]:
    """The `LocalRun` "manifest": everything the supervisor needs, secrets excepted.

    `spec` is the JobSpec, `plan` its LaunchPlan, `env` the contract without an ingest binding.
    """
    body = spec.spec
    return {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "metadata": {"name": spec.metadata.name},
        "spec": {
            "experiment": spec.metadata.experiment,
            "run_id": spec.metadata.run_id,
            "repo": str(repo_root),
            "commit": spec.provenance.commit,
            "run_dir": body.paths.run_dir,
            "gpu_lock_dir": f"{body.paths.storage_root}/.locks/gpus",
            "work_dir": body.paths.work_dir,
            "out_dir": body.paths.out_dir,
            "plugins": [p.source or f"plugins/{p.name}" for p in body.plugins
                        if p.capability == "algorithm"],  # only these travel
            "jobspec": jobspec_doc,
            "argv": [sys.executable, "-m", "tuneplane.launcher"],
            "plan_argv": list(plan.argv),
            "env": env,
            "timeout": body.timeout_seconds,
            "gpus": body.resources.gpus_per_node,
            "artifacts": [{"kind": a.kind, "pattern": a.pattern, "format": a.format} for a in plan.artifacts],
        },
    }



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

    def run(
        self, request: SubmitRequest, echo: Callable[[str], None] | None = None
    ) -> tuple[BackendRef, Observation]:
        """Submit and supervise in this process (`tp submit --local`): returns when the run has ended."""
        run_dir, ref = self.prepare(request)
        supervise(run_dir, echo=echo)
        return ref, self.observe(ref)

    def prepare(self, request: SubmitRequest) -> tuple[Path, BackendRef]:
        spec = _local_spec(request)
        run_dir = Path(spec["run_dir"])
        run_dir.mkdir(parents=True, exist_ok=True)
        with locked(run_dir / SUBMIT_LOCK):
            state = read_state(run_dir)
            if state is None:
                try:
                    _materialise(run_dir, spec)
                except (OSError, TunePlaneError) as exc:  # git archive failed, disk full, …
                    raise BackendError(
                        f"could not prepare the job package of run {spec['run_id']}: {exc}"
                    ) from exc
                update_state(
                    run_dir,
                    run_id=spec["run_id"],
                    experiment=spec["experiment"],
                    phase=PENDING,
                    reason="Starting",
                    message="waiting for the local supervisor",
                    submitted_at=utc_now(),
                    uid=secrets.token_hex(8),
                    supervisor_started=False,
                )
                state = read_state(run_dir) or {}
        return run_dir, BackendRef(
            backend=self.name,
            kind=REF_KIND,
            name=request.object_name,
            namespace=str(run_dir),
            uid=str(state.get("uid", "")),
        )

    def _spawn(self, run_dir: Path) -> None:
        self.spawn(run_dir, [self.python, "-m", "tuneplane.backends.local", "supervise", str(run_dir)],
                   scrubbed_env(os.environ, keep_storage=True))

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

    def run_dir(self, ref: BackendRef) -> Path:
        """A local ref's namespace is its run directory: found whatever storage root is in force now."""
        path = Path(ref.namespace)
        return path if path.is_absolute() else self.root / path

    # ---- observe ----
    def observe(self, ref: BackendRef) -> Observation:
        run_dir = self.run_dir(ref)
        state = read_state(run_dir)
        if state is None:
            return Observation(
                FAILED,
                reason="Lost",
                message=f"the run directory {run_dir} has no state (deleted, or another storage root?)",
            )
        if ref.uid and state.get("uid") and state["uid"] != ref.uid:
            return Observation(
                FAILED, reason="Replaced", message=f"{run_dir} now holds another submission of this run"
            )
        phase = str(state.get("phase", PENDING))
        if phase not in TERMINAL and not supervisor_alive(run_dir):
            lost = _lost(run_dir, state)
            if lost is not None:
                return lost
        return Observation(
            observed_phase(phase),
            reason=str(state.get("reason", "")),
            message=str(state.get("message", "")),
            started_at=state.get("started_at"),
            finished_at=state.get("finished_at"),
            exit_code=state.get("exit_code"),
        )

    def metrics(self, ref: BackendRef) -> tuple[dict[str, dict[str, Any]], dict[str, list[float]]]:
        """The run's ingest summary and each key's recent values (empty when nothing was reported)."""
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
        return found, {k: [v for _, v in series(db, run_id, k)[-20:]] for k in found}

    def artifacts(self, ref: BackendRef) -> list[dict[str, Any]]:
        try:
            data = json.loads((self.run_dir(ref) / "out" / "artifacts.json").read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return []
        return list(data.get("artifacts") or []) if isinstance(data, dict) else []

    # ---- logs ----
    def logs(self, ref: BackendRef, tail: int | None = None, follow: bool = False) -> Iterator[str]:
        run_dir = self.run_dir(ref)
        path = run_dir / LOG
        if not path.exists():
            raise BackendError(f"run {ref.name} has no log yet ({path})")
        return follow_log(path, tail, follow, lambda: _ended(run_dir), poll=LOG_POLL)

    # ---- cancel ----
    def cancel(self, ref: BackendRef) -> None:
        """Ask the supervisor to stop the run; kill the group ourselves when no supervisor is left."""
        run_dir = self.run_dir(ref)
        if not run_dir.exists():
            return
        (run_dir / CANCEL).touch()
        state = read_state(run_dir) or {}
        if state.get("phase") in TERMINAL:
            return
        if supervisor_alive(run_dir):
            signal_group(state.get("pgid"), signal.SIGTERM)  # faster than waiting for the next poll
            return
        with locked(run_dir / SUBMIT_LOCK):
            signal_group(state.get("pgid"), signal.SIGKILL)
            update_state(
                run_dir,
                phase=CANCELLED,
                reason="Cancelled",
                finished_at=utc_now(),
                message="cancelled (no supervisor was running)",
                supervisor_started=True,
            )


def _local_spec(request: SubmitRequest) -> dict[str, Any]:
    for manifest in request.manifests:
        if manifest.get("apiVersion") == API_VERSION and manifest.get("kind") == KIND:
            return dict(manifest["spec"])
    raise BackendError(
        f"run {request.run_id}: the local backend needs a {KIND} manifest "
        "(render the run for the local backend)"
    )


def _lost(run_dir: Path, state: dict[str, Any]) -> Observation | None:
    """A non-terminal run nobody supervises: still starting, or lost with its supervisor."""
    if not state.get("supervisor_started"):
        submitted = epoch_of(state.get("submitted_at"))
        if submitted is None or time.time() - submitted < START_GRACE:
            return None
        return Observation(
            FAILED,
            reason="Lost",
            finished_at=utc_now(),
            message=f"the local supervisor never started; see {run_dir / 'supervisor.log'}",
        )
    return Observation(
        FAILED,
        reason="Lost",
        started_at=state.get("started_at"),
        finished_at=utc_now(),
        message="the local supervisor stopped without recording how the run ended "
        f"(machine restarted or process killed); see {run_dir / LOG}",
    )




def _materialise(run_dir: Path, spec: dict[str, Any]) -> None:
    """The job package at the run's commit, plugins where the launcher looks, and the JobSpec."""
    work = Path(spec["work_dir"])
    partial = work.with_name(work.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    if work.exists():  # a submitter died after unpacking: start over from the commit
        shutil.rmtree(work)
    repo = GitRepo(Path(spec["repo"]))
    try:
        repo.archive(spec["commit"], partial, exclude=("runs", "status"))
    finally:
        repo.close()
    for rel in spec.get("plugins") or []:
        source, target = partial / rel, partial / "tuneplane_plugins" / Path(rel).name
        if source.is_dir() and not target.exists():
            shutil.copytree(source, target, symlinks=True)
    (partial / ".tuneplane").mkdir(exist_ok=True)
    (partial / JOBSPEC_PATH).write_text(
        json.dumps(spec["jobspec"], indent=2, sort_keys=True) + "\n", encoding="utf-8"
    )
    publish_dir(partial, work)
    Path(spec["out_dir"]).mkdir(parents=True, exist_ok=True)
    (run_dir / LOG).touch()  # `tp job logs -f` may start following before the job does
    launch = {
        k: spec[k]
        for k in (
            "run_id",
            "experiment",
            "work_dir",
            "out_dir",
            "argv",
            "plan_argv",
            "env",
            "timeout",
            "gpus",
            "gpu_lock_dir",
            "artifacts",
        )
    }
    write_json(run_dir / LAUNCH, launch)


def _ended(run_dir: Path) -> bool:
    """The run is over, or nobody is left to run it (a killed supervisor never writes its end)."""
    state = read_state(run_dir) or {}
    if state.get("phase") in TERMINAL:
        return True
    return bool(state.get("supervisor_started")) and not supervisor_alive(run_dir)
