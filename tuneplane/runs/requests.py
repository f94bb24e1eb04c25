"""A run request from the command line, built once: the one builder `tp render`, `tp submit`, `tp sweep`,
`tp rerun`, `tp export` and `tp eval` share, so a flag means the same thing to each of them.

`TypedFlags` keeps the command line as typed (the text Typer gives; `tp render` keeps it in its options).
`read_request` reads it (`read_fields`: each `--set` by the type the experiment declares, `--timeout` in
seconds) and validates it into the `RunRequest`; code that already holds parsed values (a rerun, a
sweep's trials, `tp export`/`tp eval`) makes its request with `new_request`, the same one validation,
so a bad value is "the command line" and the command's own `--help` for every one of them. A sweep
reads its shared fields with `read_fields` too and validates them into its own `Sweep`. `requester`
names who asks, as the request's commit will (so `tp render EXP` shows the annotation `tp submit`
writes); `tp submit` stamps it and the time where a request leaves them empty.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from tuneplane.check.params import parse_sets
from tuneplane.check.setkeys import experiment_set_keys
from tuneplane.constants import USER_ENV
from tuneplane.errors import UsageError
from tuneplane.lab.catalog import Catalog, load_catalog
from tuneplane.lab.gitrepo import FALLBACK_EMAIL, FALLBACK_NAME, GitFailed, GitRepo
from tuneplane.lab.load import Lab, load_lab
from tuneplane.lab.modelparse import validate_or_raise
from tuneplane.models.run import Inputs, RunRequest
from tuneplane.runtime.patterns import lazy_pattern
from tuneplane.runtime.records import FrozenRecord

# the files a trainer reads as local data (the TRL templates' loaders); a name without one is a Hub id
DATA_SUFFIXES = (".jsonl", ".json", ".parquet", ".csv")
LOCAL_INPUTS = {
    "model": "--model",
    "train_data": "--train-data",
    "validation_data": "--validation-data",
    "data": "--data",
}


class TypedFlags(FrozenRecord):
    """The run flags `tp render EXP`, `tp submit EXP` and `tp sweep EXP` share, as typed."""

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


def read_request(
    typed: TypedFlags,
    *,
    run_id: str,
    command: str,
    lab: Lab | None = None,
    catalog: Catalog | None = None,
    **recorded: str,
) -> RunRequest:
    """The RunRequest `typed` asks for, as `run_id`; `recorded` adds who asked and when (`requested_by`,
    `created_at`). The lab and the catalog are loaded to read `--set` when not given. Raises UsageError
    naming the command line and `tp <command> --help`."""
    return new_request(command=command, run_id=run_id, **read_fields(typed, lab, catalog), **recorded)


def read_fields(typed: TypedFlags, lab: Lab | None = None, catalog: Catalog | None = None) -> dict[str, object]:
    """The request's fields `typed` gives, read but not yet validated: each `--set` value by the type its
    key declares in the experiment, `--timeout` in seconds. Raises UsageError."""
    keys = _set_keys(typed.experiment, lab, catalog) if typed.sets else None
    return {
        "experiment": typed.experiment,
        "profile": typed.profile,
        "image": typed.image,
        "observability_url": typed.observability_url,
        "set": parse_sets(list(typed.sets), keys),
        "inputs": Inputs(model=typed.model, train_data=typed.train_data, validation_data=typed.validation_data),
        "timeout": parse_duration(typed.timeout),
        "message": typed.message,
    }


def new_request(*, command: str, **fields: object) -> RunRequest:
    """`fields` validated into a RunRequest: the one check every request tp makes passes, whose first
    problem names the command line and `see tp <command> --help`."""
    return validate_or_raise(RunRequest, fields, "the command line", hint=f"see `tp {command} --help`")


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
