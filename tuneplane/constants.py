"""Names and values every layer agrees on: exit codes, run phases, shared types. Standard library only.

The job side (the launcher, the SDK) imports this module too, so it must stay free of third-party imports.
"""

from __future__ import annotations

import time
import typing
from enum import StrEnum
from typing import TYPE_CHECKING, Final, Literal

if TYPE_CHECKING:
    import datetime

# Exit codes of `tp` (docs/reference/commands.md): library code raises, only the CLI picks one.
EXIT_OK = 0
EXIT_PROBLEMS = 1  # the command ran and found problems (validate), or the operation failed
EXIT_USAGE = 2  # bad arguments or a file that cannot be parsed
EXIT_INTERNAL = 3  # a bug in tp: the traceback is shown
EXIT_INTERRUPTED = 130  # Ctrl-C: the shell's 128 + SIGINT
# EX_CONFIG from sysexits.h: the launcher's exit code for a job whose configuration is wrong; a
# backend seeing it knows that retrying cannot help.
CONFIG_ERROR_EXIT = 78

Scalar = bool | int | float | str

# An experiment's, a plugin's or a recipe part's name (`models.base.NAME_RE` anchors it); the launcher
# checks a plugin's name with it too.
NAME_PATTERN = r"[A-Za-z0-9][A-Za-z0-9._-]*"


class RenderFormat(StrEnum):
    """How `tp render`, `tp export` and `tp eval` print what they render."""

    yaml = "yaml"
    json = "json"


PREVIEW_RUN_ID = "00000000-000000-000000"  # a run not requested yet renders under this fixed id

Phase = Literal["Submitted", "Pending", "Running", "Succeeded", "Failed", "Cancelled"]
# Each phase by name, so that no other module spells one (mypy reads each as its Literal).
SUBMITTED: Final = "Submitted"
PENDING: Final = "Pending"
RUNNING: Final = "Running"
SUCCEEDED: Final = "Succeeded"
FAILED: Final = "Failed"
CANCELLED: Final = "Cancelled"
UNKNOWN: Final = "Unknown"  # what a backend reports when it cannot tell (never written as a phase)
TERMINAL: frozenset[str] = frozenset({SUCCEEDED, FAILED, CANCELLED})
UNDER_WAY: frozenset[str] = frozenset({PENDING, RUNNING})  # the backend has it, and it has not ended
RAN_TO_END: frozenset[str] = frozenset({SUCCEEDED, FAILED})  # ended by itself, not cancelled
# How far a run has come: phases only move forward, and of two versions of one status the further wins.
PHASE_RANK: dict[str, int] = {SUBMITTED: 0, PENDING: 1, RUNNING: 2, SUCCEEDED: 3, FAILED: 3, CANCELLED: 3}
# What a backend may report: a phase (never `Submitted`, which only the bot writes) or that it cannot tell.
ObservedPhase = Literal["Pending", "Running", "Succeeded", "Failed", "Cancelled", "Unknown"]
_OBSERVED: frozenset[str] = frozenset(typing.get_args(ObservedPhase))


def observed_phase(text: str) -> ObservedPhase:
    """`text` as a phase a backend may report, or `Unknown` for anything else (a damaged state file)."""
    return typing.cast(ObservedPhase, text) if text in _OBSERVED else UNKNOWN


# Why an attempt of a run ended: one vocabulary across engines (docs/reference/files.md). An attempt
# still under way has no reason yet. A later issue that needs a new reason adds it here and nowhere else.
AttemptReason = Literal[
    "Completed",  # the trainer exited 0
    "Error",  # the trainer exited non-zero by itself
    "Signal",  # killed by a signal nobody accounted for
    "Timeout",  # the run's time limit (Slurm TIMEOUT, activeDeadlineSeconds)
    "Preempted",  # the engine took the resources back (Kueue, Slurm PREEMPTED, an engine requeue)
    "Evicted",  # a node drain or an API-initiated eviction (DisruptionTarget)
    "NodeFailure",  # a node died or stopped answering
    "OutOfMemory",  # the kernel or the engine killed it for memory
    "Cancelled",  # stopped on request
    "Lost",  # nobody can tell any more: the machine that ran it is gone
    "ImagePull",  # the image could not be pulled
    "ConfigError",  # the job as written cannot start (a missing secret, exit 78)
    "Unschedulable",  # the engine can never place it
    "GpuOveruse",  # the GPU watchdog stopped it for using more GPUs than granted
]
ATTEMPT_REASONS: tuple[str, ...] = typing.get_args(AttemptReason)
STOPPED_ON_REQUEST: AttemptReason = "Cancelled"  # the attempt reason that is also the phase it ends in
# The reasons a run is retried for by default: none of them is the trainer's own fault.
DEFAULT_RETRY_ON: tuple[AttemptReason, ...] = ("Preempted", "Evicted", "NodeFailure")
ATTEMPT_ENV = "TUNEPLANE_ATTEMPT"  # the attempt's number, 1 for the first
RESUME_FROM_ENV = "TUNEPLANE_RESUME_FROM"  # the newest complete checkpoint of an earlier attempt, if any


