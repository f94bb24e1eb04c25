"""What the collector reads: declared native outputs under the out dir, and how each becomes points.

A declaration (recipe or experiment `metrics.native`, handed to the job as the JSON list in
`TUNEPLANE_METRICS_NATIVE`) is a list of objects:

    {"format": "tensorboard", "path": "logs/tb"}                       every events.out.tfevents.* below
    {"format": "jsonl", "path": "logs/metrics.jsonl", "step": "step"}  wide: every number is a metric
    {"format": "jsonl", "path": "m.jsonl", "key": "name", "step": "it", "value": "val"}   long: one per line

`path` is relative to the out dir and must stay inside it; `prefix` (optional) is put before every key;
for wide JSON-lines, `values` names a nested object that holds the metrics (verl's `{"step", "data"}`).
The SDK's own leftovers (`.tuneplane/report-unsent-*.jsonl`, what `finish()` could not deliver) are
always collected too.
"""

from __future__ import annotations

import binascii
import errno
import json
import math
import os
import re
import struct
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import PurePosixPath

from tuneplane.collector import tfevents
from tuneplane.constants import METRICS_NATIVE_ENV
from tuneplane.runtime.records import FrozenRecord

FORMATS = ("tensorboard", "jsonl", "unsent")
UNSENT_GLOB = "report-unsent-"
MAX_LINE = 1024 * 1024  # a longer JSON line is not a metrics line; it is skipped and counted
MAX_SOURCES = 64
MAX_DEPTH = 16  # subdirectory levels searched below a tensorboard path

# step, unix time (None: unknown, the time it is collected), {key: value}: the SDK's record
Point = tuple[int, float | None, dict[str, float]]


class SourceError(ValueError):
    """A declaration that cannot be used; the message says which entry and why."""


class Source(FrozenRecord):
    format: str
    path: str
    key: str | None = None
    step: str = "step"
    value: str = "value"
    values: str | None = None
    prefix: str = ""


def parse(text: str) -> list[Source]:
    """The sources of a `TUNEPLANE_METRICS_NATIVE` value (a JSON list); raises SourceError."""
    try:
        raw = json.loads(text) if text.strip() else []
    except (ValueError, RecursionError) as exc:
        raise SourceError(f"{METRICS_NATIVE_ENV} is not valid JSON: {exc}") from None
    if not isinstance(raw, list) or len(raw) > MAX_SOURCES:
        raise SourceError(f"{METRICS_NATIVE_ENV} must be a JSON list of at most {MAX_SOURCES} objects")
    return [source_of(item, index) for index, item in enumerate(raw)]


_FIELDS = {"format", "path", "key", "step", "value", "values", "prefix"}


def source_of(item: object, index: int = 0) -> Source:
    where = f"metrics.native[{index}]"
    if not isinstance(item, dict):
        raise SourceError(f"{where}: must be an object with format and path")
    unknown = sorted(set(item) - _FIELDS)
    if unknown:
        raise SourceError(f"{where}: unknown field(s) {', '.join(unknown)}; known: {', '.join(sorted(_FIELDS))}")
    fmt = item.get("format")
    if fmt not in ("tensorboard", "jsonl"):
        raise SourceError(f"{where}.format: must be tensorboard or jsonl, got {fmt!r}")
    path = item.get("path")
    if not isinstance(path, str) or not path.strip():
        raise SourceError(f"{where}.path: must be a path relative to the out dir")
    pure = PurePosixPath(path)
    if pure.is_absolute() or ".." in pure.parts or "\0" in path:
        raise SourceError(f"{where}.path: {path!r} must stay inside the out dir (relative, no '..')")
    texts = {name: item.get(name) for name in ("key", "step", "value", "values", "prefix")}
    for name, value in texts.items():
        if value is not None and (not isinstance(value, str) or len(value) > 256):
            raise SourceError(f"{where}.{name}: must be a short string")
    return Source(
        fmt,
        str(pure),
        key=texts["key"],
        step=texts["step"] or "step",
        value=texts["value"] or "value",
        values=texts["values"],
        prefix=texts["prefix"] or "",
    )


