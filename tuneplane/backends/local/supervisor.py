"""The supervisor: runs one local job to its end in its own session and records what happened.

`python -m tuneplane.backends.local supervise RUN_DIR` runs it detached; `tp submit --local` runs it in
the foreground. It holds `supervisor.lock` for its whole life (and, with `on_end`, until the caller has
recorded the outcome), allots GPUs, starts a per-run ingest receiver with a token kept in memory, runs
the launcher in its own process group (so timeout and cancel stop the whole group), and writes the
final state. While it lives it rewrites `heartbeat` every `TUNEPLANE_LOCAL_HEARTBEAT` seconds (default
10), so a machine that cannot take its lock (another one, on shared storage) can still tell how long ago
it was last alive. The heartbeat it publishes to the lab's remote stops once the job has ended, before
the end is recorded (the bot deletes it with the push of the end: see `tuneplane.lab.heartbeats`).

A run has attempts: `state.json` says which one is current (`attempt`, 1 for the first), the supervisor
runs that one only (its log is `run.log` for the first, `run.<N>.log` after), and when it ends appends
what became of it to `attempts` (reason from the one vocabulary, exit code, signal, the trainer's own last
exception line, the log's tail, GPUs held).
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import shlex
import signal
import subprocess
import threading
import time
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

from tuneplane.backends.local.artifacts import write_artifacts
from tuneplane.backends.local.files import (
    CANCEL,
    DB,
    GPUS_ENV,
    HEARTBEAT_ENV,
    KILL_GRACE_ENV,
    LAUNCH,
    MESSAGE_LINES,
    SUPERVISOR_LOCK,
    TERMINATION_LOG,
    attempt_of,
    beat,
    heartbeat_interval,
    log_name,
    process_start,
    read_state,
    scrubbed_env,
    signal_group,
    this_machine,
    try_lock,
    update_state,
)
from tuneplane.backends.local.gpus import GpuLease, Unschedulable, allot
from tuneplane.backends.rundir import last_exception, read_tail
from tuneplane.collector import collect_after
from tuneplane.constants import (
    ATTEMPT_ENV,
    CANCELLED,
    CONFIG_ERROR_EXIT,
    FAILED,
    JOB_ENABLED,
    JOB_ENDPOINT,
    JOB_RUN_ID,
    JOB_TOKEN,
    PENDING,
    RUNNING,
    STOPPED_ON_REQUEST,
    SUCCEEDED,
    TERMINATION_LOG_ENV,
    utc_now,
)
from tuneplane.lab.gitrepo import GitFailed
from tuneplane.lab.heartbeats import PUBLISH_ENV, REMOTE_TIMEOUT, publish, publish_interval, remote_of
from tuneplane.runtime import attempts as records
from tuneplane.runtime.launchline import SHOWN_ENV as LAUNCH_SHOWN_ENV
from tuneplane.runtime.launchline import own_launch_line
from tuneplane.runtime.reporter import plain
from tuneplane.runtime.supervise import ENGINE_SIGNALS_ALL_ENV

SIGNALS = 64  # the highest signal number on Linux: an exit code above 128 + this is no signal's
# Seconds a heartbeat push under way may take to land once the job ended, before the end is recorded:
# the bot deletes the heartbeat with the push of the end, and a beat landing after that would publish a
# run that no longer runs (a slower push, of a remote that hangs, is deleted by the bot's next push).
PUBLISH_SETTLE = 5.0

# ── the supervisor ───────────────────────────────────────────────────────────────────────────────


# Things that run beside a local job for its whole life, started after the ingest receiver with the
# job's environment (endpoint and token included) and stopped when the job has ended: each is called as
# `start(run_dir, env)` and returns its stop function. The native metrics collector registers here.
Sidecar = Callable[[Path, dict[str, str]], Callable[[], None]]
SIDECARS: list[Sidecar] = []


def supervise(
    run_dir: Path,
    echo: Callable[[str], None] | None = None,
    on_end: Callable[[dict[str, Any]], None] | None = None,
) -> dict[str, Any]:
    """Run the job of `run_dir` to its end, once: a second supervisor for the same run does nothing.

    `on_end(state)` runs after the final state is written and before the supervisor lock is released,
    so whoever waits for the lock (a canceller, `tp job logs -f`) sees the outcome fully recorded.
    """
    lock = try_lock(run_dir / SUPERVISOR_LOCK)
    if lock is None:
        return read_state(run_dir) or {}
    stop_publishing: Callable[[float], None] | None = None
    try:
        state = read_state(run_dir) or {}
        if state.get("supervisor_started"):  # this attempt has (had) its supervisor; a new one resets it
            return state
        update_state(
            run_dir,
            supervisor_started=True,
            supervisor_pid=os.getpid(),
            supervisor_start=process_start(os.getpid()),
            **this_machine(),
        )
        stop_beating = _heartbeat(run_dir, attempt_of(state))
        stop_publishing = _publish_heartbeats(run_dir, attempt_of(state))
        publishing = stop_publishing
        try:
            state = _Supervisor(run_dir, echo, ending=lambda: publishing(PUBLISH_SETTLE)).run()
        finally:
            stop_beating()
        if on_end is not None:
            on_end(state)
        return state
    finally:
        lock.close()
        if stop_publishing is not None:  # after the lock: a push under way (ended by its own timeout)
            stop_publishing(REMOTE_TIMEOUT + 5)  # never delays whoever waits for the run's end


def _heartbeat(run_dir: Path, attempt: int) -> Callable[[], None]:
    """Beat now and every interval until stopped; the last beat stays as the supervisor's last word."""
    stop = threading.Event()
    interval = heartbeat_interval()

    def loop() -> None:
        while True:
            try:
                beat(run_dir, attempt)
            except OSError:  # a full disk must not end the run; the next beat tries again
                pass
            if stop.wait(interval):
                return

    thread = threading.Thread(target=loop, name="tuneplane-heartbeat", daemon=True)
    thread.start()

    def halt() -> None:
        stop.set()
        thread.join(timeout=5)
        with contextlib.suppress(OSError):
            beat(run_dir, attempt)  # when it stopped: the run's end is recorded by now

    return halt


