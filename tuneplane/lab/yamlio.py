"""Read YAML and JSON files into plain data plus source positions, and refuse what would hurt us.

PyYAML's C parser composes the node graph (fast); we build the Python values ourselves so we can
record `file:line:col` for every JSON pointer, refuse duplicate keys, and bound alias expansion
(an alias bomb is refused after a fixed node budget, before memory grows).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from tuneplane.problems import Problem

_Loader: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
_CONSTRUCT = yaml.constructor.SafeConstructor()

MAX_BYTES = 2 * 1024 * 1024  # a config bigger than this is a mistake, not a config
NODE_BUDGET = 200_000  # nodes built after expanding aliases

STR_TAG = "tag:yaml.org,2002:str"
MAP_TAG = "tag:yaml.org,2002:map"
SEQ_TAG = "tag:yaml.org,2002:seq"
MERGE_TAG = "tag:yaml.org,2002:merge"


@dataclass
class Doc:
    """A parsed file: its data and where each JSON pointer came from (1-based line, col)."""

    rel: str
    data: Any
    positions: dict[str, tuple[int, int]] = field(default_factory=dict)  # of the key (or list item)
    text: str = ""
    values: dict[str, tuple[int, int]] = field(default_factory=dict)  # of the value

    def where(self, pointer: str, value: bool = False) -> tuple[int, int]:
        """Position of `pointer` (its key, or its value with `value=True`), else its nearest ancestor's."""
        ptr = pointer
        while True:
            if value and ptr in self.values:
                return self.values[ptr]
            if ptr in self.positions:
                return self.positions[ptr]
            if not ptr:
                return (1, 1)
            ptr = ptr.rsplit("/", 1)[0]

    def problem(self, pointer: str, rule: str, message: str, hint: str = "", **kw: Any) -> Problem:
        line, col = self.where(pointer)
        return Problem(self.rel, line, col, rule, message, pointer=pointer, hint=hint, **kw)


class LoadFailed(Exception):
    """The file cannot be read as data; `problem` says where and why."""

    def __init__(self, problem: Problem) -> None:
        super().__init__(problem.message)
        self.problem = problem


def escape(token: str) -> str:
    return str(token).replace("~", "~0").replace("/", "~1")


def read_text(path: Path, rel: str, max_bytes: int = MAX_BYTES) -> str:
    """Read a text file as UTF-8 or raise LoadFailed naming the byte that is wrong."""
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise LoadFailed(Problem(rel, 0, 0, "unreadable", f"cannot read file: {exc.strerror}")) from None
    if len(raw) > max_bytes:
        limit = max_bytes // 1024 // 1024
        raise LoadFailed(Problem(rel, 1, 1, "too-large",
                                 f"file is {len(raw) / 1e6:.1f} MB; files over {limit} MiB are refused",
                                 hint="keep data out of config files; point at it with a path instead"))
    if b"\0" in raw[:8192]:
        raise LoadFailed(Problem(rel, 1, 1, "binary", "this is a binary file, not text",
                                 hint="save the file as UTF-8 text"))
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        before = raw[: exc.start]
        line = before.count(b"\n") + 1
        col = exc.start - (before.rfind(b"\n") + 1) + 1
        raise LoadFailed(Problem(rel, line, col, "encoding",
                                 f"not valid UTF-8 (byte 0x{raw[exc.start]:02x})",
                                 hint="re-save the file with UTF-8 encoding")) from None


def load_yaml(path: Path, rel: str, max_bytes: int = MAX_BYTES) -> Doc:
    """Parse one YAML document with positions; raise LoadFailed with a positioned Problem."""
    text = read_text(path, rel, max_bytes)
    return parse_yaml(text, rel)


def parse_yaml(text: str, rel: str) -> Doc:
    try:
        node = yaml.compose(text, Loader=_Loader)
    except yaml.MarkedYAMLError as exc:
        raise LoadFailed(_yaml_error(exc, rel, text)) from None
    except yaml.YAMLError as exc:
        raise LoadFailed(Problem(rel, 1, 1, "yaml-syntax", f"not valid YAML: {exc}")) from None
    doc = Doc(rel=rel, data=None, text=text)
    if node is None:
        doc.data = {}
        return doc
    builder = _Builder(doc)
    doc.data = builder.build(node, "")
    return doc


def _yaml_error(exc: yaml.MarkedYAMLError, rel: str, text: str = "") -> Problem:
    mark = exc.problem_mark or exc.context_mark
    line, col = (mark.line + 1, mark.column + 1) if mark else (1, 1)
    what = " ".join(str(p) for p in (exc.context, exc.problem) if p)
    lines = text.splitlines()
    hint = "check the indentation and quoting on this line and the one before"
    if 0 < line <= len(lines) and "\t" in lines[line - 1]:
        what = "a tab character is used for indentation"
        hint = "YAML indentation uses spaces, never tabs: replace the tab with spaces"
    if "could not determine a constructor" in what:
        hint = "custom YAML tags are not allowed; write a plain value"
    return Problem(rel, line, col, "yaml-syntax", f"not valid YAML: {what}", hint=hint)