def files_of(
    out_dir: str, source: Source, refused: Callable[[OSError], None] | None = None
) -> Iterator[tuple[str, str]]:
    """(relative name, absolute path) of each regular file a source covers, inside the out dir;
    `refused` is told of each folder that cannot be listed."""
    root = os.path.realpath(out_dir)
    target = os.path.join(root, source.path)
    real = os.path.realpath(target)
    if real != root and not real.startswith(root + os.sep):
        return
    if source.format == "jsonl":
        if os.path.isfile(real):
            yield source.path, real
        return
    if not os.path.isdir(real):
        return
    for folder, dirs, names in os.walk(real, onerror=refused):
        if folder.count(os.sep) - real.count(os.sep) >= MAX_DEPTH:
            dirs[:] = []  # deeper than any logger writes: bounded work (and os.walk's recursion)
        dirs.sort()
        for name in sorted(names):
            if "tfevents" in name:
                path = os.path.join(folder, name)
                if os.path.isfile(path) and not os.path.islink(path):
                    yield os.path.relpath(path, root), path


# Folders that name an attempt of the run or say only "events are here", not what the series is:
# NeMo-RL's `exp_001/tensorboard/`, Lightning's `lightning_logs/version_0/`, transformers' default
# `runs/<Mon DD_HH-MM-SS>_<host>/`, and the `<unix time>/` folder of `add_hparams`' metrics (torch's
# and tensorboardX's `str(time.time())`). A restarted job writes the same series under the next attempt.
_ATTEMPT = re.compile(
    r"(?:exp|version|run|attempt|trial)[_-]?\d+|[A-Z][a-z]{2}\d{2}_\d{2}-\d{2}-\d{2}_.+"
    r"|\d{9,11}(?:\.\d+)?"
)
_PLACES = frozenset({"tensorboard", "tensorboard_logs", "tb", "tb_logs", "events", "logs", "runs", "lightning_logs"})


def tb_key(source: Source, relname: str, tag: str) -> str:
    """The key of a TensorBoard tag: the declared prefix, the folders below the declared path that
    name a series, then the tag as written.

    A folder names a series when two writers use the same tags in sibling folders (Keras's `train/`
    and `validation/`): dropping it would make one series overwrite the other step by step. Folders
    that only name an attempt of the run or a place for events (`_ATTEMPT`, `_PLACES`) are left out,
    so a restarted job continues the same series. `add_scalars(main, {name: v})` writes each name's
    events, tagged `main`, to a folder of its own (torch's `<main with _ for />_<name>/`,
    tensorboardX's `<main>/<name>/`): that series is `main/name`, as the person wrote it."""
    folder = os.path.dirname(os.path.relpath(relname, source.path))
    parts = [p for p in folder.split(os.sep) if p and p != "."]
    name = ""
    flat = tag.replace("/", "_") + "_"
    nested = tag.split("/")
    if parts and parts[-1].startswith(flat) and len(parts[-1]) > len(flat):
        name, parts = parts[-1][len(flat) :], parts[:-1]
    elif len(parts) > len(nested) and parts[-len(nested) - 1 : -1] == nested:
        name, parts = parts[-1], parts[: -len(nested) - 1]
    kept = [p for p in parts if p.lower() not in _PLACES and not _ATTEMPT.fullmatch(p)]
    return source.prefix + "".join(f"{p}/" for p in kept) + tag + (f"/{name}" if name else "")


Note = Callable[[str], None]  # takes what is wrong with one line, for a `file:line: …` message


def _skip(counts: dict[str, int], why: str, note: Note | None, detail: str) -> list[Point]:
    counts[why] = counts.get(why, 0) + 1
    if note is not None:
        note(detail)
    return []


