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

A small supervisor process (`python -m tuneplane.backends.local.backend supervise RUN_DIR`) owns the run: it
holds `supervisor.lock` for its whole life, allots GPUs, starts a per-run ingest receiver with a token
kept in memory, runs the launcher in its own session (so timeout and cancel kill the whole group),
and records the outcome. `tp submit --local` runs the same supervisor in the foreground; the bot starts
it detached, so the bot may exit (or be killed) while the job goes on.

Submitting is idempotent: the run directory is the object, claimed under a file lock; a second submit
of the same run adopts it, and a second supervisor for the same run exits without starting anything.
"""

from __future__ import annotations

import calendar
import contextlib
import fcntl
import glob
import json
import os
import re
import secrets
import shlex
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from tuneplane.backends.base import BackendError, BackendRef, Observation, SubmitRequest
from tuneplane.collector import collect_after
from tuneplane.constants import CONFIG_ERROR_EXIT, TERMINAL, observed_phase, utc_now
from tuneplane.errors import TunePlaneError
from tuneplane.lab.fs import write_json
from tuneplane.lab.gitrepo import GitRepo

API_VERSION = "tuneplane.dev/local/v1"
KIND = "LocalRun"
REF_KIND = "Process"
LAUNCH, STATE, LOG, CANCEL = "launch.json", "state.json", "run.log", "cancel"
TERMINATION_LOG = "termination-log"  # the job's one-line status message, as a pod's /dev/termination-log
SUPERVISOR_LOCK, SUBMIT_LOCK, DB = "supervisor.lock", ".submit.lock", "metrics.sqlite"
JOBSPEC_PATH = ".tuneplane/jobspec.json"
ARTIFACTS_VERSION = "tuneplane/artifacts/v1"
MESSAGE_LINES = 20  # log lines quoted in a failed run's message
START_GRACE = 60.0  # seconds a spawned supervisor may take to show up before the run counts as lost
KILL_GRACE_ENV = "TUNEPLANE_LOCAL_KILL_GRACE"  # seconds between SIGTERM and SIGKILL (default 10)
GPUS_ENV = "TUNEPLANE_LOCAL_GPUS"  # this machine's GPU ids ("0,1,2,3") or a count ("4")
_STEP = re.compile(r"(?:step|checkpoint|ckpt|epoch|iter)[-_]?(\d+)", re.IGNORECASE)
_SCRUB = ("TUNEPLANE_", "GIT_", "STARFORGE_", "FORGE_")  # never inherited: the contract sets its own




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


# ── small file helpers ───────────────────────────────────────────────────────────────────────────



def read_state(run_dir: Path) -> dict[str, Any] | None:
    try:
        data = json.loads((run_dir / STATE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def _update_state(run_dir: Path, **changes: Any) -> dict[str, Any]:
    state = read_state(run_dir) or {}
    state.update(changes)
    write_json(run_dir / STATE, state)
    return state


@contextlib.contextmanager
def _flock(path: Path) -> Iterator[None]:
    """An exclusive lock on `path`, held for the block (serialises submitters of one run)."""
    with open(path, "a+") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def _try_lock(path: Path) -> IO[str] | None:
    """Take `path`'s lock without waiting; the open file is the lock (None: someone holds it)."""
    fh = open(path, "a+")  # the caller keeps it open for as long as it holds the lock
    try:
        fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        fh.close()
        return None
    return fh


