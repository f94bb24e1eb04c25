"""Run ids, and the two files of every run: its request (`runs/`) and its status (`status/`).

A run id is `YYYYMMDD-HHMMSS-<6 hex>` in UTC: it sorts by submission time and needs no coordination
(two people submitting in the same second collide with probability 1 in 16.7 million, and the request
file is created exclusively, so a collision is refused, never overwritten).
"""

from __future__ import annotations

import json
import math
import os
import re
import secrets
from collections.abc import Mapping
from datetime import UTC, datetime
from io import StringIO
from pathlib import Path
from types import MappingProxyType

from ruamel.yaml import YAML

from tuneplane.constants import BLOB_LIMIT, utc_moment
from tuneplane.errors import AmbiguousRun, RunNotFound, UsageError
from tuneplane.lab.fs import atomic_write, present, read_text
from tuneplane.lab.modelparse import first_problem_error, parse_model, validate_or_raise
from tuneplane.lab.schemarefs import comment_line, reference, schema_rel
from tuneplane.lab.yamlio import LoadFailed, load_yaml, parse_json, parse_yaml, yaml
from tuneplane.models.base import name_error
from tuneplane.models.run import RUN_ID, RunRequest, RunStatus, recorded_run_dir
from tuneplane.runtime.jsonvalue import JSONObject, JSONValue
from tuneplane.runtime.records import FrozenRecord

RUNS_DIR = "runs"
STATUS_DIR = "status"
# The bot's CI checkout: every file but the run files (a request, a status and a chart per run), which a
# pass with nothing to write never reads (`record.batch.widen` checks them out before a pass writes).
# The lab workflow's checkout step lists these patterns (tp init renders them from here).
SPARSE_CHECKOUT = ("/*", f"!/{RUNS_DIR}/*/", f"!/{STATUS_DIR}/*/*.json", f"!/{STATUS_DIR}/*/*.svg")
# Requests and status files always lie two folders deep, so their schema references are fixed.
SCHEMA_LINE = comment_line(f"{RUNS_DIR}/EXP/RUN.yaml", schema_rel("run"))
STATUS_SCHEMA = reference(f"{STATUS_DIR}/EXP/RUN.json", schema_rel("status"))
DASHBOARD = f"{STATUS_DIR}/README.md"


class RunKey(FrozenRecord, order=True):
    """One run, named by its experiment and id (sorts by experiment, then time)."""

    experiment: str
    run_id: str

    @property
    def request_rel(self) -> str:
        return f"{RUNS_DIR}/{self.experiment}/{self.run_id}.yaml"

    @property
    def status_rel(self) -> str:
        return f"{STATUS_DIR}/{self.experiment}/{self.run_id}.json"

    def __str__(self) -> str:
        return f"{self.experiment}/{self.run_id}"


_ISSUED: set[str] = set()


def new_run_id(now: datetime | None = None) -> str:
    """UTC time to the second, then 40 random bits: ids sort by time and two machines would have to
    draw the same 40 bits in the same second to collide; within one process they never repeat."""
    moment = (now or utc_moment()).astimezone(UTC)
    while True:
        run_id = f"{moment:%Y%m%d-%H%M%S}-{secrets.token_hex(5)}"
        if run_id not in _ISSUED:
            _ISSUED.add(run_id)
            return run_id


# ── run requests ──────────────────────────────────────────────────────────────────────────────────


def dump_request(req: RunRequest) -> str:
    """The request as a person reads it in review: fixed key order, empty optional fields left out."""
    data = req.model_dump(mode="json", by_alias=True)
    inputs = {k: v for k, v in data.pop("inputs").items() if v}
    cancel = data.pop("cancel")
    body: dict[str, object] = {}
    for key, value in data.items():
        if key in ("set",) or value not in ("", None):
            body[key] = value
    if inputs:
        body["inputs"] = inputs
    text = yaml.dump(body, Dumper=_dumper(), sort_keys=False, allow_unicode=True, default_flow_style=False, width=1000)
    return (
        f"{SCHEMA_LINE}\n"
        "# A run request, written by `tp submit`. Review it in the pull request; the bot submits it\n"
        "# once it is merged and writes the outcome to status/.\n"
        f"{text}"
        "# Set to true and merge to stop the run (or `tp job cancel`).\n"
        f"cancel: {'true' if cancel else 'false'}\n"
    )