def jsonl_points(source: Source, line: bytes, counts: dict[str, int], note: Note | None = None) -> list[Point]:
    """The points of one JSON line (no trailing newline); a bad line is counted (and told to `note`,
    with what to fix), not raised."""
    try:
        obj = json.loads(line)
    except UnicodeDecodeError as exc:
        return _skip(
            counts,
            "bad json line",
            note,
            f"not UTF-8 text (byte {exc.start + 1} of the line); write JSON lines as UTF-8",
        )
    except ValueError as exc:
        where = f" at column {exc.colno}" if isinstance(exc, json.JSONDecodeError) else ""
        return _skip(counts, "bad json line", note, f"not valid JSON{where}; write one JSON object per line")
    except RecursionError:
        return _skip(counts, "bad json line", note, "JSON nested too deeply; write one flat object per line")
    if not isinstance(obj, dict):
        return _skip(
            counts,
            "line is not an object",
            note,
            f"a JSON {type(obj).__name__}, not an object; write one object per line",
        )
    step = _step(obj.get(source.step))
    if step is None:
        return _skip(
            counts,
            "missing or bad step",
            note,
            f"no whole-number {source.step!r} field; give each line its step, or declare the "
            "field that holds it as `step:`",
        )
    ts = unix_time(obj.get("ts", obj.get("time", obj.get("wall_time"))))
    if source.key is not None:
        key, value = obj.get(source.key), _number(obj.get(source.value))
        if isinstance(key, str) and key and _infinite(obj.get(source.value)):
            return _not_finite(counts, note, [source.value])
        if not isinstance(key, str) or not key or value is None:
            return _skip(
                counts,
                "missing key or value",
                note,
                f"needs a text {source.key!r} and a finite number {source.value!r} field "
                "(the declared `key:` and `value:`)",
            )
        return [(step, ts, {source.prefix + key: value})]
    holder = obj.get(source.values) if source.values else obj
    if not isinstance(holder, dict):
        return _skip(
            counts,
            "missing values object",
            note,
            f"no {source.values!r} object holding the metrics (the declared `values:`)",
        )
    values: dict[str, float] = {}
    infinite: list[str] = []
    _flatten(
        holder,
        "",
        values,
        skip=set() if source.values else {source.step, "ts", "time", "wall_time"},
        depth=0,
        infinite=infinite,
    )
    if infinite:
        _not_finite(counts, note, infinite)
    return [(step, ts, {source.prefix + k: v for k, v in values.items()})] if values else []


def unix_time(value: object) -> float | None:
    """A line's time as the writers spell it: seconds, milliseconds or nanoseconds since the epoch
    (told apart by size), or ISO-8601 text (UTC when it names no zone); None when absent or not a
    time, so the point takes the time it is collected rather than 1970."""
    if isinstance(value, str):
        try:
            parsed = datetime.fromisoformat(value.strip())
        except ValueError:
            return None
        return (parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)).timestamp()
    number = _number(value)
    if number is None or number <= 0:
        return None
    for scale in (1.0, 1e3, 1e6, 1e9):  # the first reading before the year 2500
        if number / scale < 16_725_225_600:
            return number / scale
    return None


def _flatten(
    obj: dict[str, object], prefix: str, out: dict[str, float], skip: set[str], depth: int, infinite: list[str]
) -> None:
    if depth > 8:
        return
    for key, value in obj.items():
        if not prefix and key in skip:
            continue
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            _flatten(value, name + ".", out, skip, depth + 1, infinite)
            continue
        number = _number(value)
        if number is not None:
            out[name] = number
        elif _infinite(value):
            infinite.append(name)


def _infinite(value: object) -> bool:
    """A number a chart cannot hold: NaN, an infinity (Python's json writes them), or an integer past
    a float's range."""
    return not isinstance(value, bool) and isinstance(value, (int, float)) and _number(value) is None


def _not_finite(counts: dict[str, int], note: Note | None, names: list[str]) -> list[Point]:
    shown = ", ".join(repr(n) for n in names[:5]) + (f" and {len(names) - 5} more" if len(names) > 5 else "")
    return _skip(
        counts,
        "value not finite",
        note,
        f"{shown}: NaN, an infinity or out of range, skipped "
        "(the SDK drops these too); log a finite number or leave the key out",
    )


def _number(value: object) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    try:
        number = float(value)
    except OverflowError:
        return None
    return number if math.isfinite(number) else None


def _step(value: object) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value if -(2**63) <= value < 2**63 else None
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return None


