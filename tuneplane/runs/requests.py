"""A run request from command-line flags: the one builder `tp render`, `tp submit`, `tp rerun`,
`tp export` and `tp eval` share, so a flag means the same thing to each of them.

`read_flags` turns the flags as typed (`TypedFlags`: text) into `RunFlags` (`--set` read by the types the
experiment declares, `--timeout` in seconds); `request_from_flags` makes the `RunRequest`, and `requester`
names who asks, as the request's commit will (so `tp render EXP` shows the annotation `tp submit` writes).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, TypeVar

from tuneplane.check.params import parse_sets
from tuneplane.check.setkeys import experiment_set_keys
from tuneplane.constants import USER_ENV, Scalar
from tuneplane.errors import UsageError
from tuneplane.lab.catalog import Catalog, load_catalog
from tuneplane.lab.gitrepo import FALLBACK_EMAIL, FALLBACK_NAME, GitFailed, GitRepo
from tuneplane.lab.load import Lab, load_lab
from tuneplane.lab.modelparse import validate_or_raise
from tuneplane.models.run import Inputs, RunRequest
from tuneplane.runtime.patterns import lazy_pattern

F = TypeVar("F", bound="RunFlags")
# the files a trainer reads as local data (the TRL templates' loaders); a name without one is a Hub id
DATA_SUFFIXES = (".jsonl", ".json", ".parquet", ".csv")
LOCAL_INPUTS = {
    "model": "--model",
    "train_data": "--train-data",
    "validation_data": "--validation-data",
    "data": "--data",
}


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

    @classmethod
    def of(cls: type[F], flags: RunFlags, **more: Any) -> F:
        """`flags` as this subclass (`SubmitOptions`), with what only it takes in `more`."""
        return cls(**{f.name: getattr(flags, f.name) for f in fields(RunFlags)}, **more)


@dataclass(frozen=True)
class TypedFlags:
    """The run flags `tp render EXP` and `tp submit EXP` share, as typed."""

    experiment: str = ""
    profile: str = ""
    image: str = ""
    observability_url: str = ""
    sets: Sequence[str] = ()
    model: str = ""
    train_data: str = ""
    validation_data: str = ""
    timeout: str = ""
    message: str = ""


def read_flags(typed: TypedFlags, lab: Lab | None = None, catalog: Catalog | None = None) -> RunFlags:
    """`typed` read: each `--set` value by the type its key declares in the experiment (the lab and the
    catalog are loaded for that when not given), `--timeout` in seconds. Raises UsageError."""
    keys = _set_keys(typed.experiment, lab, catalog) if typed.sets else None
    inputs = Inputs(model=typed.model, train_data=typed.train_data, validation_data=typed.validation_data)
    return RunFlags(
        typed.experiment,
        typed.profile,
        typed.image,
        typed.observability_url,
        parse_sets(list(typed.sets), keys),
        inputs,
        timeout=parse_duration(typed.timeout),
        message=typed.message,
    )


def request_from_flags(flags: RunFlags, *, run_id: str, command: str, **recorded: str) -> RunRequest:
    """The RunRequest `flags` describe; `recorded` adds who asked and when (`requested_by`, `created_at`)."""
    data: dict[str, Any] = {
        "experiment": flags.experiment,
        "run_id": run_id,
        "operation": flags.operation,
        "profile": flags.profile,
        "image": flags.image,
        "observability_url": flags.observability_url,
        "set": flags.sets,
        "inputs": flags.inputs,
        "timeout": flags.timeout,
        "message": flags.message,
        "commit": flags.commit,
        "rerun_of": flags.rerun_of,
        **recorded,
    }
    return validate_or_raise(RunRequest, data, "the command line", hint=f"see `tp {command} --help`")


def requester(repo: GitRepo) -> str:
    """Who asks for a run, for its request and the job's `requested-by`: git's identity (`Name <email>`,
    or the half git has), else `$TUNEPLANE_USER`, else `$USER`, so a container or login node with no
    git identity still names its user. tp's own identity, which `GitRepo.ensure_identity` writes into a
    repository git gives none, names no one and is skipped; it is the answer only when nothing else
    names anyone. Render and submit both ask here, so a preview names its submitted request's requester."""
    parts = []
    for key, own in (("user.name", FALLBACK_NAME), ("user.email", FALLBACK_EMAIL)):
        try:
            value = repo.git("config", "--get", key).strip()
        except GitFailed:
            value = ""
        parts.append("" if value == own else value)
    name, email = parts
    person = f"{name} <{email}>" if name and email else name or email
    return (
        person
        or os.environ.get(USER_ENV, "").strip()
        or os.environ.get("USER", "").strip()
        or f"{FALLBACK_NAME} <{FALLBACK_EMAIL}>"
    )


_DURATION = lazy_pattern(r"^\s*(\d+)\s*([smhd]?)\s*$")


def parse_duration(text: str) -> int | None:
    """`--timeout`: `3600`, `90s`, `45m`, `12h`, `2d` → seconds; empty → no timeout."""
    if not text:
        return None
    match = _DURATION().match(text.lower())
    if match is None:
        raise UsageError(f"--timeout {text!r} is not a duration", hint="use seconds or a unit: 5400, 90m, 12h, 2d")
    return int(match.group(1)) * {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400}[match.group(2)]


def _set_keys(experiment: str, lab: Lab | None, catalog: Catalog | None) -> dict[str, Any]:
    """The parameters the experiment declares, so `--set` reads each value by its type."""
    if lab is None:
        try:
            lab = load_lab(None)
        except UsageError:
            return {}  # not in a lab: the command says so when it loads the lab itself
    return experiment_set_keys(lab, catalog or load_catalog(), experiment)


def check_local_inputs(lab_root: Path, inputs: Inputs) -> None:
    """A `--local` run reads its inputs on this machine: a path that is not there is refused now,
    before the request is committed, not by the trainer once the run has started.

    A value is a path when it is absolute, starts with `.` or `~`, or names a data file (`.jsonl`,
    `.json`, `.parquet`, `.csv`); a relative one is read from the lab's root, the run's working
    directory. Anything else (`Qwen/Qwen3-0.6B`, `org/data-set`) is a Hub name, which the trainer
    fetches itself."""
    for name, flag in LOCAL_INPUTS.items():
        value = str(getattr(inputs, name))
        if not value or not _looks_local(value):
            continue
        path = Path(value).expanduser()
        if not (path if path.is_absolute() else lab_root / path).exists():
            raise UsageError(
                f"{flag} {value}: no such file or folder on this machine, where a --local run reads it",
                hint="check the path (a relative one is read from the lab's root); a Hub name is owner/name",
            )


def _looks_local(value: str) -> bool:
    return value.startswith(("/", ".", "~")) or value.lower().endswith(DATA_SUFFIXES)