class _Builder:
    def __init__(self, doc: Doc) -> None:
        self.doc = doc
        self.budget = NODE_BUDGET

    def build(self, node: Any, pointer: str) -> Any:
        self.budget -= 1
        if self.budget < 0:
            line, col = node.start_mark.line + 1, node.start_mark.column + 1
            raise LoadFailed(Problem(self.doc.rel, line, col, "yaml-aliases",
                                     f"document expands to more than {NODE_BUDGET} values (YAML alias bomb?)",
                                     hint="do not nest anchors and aliases; write the values out"))
        if isinstance(node, (yaml.MappingNode, yaml.SequenceNode)) and node.tag not in (MAP_TAG, SEQ_TAG):
            self._fail(node, "yaml-syntax", f"not valid YAML: the tag {node.tag!r} is not allowed",
                       hint="custom YAML tags are not allowed; write a plain value")
        if isinstance(node, yaml.MappingNode):
            return self._mapping(node, pointer)
        if isinstance(node, yaml.SequenceNode):
            return [self._child(item, f"{pointer}/{i}") for i, item in enumerate(node.value)]
        return self._scalar(node)

    def _child(self, node: Any, pointer: str) -> Any:
        self.doc.positions.setdefault(pointer, (node.start_mark.line + 1, node.start_mark.column + 1))
        return self.build(node, pointer)

    def _scalar(self, node: Any) -> Any:
        if node.tag == STR_TAG:
            return node.value
        try:
            value = _CONSTRUCT.construct_object(node, deep=True)
        except yaml.constructor.ConstructorError as exc:
            raise LoadFailed(_yaml_error(exc, self.doc.rel)) from None
        if hasattr(value, "isoformat"):  # dates and timestamps stay text: JSON has no date type
            return node.value
        return value

    def _mapping(self, node: Any, pointer: str) -> dict[str, Any]:
        out: dict[str, Any] = {}
        first_seen: dict[str, int] = {}
        for key_node, value_node in node.value:
            if key_node.tag == MERGE_TAG:
                merged = self.build(value_node, pointer)
                for item in merged if isinstance(merged, list) else [merged]:
                    if isinstance(item, dict):
                        for k, v in item.items():
                            out.setdefault(k, v)
                continue
            if not isinstance(key_node, yaml.ScalarNode):
                self._fail(key_node, "yaml-key", "a mapping key must be a plain value, not a list or mapping")
            key = key_node.value  # keys as written: `yes:` is the key "yes", not True
            line = key_node.start_mark.line + 1
            if key in first_seen:
                self._fail(key_node, "duplicate-key",
                           f"duplicate key {key!r} (first defined on line {first_seen[key]})",
                           hint="remove one of them: YAML keeps only the last, silently")
            first_seen[key] = line
            child = f"{pointer}/{escape(key)}"
            self.doc.positions[child] = (line, key_node.start_mark.column + 1)
            self.doc.values[child] = (value_node.start_mark.line + 1, value_node.start_mark.column + 1)
            out[key] = self.build(value_node, child)
        return out

    def _fail(self, node: Any, rule: str, message: str, hint: str = "") -> None:
        raise LoadFailed(Problem(self.doc.rel, node.start_mark.line + 1, node.start_mark.column + 1,
                                 rule, message, hint=hint))


def load_json(path: Path, rel: str, max_bytes: int = MAX_BYTES) -> Doc:
    """Parse JSON strictly; positions are computed only when a problem needs one (see `locate_json`)."""
    text = read_text(path, rel, max_bytes)
    try:
        data = json.loads(text, object_pairs_hook=_no_duplicates, parse_constant=_no_constant)
    except json.JSONDecodeError as exc:
        raise LoadFailed(Problem(rel, exc.lineno, exc.colno, "json-syntax", f"not valid JSON: {exc.msg}",
                                 hint="check for a missing comma or quote just before this place")) from None
    except _DuplicateKey:
        parse_yaml(text, rel)  # JSON is YAML: its parser points at the exact duplicate and raises
        raise LoadFailed(Problem(rel, 1, 1, "duplicate-key", "duplicate key",
                                 hint="remove one of them")) from None
    except _BadConstant as exc:
        line, col = _locate(text, exc.token)
        raise LoadFailed(Problem(rel, line, col, "json-syntax",
                                 f"not valid JSON: {exc.token} is not a number",
                                 hint="write a number or null")) from None
    return _LazyJsonDoc(rel=rel, data=data, text=text)


class _LazyJsonDoc(Doc):
    """JSON positions cost a second parse; pay it only when something is wrong."""

    _located = False

    def where(self, pointer: str, value: bool = False) -> tuple[int, int]:
        if not self._located:
            self._located = True
            try:
                self.positions = parse_yaml(self.text, self.rel).positions
            except LoadFailed:
                self.positions = {}
        return super().where(pointer, value)


class _DuplicateKey(Exception):
    def __init__(self, key: str) -> None:
        self.key = key


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise _DuplicateKey(key)
        out[key] = value
    return out


class _BadConstant(Exception):
    def __init__(self, token: str) -> None:
        self.token = token


def _no_constant(token: str) -> Any:
    raise _BadConstant(token)


def _locate(text: str, needle: str) -> tuple[int, int]:
    idx = text.find(needle)
    if idx < 0:
        return (1, 1)
    line = text.count("\n", 0, idx) + 1
    return line, idx - (text.rfind("\n", 0, idx) + 1) + 1
