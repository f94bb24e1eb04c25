"""The Backend protocol every backend implements, and the plain records it exchanges.

The bot and the CLI talk to backends only through this protocol; tests swap in fakes. What only some
backends can do is a capability, a small protocol of its own checked with `isinstance` (`HasMetrics`,
`HasArtifacts`, `HasRunDir`, `Closable`), so no caller asks a backend for a method by its name. A backend
whose runs are supervised on this machine is a `RunsHere`: the supervisor stays the backend's.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from tuneplane.constants import EXIT_PROBLEMS, AttemptReason, ObservedPhase
from tuneplane.errors import TunePlaneError
from tuneplane.runtime.jsonvalue import JSONObject
from tuneplane.runtime.records import FrozenRecord, field


class Payload(Protocol):
    """What one backend is sent for one run: a frozen record of that backend's own (the Kubernetes
    objects, a Slurm batch, a local run), packed by it through `backends.factory` and read by it alone.
    Each backend checks at `submit` that it was handed its own kind and refuses any other."""

    def shown(self) -> tuple[str | None, list[JSONObject]]:
        """What `tp render` prints of it: the text rendered and checked (the manifests' YAML, the batch
        script; None where nothing was rendered as text), and the documents `--format json` prints."""
        ...


class SubmitRequest(FrozenRecord):
    run_id: str
    experiment: str
    namespace: str
    object_name: str  # deterministic DNS-1035 name; resubmitting the same name adopts, never duplicates
    payload: Payload  # the backend's own record of the run, rendered and already validated
    secret_data: dict[str, str] = field(default_factory=dict)  # per-run tokens; never logged
    # per-run Secret key → (Secret in the job's namespace, its key): copied by the backend at submit,
    # so a long-lived credential (the lab's HF token) never passes through the bot or git
    secret_copies: dict[str, tuple[str, str]] = field(default_factory=dict)
    # Secret of the namespace → the tuneplane.yaml setting that names it, so a refusal says what to change
    secret_settings: dict[str, str] = field(default_factory=dict)
    # 1 for the first attempt; the bot's retry of a run whose newest attempt ended asks for the next one,
    # and the engine starts it under the same object (run dir, out dir: checkpoints stay where they were)
    attempt: int = 1


class BackendRef(FrozenRecord):
    backend: str  # "local" | "kubernetes" | "slurm"
    kind: str  # e.g. "Job", "JobSet", "RayJob", "Process"
    name: str
    namespace: str = ""  # the object's Kubernetes namespace; empty on the other engines
    uid: str = ""
    # What the object actually runs, from its provenance annotations (empty when unknown). A bot that
    # adopts an object another bot created may have resolved the run at a different commit.
    commit: str = ""
    jobspec_digest: str = ""
    # the directory the run is kept in (a local run's, a Slurm job's on the shared filesystem); empty on
    # Kubernetes. Last, so that a ref written positionally keeps its meaning.
    run_dir: str = ""


class AttemptReport(FrozenRecord):
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


class Observation(FrozenRecord):
    phase: ObservedPhase
    reason: str = ""  # e.g. a Kueue queue reason while Pending
    message: str = ""  # what a person needs to know, e.g. the failing container's last lines
    started_at: str | None = None  # ISO-8601 UTC
    finished_at: str | None = None
    exit_code: int | None = None
    # Every attempt the engine can account for, oldest first; empty from a backend that cannot tell
    # attempts apart (the phase then stands for the only one).
    attempts: tuple[AttemptReport, ...] = ()
    # The last sign of life the engine can see from whoever runs the newest attempt (ISO-8601 UTC; the
    # local supervisor's heartbeat), None when it keeps none. With phase Unknown and reason `NO_HEARTBEAT`
    # (a run only another machine can see), None means it never had one. The bot marks the run
    # `Lost` once it is older than `cluster.local.lost_after` seconds.
    heartbeat_at: str | None = None
    # The engine says it starts the run's next attempt itself (Slurm's requeue). Under way with its newest
    # attempt failed reads as a requeue without it (a Job replacing its pod); an attempt that completed is
    # followed by another only on the engine's word, else its object has not yet caught up with its end.
    requeued: bool = False
    # The engine decided the run's object ends with its newest attempt (a Job's `FailureTarget`) and stops
    # the pods still running: no next attempt comes, and the phase stays under way only until they stopped.
    ending: bool = False


NO_HEARTBEAT = "NoHeartbeat"  # Observation.reason of a run only another machine can see


class BackendError(Exception):
    """The backend could not do what was asked; the message is for a person."""


class NotReachable(BackendError, TunePlaneError):
    """The run is not within this machine's reach (its run directory, or the machine that supervises it,
    is elsewhere): nothing was done to it beyond what the message says, and the message says where to act.
    Also a `TunePlaneError`, so a command that meets it says it and exits 1, never as a bug."""

    exit_code = EXIT_PROBLEMS


class SubmitRefused(BackendError):
    """The backend refused the job as written (a bad partition, too many GPUs): retrying cannot help.

    `setting` names the tuneplane.yaml setting to change (`cluster.slurm.partition`), when known.
    """

    def __init__(self, message: str, setting: str = "", hint: str = "") -> None:
        super().__init__(message)
        self.setting = setting
        self.hint = hint


class Backend(Protocol):
    """What every backend does; what only some do is a capability below, checked with `isinstance`."""

    name: str

    def submit(self, request: SubmitRequest) -> BackendRef: ...

    def observe(self, ref: BackendRef) -> Observation: ...

    def logs(self, ref: BackendRef, tail: int | None = None, follow: bool = False) -> Iterator[str]: ...

    def cancel(self, ref: BackendRef) -> None: ...


# ── capabilities: what only some backends can do ─────────────────────────────────────────────────────


@runtime_checkable
class HasMetrics(Protocol):
    """Reads a run's metrics itself (a run directory's store), not through the ingest receiver."""

    def metrics(self, ref: BackendRef) -> tuple[dict[str, dict[str, Any]], dict[str, list[float]]]: ...


TimedPoint = tuple[int, float, float | None]  # step, value, seconds since the epoch (None: not known)


@runtime_checkable
class HasTimedMetrics(Protocol):
    """Reads every point of a run's metrics with the time it was logged from the run's own store, for the
    chart of a run whose metrics no receiver holds."""

    def timed_metrics(self, ref: BackendRef, keys: Iterable[str]) -> dict[str, list[TimedPoint]]: ...


@runtime_checkable
class HasArtifacts(Protocol):
    """Lists what a run wrote (checkpoints, exports) once it ended."""

    def artifacts(self, ref: BackendRef) -> list[dict[str, Any]]: ...


@runtime_checkable
class HasRunDir(Protocol):
    """Keeps each run in a directory on this machine's file system (local runs, Slurm's shared storage)."""

    def run_dir(self, ref: BackendRef) -> Path: ...


@runtime_checkable
class Requeues(Protocol):
    """Its engine may start a later attempt after reporting an end (Slurm requeues a job after a node
    failure), so the bot keeps looking at an ended run for a while; `requeues` says whether it does."""

    requeues: bool


@runtime_checkable
class CleansUp(Protocol):
    """Deletes what a run left in its engine once its end, log tail and metrics are recorded and nothing
    more is to be read from it (KubeRay keeps a finished RayJob, its submitter and its Secret for ever).
    Absent is fine; a failure raises `BackendError` and the bot tries again on its next sync."""

    def clean_up(self, ref: BackendRef) -> None: ...


@runtime_checkable
class Closable(Protocol):
    """Holds a connection to let go of when the caller is done (the Kubernetes client's pool)."""

    def close(self) -> None: ...


@runtime_checkable
class RunsHere(Backend, HasRunDir, HasMetrics, HasTimedMetrics, HasArtifacts, Protocol):
    """Runs each run as a process group of this machine, which one process here supervises to its end:
    `tp submit --local` itself, or the owner it spawns with `--detach`. The supervisor is the backend's;
    its caller says only what is recorded once the run has ended (`BackendKind.runs_here` says the same
    of a backend's name, without making one)."""

    def prepare(self, request: SubmitRequest) -> tuple[Path, BackendRef]:
        """Claim the run's directory for `request.attempt` (made, or adopted), starting nothing."""
        ...

    def spawn(self, run_dir: Path, argv: list[str], env: dict[str, str]) -> None:
        """Start `argv`, a process that ends up in `supervise(run_dir)`, with no tie to this one."""
        ...

    def supervise(
        self,
        run_dir: Path,
        echo: Callable[[str], None] | None = None,
        on_end: Callable[[JSONObject], None] | None = None,
    ) -> None:
        """Run the job of `run_dir` to its end in this process, once: returns at once where another
        process supervises it. `on_end(state)` runs after the end is written and before the run is let
        go of, so whoever waits for `supervised` to turn false finds the end recorded."""
        ...

    def supervised(self, run_dir: Path) -> bool:
        """Whether a process on this machine supervises the run now."""
        ...

    def run_key(self, run_dir: Path) -> tuple[str, str]:
        """The experiment and the run id the run directory was made for ("" where it does not say)."""
        ...
