"""Stopping a local run's processes from a test as a machine's end would, without ever signalling a
process group whose number the kernel has since handed to another test's process; a local request's
`LocalRun`, read or changed."""

from __future__ import annotations

import signal
from collections.abc import Mapping

from tuneplane.backends.base import SubmitRequest
from tuneplane.backends.local import LocalRun
from tuneplane.backends.local.files import signal_group


def local_run(request: SubmitRequest) -> LocalRun:
    """The `LocalRun` a local request carries."""
    assert isinstance(request.payload, LocalRun)
    return request.payload


def with_run(request: SubmitRequest, **changes: object) -> SubmitRequest:
    """`request` with its `LocalRun`'s fields changed (a timeout, GPUs)."""
    return request.replace(payload=local_run(request).replace(**changes))


def kill_recorded(state: Mapping[str, object]) -> None:
    """SIGKILL the run's supervisor and its job, each only while its recorded group is still the run's."""
    signal_group(state.get("supervisor_pid"), signal.SIGKILL, state.get("supervisor_start"))
    signal_group(state.get("pgid"), signal.SIGKILL, state.get("pgid_start"))


def kill_job(state: Mapping[str, object]) -> None:
    """SIGKILL the run's job only (its supervisor then records how it ended)."""
    signal_group(state.get("pgid"), signal.SIGKILL, state.get("pgid_start"))