_RANKED = re.compile(r"report-(?:unsent|spill)-rank(\d{1,9})-")


def unsent_suffix(name: str) -> str:
    """What the receiver appends to the keys of a rank's points when every rank reports (`@rank<N>`,
    see `tuneplane.ingest.bodies`), for a file the SDK of such a rank left (`report-unsent-rank<N>-*`):
    the collector uploads it as rank zero, so without it ranks' series would overwrite each other."""
    found = _RANKED.match(os.path.basename(name))
    return f"@rank{int(found.group(1))}" if found else ""


def unsent_points(line: bytes, counts: dict[str, int], note: Note | None = None, suffix: str = "") -> list[Point]:
    """One line the SDK's `finish()` left behind: a block `{"keys": [...], "rows": "<base64>"}` of
    packed rows (`tuneplane.report._spill`), or `[step, unix_time, {key: value}]` from older SDKs;
    `suffix` (`unsent_suffix`) goes after every key."""
    try:
        found = json.loads(line)
        if isinstance(found, dict):
            points = _unsent_block(found)
            return (
                [(step, unix, {k + suffix: v for k, v in values.items()}) for step, unix, values in points]
                if suffix
                else points
            )
        step, ts, values = found
        record = {str(k) + suffix: float(v) for k, v in values.items()}
        return [(int(step), float(ts), record)]
    except (ValueError, TypeError, AttributeError, RecursionError, OverflowError, KeyError) as exc:
        return _skip(counts, "bad unsent line", note, f"not a line tuneplane.report wrote ({type(exc).__name__})")


def _unsent_block(block: dict[str, object]) -> list[Point]:
    keys = block["keys"]
    if not isinstance(keys, list) or not all(isinstance(k, str) for k in keys) or not keys:
        raise ValueError("keys must be a list of names")
    layout = struct.Struct(f"<qd{len(keys)}d")
    rows = block["rows"]
    if not isinstance(rows, str):  # what a2b_base64 would refuse with the same TypeError
        raise TypeError("rows must be base64 text")
    raw = binascii.a2b_base64(rows, strict_mode=True)
    if len(raw) % layout.size:
        raise ValueError("partial row")
    # NaN stands for "no value"; the SDK drops (and counts) anything else that is not finite.
    return [
        (step, unix, {k: v for k, v in zip(keys, values, strict=True) if v == v})
        for step, unix, *values in layout.iter_unpack(raw)
    ]


SAME_TIME = 0.001  # seconds: scalars of one step written this close together share a record


def tb_points(source: Source, relname: str, payloads: list[bytes], counts: dict[str, int]) -> list[Point]:
    """The scalars of consecutive events with the same step become one record, as one `log()` call."""
    points: list[tuple[int, float, dict[str, float]]] = []  # every event has its wall time
    keys: dict[str, str] = {}  # tag → key, for this file
    for payload in payloads:
        try:
            found = tfevents.scalars(payload)
        except tfevents.ProtoError:
            counts["bad event"] = counts.get("bad event", 0) + 1
            continue
        for scalar in found:
            key = keys.get(scalar.tag) or keys.setdefault(scalar.tag, tb_key(source, relname, scalar.tag))
            # one record has one time: a scalar logged with its own wall time (a hardware sample
            # written with `walltime=`) starts a record of its own, so its time is kept
            if (
                points
                and points[-1][0] == scalar.step
                and key not in points[-1][2]
                and abs(points[-1][1] - scalar.wall_time) < SAME_TIME
            ):
                points[-1][2][key] = scalar.value
            else:
                points.append((scalar.step, scalar.wall_time, {key: scalar.value}))
    return list(points)


def next_data(fd: int, offset: int, size: int) -> int:
    """Where the data from `offset` on starts, where the file system tells holes (`SEEK_DATA`): `size`
    when only a hole follows, `offset` itself where it cannot tell (then the zeros are read)."""
    if not hasattr(os, "SEEK_DATA"):
        return offset
    try:
        return min(os.lseek(fd, offset, os.SEEK_DATA), size)
    except OSError as exc:
        return size if exc.errno == errno.ENXIO else offset