_AMBIGUOUS = {"true", "false", "yes", "no", "on", "off", "y", "n", "null", "~", ""}


def _dumper() -> type[yaml.SafeDumper]:
    """A safe dumper that quotes every string a YAML 1.1 or 1.2 reader could take for another type."""

    class Dumper(yaml.SafeDumper):
        pass

    def text(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
        style = "'" if _looks_typed(value) else None
        return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)

    Dumper.add_representer(str, text)
    return Dumper


def _looks_typed(value: str) -> bool:
    if value.lower() in _AMBIGUOUS:
        return True
    try:
        float(value.replace("_", "x"))  # `1_000` is a number in YAML 1.1 only; quote it too
    except ValueError:
        return value.replace("_", "").isdigit() or value.lower().startswith(("0x", "0o", "0b"))
    return True


def write_request(root: Path, req: RunRequest) -> Path:
    """Create `runs/<exp>/<run-id>.yaml`; an existing file is never replaced."""
    key = RunKey(req.experiment, req.run_id)
    path = root / key.request_rel
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    except FileExistsError:
        raise UsageError(f"{key.request_rel} already exists", hint="submit again: a new run id is drawn") from None
    with os.fdopen(fd, "w", encoding="utf-8", newline="\n") as fh:
        fh.write(dump_request(req))
    return path


def parse_request(text: str, rel: str) -> RunRequest:
    """Parse a request, raising a UsageError that names `file:line:col` and the fix."""
    try:
        doc = parse_yaml(text, rel)
    except LoadFailed as exc:
        raise first_problem_error([exc.problem]) from None
    req, problems = parse_model(RunRequest, doc, "run-schema")
    if req is None:
        raise first_problem_error(problems, f"run `tp validate` to see every problem in {rel}")
    return req


def read_request(root: Path, key: RunKey) -> RunRequest:
    try:
        doc = load_yaml(root / key.request_rel, key.request_rel)
    except LoadFailed as exc:
        raise first_problem_error([exc.problem]) from None
    return parse_request(doc.text, key.request_rel)


def mark_cancel(root: Path, key: RunKey) -> Path:
    """Set `cancel: true`, keeping the person's comments and key order (ruamel round trip)."""

    path = root / key.request_rel
    text = path.read_text(encoding="utf-8")
    parse_request(text, key.request_rel)  # refuse to edit a file that is already broken
    yaml = YAML()
    yaml.preserve_quotes = True
    yaml.width = 1000
    data = yaml.load(text)
    data["cancel"] = True
    out = StringIO()
    yaml.dump(data, out)
    parse_request(out.getvalue(), key.request_rel)
    atomic_write(path, out.getvalue())
    return path


# ── listing and finding runs ─────────────────────────────────────────────────────────────────────


def _keys_under(base: Path, suffix: str) -> list[RunKey]:
    """Run keys from file names alone (no parsing): cheap enough for thousands of runs."""
    keys: list[RunKey] = []
    try:
        experiments = list(os.scandir(base))
    except FileNotFoundError:
        return keys
    for exp in experiments:
        if not exp.is_dir() or name_error(exp.name):
            continue
        for entry in os.scandir(exp.path):
            stem = entry.name[: -len(suffix)] if entry.name.endswith(suffix) else ""
            if stem and RUN_ID.match(stem) and entry.is_file():
                keys.append(RunKey(exp.name, stem))
    return sorted(keys)


def request_keys(root: Path) -> list[RunKey]:
    return _keys_under(root / RUNS_DIR, ".yaml")


def status_keys(root: Path) -> list[RunKey]:
    return _keys_under(root / STATUS_DIR, ".json")


SHOWN_MATCHES = 10  # an ambiguous reference lists this many of its runs


