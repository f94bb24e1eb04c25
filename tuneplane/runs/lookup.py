"""What `tp job ls`, `tp job status` and `tp job logs` look at: the runs of a lab as they are now.

A status file is the bot's record; a local run still going is asked its run directory, and `--refresh`
asks the run's backend. Nothing here writes: the bot owns status files.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable
from pathlib import Path

from tuneplane.backends.base import Backend, BackendRef, HasMetrics
from tuneplane.backends.factory import ClusterAccess, backend_kind, local_backend, make_backend
from tuneplane.constants import SUCCEEDED, TERMINAL, UNKNOWN, utc_now
from tuneplane.lab.load import open_lab
from tuneplane.lab.runs import (
    RunKey,
    UncheckedStatus,
    find_run,
    read_status,
    request_keys,
    status_keys,
    unchecked_status,
)
from tuneplane.models.run import RunStatus
from tuneplane.runs.observe import backend_ref, observe_run, with_metrics
from tuneplane.views.dashboard import duration_text, metric_cell, short_time
from tuneplane.views.runmetrics import vocabulary_of

LS_COLUMNS = ["RUN", "EXPERIMENT", "PHASE", "PROFILE", "STARTED", "DURATION", "METRIC"]


def run_rows(experiment: str | None, limit: int | None) -> tuple[list[list[str]], int]:
    """`tp job ls`: one row per run (newest first, `limit` of them), and how many more there are."""
    lab = open_lab()
    root = lab.root
    keys = sorted(
        set(request_keys(root)) | set(status_keys(root)), key=lambda k: (k.run_id, k.experiment), reverse=True
    )
    keys = [k for k in keys if experiment is None or k.experiment == experiment]
    shown = keys if limit is None else keys[:limit]
    local = functools.cache(lambda: local_backend(lab))  # built once, and only for a live local run
    return [_row(root, key, local) for key in shown], len(keys) - len(shown)


def _row(root: Path, key: RunKey, local: Callable[[], Backend]) -> list[str]:
    # unchecked, not the model: a listing of many runs stays cheap, and a broken file is one row
    try:
        raw: bytes | None = (root / key.status_rel).read_bytes()
    except FileNotFoundError:
        return [key.run_id, key.experiment, "(not submitted)", "", "", "", ""]
    except OSError:
        raw = None  # a corrupt status file is not a run waiting to be submitted
    status = unchecked_status(raw)
    if status is None:
        return [key.run_id, key.experiment, "(unreadable)", "", "", "", ""]
    status = _live(status, local)
    reason = f" ({status.reason})" if status.reason and status.phase != SUCCEEDED else ""
    return [
        key.run_id,
        key.experiment,
        status.phase + reason,
        status.profile,
        short_time(status.started_at),
        duration_text(status.started_at, status.finished_at),
        metric_cell(status),
    ]


def _live(status: UncheckedStatus, local: Callable[[], Backend]) -> UncheckedStatus:
    """A local run still in progress, as its run directory says now (its status file is from the start).
    The lab's local backend reads it: a directory it did not make keeps the status as recorded."""
    backend = status.backend
    if status.phase in TERMINAL or backend is None:
        return status
    name = backend.backend or ""
    run_dir = backend.run_dir
    if not backend_kind(name).runs_here or not os.path.isdir(run_dir):
        return status
    ref = BackendRef(
        backend=name,
        kind=backend.kind,
        name=backend.name,
        run_dir=run_dir,
        uid=backend.uid,
    )
    obs = local().observe(ref)
    if obs.phase == UNKNOWN:
        return status
    return status.replace(phase=obs.phase, reason=obs.reason, started_at=obs.started_at or status.started_at)


def located(run: str) -> tuple[Path, RunKey, RunStatus | None]:
    """The lab, the run a reference names (id, prefix or EXP/RUN) and its status (None: not submitted)."""
    root = open_lab().root
    key = find_run(root, run)
    return root, key, read_status(root, key)


def current_status(root: Path, status: RunStatus, refresh: bool | None, access: ClusterAccess) -> RunStatus:
    """`tp job status`: the recorded status, asked anew of its backend when `refresh` says so (by default
    only for a local run whose directory is on this machine: cheap and safe to look at live)."""
    live = refresh if refresh is not None else _here(status)
    if not live or status.phase in TERMINAL or status.backend is None:
        return status
    ref = backend_ref(status)
    assert ref is not None
    backend = backend_for(root, ref.backend, access)
    fresh = observe_run(backend, status, utc_now())
    if isinstance(backend, HasMetrics):
        summary, series = backend.metrics(ref)
        if summary:
            vocab = vocabulary_of(status.method)
            fresh = with_metrics(fresh, summary, series, list(vocab.primary), vocab)
    return fresh


def _here(status: RunStatus) -> bool:
    backend = status.backend
    return backend is not None and backend_kind(backend.backend).runs_here and os.path.isdir(backend.run_dir)


def backend_for(root: Path, name: str, access: ClusterAccess) -> Backend:
    """The backend a run was submitted to, built from the lab's settings (the one factory)."""
    return make_backend(name, open_lab(root), access)
