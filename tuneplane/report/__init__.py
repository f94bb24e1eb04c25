"""Report training metrics from inside a TunePlane job: `init`, `log`, `finish`, `TunePlaneCallback`.

    from tuneplane.report import init, log, finish
    init(hparams={"lr": 3e-4})
    log({"loss": 0.42, "lr": 3e-4}, step=10)
    finish()

Reporting is a side channel, so this module never raises into the training loop, imports only the
standard library (and that lazily), and does nothing without `TUNEPLANE_JOB_TOKEN`. Whether to report
is decided once per process (again in a forked child), which makes the disabled `log()` about one
function call. Enabled, `log()` only packs the values into a compact row and appends it to a memory
queue; a background thread checks, batches, encodes and sends, retrying with capped backoff, spilling
to `$TUNEPLANE_OUT_DIR/.tuneplane/` when the memory budget is spent, and `finish()` drains within a
bounded time and says on stderr what it could not send.
"""

from __future__ import annotations

import os
import sys
from time import time as _now
from typing import TYPE_CHECKING, cast

from tuneplane.constants import JOB_ENABLED, JOB_TOKEN
from tuneplane.report._callback import TunePlaneCallback, forget_steps

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Mapping
    from types import FrameType
    from typing import SupportsInt

    from tuneplane.report._core import Session, Stats

__all__ = ["TunePlaneCallback", "enabled", "finish", "flush", "init", "lifecycle", "log", "log_hparams", "stats"]

# Process-wide state. `_session` is the live session; `_decided` means "do not look again": together
# they make the disabled log() one global read and one comparison.
_session: Session | None = None
_decided = False
_finished = False  # a session ended; the next log() without init() warns once
_last_stats: Stats = {}
_orphans: list[Session] = []  # sessions inherited across fork: kept alive so nothing closes shared fds
_atexit_registered = False
_closing: Session | None = None  # the session finish() is draining (see `_sigterm`)
_term_pending = False  # a SIGTERM came during that drain: finish() ends the process as it returns
CHAINED_FLUSH = 2.0  # seconds a chained SIGTERM handler waits for what is queued to go out


def log(metrics: Mapping[str, object], step: int | None = None, prefix: str = "") -> None:
    """Queue scalar metrics for `step` (the previous step + 1 when omitted). Never raises.

    Nested dicts are flattened with `.`; tensors, arrays and lists of numbers are reduced to their
    mean; anything else is dropped and counted. `prefix` puts keys under `prefix/` unless they are.
    """
    s = _session
    if s is None:
        if _decided:
            return
        s = _auto_init()
        if s is None:
            return
    try:
        # The previous step + 1, an int as given, or a numpy/torch integer made an int (text is refused).
        step = s.step = s.step + 1 if step is None else step if type(step) is int else _as_step(step)
        if not prefix and type(metrics) is dict:
            # Fastest path: the key set of the last call that took the lookup below. Its putter (see
            # _queued) checks the size, reads each value by key, packs, queues and charges the row.
            try:
                over = s.put(metrics, step)
            except Exception:  # a missing key or a value that is not a number: nothing was queued
                s.demote()  # an exception costs more than the lookup: none again until promoted
                over = None
            if over is not None:
                if over:
                    s.overflow()
                return
            if _known_keys(s, metrics, step):
                return
        s.log_slow(metrics, step, prefix)
    except _BadStep:
        s.drop("step is not an integer", _size(metrics))
    except Exception as exc:  # reporting must never break training
        s.internal_error(f"log(): {type(exc).__name__}: {exc}")


def _known_keys(s: Session, metrics: dict[str, object], step: int) -> bool:
    """The lookup path: keys validated before, in this order. One C call packs id, step, time and
    values into an id row (see _queued), converting as float() does (a one-element tensor gives its value); anything
    else (text, None, a nested dict, a tensor of many elements, a step beyond 64 bits) makes it raise,
    and the slow path reduces or drops it. The caller may reuse its dict. A key set that takes this
    path twice in a row has its putter tried first from then on."""
    try:
        found = s.entries.get(tuple(metrics))
    except Exception:  # a key whose comparison raises: the slow path names what it can
        return False
    if found is None:
        return False
    _, pack, ident, cost = found
    try:
        s.queue.append(pack(ident, step, _now(), *metrics.values()))
    except Exception:
        return False
    s.added += cost
    if s.added > s.limit:
        s.overflow()
    if found is s.last_found:  # twice in a row: a hot key set, not one of several taking turns
        s.promote(found)
    else:
        s.last_found = found
    return True


