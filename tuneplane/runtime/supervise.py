"""Watching the trainer as a child of the node's launcher, and recording the attempt it is part of.

Standard library only (it runs in training images). The launcher runs the trainer as a child whose
output it copies through and remembers, so that however it ends (an exit code, a signal from the
engine, a rank's refusal) the attempt record says so; it passes TERM, INT and HUP on, once each, where
the engine signalled it alone (a pod's PID 1), and the engine's warning before a time limit (USR1) only
to the trainer's processes that installed a handler for it.
Beside the trainer runs the GPU watchdog (`tuneplane.runtime.gpuwatch`): its finding goes into the
record, and when the lab's policy had it stop the trainer, the attempt's reason is `GpuOveruse`.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from types import FrameType
from typing import Any

import tuneplane.runtime.attempts as attempts
from tuneplane.constants import NODE_RANK_ENV, utc_now
from tuneplane.runtime.gpuwatch import OVERUSE_REASON, Settings, TreeStop, Watchdog, proc_field, process_tree
from tuneplane.runtime.pinned import LAUNCH_ERROR_ENV, termination_log
from tuneplane.runtime.records import FrozenRecord, Record

FORWARDED = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)  # passed on to the trainer, and recorded
# Set by an engine that signals every process of the job itself (the local backend signals the run's
# process group): the trainer has each stop already, and a second copy from this launcher would be taken
# as "stop now" by a wrapper (accelerate kills its ranks before they flush what they hold).
ENGINE_SIGNALS_ALL_ENV = "TUNEPLANE_ENGINE_SIGNALS_ALL"
WARNING_SIGNAL = signal.SIGUSR1  # the engine's "time is nearly up": only to processes that catch it
LIMIT_WARNING_FILE_ENV = "TUNEPLANE_LIMIT_WARNING_FILE"  # a file the engine writes when the warning comes
WARNING_POLL_SECONDS = 1.0


class Outcome(FrozenRecord):
    """How the trainer ended: its exit code (128 + N when signal N ended it), the signal this launcher
    received or the trainer died of, its last output lines, its last stderr lines, a rank's refusal;
    the GPU watchdog's finding, and `GpuOveruse` as `reason` when the watchdog stopped it."""

    code: int
    signal: int | None
    output: list[str]
    errors: list[str]
    refusal: str = ""
    warning: str = ""
    reason: str = ""


class JobAttempt(Record):
    """This node's record of the attempt, under `$TUNEPLANE_RUN_DIR/attempts/`."""

    run_dir: Path
    attempt: int
    node_rank: int
    node: str
    started_at: str = ""

    @classmethod
    def from_env(cls) -> JobAttempt | None:
        run_dir = attempts.run_dir_of()
        if run_dir is None:
            return None
        rank = os.environ.get(NODE_RANK_ENV, "0")
        node = os.environ.get("SLURMD_NODENAME") or os.environ.get("NODE_NAME") or os.uname().nodename
        node_rank = int(rank) if rank.isdigit() else 0
        return cls(run_dir, attempts.this_attempt(run_dir, node_rank), node_rank, node)

    def _base(self) -> dict[str, Any]:
        return {"attempt": self.attempt, "node_rank": self.node_rank, "node": self.node, "started_at": self.started_at}

    def begin(self) -> None:
        self.started_at = utc_now(millis=True)  # a run of seconds shows its duration with a decimal
        self._write(self._base())

    def end(self, outcome: Outcome, termination: bool = True) -> None:
        record = {**self._base(), **attempts.end_fields(outcome.code, outcome.signal, outcome.output, outcome.errors)}
        if outcome.refusal:
            record["error"] = outcome.refusal.removeprefix("tuneplane-launch: error: ")
        if outcome.warning:
            record["warning"] = outcome.warning
        if outcome.reason:  # the watchdog's stop is the cause, whatever the trainer printed as it went
            record["reason"] = outcome.reason
            record["error"] = f"GPU watchdog: {outcome.warning}"
        self._write(record)
        target = termination_log()  # on Kubernetes the backend reads the record from the API
        if termination and target:
            try:
                Path(target).write_text(attempts.encode(record, limit=attempts.TERMINATION_LIMIT), encoding="utf-8")
            except OSError as exc:
                print(f"tuneplane-launch: cannot write the termination message {target}: {exc}", file=sys.stderr)

    def _write(self, record: dict[str, Any]) -> None:
        try:
            attempts.write(self.run_dir, record)
        except OSError as exc:  # the record is for the status; the training goes on without it
            print(f"tuneplane-launch: cannot record attempt {self.attempt}: {exc}", file=sys.stderr, flush=True)