def _publish_heartbeats(run_dir: Path, attempt: int) -> Callable[[float], None]:
    """Publish the heartbeat to the lab's remote now and every publish interval, for the bot passes on
    other machines (see `tuneplane.lab.heartbeats`). A lab without a remote publishes nothing; a push that
    fails (no credentials, no network, a hung remote killed after its timeout) is noted once in the run's
    log and tried again on the next beat: publishing never touches the run itself. The returned stop
    waits that many seconds for a push under way."""
    interval = publish_interval()
    try:
        launch = json.loads((run_dir / LAUNCH).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return _not_publishing
    repo = remote_of(Path(launch["repo"])) if interval and launch.get("repo") else None
    if repo is None:
        return _not_publishing
    stop = threading.Event()
    log = run_dir / log_name(attempt)

    def loop() -> None:
        noted = False
        while True:
            message = (
                f"heartbeat of run {launch['run_id']} attempt {attempt} on {this_machine()['host']} at {utc_now()}"
            )
            try:
                publish(repo, "origin", str(launch["experiment"]), str(launch["run_id"]), message)
            except (GitFailed, OSError) as exc:
                if not noted:  # once: a lab without credentials would otherwise fill the log
                    noted = True
                    with contextlib.suppress(OSError), open(log, "a", encoding="utf-8") as fh:
                        fh.write(
                            f"[tuneplane] {utc_now()} the heartbeat could not be published to origin "
                            f"({exc}); the run goes on, but a bot on another machine cannot tell whether "
                            "it is alive\n"
                        )
            if stop.wait(interval):
                return

    thread = threading.Thread(target=loop, name="tuneplane-heartbeat-publish", daemon=True)
    thread.start()

    def halt(wait: float) -> None:
        stop.set()
        thread.join(timeout=wait)  # a push under way ends by its own timeout

    return halt


def _not_publishing(wait: float) -> None:
    """The stop of a run that publishes no heartbeat."""


class _Supervisor:
    def __init__(
        self, run_dir: Path, echo: Callable[[str], None] | None, ending: Callable[[], None] = lambda: None
    ) -> None:
        self.run_dir = run_dir
        self.echo = echo
        self.ending = ending  # called once the job has ended, before its end is recorded
        self.launch = json.loads((run_dir / LAUNCH).read_text(encoding="utf-8"))
        self.attempt = attempt_of(read_state(run_dir) or {})
        self.log_path = run_dir / log_name(self.attempt)
        self.gpus = 0
        self.started_at: str | None = None
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
            lease = allot(
                int(self.launch.get("gpus") or 0),
                Path(self.launch["gpu_lock_dir"]),
                self._cancelled,
                self._waiting,
            )
        except Unschedulable as exc:
            return self._finish(FAILED, "Unschedulable", str(exc), None, ended="Unschedulable")
        if lease is None:
            return self._finish(
                CANCELLED,
                reason="Cancelled",
                message="cancelled while waiting for GPUs",
                exit_code=None,
                ended=STOPPED_ON_REQUEST,
            )
        self.gpus = len(lease.ids)
        try:
            return self._run_with(lease)
        finally:
            lease.release()

    def _run_with(self, lease: GpuLease) -> dict[str, Any]:
        stop_ingest, env = self._ingest(dict(self.launch["env"]))
        env = self._child_env(env, lease.ids)
        stops = [stop_ingest, *(start(self.run_dir, dict(env)) for start in SIDECARS)]
        try:
            self.log = open(self.log_path, "a", encoding="utf-8", errors="replace")
            own = own_launch_line(self.launch.get("plan_argv") or [], self.launch["work_dir"])
            if own:  # the log starts with the person's own launch, then the platform's
                self._line(own)
                env[LAUNCH_SHOWN_ENV] = "1"  # so the launcher does not repeat it
            self._line(self._launch_line(lease.ids))
            code = self._execute(env)
            # Native metric files and whatever the SDK's finish() left in the out dir reach the
            # run's receiver before it stops: the last pass of the collector, beside the job.
            collect_after(env)
        finally:
            for stop in reversed(stops):  # sidecars first, so they can flush into the receiver
                stop()
            if self.log is not None:
                self.log.close()
                self.log = None
        artifacts_error = write_artifacts(
            Path(self.launch["out_dir"]), self.launch.get("artifacts") or [], self.launch["run_id"]
        )
        return self._outcome(code, artifacts_error)

    def _ingest(self, env: dict[str, str]) -> tuple[Callable[[], None], dict[str, str]]:
        """A receiver on 127.0.0.1 for this run only; its token lives in this process's memory."""
        try:  # lazy: the receiver loads only in the supervisor of a run that reports
            from tuneplane.ingest import mint_token, start_server
        except ImportError:
            return (lambda: None), env
        secret = secrets.token_hex(32).encode()
        url, stop = start_server(self.run_dir / DB, secret)
        token = mint_token(secret, self.launch["run_id"])
        self.secrets.append(token)
        env.update(
            {
                JOB_ENABLED: "1",
                JOB_ENDPOINT: url,
                JOB_RUN_ID: self.launch["run_id"],
                JOB_TOKEN: token,
            }
        )
        return stop, env

    def _child_env(self, contract: dict[str, str], gpus: list[str]) -> dict[str, str]:
        env = scrubbed_env(os.environ)
        env.pop(GPUS_ENV, None)
        env.pop(KILL_GRACE_ENV, None)
        inherited = env.get("PYTHONPATH")
        env.update(contract)
        if "PYTHONPATH" in contract and inherited:  # shared code first, then what this machine had
            env["PYTHONPATH"] = os.pathsep.join([contract["PYTHONPATH"], inherited])
        env["CUDA_VISIBLE_DEVICES"] = ",".join(gpus)  # empty: no GPU is visible to a 0-GPU run
        env[ATTEMPT_ENV] = str(self.attempt)  # the launcher's attempt records and resume point go by it
        env.pop(HEARTBEAT_ENV, None)
        env.pop(PUBLISH_ENV, None)
        # The job's `python` is the interpreter tp runs under, so `import tuneplane` works as it does here.
        env["PATH"] = os.pathsep.join([os.path.dirname(self.launch["argv"][0]), env.get("PATH", os.defpath)])
        env.setdefault("PYTHONUNBUFFERED", "1")  # log lines arrive as they are printed
        env[TERMINATION_LOG_ENV] = str(self.run_dir / TERMINATION_LOG)  # the launcher's one-line refusal
        env[ENGINE_SIGNALS_ALL_ENV] = "1"  # a stop goes to the run's process group: the trainer has it already
        (self.run_dir / TERMINATION_LOG).unlink(missing_ok=True)
        return env

    def _launch_line(self, gpus: list[str]) -> str:
        shown = shlex.join(self.launch.get("plan_argv") or self.launch["argv"])
        timeout = self.launch.get("timeout")
        limits = f"GPUs {','.join(gpus) or 'none'}" + (f", timeout {timeout}s" if timeout else "")
        which = f" attempt {self.attempt}" if self.attempt > 1 else ""
        return (
            f"[tuneplane] {utc_now()} run {self.launch['run_id']}{which}: launching `{shown}` "
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
        self.started_at = utc_now(millis=True)  # a run of seconds shows its duration as `12.3s`
        started = process_start(child.pid)  # the group's id with its leader's start names it for ever
        update_state(
            self.run_dir,
            phase=RUNNING,
            reason="",
            message="",
            pid=child.pid,
            pgid=child.pid,
            pgid_start=started,
            started_at=self.started_at,
        )
        pump = threading.Thread(target=self._pump, args=(child.stdout,), daemon=True)
        pump.start()
        code = self._wait(child)
        signal_group(child.pid, signal.SIGKILL, started)  # stragglers die with the job, as in a container
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
            if killed_at is None and (self._cancelled() or (deadline is not None and time.monotonic() > deadline)):
                self.timed_out = not self._cancelled()
                signal_group(child.pid, signal.SIGTERM)
                killed_at = time.monotonic()
            elif killed_at is not None and time.monotonic() - killed_at > grace:
                signal_group(child.pid, signal.SIGKILL)

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
        update_state(self.run_dir, phase=PENDING, reason="WaitingForGPUs", message=message)

    def _trap_signals(self) -> Callable[[], None]:
        """Ctrl-C or a TERM to the supervisor stops the run cleanly (recorded as Cancelled)."""
        if threading.current_thread() is not threading.main_thread():
            return lambda: None

        def stop(_signum: int, _frame: Any) -> None:
            self.stop_requested = True

        before = {sig: signal.signal(sig, stop) for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)}

        def restore() -> None:
            for sig, handler in before.items():
                signal.signal(sig, handler)

        return restore

    def _outcome(self, code: int, artifacts_error: str) -> dict[str, Any]:
        exit_code = 128 - code if code < 0 else code  # killed by signal N: the shell's 128+N
        # The launcher runs the trainer as its child and exits 128+N when signal N killed it, as a shell does
        killed_by = exit_code - 128 if 128 < exit_code <= 128 + SIGNALS else None
        last = "\n".join(self.tail)
        told = f"; last lines:\n{last}" if last.strip() else "; it printed nothing"
        if self._cancelled() and not self.timed_out:
            return self._finish(
                CANCELLED,
                reason="Cancelled",
                message="cancelled on request",
                exit_code=exit_code,
                ended=STOPPED_ON_REQUEST,
                signal=killed_by,
            )
        if self.timed_out:
            message = f"stopped after its timeout of {self.launch['timeout']} s"
            return self._finish(
                FAILED,
                "DeadlineExceeded",
                message + told,
                exit_code,
                ended="Timeout",
                signal=killed_by,
                error=message,
            )
        record = self._record()
        if record.get("reason") == "GpuOveruse":  # the launcher's GPU watchdog stopped it
            error = record.get("error", "stopped by the GPU watchdog")
            message = error + told
            return self._finish(
                FAILED, "GpuOveruse", message, exit_code, ended="GpuOveruse", signal=killed_by, error=error
            )
        if code == 0:
            warned = records.said({"warning": record.get("warning", "")})  # the GPU watchdog's, if it warned
            message = "\n".join(part for part in (artifacts_error, warned) if part)
            return self._finish(SUCCEEDED, "", message, 0, ended="Completed")
        if code == CONFIG_ERROR_EXIT and (line := self._termination_message()):
            # the launcher's one line
            return self._finish(FAILED, "ConfigError", line, exit_code, ended="ConfigError", error=line)
        reason = "ConfigError" if code == CONFIG_ERROR_EXIT else "Error"
        error = last_exception(read_tail(self.log_path))  # the trainer's own words, not its wrapper's
        said = f" ({error})" if error else ""
        return self._finish(
            FAILED,
            reason,
            f"exited with code {exit_code}{said}{told}",
            exit_code,
            ended="Signal" if killed_by else reason,
            signal=killed_by,
            error=error or f"exited with code {exit_code}",
        )

    def _record(self) -> records.AttemptRecord:
        """The launcher's end record of this attempt (node rank 0), {} when it wrote none."""
        return (records.read_all(self.run_dir).get(self.attempt) or [{}])[0]

    def _termination_message(self) -> str:
        """What the job left as its status message (as a pod's /dev/termination-log), "" if nothing."""
        try:
            with open(self.run_dir / TERMINATION_LOG, encoding="utf-8", errors="replace") as fh:
                return fh.read(4096).strip()
        except OSError:
            return ""

    def _finish(
        self,
        phase: str,
        reason: str,
        message: str,
        exit_code: int | None,
        *,
        ended: str,
        signal: int | None = None,
        error: str = "",
    ) -> dict[str, Any]:
        """Record the run's end, and this attempt's among the run's attempts (`ended`: its reason)."""
        self.ending()
        finished_at = utc_now(millis=True)
        attempt = {
            "number": self.attempt,
            "started_at": self.started_at,
            "finished_at": finished_at,
            "where": [this_machine()["host"]],
            "exit_code": exit_code,
            "signal": signal,
            "reason": ended,
            "message": error or message,
            "log_tail": list(self.tail),
            "gpus": self.gpus,
        }
        recorded = (read_state(self.run_dir) or {}).get("attempts")
        earlier = [
            a
            for a in (recorded if isinstance(recorded, list) else [])
            if isinstance(a, dict) and a.get("number") != self.attempt
        ]
        fields = dict(phase=phase, reason=reason, message=message, exit_code=exit_code, finished_at=finished_at)
        return _in_sight(self.run_dir, lambda: update_state(self.run_dir, **fields, attempts=[*earlier, attempt]))


END_WAIT = 300.0  # seconds the end of a run waits for its folder to be in sight again (a mount back)


def _in_sight(run_dir: Path, write: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    """`write()` the run's end into its folder, waiting a while when the folder is out of sight: made
    again on the disk beneath a mount, the end would be hidden once the mount is back, and recorded
    nowhere else. After `END_WAIT` the end is lost, and the run is too, once its heartbeat is stale."""
    deadline = time.monotonic() + END_WAIT
    while True:
        try:
            return write()
        except FileNotFoundError:
            if time.monotonic() > deadline:
                plain.line(f"[tuneplane] the run folder {run_dir} stayed out of sight; its end is not recorded")
                return {}
            time.sleep(1.0)