class _BadStep(Exception):
    pass


def _size(metrics: object) -> int:
    return len(metrics) if hasattr(metrics, "__len__") else 1


def _as_step(step: object) -> int:
    """Steps from numpy or torch become ints; text or None-like values are refused."""
    if isinstance(step, (str, bytes)) or step is None:
        raise _BadStep
    try:
        return int(cast("SupportsInt", step))  # anything else raises, and is refused below
    except (TypeError, ValueError, OverflowError):
        raise _BadStep from None


def init(
    hparams: Mapping[str, object] | None = None,
    monitor_hardware: bool = True,
    *,
    all_ranks: bool | None = None,
    **options: object,
) -> bool:
    """Start reporting for this process; idempotent. Returns whether reporting is on.

    `all_ranks=True` (or `TUNEPLANE_REPORT_ALL_RANKS=1`) reports from every rank with the rank as a
    label; otherwise only rank zero (`RANK`, then `LOCAL_RANK`) reports. Other keywords override the
    `TUNEPLANE_REPORT_*` settings: flush_interval, retry_base, retry_cap, finish_timeout,
    request_timeout, monitor_interval, buffer_bytes, spill_bytes, batch_points.
    """
    global _finished
    try:
        _finished = False
        session = _session if _session is not None else _start({**options, "all_ranks": all_ranks})
        if session is None:
            return False
        if hparams:
            session.add_hparams(hparams)
        if monitor_hardware:
            _start_monitor(session)
        return True
    except Exception as exc:
        _say(f"init() failed, reporting is off: {type(exc).__name__}: {exc}")
        return False


def _log_records(records: Iterable[tuple[int, float | None, Mapping[str, object]]]) -> None:
    """The native collector's way in: `(step, unix_time, {key: value})` records that keep their own
    wall time (a TensorBoard event's, say; None: now). Never raises."""
    s = _session or (None if _decided else _auto_init())
    if s is None:
        return
    for step, unix, values in records:
        try:
            s.log_slow(values, step if type(step) is int else _as_step(step), "", None if unix is None else float(unix))
        except _BadStep:
            s.drop("step is not an integer", _size(values))
        except Exception as exc:
            s.internal_error(f"collector records: {type(exc).__name__}: {exc}")


def log_hparams(params: Mapping[str, object]) -> None:
    """Report (more) hyperparameters; values that are not JSON become strings."""
    s = _session or (None if _decided else _auto_init())
    if s is not None:
        try:
            s.add_hparams(params)
        except Exception as exc:
            s.internal_error(f"log_hparams(): {exc}")


def flush(timeout: float = 5.0) -> bool:
    """Wait up to `timeout` seconds for everything logged so far to reach the receiver."""
    s = _session
    if s is None:
        return True
    try:
        return s.flush(timeout)
    except Exception:
        return False


def finish(timeout: float | None = None) -> None:
    """Stop reporting: drain for at most `timeout` seconds (default 5, `TUNEPLANE_REPORT_FINISH_TIMEOUT`)
    and print to stderr what could not be delivered. Idempotent; also runs at interpreter exit."""
    global _session, _decided, _finished, _last_stats, _closing
    # One statement with no call in it: a signal handler cannot run between the read and the claim.
    s, _session, _closing = _session, None, _session
    if s is None:
        return
    _decided, _finished = False, True
    try:
        s.close(timeout)
        _last_stats = s.stats()
    except Exception as exc:
        _say(f"finish() failed: {type(exc).__name__}: {exc}")
    finally:
        _closing = None
        if _term_pending:
            _die_of_sigterm()  # a SIGTERM came while this finish() drained: it ends the process now


def lifecycle(event: str, timeout: float = 5.0) -> bool:
    """Send one lifecycle event (starting, running, succeeded, failed) now, synchronously.

    For launchers and wrappers around the training process, which report the job's phase once and
    exit. Returns whether the receiver accepted it; never raises; does nothing without a token.
    """
    env = os.environ
    if env.get(JOB_ENABLED, "").strip() == "0" or not env.get(JOB_TOKEN, "").strip():
        return False
    try:
        # lazy: keeps import tuneplane.report to a few ms in every training process
        from tuneplane.report._transport import post_lifecycle

        return post_lifecycle(env, event, timeout)
    except Exception as exc:
        _say(f"lifecycle({event!r}) not sent: {type(exc).__name__}: {exc}")
        return False