def find_run(root: Path, text: str) -> RunKey:
    """`RUN_ID`, `EXP/RUN_ID`, a request or status path, or the unique start or end of a run id
    (`tp job compare` heads its columns with the end). RunNotFound or AmbiguousRun (with the runs)."""
    name = text.strip().rstrip("/")
    for suffix in (".yaml", ".json"):
        name = name.removesuffix(suffix)
    parts = [p for p in name.split("/") if p]
    if parts and parts[0] in (RUNS_DIR, STATUS_DIR):
        parts = parts[1:]
    known = sorted(set(request_keys(root)) | set(status_keys(root)))
    if len(parts) == 2:
        candidates = [k for k in known if k.experiment == parts[0]]
    elif len(parts) == 1:
        candidates = known
    else:
        candidates = []
    part = parts[-1] if parts else ""
    exact = [k for k in candidates if k.run_id == part]
    matches = exact or [k for k in candidates if k.run_id.startswith(part) or k.run_id.endswith(part)]
    if len(matches) == 1:
        return matches[0]
    if not matches:
        raise RunNotFound(f"no run {text!r} in this lab", hint="see `tp job ls --all` for run ids")
    shown = "".join(f"\n  {k}" for k in matches[:SHOWN_MATCHES])
    more = f"\n  … and {len(matches) - SHOWN_MATCHES} more" if len(matches) > SHOWN_MATCHES else ""
    raise AmbiguousRun(
        f"{text!r} matches {len(matches)} runs:{shown}{more}",
        hint="give more of the run id (its start or its end), or EXP/RUN_ID",
        matches=list(matches),
    )


# ── status files ─────────────────────────────────────────────────────────────────────────────────


def read_status(root: Path, key: RunKey) -> RunStatus | None:
    """The status file, or None when there is none; a damaged one raises naming `file:line:col`."""
    path = root / key.status_rel
    if not present(path):
        return None
    try:
        text = read_text(path, root=root, rel=key.status_rel)  # a link out of the lab or a FIFO is refused
    except LoadFailed as exc:
        raise first_problem_error([exc.problem.replace(hint="")], _STATUS_HINT) from None
    return parse_status(text, key.status_rel)


def parse_status(text: str, rel: str) -> RunStatus:
    """A status file's text, strictly; the first problem raises at its line and column."""
    try:
        doc = parse_json(text, rel)
    except LoadFailed as exc:
        raise first_problem_error([exc.problem.replace(hint="")], _STATUS_HINT) from None
    status, problems = parse_model(RunStatus, doc, "status-schema")
    if status is None:
        raise first_problem_error(problems, _STATUS_HINT, always=True)
    return status


def status_from(data: object, rel: str) -> RunStatus:
    """Status data already parsed (the bot's scans), so without positions."""
    return validate_or_raise(RunStatus, data, rel, hint=_STATUS_HINT)


_STATUS_HINT = "the bot owns status/: restore the file from git (`git checkout -- <file>`)"


# ── status files, unchecked ──────────────────────────────────────────────────────────────────────
# What reads many statuses, or statuses a pull request may have written rather than the bot (the bot's
# scans and trust checks, the pages, budgets, `tp job ls`), reads an `UncheckedStatus`: never validated,
# so cheap for thousands of files, and a forged or broken file never raises. Its fields are typed all
# the same; a value of another type than the status schema's reads as that field's empty value.


class StatusObject(FrozenRecord):
    """The engine's object an unchecked status names (`backend`); `backend` is None when the object
    names no engine at all."""

    __slots__ = ("backend", "kind", "name", "namespace", "run_dir", "uid")
    _fields = __slots__
    backend: str | None
    kind: str
    name: str
    namespace: str
    run_dir: str
    uid: str

    def __init__(self, backend: str | None, kind: str, name: str, namespace: str, run_dir: str, uid: str) -> None:
        self._set(backend, kind, name, namespace, run_dir, uid)


class StatusOwner(FrozenRecord):
    """Whom an unchecked status says the bot submitted its run for (`submitted_for`): empty fields when
    it says so in another shape than the bot writes."""

    __slots__ = ("login", "pull_request")
    _fields = __slots__
    login: str
    pull_request: int | None

    def __init__(self, login: str, pull_request: int | None) -> None:
        self._set(login, pull_request)


class StatusAttempt(FrozenRecord):
    """One attempt of an unchecked status: what its GPU-hours are counted from; `gpu_seconds` is 0
    unless the file holds a finite number of them above zero."""

    __slots__ = ("gpu_seconds", "started_at", "reason")
    _fields = __slots__
    gpu_seconds: float
    started_at: str
    reason: str

    def __init__(self, gpu_seconds: float, started_at: str, reason: str) -> None:
        self._set(gpu_seconds, started_at, reason)


