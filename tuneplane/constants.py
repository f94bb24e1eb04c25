"""Names and values every layer agrees on: exit codes, run phases, shared types. Standard library only.

The job side (the launcher, the SDK) imports this module too, so it must stay free of third-party imports.
"""

from __future__ import annotations

import typing
from datetime import UTC, datetime
from enum import StrEnum
from typing import Literal

# Exit codes of `tp` (docs/reference/commands.md): library code raises, only the CLI picks one.
EXIT_OK = 0
EXIT_PROBLEMS = 1  # the command ran and found problems (validate), or the operation failed
EXIT_USAGE = 2  # bad arguments or a file that cannot be parsed
EXIT_INTERNAL = 3  # a bug in tp: the traceback is shown
# EX_CONFIG from sysexits.h: the launcher's exit code for a job whose configuration is wrong; a
# backend seeing it knows that retrying cannot help.
CONFIG_ERROR_EXIT = 78

Scalar = bool | int | float | str


class RenderFormat(StrEnum):
    """How `tp render`, `tp export` and `tp eval` print what they render."""

    yaml = "yaml"
    json = "json"


PREVIEW_RUN_ID = "00000000-000000-000000"  # a run not requested yet renders under this fixed id

Phase = Literal["Submitted", "Pending", "Running", "Succeeded", "Failed", "Cancelled"]
PHASES: tuple[Phase, ...] = ("Submitted", "Pending", "Running", "Succeeded", "Failed", "Cancelled")
TERMINAL: frozenset[str] = frozenset({"Succeeded", "Failed", "Cancelled"})
# What a backend may report: a phase (never `Submitted`, which only the bot writes) or that it cannot tell.
ObservedPhase = Literal["Pending", "Running", "Succeeded", "Failed", "Cancelled", "Unknown"]
_OBSERVED: frozenset[str] = frozenset(typing.get_args(ObservedPhase))


def observed_phase(text: str) -> ObservedPhase:
    """`text` as a phase a backend may report, or `Unknown` for anything else (a damaged state file)."""
    return typing.cast(ObservedPhase, text) if text in _OBSERVED else "Unknown"

# The environment contract's names that more than one layer reads or writes (CONTRACT §6).
ENV_PREFIX = "TUNEPLANE_"
JOB_TOKEN = "TUNEPLANE_JOB_TOKEN"
HF_TOKEN = "HF_TOKEN"
INGEST_SECRET_ENV = "TUNEPLANE_INGEST_SECRET"
STORAGE_ROOT_ENV = "TUNEPLANE_STORAGE_ROOT"


def utc_now() -> str:
    """ISO-8601 UTC with second precision, the form every time in a status file takes."""
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
