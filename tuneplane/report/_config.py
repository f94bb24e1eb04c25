"""Where the SDK's settings come from: the job environment, overridden by `init()` keyword arguments.

Every knob that decides how long something waits is here so tests and unusual deployments can shrink
or stretch it without touching code.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from typing import Any, SupportsFloat, cast

from tuneplane.constants import (
    JOB_ENABLED,
    JOB_ENDPOINT,
    JOB_RUN_ID,
    JOB_TOKEN,
    MONITOR_INTERVAL_ENV,
    OUT_DIR_ENV,
    REPORT_ALL_RANKS_ENV,
)
from tuneplane.runtime.records import FrozenRecord, field

# Tunables: init keyword -> (environment variable, default, minimum, maximum). A value outside its
# range (inf, nan, negative, 1e308) falls back to the default with one warning: a wait of 1e308 s
# is no wait a thread can make (it raises) and an infinite timeout hangs the sender on a dead peer.
_FLOATS = {
    "flush_interval": ("TUNEPLANE_REPORT_FLUSH_INTERVAL", 1.0, 0.001, 3600.0),
    "retry_base": ("TUNEPLANE_REPORT_RETRY_BASE", 0.5, 0.001, 3600.0),
    "retry_cap": ("TUNEPLANE_REPORT_RETRY_CAP", 10.0, 0.001, 3600.0),
    "finish_timeout": ("TUNEPLANE_REPORT_FINISH_TIMEOUT", 5.0, 0.0, 86400.0),
    "request_timeout": ("TUNEPLANE_REPORT_REQUEST_TIMEOUT", 10.0, 0.01, 3600.0),
    "monitor_interval": (MONITOR_INTERVAL_ENV, 10.0, 0.01, 86400.0),
}
# The receiver takes at most 50,000 points a request (tuneplane.ingest.gate.Limits.max_points).
MAX_BATCH_POINTS = 50_000
_INTS = {
    "buffer_bytes": ("TUNEPLANE_REPORT_BUFFER_BYTES", 32 * 1024 * 1024, 16 * 1024, 1 << 40),
    "spill_bytes": ("TUNEPLANE_REPORT_SPILL_BYTES", 1024 * 1024 * 1024, 0, 1 << 50),
    "batch_points": ("TUNEPLANE_REPORT_BATCH_POINTS", 10_000, 1, MAX_BATCH_POINTS),
}
# Keys one record may hold: a wider call is queued as several records of one step, so a batch always
# fits the receiver (it reads at most 10,000 keys a rows/1 block, 50,000 points a request).
MAX_RECORD_KEYS = 5_000
OPTION_NAMES = frozenset(_FLOATS) | frozenset(_INTS) | {"all_ranks"}
SPILL_DIR = ".tuneplane"

# Upper-bound estimate of one queued item's memory (see `_queued`): an id row is one bytes object of
# id, step, time and 8 bytes per value, rounded up to the allocator's 16 bytes, plus its deque slot;
# the key strings are shared by every row with the same keys. Each key set's putter charges this
# number; tests check the bound with tracemalloc. A record `(entry, row)` (a key set past the cache's
# cap) also charges its tuple, TUPLE_COST.
TUPLE_COST = 64


def record_cost(keys: int) -> int:
    return (33 + 8 * (keys + 3) + 15) // 16 * 16 + 8


class Config(FrozenRecord):
    """One session's settings; frozen so the sender thread can read it without locks."""

    endpoint: str
    run_id: str
    token: str
    rank: int
    all_ranks: bool
    out_dir: str
    flush_interval: float = 1.0
    retry_base: float = 0.5
    retry_cap: float = 10.0
    finish_timeout: float = 5.0
    request_timeout: float = 10.0
    monitor_interval: float = 10.0
    buffer_bytes: int = 32 * 1024 * 1024
    spill_bytes: int = 1024 * 1024 * 1024
    batch_points: int = 10_000
    notes: tuple[str, ...] = field(default=())

    @property
    def sends(self) -> bool:
        """Rank zero reports; other ranks only when asked to."""
        return self.rank == 0 or self.all_ranks

    @property
    def rank_label(self) -> int | None:
        return self.rank if self.all_ranks else None


def enabled_in(env: Mapping[str, str]) -> bool:
    """Cheap gate: a token, and no explicit `TUNEPLANE_JOB_ENABLED=0`."""
    if env.get(JOB_ENABLED, "").strip() == "0":
        return False
    return bool(env.get(JOB_TOKEN, "").strip())


def rank_of(env: Mapping[str, str]) -> int:
    """`RANK` (global) before `LOCAL_RANK`; an unparsable or absent rank counts as zero."""
    for name in ("RANK", "LOCAL_RANK"):
        raw = env.get(name, "").strip()
        if raw:
            try:
                return int(raw)
            except ValueError:
                return 0
    return 0


def _truthy(raw: str) -> bool:
    return raw.strip().lower() in {"1", "true", "yes", "on"}


def from_env(env: Mapping[str, str], options: Mapping[str, object]) -> Config | None:
    """The session config, or None when this process must not report."""
    if not enabled_in(env):
        return None
    endpoint = env.get(JOB_ENDPOINT, "").strip()
    run_id = env.get(JOB_RUN_ID, "").strip()
    if not endpoint or not run_id:
        pairs = ((JOB_ENDPOINT, endpoint), (JOB_RUN_ID, run_id))
        missing = [name for name, value in pairs if not value]
        _say(f"reporting is off: TUNEPLANE_JOB_TOKEN is set but {', '.join(missing)} is not")
        return None
    all_ranks = options.get("all_ranks")
    if all_ranks is None:
        all_ranks = _truthy(env.get(REPORT_ALL_RANKS_ENV, ""))
    config = Config(
        endpoint=endpoint.rstrip("/"),
        run_id=run_id,
        token=env[JOB_TOKEN].strip(),
        rank=rank_of(env),
        all_ranks=bool(all_ranks),
        out_dir=env.get(OUT_DIR_ENV, "").strip(),
    )
    notes: list[str] = []
    values: dict[str, Any] = {}  # each field's own type (int or float): replace() checks it per name
    for name, (var, default, minimum, maximum) in {**_FLOATS, **_INTS}.items():
        values[name] = _number(name, var, (default, minimum, maximum), env, options, notes)
    return config.replace(notes=tuple(notes), **values)


def _number(
    name: str,
    var: str,
    bounds: tuple[float, float, float],
    env: Mapping[str, str],
    options: Mapping[str, object],
    notes: list[str],
) -> float:
    """The setting's value, or its default (and a note) when it is no number in its range."""
    default, minimum, maximum = bounds
    kind = int if name in _INTS else float
    raw = options.get(name)
    source = f"init({name}=...)"
    if raw is None:
        raw, source = env.get(var, "").strip() or None, var
    if raw is None:
        return kind(default)
    try:
        number = float(cast("str | SupportsFloat", raw))  # anything else raises, and is noted below
    except (TypeError, ValueError, OverflowError):
        notes.append(f"{source}={str(raw)[:40]!r} is not a number; using the default {kind(default)}")
        return kind(default)
    if not minimum <= number <= maximum:  # also NaN, which compares false
        notes.append(
            f"{source}={str(raw)[:40]!r} is outside {kind(minimum)}..{kind(maximum)}; using the default {kind(default)}"
        )
        return kind(default)
    return kind(number)


def _say(message: str) -> None:
    try:
        print(f"tuneplane.report: {message}", file=sys.stderr, flush=True)
    except (OSError, ValueError):
        pass