_NAME_FIELDS = ("experiment", "run_id")  # which run a status says it is: compared, so read strictly
_TEXT_FIELDS = (
    "phase",
    "reason",
    "message",
    "method",
    "profile",
    "submitted_at",
    "started_at",
    "finished_at",
)


class UncheckedStatus(FrozenRecord):
    """The fields of a status file read without validating it: the run's names are strings or "", a
    text field holding a number or a boolean reads as its JSON text and one of any other type as "",
    an object of another shape is None, a list keeps its entries of the right shape only. `history` is
    (phase, at) pairs."""

    __slots__ = (
        *_NAME_FIELDS,
        *_TEXT_FIELDS,
        "backend",
        "submitted_for",
        "attempts",
        "history",
        "metrics",
        "metric_history",
    )
    _fields = __slots__
    experiment: str
    run_id: str
    phase: str
    reason: str
    message: str
    method: str
    profile: str
    submitted_at: str
    started_at: str
    finished_at: str
    backend: StatusObject | None
    submitted_for: StatusOwner | None
    attempts: tuple[StatusAttempt, ...]
    history: tuple[tuple[str, str], ...]
    metrics: Mapping[str, float]
    metric_history: Mapping[str, object]  # as written: `series` reads one metric's values (most are never read)

    def __init__(
        self,
        *,
        experiment: str = "",
        run_id: str = "",
        phase: str = "",
        reason: str = "",
        message: str = "",
        method: str = "",
        profile: str = "",
        submitted_at: str = "",
        started_at: str = "",
        finished_at: str = "",
        backend: StatusObject | None = None,
        submitted_for: StatusOwner | None = None,
        attempts: tuple[StatusAttempt, ...] = (),
        history: tuple[tuple[str, str], ...] = (),
        metrics: Mapping[str, float] | None = None,
        metric_history: Mapping[str, object] | None = None,
    ) -> None:
        self._set(
            experiment,
            run_id,
            phase,
            reason,
            message,
            method,
            profile,
            submitted_at,
            started_at,
            finished_at,
            backend,
            submitted_for,
            attempts,
            history,
            MappingProxyType(dict(metrics or {})),
            MappingProxyType(dict(metric_history or {})),
        )

    def series(self, metric: str) -> tuple[float, ...]:
        """The recent values of `metric` (`metric_history`), its numbers only."""
        values = self.metric_history.get(metric)
        return _numbers(values) if isinstance(values, list) else ()

    def __hash__(self) -> int:  # its mappings are not hashable: by what names the run
        return hash((self.experiment, self.run_id, self.phase))


def unchecked_status(raw: bytes | str | None) -> UncheckedStatus | None:
    """A status file's content, unchecked; None when there is none, or it is no JSON object."""
    if raw is None:
        return None
    try:
        data = json.loads(raw)
    except (ValueError, RecursionError):
        return None
    return unchecked_from(data)


def read_unchecked(root: Path, key: RunKey) -> UncheckedStatus | None:
    """A status file of the work tree, unchecked; None when there is none, it is a symbolic link, larger
    than a status may be (the scan refuses it unread too), or no JSON object."""
    path = Path(root) / key.status_rel
    if path.is_symlink():
        return None
    try:
        with path.open("rb") as file:
            raw = file.read(BLOB_LIMIT + 1)
    except OSError:
        return None
    return unchecked_status(raw) if len(raw) <= BLOB_LIMIT else None


def unchecked_from(data: object) -> UncheckedStatus | None:
    """Status data already parsed, unchecked; None when it is no JSON object."""
    if not isinstance(data, dict):
        return None
    text = {name: _text(data.get(name)) for name in _TEXT_FIELDS}
    text |= {name: _name(data.get(name)) for name in _NAME_FIELDS}
    return UncheckedStatus(
        **text,
        backend=_backend(data.get("backend")),
        submitted_for=_owner(data.get("submitted_for")),
        attempts=tuple(_attempt(a) for a in _list(data.get("attempts")) if isinstance(a, dict)),
        history=tuple(
            (_text(h.get("phase")), _text(h.get("at"))) for h in _list(data.get("history")) if isinstance(h, dict)
        ),
        metrics={k: n for k, v in _object(data.get("metrics")).items() if (n := _number(v)) is not None},
        metric_history=_object(data.get("metric_history")),
    )