def supervise(argv: list[str], error_file: Path) -> Outcome:
    """Run `argv` as a child, its output copied through and remembered; TERM/INT/HUP passed on, the
    engine's warning (USR1) passed only to processes of the trainer that catch it."""
    error_file.unlink(missing_ok=True)
    env = dict(os.environ, **{LAUNCH_ERROR_ENV: str(error_file)})
    sys.stdout.flush()
    sys.stderr.flush()
    output, errors = attempts.Tail(), attempts.Tail()
    # Where our stdout and stderr are one file (a run's log), the child gets one pipe for both, so its
    # lines stay in the order it wrote them; its error lines are then found in the one stream.
    joined = _same_file(1, 2)
    child = subprocess.Popen(
        argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT if joined else subprocess.PIPE
    )
    received: list[int] = []
    forward = _forwarder(child, received)

    def warn(signum: int, _frame: FrameType | None) -> None:
        for pid in catchers(child.pid, signum):
            with contextlib.suppress(OSError):
                os.kill(pid, signum)

    copiers = [
        threading.Thread(
            target=_copy,
            args=(child.stdout, sys.stdout, (output, errors) if joined else (output,), "err" if joined else "out"),
            daemon=True,
        )
    ]
    if not joined:
        copiers.append(
            threading.Thread(target=_copy, args=(child.stderr, sys.stderr, (output, errors), "err"), daemon=True)
        )
    for thread in copiers:
        thread.start()
    previous = {sig: signal.signal(sig, forward) for sig in FORWARDED}
    previous[WARNING_SIGNAL] = signal.signal(WARNING_SIGNAL, warn)
    done = threading.Event()
    warning_file = os.environ.get(LIMIT_WARNING_FILE_ENV, "")
    if warning_file:
        threading.Thread(target=_watch_warning, args=(Path(warning_file), child.pid, done), daemon=True).start()
    watchdog = _start_watchdog(child.pid, done)
    try:
        code = child.wait()
    finally:
        done.set()
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        if watchdog is not None:
            watchdog.tool.close()  # a query still under way ends with the trainer
            if watchdog.stopped and isinstance(watchdog.stop, TreeStop):
                watchdog.stop.finish()  # ranks that outlived the trainer go with it
    for thread in copiers:
        thread.join(timeout=10)  # a grandchild holding the pipe open must not keep the job alive
    died_of = -code if code < 0 else None
    stopped_by = received[-1] if received else None
    try:
        refusal = error_file.read_text(encoding="utf-8").strip().splitlines()[0]
    except (OSError, IndexError):
        refusal = ""
    return Outcome(
        _ended_code(code, died_of, stopped_by),
        died_of or stopped_by,
        output.snapshot(),
        errors.snapshot(),
        refusal,
        watchdog.finding if watchdog is not None else "",
        OVERUSE_REASON if watchdog is not None and watchdog.stopped else "",
    )


def _forwarder(child: subprocess.Popen[bytes], received: list[int]) -> Callable[[int, FrameType | None], None]:
    """The handler of TERM, INT and HUP: each is recorded, and passed on to the trainer once, where a stop
    reaches the trainer only through this launcher; an engine that repeats a stop does not make it two."""
    passed_on: set[int] = set() if _launcher_alone_is_signalled() else set(FORWARDED)

    def forward(signum: int, _frame: FrameType | None) -> None:
        received.append(signum)
        if signum not in passed_on:
            passed_on.add(signum)
            child.send_signal(signum)

    return forward


def _launcher_alone_is_signalled() -> bool:
    """Whether a stop reaches the trainer only through this launcher, as a pod's PID 1 is signalled alone.
    Not inside a Slurm step, where slurmstepd signals every process of the step (scancel, the time limit,
    a requeue, and srun passing on what it got), nor under an engine that says it signals them all."""
    return not os.environ.get("SLURM_STEP_ID", "").isdigit() and os.environ.get(ENGINE_SIGNALS_ALL_ENV) != "1"


def _ended_code(code: int, died_of: int | None, stopped_by: int | None) -> int:
    """The attempt's exit code as a shell says it: 128 + N when signal N ended the trainer, also where
    a wrapper (torchrun, accelerate) caught the signal this launcher passed on and exited 1 instead."""
    if died_of:
        return 128 + died_of
    if stopped_by and code != 0:
        return 128 + stopped_by
    return code


def _start_watchdog(pid: int, done: threading.Event) -> Watchdog | None:
    """The GPU watchdog over the trainer `pid`'s tree, started; None where it is off (no nvidia-smi,
    no grant, the lab's policy `off`)."""
    settings = Settings.from_env()
    if settings is None:
        return None
    watchdog = Watchdog(pid, settings, TreeStop(pid))
    watchdog.start(done)
    return watchdog


def _same_file(first: int, second: int) -> bool:
    try:
        return os.path.samestat(os.fstat(first), os.fstat(second))
    except OSError:
        return False


def _watch_warning(path: Path, pid: int, done: threading.Event) -> None:
    """The engine's warning arrives as a file (Slurm: the batch script writes it on `--signal`): pass it
    on once, as USR1, to the trainer processes that catch it; a trainer still starting when it came
    gets it once it has installed its handler."""
    while not done.wait(WARNING_POLL_SECONDS):
        if not path.exists():
            continue
        targets = catchers(pid, WARNING_SIGNAL)
        for target in targets:
            with contextlib.suppress(OSError):
                os.kill(target, WARNING_SIGNAL)
        if targets:
            return


def _copy(source: Any, target: Any, tails: tuple[attempts.Tail, ...], name: str) -> None:
    """Copy a child's stream to ours as it comes (no line buffering), remembering its last lines."""
    sink = getattr(target, "buffer", None)
    while True:
        try:
            chunk = source.read1(65536)
        except (OSError, ValueError):
            break
        if not chunk:
            break
        with contextlib.suppress(OSError, ValueError):
            if sink is not None:
                sink.write(chunk)
                sink.flush()
            else:
                target.write(chunk.decode("utf-8", "replace"))
                target.flush()
        text = chunk.decode("utf-8", "replace")
        for tail in tails:
            tail.feed(text, name)


def catchers(root: int, signum: int) -> list[int]:
    """`root` and its descendants that installed a handler for `signum` (Linux `/proc`): the processes
    that asked for it; sending it to any other would kill it."""
    found = []
    for pid in process_tree(root):
        caught = proc_field(pid, "SigCgt", 16)
        if caught is not None and caught >> (signum - 1) & 1:
            found.append(pid)
    return found
