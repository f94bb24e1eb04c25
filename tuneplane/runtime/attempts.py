"""The job side's record of one attempt: written by the launcher when it starts and when it ends, read by
the backends. Standard library only (it runs in training images).

One record per attempt and node rank, at `$TUNEPLANE_RUN_DIR/attempts/<attempt>-<node rank>.json`. On
Kubernetes the end record also goes, compact and within the kubelet's 4,096 bytes, to the container's
termination message, where the backend reads it from the API. A record is a JSON object:

    {"attempt": 2, "node_rank": 0, "node": "gpu-7", "started_at": "2026-…Z", "finished_at": "2026-…Z",
     "exit_code": 143, "signal": 15, "error": "FileNotFoundError: data.jsonl", "log_tail": ["…"]}

`finished_at`, `exit_code`, `signal`, `error` and `log_tail` are absent from a start record. `signal` is
set when the trainer was ended by one (then `exit_code` is 128 + the signal, as a shell reports it).
`warning` is the GPU watchdog's finding (the run occupied more GPUs than granted), and `reason` is set
only when the job side knows why the attempt ended better than its exit says: `GpuOveruse`.
"""

from __future__ import annotations

import collections
import json
import os
import re
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import TypedDict, cast

from tuneplane.constants import ATTEMPT_ENV, ATTEMPT_REASONS, RUN_DIR_ENV, utc_now
from tuneplane.runtime.files import atomic_write

ATTEMPTS_DIR = "attempts"
TERMINATION_LIMIT = 4096  # bytes the kubelet keeps of a termination message
LOG_TAIL_LINES = 20
LINE_LIMIT = 500  # characters kept of one log line
RECORD_LIMIT = 64 * 1024  # bytes read of a record: a damaged or hostile one is not read whole


class AttemptRecord(TypedDict, total=False):
    """A record as read back: only the known fields, each of its type."""

    attempt: int
    node_rank: int
    node: str
    started_at: str
    finished_at: str
    exit_code: int
    signal: int
    error: str
    log_tail: list[str]
    warning: str
    reason: str


_FIELDS: dict[str, type | tuple[type, ...]] = {
    "attempt": int,
    "node_rank": int,
    "node": str,
    "started_at": str,
    "finished_at": str,
    "exit_code": int,
    "signal": int,
    "error": str,
    "log_tail": list,
    "warning": str,
    "reason": str,
}


def attempt_number(environ: Mapping[str, str] | None = None) -> int:
    """This job's attempt, from `TUNEPLANE_ATTEMPT` (1 when unset or not a positive number)."""
    text = (os.environ if environ is None else environ).get(ATTEMPT_ENV, "")
    return int(text) if text.isdigit() and int(text) > 0 else 1


def this_attempt(run_dir: Path, node_rank: int, environ: Mapping[str, str] | None = None) -> int:
    """This node's attempt: `TUNEPLANE_ATTEMPT`, or the one after the newest this node rank already
    recorded at or past it. An engine that replaces a job's pod (a Kubernetes Job under its backoff
    limit, a JobSet restart) starts the replacement with the first one's environment: it is a new
    attempt all the same, and its record must not overwrite the one before."""
    number = attempt_number(environ)
    recorded = [
        n for n, records in read_all(run_dir).items() if any(r.get("node_rank", 0) == node_rank for r in records)
    ]
    return max([number, *(n + 1 for n in recorded if n >= number)])


def record_path(run_dir: Path, attempt: int, node_rank: int) -> Path:
    return run_dir / ATTEMPTS_DIR / f"{attempt}-{node_rank}.json"


def run_dir_of(environ: Mapping[str, str] | None = None) -> Path | None:
    text = (os.environ if environ is None else environ).get(RUN_DIR_ENV, "")
    return Path(text) if text else None


def clean(record: Mapping[str, object]) -> AttemptRecord:
    """`record` with only the known fields of the right type, log lines cut to `LINE_LIMIT`."""
    kept: dict[str, object] = {}
    for key, kind in _FIELDS.items():
        value = record.get(key)
        if isinstance(value, kind) and not (kind is int and isinstance(value, bool)):
            kept[key] = value
    tail = kept.get("log_tail")
    if isinstance(tail, list):
        kept["log_tail"] = [line[:LINE_LIMIT] for line in tail if isinstance(line, str)][-LOG_TAIL_LINES:]
    for key in ("error", "warning"):
        text = kept.get(key)
        if isinstance(text, str):
            kept[key] = text[:LINE_LIMIT]
    if kept.get("reason") not in ATTEMPT_REASONS:
        kept.pop("reason", None)
    return cast(AttemptRecord, kept)  # every field checked against its type above


def encode(record: Mapping[str, object], limit: int | None = None) -> str:
    """`record` as one JSON line; with `limit`, log lines are dropped oldest first until it fits."""
    record = clean(record)
    text = json.dumps(record, separators=(",", ":"), ensure_ascii=False)
    while limit is not None and len(text.encode()) > limit and record.get("log_tail"):
        record["log_tail"] = record["log_tail"][1:]
        text = json.dumps(record, separators=(",", ":"), ensure_ascii=False)
    return text