def _text(value: object) -> str:
    """A text field: a string as written; a number or a boolean as JSON writes it; anything else ""."""
    if isinstance(value, str):
        return value
    if isinstance(value, bool | int | float):
        return json.dumps(value)
    return ""


def _name(value: object) -> str:
    """An identity field: a string as written; anything else "" (no run is named "", so it never
    matches the run of the status's path: a status naming experiment 123 is not experiment "123")."""
    return value if isinstance(value, str) else ""


def _list(value: object) -> list[object]:
    return value if isinstance(value, list) else []


def _object(value: object) -> dict[str, object]:
    return value if isinstance(value, dict) else {}


def _number(value: object) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    try:
        return float(value)
    except OverflowError:  # JSON allows an integer of any length; past float's range it is no metric
        return None


def _numbers(values: list[object]) -> tuple[float, ...]:
    return tuple(n for v in values if (n := _number(v)) is not None)


def _backend(value: object) -> StatusObject | None:
    if not isinstance(value, dict) or not value:
        return None
    engine = value.get("backend")
    namespace = _text(value.get("namespace"))
    run_dir = recorded_run_dir(value)
    return StatusObject(
        backend=None if engine is None else _text(engine),
        kind=_text(value.get("kind")),
        name=_text(value.get("name")),
        namespace="" if run_dir == namespace else namespace,  # an older status kept its run directory there
        run_dir=run_dir,
        uid=_text(value.get("uid")),
    )


def _owner(value: object) -> StatusOwner | None:
    if value is None:
        return None
    owner = _object(value)
    login, number = owner.get("login"), owner.get("pull_request")
    return StatusOwner(
        login=login if isinstance(login, str) else "",
        pull_request=number if isinstance(number, int) and not isinstance(number, bool) else None,
    )


def _attempt(value: dict[str, object]) -> StatusAttempt:
    seconds = _number(value.get("gpu_seconds"))
    return StatusAttempt(
        gpu_seconds=max(seconds, 0.0) if seconds is not None and math.isfinite(seconds) else 0.0,
        started_at=_text(value.get("started_at")),
        reason=_text(value.get("reason")),
    )


def write_status(root: Path, status: RunStatus) -> Path:
    """Atomically (temp file + rename), so a reader or a killed bot never sees half a file."""
    path = root / RunKey(status.experiment, status.run_id).status_rel
    atomic_write(path, status_text(status))
    return path


_NUMBERS = re.compile(r"\[\s*(-?[0-9][-+0-9.eE]*(?:,\s*-?[0-9][-+0-9.eE]*)*)\s*\]")
_IN_READING_ORDER = ("metrics", "metric_history")  # primary first, hardware last, as every view shows them


def status_text(status: RunStatus) -> str:
    """A status file, as the bot and a local run write it: indented JSON with sorted keys (small,
    stable diffs), except the metrics, which keep their reading order; number lists on one line
    (they are sparklines)."""
    text = json.dumps(status_data(status, {"$schema": STATUS_SCHEMA}), indent=2, ensure_ascii=False)
    return _NUMBERS.sub(lambda m: "[" + ", ".join(v.strip() for v in m.group(1).split(",")) + "]", text) + "\n"


def status_data(status: RunStatus, extra: JSONObject | None = None) -> JSONObject:
    """A status as JSON data in the file's order (`tp job status --json` prints the same): keys sorted,
    the metrics in reading order."""
    data: JSONObject = {**(extra or {}), **status.model_dump(mode="json", by_alias=True)}
    return {key: data[key] if key in _IN_READING_ORDER else _sorted(data[key]) for key in sorted(data)}


def _sorted(value: JSONValue) -> JSONValue:
    if isinstance(value, dict):
        return {key: _sorted(value[key]) for key in sorted(value)}
    if isinstance(value, list):
        return [_sorted(item) for item in value]
    return value