# The environment contract's names (CONTRACT §6) that more than one module reads or writes, the
# developer side that sets them and the job side that reads them alike; a name only one module
# uses stays there. Importing this module costs the SDK nothing it does not already import.
ENV_PREFIX = "TUNEPLANE_"
JOB_TOKEN = "TUNEPLANE_JOB_TOKEN"
JOB_ENABLED = "TUNEPLANE_JOB_ENABLED"
JOB_ENDPOINT = "TUNEPLANE_JOB_ENDPOINT"
JOB_RUN_ID = "TUNEPLANE_JOB_RUN_ID"
HF_TOKEN = "HF_TOKEN"
INGEST_SECRET_ENV = "TUNEPLANE_INGEST_SECRET"
STORAGE_ROOT_ENV = "TUNEPLANE_STORAGE_ROOT"
WORK_DIR_ENV = "TUNEPLANE_WORK_DIR"
JOBSPEC_ENV = "TUNEPLANE_JOBSPEC"  # the checkout container's copy of the JobSpec a Kubernetes run was rendered from
RUN_DIR_ENV = "TUNEPLANE_RUN_DIR"
OUT_DIR_ENV = "TUNEPLANE_OUT_DIR"
NODE_RANK_ENV = "TUNEPLANE_NODE_RANK"
NUM_NODES_ENV = "TUNEPLANE_CLUSTER_NUM_NODES"
GPUS_PER_NODE_ENV = "TUNEPLANE_CLUSTER_GPUS_PER_NODE"
PROCS_PER_NODE_ENV = "TUNEPLANE_CLUSTER_PROCS_PER_NODE"  # processes a node starts (GPUs, or N on local:N)
USER_ENV = "TUNEPLANE_USER"
METRICS_NATIVE_ENV = "TUNEPLANE_METRICS_NATIVE"  # the native outputs to collect, a JSON list
MONITOR_INTERVAL_ENV = "TUNEPLANE_JOB_MONITOR_INTERVAL"
REPORT_ALL_RANKS_ENV = "TUNEPLANE_REPORT_ALL_RANKS"
TOOL_REQUIREMENT_ENV = "TUNEPLANE_TOOL_REQUIREMENT"  # how CI installs tp, when tp init or migrate is not told
TERMINATION_LOG_ENV = "TUNEPLANE_TERMINATION_LOG"  # where the launcher writes its one-line refusal
GPU_WATCHDOG_ENV = "TUNEPLANE_GPU_WATCHDOG"  # the lab's cluster.gpu_watchdog: warn, stop or off
GPU_WATCHDOG_DEFAULT = "warn"  # the launcher's policy where the variable is unset


# After its trainer, node rank zero's launcher uploads for at most this long what the SDK left unsent;
# the other ranks have ended by then, so the step's grace for the last rank (srun --wait) is longer.
AFTER_JOB_UPLOAD_SECONDS = 60.0

BLOB_LIMIT = 1 << 20  # a run request or a status file larger than 1 MiB is refused unread

STAMP_FORMAT = "%Y-%m-%dT%H:%M:%SZ"  # every time in a status file: ISO-8601 UTC to the second


def wire_second(second: int) -> str:
    """A whole second as a point's time on the ingest wire begins (`2026-01-02T03:04:05`, UTC): the SDK
    caches it per second on its hot path and appends the microseconds (`wire_stamp`)."""
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(second))


def wire_stamp(unix: float) -> str:
    """A time on the ingest wire: ISO-8601 UTC with microseconds and `+00:00`, as the upstream SDK sends."""
    second = int(unix)
    return f"{wire_second(second)}.{min(int((unix - second) * 1_000_000), 999_999):06d}+00:00"


def utc_moment() -> datetime.datetime:
    """Now, in UTC: the one reading of the wall clock as a date (run ids, status times, ages)."""
    import datetime  # lazy: the SDK imports this module and has no use for datetime

    return datetime.datetime.now(datetime.UTC)


def utc_now(millis: bool = False) -> str:
    """ISO-8601 UTC with second precision, the form every time in a status file takes; `millis` adds
    the milliseconds (a local run's start and end, whose difference is shown as `12.3s`)."""
    now = utc_moment()
    if millis:
        return now.strftime(STAMP_FORMAT[:-1]) + f".{now.microsecond // 1000:03d}Z"
    return now.strftime(STAMP_FORMAT)


def as_utc(value: str, local: bool = False) -> str | None:
    """An ISO-8601 time as a status file writes it (UTC, to the second), or None when it is not one;
    `local`: a time without a zone is the machine's local time (else it is UTC)."""
    import datetime  # lazy: as in utc_moment

    try:
        moment = datetime.datetime.fromisoformat(value)
    except ValueError:
        return None
    if moment.tzinfo is None:
        moment = moment.astimezone() if local else moment.replace(tzinfo=datetime.UTC)
    return moment.astimezone(datetime.UTC).strftime(STAMP_FORMAT)


def epoch_of(stamp: object) -> float | None:
    """Seconds since the epoch of a status file's time (`2026-01-02T03:04:05Z`, a fraction allowed; no
    zone: UTC), or None when it is not one."""
    import datetime  # lazy: as in utc_moment

    try:
        moment = datetime.datetime.fromisoformat(str(stamp))
    except ValueError:
        return None
    return (moment if moment.tzinfo else moment.replace(tzinfo=datetime.UTC)).timestamp()
