"""A run request from command-line flags: the one builder `tp render`, `tp submit`, `tp rerun`,
`tp export` and `tp eval` share, so a flag means the same thing to each of them."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from tuneplane.constants import Scalar
from tuneplane.lab.modelparse import validate_or_raise
from tuneplane.models.run import Inputs, RunRequest


@dataclass(frozen=True)
class RunFlags:
    """What a person asked for on the command line; `sets` already parsed by `check.params.parse_sets`."""

    experiment: str
    profile: str
    image: str = ""
    observability_url: str = ""
    sets: dict[str, Scalar] = field(default_factory=dict)
    inputs: Inputs | dict[str, str] = field(default_factory=Inputs)
    operation: str = "train"
    timeout: int | None = None
    message: str = ""
    commit: str = ""  # reruns: pin the job to this commit
    rerun_of: str = ""


def request_from_flags(flags: RunFlags, *, run_id: str, command: str, **recorded: str) -> RunRequest:
    """The RunRequest `flags` describe; `recorded` adds who asked and when (`requested_by`, `created_at`)."""
    data: dict[str, Any] = {
        "experiment": flags.experiment, "run_id": run_id, "operation": flags.operation,
        "profile": flags.profile, "image": flags.image, "observability_url": flags.observability_url,
        "set": flags.sets, "inputs": flags.inputs, "timeout": flags.timeout, "message": flags.message,
        "commit": flags.commit, "rerun_of": flags.rerun_of, **recorded,
    }
    return validate_or_raise(RunRequest, data, "the command line", hint=f"see `tp {command} --help`")
