"""The Backend protocol every backend implements, and the plain records it exchanges.

The bot and the CLI talk to backends only through this protocol; tests swap in fakes.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, Protocol

from tuneplane.constants import AttemptReason, ObservedPhase


@dataclass(frozen=True)
class SubmitRequest:
    run_id: str
    experiment: str
    namespace: str
    object_name: str  # deterministic DNS-1035 name; resubmitting the same name adopts, never duplicates
    manifests: list[dict[str, Any]]  # rendered, already validated
    secret_data: dict[str, str] = field(default_factory=dict)  # per-run tokens; never logged
    # per-run Secret key → (Secret in the job's namespace, its key): copied by the backend at submit,
    # so a long-lived credential (the lab's HF token) never passes through the bot or git
    secret_copies: dict[str, tuple[str, str]] = field(default_factory=dict)


@dataclass(frozen=True)
class BackendRef:
    backend: str  # "local" | "kubernetes"
    kind: str  # e.g. "Job", "JobSet", "RayJob", "Process"
    name: str
    namespace: str = ""
    uid: str = ""
    # What the object actually runs, from its provenance annotations (empty when unknown). A bot that
    # adopts an object another bot created may have resolved the run at a different commit.
    commit: str = ""
    jobspec_digest: str = ""


@dataclass(frozen=True)
class AttemptReport:
    """What an engine knows of one attempt: the job side's own record where it wrote one, else the
    engine's word. `reason` is empty while the attempt is under way."""

    # Counted across the run: an object's first attempt is its job's TUNEPLANE_ATTEMPT (1 unless the bot
    # retried), each engine restart one more; numbers from 1 per object are shifted by the bot.
    number: int
    started_at: str | None = None
    finished_at: str | None = None
    where: tuple[str, ...] = ()
    exit_code: int | None = None
    signal: int | None = None
    reason: AttemptReason | None = None
    message: str = ""
    failed_node: str = ""
    failed_rank: int | None = None
    log_tail: tuple[str, ...] = ()
    gpus: int = 0


@dataclass(frozen=True)
class Observation:
    phase: ObservedPhase
    reason: str = ""  # e.g. a Kueue queue reason while Pending
    message: str = ""  # what a person needs to know, e.g. the failing container's last lines
    started_at: str | None = None  # ISO-8601 UTC
    finished_at: str | None = None
    exit_code: int | None = None
    # Every attempt the engine can account for, oldest first; empty from a backend that cannot tell
    # attempts apart (the phase then stands for the only one).
    attempts: tuple[AttemptReport, ...] = ()
    # The last sign of life of a run the backend cannot see itself (a local run of another machine),
    # with phase Unknown and reason `NO_HEARTBEAT`; None when it never had one. The bot marks the run
    # `Lost` once it is older than `cluster.local.lost_after` seconds.
    heartbeat_at: str | None = None


NO_HEARTBEAT = "NoHeartbeat"  # Observation.reason of a run only another machine can see


class BackendError(Exception):
    """The backend could not do what was asked; the message is for a person."""


class SubmitRefused(BackendError):
    """The backend refused the job as written (a bad partition, too many GPUs): retrying cannot help.

    `setting` names the tuneplane.yaml setting to change (`cluster.slurm.partition`), when known.
    """

    def __init__(self, message: str, setting: str = "", hint: str = "") -> None:
        super().__init__(message)
        self.setting = setting
        self.hint = hint


class Backend(Protocol):
    """Optional capabilities, looked up with `getattr`: `requeues` (True when the engine may start a
    later attempt after reporting an end, so the bot keeps looking at an ended run for a while),
    `run_dir`, `metrics`, `artifacts`."""

    name: str

    def submit(self, request: SubmitRequest) -> BackendRef: ...

    def observe(self, ref: BackendRef) -> Observation: ...

    def logs(self, ref: BackendRef, tail: int | None = None, follow: bool = False) -> Iterator[str]: ...

    def cancel(self, ref: BackendRef) -> None: ...