def stats() -> Stats:
    """Counters of the live session (or the last finished one): delivered, pending, spilled, dropped..."""
    s = _session
    try:
        return s.stats() if s is not None else _last_stats.copy()
    except Exception:
        return {}


def enabled() -> bool:
    """Whether this process reports (deciding now if nothing has been logged yet)."""
    return (_session or (None if _decided else _auto_init())) is not None


# ── decisions ─────────────────────────────────────────────────────────────────────────────────
def _auto_init() -> Session | None:
    """First log() without init(): decide once, and remember a 'no' so later calls are free."""
    global _decided
    if _finished:
        _decided = True
        _say("log() called after finish(); ignoring it and later calls (call init() to start again)")
        return None
    try:
        return _start({})
    except Exception as exc:
        _decided = True
        _say(f"reporting is off: {type(exc).__name__}: {exc}")
        return None


def _start(options: Mapping[str, object]) -> Session | None:
    global _session, _decided, _atexit_registered
    env = os.environ
    # The cheap gate first, so a run without a token never imports the machinery.
    if env.get(JOB_ENABLED, "").strip() == "0" or not env.get(JOB_TOKEN, "").strip():
        _decided = True
        return None
    # lazy: keeps import tuneplane.report to a few ms in every training process
    from tuneplane.report._config import OPTION_NAMES, from_env
    from tuneplane.report._core import Session

    unknown = sorted(set(options) - OPTION_NAMES)
    if unknown:
        _say(f"init() ignores unknown option(s): {', '.join(unknown)}")
    config = from_env(env, options)
    if config is None or not config.sends:
        _decided = True
        return None
    session = Session(config)
    session.start()
    _session, _decided = session, True
    if not _atexit_registered:
        # lazy: keeps import tuneplane.report to a few ms in every training process
        import atexit

        atexit.register(finish)
        _atexit_registered = True
    _catch_sigterm()
    _quiet_conversions()
    _finish_in_worker()
    return session


def _finish_in_worker() -> None:
    """A `multiprocessing` child started by fork or forkserver (a Pool worker, a `Process`, a
    DataLoader worker) leaves through `os._exit`, which skips `atexit`: everything it logged was
    lost. Its own exit hook, multiprocessing's finalizers, finishes the session instead, draining at
    most `WORKER_DRAIN` seconds: a parent joins its workers (a DataLoader at every epoch's end), and
    what is not sent by then stays in the out dir for the collector."""
    mp = sys.modules.get("multiprocessing")
    if mp is None or mp.parent_process() is None:
        return
    # lazy: only a reporting multiprocessing child needs it (the package is loaded already)
    from multiprocessing import util

    util.Finalize(None, _finish_worker, exitpriority=10)


WORKER_DRAIN = 1.0


def _finish_worker() -> None:
    s = _session
    finish(min(WORKER_DRAIN, s.config.finish_timeout) if s is not None else None)


def _quiet_conversions() -> None:
    """`log({"loss": loss})` with the loss tensor itself is the common case; taking its value (as
    `float()` does, and we do) is right there, so torch's warning about a tensor that requires grad
    is not shown for our own frames. The trainer's own conversions still warn."""
    # lazy: only a process that reports needs it
    import warnings

    warnings.filterwarnings(
        "ignore",
        message="Converting a tensor with requires_grad=True to a scalar",
        category=UserWarning,
        module=r"tuneplane\.report",
    )


def _catch_sigterm() -> None:
    """A job told to stop (a pod deleted or preempted, torchrun's agent) gets
    SIGTERM, whose default action skips the exit-time `finish()`: what was queued was lost. Where the
    process left SIGTERM at its default, it first drains (bounded, leaving the rest in the out dir
    for the collector) and then dies of the signal as before. A handler of the trainer's own is kept."""
    # lazy: only a process that reports needs them
    import signal
    import threading

    if threading.current_thread() is not threading.main_thread():
        return  # only the main thread may set a handler; a thread's init() leaves SIGTERM as it is
    mp = sys.modules.get("multiprocessing")
    if mp is not None and mp.parent_process() is not None:
        # A multiprocessing child (a Pool worker) is terminated while its main thread waits on a
        # lock only the parent releases; CPython runs a Python-level handler between bytecodes, so
        # a SIGTERM landing just before that wait is never handled and the Pool hangs for good.
        # It keeps the default action; a child that exits normally still finishes (`_finish_in_worker`).
        return
    try:
        if signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL:
            return
        signal.signal(signal.SIGTERM, _sigterm)
    except (ValueError, OSError):  # no signals here (an embedded interpreter)
        return