def supervisor_alive(run_dir: Path) -> bool:
    lock = _try_lock(run_dir / SUPERVISOR_LOCK)
    if lock is None:
        return True
    lock.close()
    return False


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
        with _flock(run_dir / SUBMIT_LOCK):
            state = read_state(run_dir)
            if state is None:
                try:
                    _materialise(run_dir, spec)
                except (OSError, TunePlaneError) as exc:  # git archive failed, disk full, …
                    raise BackendError(
                        f"could not prepare the job package of run {spec['run_id']}: {exc}"
                    ) from exc
                _update_state(
                    run_dir,
                    run_id=spec["run_id"],
                    experiment=spec["experiment"],
                    phase="Pending",
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
        """Start the supervisor in its own session, with no tie to our stdio (we may exit first)."""
        with open(run_dir / "supervisor.log", "ab") as log:
            subprocess.Popen(  # our own interpreter and module
                [self.python, "-m", "tuneplane.backends.local.backend", "supervise", str(run_dir)],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=log,
                start_new_session=True,
                close_fds=True,
                cwd=run_dir,
                env=_scrubbed_env(os.environ, keep_storage=True),
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
                "Failed",
                reason="Lost",
                message=f"the run directory {run_dir} has no state (deleted, or another storage root?)",
            )
        if ref.uid and state.get("uid") and state["uid"] != ref.uid:
            return Observation(
                "Failed", reason="Replaced", message=f"{run_dir} now holds another submission of this run"
            )
        phase = str(state.get("phase", "Pending"))
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
        try:
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
        return _read_log(run_dir, path, tail, follow)

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
            _signal_group(state.get("pgid"), signal.SIGTERM)  # faster than waiting for the next poll
            return
        with _flock(run_dir / SUBMIT_LOCK):
            _signal_group(state.get("pgid"), signal.SIGKILL)
            _update_state(
                run_dir,
                phase="Cancelled",
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
        submitted = _epoch(state.get("submitted_at"))
        if submitted is None or time.time() - submitted < START_GRACE:
            return None
        return Observation(
            "Failed",
            reason="Lost",
            finished_at=utc_now(),
            message=f"the local supervisor never started; see {run_dir / 'supervisor.log'}",
        )
    return Observation(
        "Failed",
        reason="Lost",
        started_at=state.get("started_at"),
        finished_at=utc_now(),
        message="the local supervisor stopped without recording how the run ended "
        f"(machine restarted or process killed); see {run_dir / LOG}",
    )


def _epoch(value: Any) -> float | None:

    try:
        return float(calendar.timegm(time.strptime(str(value), "%Y-%m-%dT%H:%M:%SZ")))
    except (TypeError, ValueError):
        return None


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
    os.rename(partial, work)
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


def _signal_group(pgid: Any, sig: int) -> None:
    if isinstance(pgid, int) and pgid > 1:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pgid, sig)


def _scrubbed_env(base: Any, keep_storage: bool = False) -> dict[str, str]:
    env = {k: v for k, v in base.items() if not k.startswith(_SCRUB)}
    if keep_storage and "TUNEPLANE_STORAGE_ROOT" in base:
        env["TUNEPLANE_STORAGE_ROOT"] = base["TUNEPLANE_STORAGE_ROOT"]
    for key in (GPUS_ENV, KILL_GRACE_ENV):
        if key in base:
            env[key] = base[key]
    return env


def _read_log(run_dir: Path, path: Path, tail: int | None, follow: bool) -> Iterator[str]:
    with open(path, encoding="utf-8", errors="replace") as fh:
        lines = fh.readlines()
        for line in lines[-tail:] if tail is not None and tail >= 0 else lines:
            yield line.rstrip("\n")
        if not follow:
            return
        pending = ""
        while True:
            chunk = fh.readline()
            if chunk:
                pending += chunk
                if pending.endswith("\n"):
                    yield pending.rstrip("\n")
                    pending = ""
                continue
            if (read_state(run_dir) or {}).get("phase") in TERMINAL:
                if pending:
                    yield pending
                return
            time.sleep(0.2)


# ── GPUs ─────────────────────────────────────────────────────────────────────────────────────────


def local_gpus(env: Any = None) -> list[str]:
    """This machine's GPU ids: $TUNEPLANE_LOCAL_GPUS, else $CUDA_VISIBLE_DEVICES, else nvidia-smi."""
    env = os.environ if env is None else env
    text = str(env.get(GPUS_ENV, "")).strip()
    if text:
        return (
            [str(i) for i in range(int(text))]
            if text.isdigit() and "," not in text
            else [p.strip() for p in text.split(",") if p.strip()]
        )
    visible = env.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        return [p.strip() for p in str(visible).split(",") if p.strip() and p.strip() != "-1"]
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=index", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=10,
            check=True,
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    return [line.strip() for line in out.splitlines() if line.strip()]


class Unschedulable(Exception):
    """The run asks for more GPUs than this machine has."""


@dataclass
class _GpuLease:
    ids: list[str] = field(default_factory=list)
    handles: list[IO[str]] = field(default_factory=list)

    def release(self) -> None:
        for fh in self.handles:
            fh.close()
        self.handles.clear()


def _allot(
    count: int, lock_dir: Path, stop: Callable[[], bool], waiting: Callable[[str], None]
) -> _GpuLease | None:
    """Lock `count` free GPUs (one lock file per device, shared by every local run on this machine)."""
    if count <= 0:
        return _GpuLease()
    devices = local_gpus()
    if count > len(devices):
        raise Unschedulable(
            f"the run needs {count} GPU(s); this machine has {len(devices)} "
            f"({GPUS_ENV}={','.join(devices) or 'none'})"
        )
    lock_dir.mkdir(parents=True, exist_ok=True)
    told = False
    while not stop():
        lease = _GpuLease()
        for device in devices:
            fh = _try_lock(lock_dir / f"gpu-{device}.lock")
            if fh is not None:
                lease.ids.append(device)
                lease.handles.append(fh)
                if len(lease.ids) == count:
                    return lease
        lease.release()
        if not told:
            waiting(f"waiting for {count} free GPU(s) of {len(devices)}: other local runs hold them")
            told = True
        time.sleep(0.5)
    return None


# ── the supervisor ───────────────────────────────────────────────────────────────────────────────


def supervise(run_dir: Path, echo: Callable[[str], None] | None = None) -> dict[str, Any]:
    """Run the job of `run_dir` to its end, once: a second supervisor for the same run does nothing."""
    lock = _try_lock(run_dir / SUPERVISOR_LOCK)
    if lock is None:
        return read_state(run_dir) or {}
    try:
        state = read_state(run_dir) or {}
        if state.get("supervisor_started"):
            return state
        _update_state(run_dir, supervisor_started=True, supervisor_pid=os.getpid())
        return _Supervisor(run_dir, echo).run()
    finally:
        lock.close()


class _Supervisor:
    def __init__(self, run_dir: Path, echo: Callable[[str], None] | None) -> None:
        self.run_dir = run_dir
        self.echo = echo
        self.launch = json.loads((run_dir / LAUNCH).read_text(encoding="utf-8"))
        self.tail: deque[str] = deque(maxlen=MESSAGE_LINES)
        self.secrets: list[str] = []
        self.stop_requested = False
        self.timed_out = False
        self.log: IO[str] | None = None

    def run(self) -> dict[str, Any]:
        restore = self._trap_signals()
        try:
            return self._allot_and_run()
        finally:
            restore()

    def _allot_and_run(self) -> dict[str, Any]:
        try:
            lease = _allot(
                int(self.launch.get("gpus") or 0),
                Path(self.launch["gpu_lock_dir"]),
                self._cancelled,
                self._waiting,
            )
        except Unschedulable as exc:
            return self._finish("Failed", "Unschedulable", str(exc), None)
        if lease is None:
            return self._finish("Cancelled", "Cancelled", "cancelled while waiting for GPUs", None)
        try:
            return self._run_with(lease)
        finally:
            lease.release()

    def _run_with(self, lease: _GpuLease) -> dict[str, Any]:
        stop_ingest, env = self._ingest(dict(self.launch["env"]))
        env = self._child_env(env, lease.ids)
        try:
            self.log = open(self.run_dir / LOG, "a", encoding="utf-8", errors="replace")
            self._line(self._launch_line(lease.ids))
            code = self._execute(env)
            # Native metric files and whatever the SDK's finish() left in the out dir reach the
            # run's receiver before it stops: the last pass of the collector, beside the job.
            collect_after(env)
        finally:
            stop_ingest()
            if self.log is not None:
                self.log.close()
                self.log = None
        artifacts_error = _write_artifacts(
            Path(self.launch["out_dir"]), self.launch.get("artifacts") or [], self.launch["run_id"]
        )
        return self._outcome(code, artifacts_error)

    def _ingest(self, env: dict[str, str]) -> tuple[Callable[[], None], dict[str, str]]:
        """A receiver on 127.0.0.1 for this run only; its token lives in this process's memory."""
        try:
            from tuneplane.ingest import mint_token, start_server
        except ImportError:
            return (lambda: None), env
        secret = secrets.token_hex(32).encode()
        url, stop = start_server(self.run_dir / DB, secret)
        token = mint_token(secret, self.launch["run_id"])
        self.secrets.append(token)
        env.update(
            {
                "TUNEPLANE_JOB_ENABLED": "1",
                "TUNEPLANE_JOB_ENDPOINT": url,
                "TUNEPLANE_JOB_RUN_ID": self.launch["run_id"],
                "TUNEPLANE_JOB_TOKEN": token,
            }
        )
        return stop, env

    def _child_env(self, contract: dict[str, str], gpus: list[str]) -> dict[str, str]:
        env = _scrubbed_env(os.environ)
        env.pop(GPUS_ENV, None)
        env.pop(KILL_GRACE_ENV, None)
        inherited = env.get("PYTHONPATH")
        env.update(contract)
        if "PYTHONPATH" in contract and inherited:  # shared code first, then what this machine had
            env["PYTHONPATH"] = os.pathsep.join([contract["PYTHONPATH"], inherited])
        env["CUDA_VISIBLE_DEVICES"] = ",".join(gpus)  # empty: no GPU is visible to a 0-GPU run
        # The job's `python` is the interpreter tp runs under, so `import tuneplane` works as it does here.
        env["PATH"] = os.pathsep.join([os.path.dirname(self.launch["argv"][0]), env.get("PATH", os.defpath)])
        env.setdefault("PYTHONUNBUFFERED", "1")  # log lines arrive as they are printed
        env["TUNEPLANE_TERMINATION_LOG"] = str(self.run_dir / TERMINATION_LOG)  # the launcher's one-line refusal
        (self.run_dir / TERMINATION_LOG).unlink(missing_ok=True)
        return env

    def _launch_line(self, gpus: list[str]) -> str:
        shown = shlex.join(self.launch.get("plan_argv") or self.launch["argv"])
        timeout = self.launch.get("timeout")
        limits = f"GPUs {','.join(gpus) or 'none'}" + (f", timeout {timeout}s" if timeout else "")
        return (
            f"[tuneplane] {utc_now()} run {self.launch['run_id']}: launching `{shown}` "
            f"through tuneplane.launcher in {self.launch['work_dir']} ({limits})"
        )

    def _execute(self, env: dict[str, str]) -> int:
        try:
            child = subprocess.Popen(
                self.launch["argv"],
                cwd=self.launch["work_dir"],
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        except OSError as exc:
            self._line(f"[tuneplane] cannot start the launcher: {exc}")
            return 127
        _update_state(
            self.run_dir,
            phase="Running",
            reason="",
            message="",
            pid=child.pid,
            pgid=child.pid,
            started_at=utc_now(),
        )
        pump = threading.Thread(target=self._pump, args=(child.stdout,), daemon=True)
        pump.start()
        code = self._wait(child)
        _signal_group(child.pid, signal.SIGKILL)  # stragglers die with the job, as in a container
        pump.join(timeout=10)
        return code

    def _wait(self, child: subprocess.Popen[bytes]) -> int:
        timeout = self.launch.get("timeout")
        deadline = time.monotonic() + float(timeout) if timeout else None
        killed_at: float | None = None
        grace = float(os.environ.get(KILL_GRACE_ENV) or 10)
        while True:
            try:
                return child.wait(timeout=0.2)
            except subprocess.TimeoutExpired:
                pass
            if killed_at is None and (
                self._cancelled() or (deadline is not None and time.monotonic() > deadline)
            ):
                self.timed_out = not self._cancelled()
                _signal_group(child.pid, signal.SIGTERM)
                killed_at = time.monotonic()
            elif killed_at is not None and time.monotonic() - killed_at > grace:
                _signal_group(child.pid, signal.SIGKILL)

    def _pump(self, stream: IO[bytes]) -> None:
        for raw in iter(stream.readline, b""):
            self._line(raw.decode("utf-8", "replace").rstrip("\n"), job=True)

    def _line(self, text: str, job: bool = False) -> None:
        for secret in self.secrets:
            text = text.replace(secret, "[redacted]")
        if job:
            self.tail.append(text)
        if self.log is not None:
            self.log.write(text + "\n")
            self.log.flush()
        if self.echo is not None:
            self.echo(text)

    def _cancelled(self) -> bool:
        return self.stop_requested or (self.run_dir / CANCEL).exists()

    def _waiting(self, message: str) -> None:
        _update_state(self.run_dir, phase="Pending", reason="WaitingForGPUs", message=message)

    def _trap_signals(self) -> Callable[[], None]:
        """Ctrl-C or a TERM to the supervisor stops the run cleanly (recorded as Cancelled)."""
        if threading.current_thread() is not threading.main_thread():
            return lambda: None

        def stop(signum: int, frame: Any) -> None:
            self.stop_requested = True

        before = {sig: signal.signal(sig, stop) for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)}

        def restore() -> None:
            for sig, handler in before.items():
                signal.signal(sig, handler)

        return restore

    def _outcome(self, code: int, artifacts_error: str) -> dict[str, Any]:
        exit_code = 128 - code if code < 0 else code  # killed by signal N: the shell's 128+N
        last = "\n".join(self.tail)
        if self._cancelled() and not self.timed_out:
            return self._finish("Cancelled", "Cancelled", "cancelled on request", exit_code)
        if self.timed_out:
            return self._finish(
                "Failed",
                "DeadlineExceeded",
                f"stopped after its timeout of {self.launch['timeout']} s; last lines:\n{last}",
                exit_code,
            )
        if code == 0:
            return self._finish("Succeeded", "", artifacts_error, 0)
        if code == CONFIG_ERROR_EXIT and (line := self._termination_message()):
            return self._finish("Failed", "ConfigError", line, exit_code)  # the launcher's one line
        reason = "ConfigError" if code == CONFIG_ERROR_EXIT else "Error"
        return self._finish("Failed", reason, f"exited with code {exit_code}; last lines:\n{last}", exit_code)

    def _termination_message(self) -> str:
        """What the job left as its status message (as a pod's /dev/termination-log), "" if nothing."""
        try:
            with open(self.run_dir / TERMINATION_LOG, encoding="utf-8", errors="replace") as fh:
                return fh.read(4096).strip()
        except OSError:
            return ""

    def _finish(self, phase: str, reason: str, message: str, exit_code: int | None) -> dict[str, Any]:
        return _update_state(
            self.run_dir,
            phase=phase,
            reason=reason,
            message=message,
            exit_code=exit_code,
            finished_at=utc_now(),
        )


# ── artifacts ────────────────────────────────────────────────────────────────────────────────────


def collect_artifacts(out_dir: Path, globs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Matches of the recipe's globs that really are inside the out dir (symlinks out are dropped)."""
    root = os.path.realpath(out_dir)
    found: list[dict[str, Any]] = []
    seen: set[str] = set()
    for item in globs:
        for match in sorted(glob.glob(os.path.join(glob.escape(str(out_dir)), item["pattern"]))):
            real = os.path.realpath(match)
            rel = os.path.relpath(match, out_dir)
            if rel in seen or not _inside(real, root) or rel == "artifacts.json":
                continue
            seen.add(rel)
            entry: dict[str, Any] = {
                "kind": item["kind"],
                "path": rel.replace(os.sep, "/"),
                "format": item.get("format") or _format_of(real),
                "size_bytes": _size(real, root),
            }
            step = _STEP.search(os.path.basename(match))
            if step:
                entry["step"] = int(step.group(1))
            found.append(entry)
    return found


def _write_artifacts(out_dir: Path, globs: list[dict[str, Any]], run_id: str) -> str:
    try:
        items = collect_artifacts(out_dir, globs)
        write_json(
            out_dir / "artifacts.json", {"version": ARTIFACTS_VERSION, "run_id": run_id, "artifacts": items}
        )
    except OSError as exc:
        return f"could not list artifacts: {exc}"
    return ""


def _inside(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip(os.sep) + os.sep)


def _format_of(path: str) -> str:
    if os.path.isdir(path):
        return "directory"
    suffix = os.path.splitext(path)[1].lstrip(".")
    return suffix or "file"


def _size(path: str, root: str) -> int:
    if os.path.isfile(path):
        return os.path.getsize(path)
    total = 0
    for base, _dirs, files in os.walk(path):
        for name in files:
            full = os.path.join(base, name)
            real = os.path.realpath(full)
            if _inside(real, root) and os.path.isfile(real):
                total += os.path.getsize(real)
    return total


# ── `python -m tuneplane.backends.local.backend supervise RUN_DIR` ───────────────────────────────────────


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) != 2 or args[0] != "supervise":
        print("usage: python -m tuneplane.backends.local.backend supervise RUN_DIR", file=sys.stderr)
        return 2
    state = supervise(Path(args[1]))
    return 0 if state.get("phase") in TERMINAL else 1


if __name__ == "__main__":
    sys.exit(main())