def decode(text: str) -> AttemptRecord | None:
    """A record from its JSON text, or None when it is not one (a plain termination message, say)."""
    try:
        value = json.loads(text[:RECORD_LIMIT])
    except ValueError:
        return None
    if not isinstance(value, dict) or type(value.get("attempt")) is not int or value["attempt"] < 1:
        return None
    return clean(value)


def write(run_dir: Path, record: Mapping[str, object]) -> Path:
    """Write `record` atomically at its place under `run_dir`; returns the path.

    `run_dir` must be there (FileNotFoundError if not): where the run's storage has gone out of sight
    (a mount missing), making it again would lay a new tree on the disk beneath the mount point."""
    kept = clean(record)
    path = record_path(run_dir, kept.get("attempt", 1), kept.get("node_rank", 0))
    path.parent.mkdir(exist_ok=True)
    atomic_write(path, encode(record) + "\n", parents=False)
    return path


def read_all(run_dir: Path) -> dict[int, list[AttemptRecord]]:
    """Every attempt's records under `run_dir`, by attempt number, each list by node rank."""
    found: dict[int, list[AttemptRecord]] = {}
    folder = run_dir / ATTEMPTS_DIR
    try:
        names = sorted(os.listdir(folder))
    except OSError:
        return found
    for name in names:
        record = _read_one(folder / name)
        if record is not None:
            found.setdefault(record["attempt"], []).append(record)
    for records in found.values():
        records.sort(key=lambda item: item.get("node_rank", 0))
    return found


def _read_one(path: Path) -> AttemptRecord | None:
    if not path.name.endswith(".json") or path.is_symlink() or not path.is_file():
        return None
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            return decode(handle.read(RECORD_LIMIT))
    except OSError:
        return None


# ── what the job side learns from a trainer's output ──────────────────────────────────────────────

TRACEBACK_HEAD = "Traceback (most recent call last):"
# Exceptions that only say "a child failed": the child's own traceback, earlier in the output, is the
# cause a person needs (a wrapper's `subprocess.check_call`, torchrun's elastic agent, an exit).
WRAPPER_ERRORS = (
    "subprocess.CalledProcessError",
    "CalledProcessError",
    "ChildFailedError",
    "torch.distributed.elastic.multiprocessing.errors.ChildFailedError",
    "SystemExit",
    "KeyboardInterrupt",
)
_RANK_PREFIX = re.compile(r"^(?:\[(?:default)?rank\d+\]:|\d+: )")


def said(record: AttemptRecord) -> str:
    """What a person reads of an attempt from its record: the error, then the watchdog's warning when
    it is not already the error's cause."""
    error, warning = record.get("error", ""), record.get("warning", "")
    if not warning or warning in error:
        return error
    return f"{error}\nGPU watchdog: {warning}" if error else f"GPU watchdog: {warning}"


def trainer_error(lines: list[str]) -> str:
    """The trainer's own last exception line (`FileNotFoundError: … data.jsonl`) in its output, or ''.

    Every traceback's closing line is a candidate; a wrapper's (CalledProcessError, torchrun's
    ChildFailedError) counts only when no traceback of the trainer itself is there."""
    found: list[str] = []
    inside = False
    for raw in lines:
        line = _RANK_PREFIX.sub("", raw.rstrip("\n"), count=1).rstrip()
        if line.strip() == TRACEBACK_HEAD:
            inside = True
            continue
        if inside and line and not line[0].isspace():
            found.append(line.strip())
            inside = False
    own = [line for line in found if not _is_wrapper(line)]
    return (own or found or [""])[-1][:LINE_LIMIT]


def _is_wrapper(line: str) -> bool:
    name = line.split(":", 1)[0].strip()
    return name in WRAPPER_ERRORS or name.endswith(".ChildFailedError")


class Tail:
    """The last lines one or more streams wrote (thread-safe; bounded memory whatever they print). Each
    stream keeps its own unfinished line, so two streams never splice into one line."""

    def __init__(self, keep: int = 400) -> None:
        self.lines: collections.deque[str] = collections.deque(maxlen=keep)
        self._partial: dict[str, str] = {}
        self._lock = threading.Lock()

    def feed(self, text: str, stream: str = "") -> None:
        with self._lock:
            parts = (self._partial.get(stream, "") + text).split("\n")
            self._partial[stream] = parts.pop()[-LINE_LIMIT * 4 :]
            self.lines.extend(part.rstrip("\r")[:LINE_LIMIT] for part in parts)

    def snapshot(self) -> list[str]:
        with self._lock:
            return list(self.lines) + [part for part in self._partial.values() if part]


def end_fields(code: int, signal_number: int | None, output: list[str], errors: list[str]) -> dict[str, object]:
    """An end record's outcome: the exit code, the signal that ended the attempt (the code is 128 + N
    when it killed the trainer), the trainer's error line (from its stderr) and its last output lines."""
    fields: dict[str, object] = {
        "finished_at": utc_now(millis=True),
        "exit_code": code,
        "log_tail": output[-LOG_TAIL_LINES:],
    }
    if signal_number:
        fields["signal"] = signal_number
    error = trainer_error(errors)
    if error:
        fields["error"] = error
    return fields