def _sigterm(signum: int, frame: FrameType | None) -> None:
    """Runs in the main thread, between any two of its bytecodes: maybe inside the session's own
    locks (log(), flush(), a finish()). So it never takes them here: the drain runs on a fresh
    thread joined with a timeout, and the process then dies of the signal whatever that drain did."""
    # lazy: only a process that reports needs them
    import signal

    global _term_pending
    try:
        ours = signal.getsignal(signal.SIGTERM) is _sigterm
    except ValueError:
        ours = False
    if not ours:
        # A handler installed after init() chained to us (Lightning's signal connector, SLURM
        # requeue): the stop is its to make. Send what is queued, bounded, and return.
        _bounded(flush, CHAINED_FLUSH, CHAINED_FLUSH + 0.5)
        return
    if _closing is not None:
        # finish() (the exit-time one, a worker's exit hook) is draining below this frame: a second
        # one would wait on its locks for good. It ends the process as it returns (bounded).
        _term_pending = True
        return
    s = _session
    drain = s.config.finish_timeout if s is not None else 0.0
    _bounded(finish, drain, drain + 1.0)
    _die_of_sigterm()


def _bounded(call: Callable[[float], object], timeout: float, wait: float) -> None:
    """`call(timeout)` on a fresh daemon thread, waited for at most `wait` seconds."""
    # lazy: only a process that reports needs it
    import threading

    try:
        worker = threading.Thread(target=_quietly, args=(call, timeout), name="tuneplane-sigterm", daemon=True)
        worker.start()
        worker.join(wait)
    except Exception:  # no thread could start (interpreter shutdown): die without the drain
        pass


def _quietly(call: Callable[[float], object], timeout: float) -> None:
    # lazy: only a process that reports needs it (loaded with the session already)
    from tuneplane.report._sender import block_sigterm

    block_sigterm()
    call(timeout)


def _die_of_sigterm() -> None:
    """The default action, so the exit status says SIGTERM; as PID 1 the kernel ignores that, so
    the process exits 143 itself rather than train on with reporting finished."""
    # lazy: only a process that reports needs it
    import signal

    try:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
    except ValueError:
        pass
    os.kill(os.getpid(), signal.SIGTERM)
    os._exit(128 + signal.SIGTERM)


def _start_monitor(session: Session) -> None:
    if session.monitor is not None or session.config.rank != 0:
        return
    # lazy: keeps import tuneplane.report to a few ms in every training process
    from tuneplane.report._hardware import Monitor

    session.monitor = Monitor.start_for(session)


def _after_fork_in_child() -> None:
    """A forked child starts undecided and sends its own points; the parent's queue stays the parent's."""
    global _session, _decided, _finished, _closing, _term_pending
    if _session is not None:
        _orphans.append(_session)
    _session, _decided, _finished, _closing, _term_pending = None, False, False, None, False
    signals = sys.modules.get("signal")
    try:  # the child decides for itself at its own init() (see `_catch_sigterm`)
        if signals is not None and signals.getsignal(signals.SIGTERM) is _sigterm:
            signals.signal(signals.SIGTERM, signals.SIG_DFL)
    except (ValueError, OSError):
        pass


def _reset() -> None:
    """Finish any session and forget every decision (for tests and for embedding in long-lived tools)."""
    global _decided, _finished, _last_stats
    finish()
    _decided, _finished, _last_stats = False, False, {}
    forget_steps()
    signals = sys.modules.get("signal")
    try:
        if signals is not None and signals.getsignal(signals.SIGTERM) is _sigterm:
            signals.signal(signals.SIGTERM, signals.SIG_DFL)
    except ValueError:  # not the main thread: the handler stays, and finishes nothing
        pass


def _say(message: str) -> None:
    try:
        print(f"tuneplane.report: {message}", file=sys.stderr, flush=True)
    except (OSError, ValueError):
        pass


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)
