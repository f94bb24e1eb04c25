"""Read YAML and JSON files into plain data plus source positions, and refuse what would hurt us.

PyYAML's C parser composes the node graph (fast); we build the Python values ourselves so we can
record `file:line:col` for every JSON pointer, refuse duplicate keys, and bound alias expansion
(an alias bomb is refused after a fixed node budget, before memory grows).
"""

from __future__ import annotations

import functools
import json
import math
import re
from pathlib import Path
from typing import Any, NoReturn, Protocol

from tuneplane.lab import fs
from tuneplane.lab.fs import MAX_BYTES as MAX_BYTES
from tuneplane.lab.fs import LoadFailed as LoadFailed
from tuneplane.problems import Problem, Severity
from tuneplane.runtime.patterns import compiled_on_first_use, lazy_pattern
from tuneplane.runtime.records import Record

# The one import of PyYAML in tp (.importlinter); other modules take `yaml` from here. Most of the
# patterns PyYAML compiles on import are for its pure-Python reader, which tp never uses.
with compiled_on_first_use("yaml"):
    import yaml as yaml

_Loader: type[yaml.SafeLoader] | type[yaml.CSafeLoader] = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
_CONSTRUCT = yaml.constructor.SafeConstructor()

NODE_BUDGET = 200_000  # nodes built after expanding aliases
MAX_DEPTH = 100  # levels of nested mappings and lists, aliases expanded; configs need a handful

STR_TAG = "tag:yaml.org,2002:str"
MAP_TAG = "tag:yaml.org,2002:map"
SEQ_TAG = "tag:yaml.org,2002:seq"
MERGE_TAG = "tag:yaml.org,2002:merge"


class Doc(Record):
    """A parsed file: its data and where each JSON pointer came from (1-based line, col)."""

    __slots__ = ("rel", "data", "positions", "text", "values", "notes", "plain")
    _fields = __slots__

    def __init__(
        self,
        rel: str,
        data: Any,
        positions: dict[str, tuple[int, int]] | None = None,
        text: str = "",
        values: dict[str, tuple[int, int]] | None = None,
        notes: list[Problem] | None = None,
        plain: dict[str, str] | None = None,
    ) -> None:
        self.rel = rel
        self.data = data
        self.positions: dict[str, tuple[int, int]] = {} if positions is None else positions  # of the key (or list item)
        self.text = text
        self.values: dict[str, tuple[int, int]] = {} if values is None else values  # of the value
        self.notes: list[Problem] = [] if notes is None else notes  # warnings found while reading (confusable keys)
        # the text of each unquoted scalar that YAML 1.1 read as a bool or number (`no`, `007`), so a
        # parameter declared as text can take it as written
        self.plain: dict[str, str] = {} if plain is None else plain

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

    def problem(
        self, pointer: str, rule: str, message: str, hint: str = "", severity: Severity = Severity.ERROR
    ) -> Problem:
        line, col = self.where(pointer)
        return Problem(self.rel, line, col, rule, message, pointer=pointer, hint=hint, severity=severity)


def escape(token: str) -> str:
    return str(token).replace("~", "~0").replace("/", "~1")


def read_text(path: Path, rel: str, max_bytes: int = MAX_BYTES, root: Path | None = None) -> str:
    """Read a lab file through the one safe reader as UTF-8, or raise LoadFailed saying why."""
    return fs.read_text(path, max_bytes, root, rel)


def load_yaml(path: Path, rel: str, max_bytes: int = MAX_BYTES, root: Path | None = None) -> Doc:
    """Parse one YAML document with positions; raise LoadFailed with a positioned Problem."""
    text = read_text(path, rel, max_bytes, root)
    return parse_yaml(text, rel)


def parse_yaml(text: str, rel: str) -> Doc:
    deep = _yaml_too_deep(text)
    if deep is not None:  # before the C composer, which recurses once per level
        raise LoadFailed(_deep_problem(rel, *deep))
    try:
        node = yaml.compose(text, Loader=_Loader)
    except yaml.MarkedYAMLError as exc:
        raise LoadFailed(_yaml_error(exc, rel, text)) from None
    except yaml.reader.ReaderError as exc:  # a character YAML refuses: placed from its offset
        line, col = _locate_at(text, min(max(exc.position, 0), len(text)))
        char = ord(exc.character) if isinstance(exc.character, str) else int(exc.character)
        raise LoadFailed(
            Problem(
                rel,
                line,
                col,
                "yaml-syntax",
                f"not valid YAML: character U+{char:04X} is not allowed ({exc.reason})",
                hint="delete the invisible character at this place",
            )
        ) from None
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
    line, col = _at(exc.problem_mark or exc.context_mark, text)
    what = " ".join(str(p) for p in (exc.context, exc.problem) if p)
    lines = text.splitlines()
    hint = "check the indentation and quoting on this line and the one before"
    if 0 < line <= len(lines) and "\t" in lines[line - 1]:
        what = "a tab character is used for indentation"
        hint = "YAML indentation uses spaces, never tabs: replace the tab with spaces"
    if "could not determine a constructor" in what:
        hint = "custom YAML tags are not allowed; write a plain value"
    return Problem(rel, line, col, "yaml-syntax", f"not valid YAML: {what}", hint=hint)


_OPENS = (yaml.MappingStartEvent, yaml.SequenceStartEvent)
_CLOSES = (yaml.MappingEndEvent, yaml.SequenceEndEvent)
_LEADING = re.compile(r"^[ \t?:-]*", re.MULTILINE)
_JSON_TOKENS = lazy_pattern(r'"(?:[^"\\]|\\.)*"|[\[\]{}]')


def _deep_problem(rel: str, line: int, col: int) -> Problem:
    return Problem(
        rel,
        line,
        col,
        "too-deep",
        f"nesting is more than {MAX_DEPTH} levels deep here",
        hint="flatten the structure: no config needs this many nested mappings or lists",
    )


def _yaml_too_deep(text: str) -> tuple[int, int] | None:
    """Where the nesting first passes MAX_DEPTH, from the event stream (iterative; no recursion).

    Cheap bound first: each level needs a bracket or two more columns of indentation.
    """
    widest = max((len(m) for m in _LEADING.findall(text)), default=0)
    if text.count("[") + text.count("{") + 2 * widest + 2 <= MAX_DEPTH:
        return None
    depth = 0
    try:
        for event in yaml.parse(text, Loader=_Loader):
            if isinstance(event, _OPENS):
                depth += 1
                mark = event.start_mark
                if depth > MAX_DEPTH:
                    return _at(mark, text)
            elif isinstance(event, _CLOSES):
                depth -= 1
    except yaml.YAMLError as exc:
        # PyYAML has no error type for too deep a nesting: its message is all that tells it
        if "maximum nesting depth" not in str(exc):
            return None  # the composer reports the syntax error at its place
        # the libyaml in PyYAML 6.0.4's wheels refuses nesting far past ours while scanning ahead, before
        # it yields the event that passes MAX_DEPTH: the brackets say where that is
        mark = getattr(exc, "problem_mark", None)
        return _json_too_deep(text) or _at(mark, text)
    return None


def _json_too_deep(text: str) -> tuple[int, int] | None:
    if text.count("[") + text.count("{") <= MAX_DEPTH:
        return None
    depth = 0
    for match in _JSON_TOKENS().finditer(text):
        token = match.group()
        if token in "[{":
            depth += 1
            if depth > MAX_DEPTH:
                return _locate_at(text, match.start())
        elif token in "]}":
            depth -= 1
    return None


def confusable(key: str) -> str:
    """Why `key` may be mistaken for another (mixed scripts, compatibility forms), else ""."""
    if key.isascii():  # NFKC keeps ASCII as it is, and ASCII letters are all Latin
        return ""
    # lazy: only a key with a non-ASCII character needs the Unicode database
    import unicodedata

    if unicodedata.normalize("NFKC", key) != key:
        plain = unicodedata.normalize("NFKC", key)
        return f"uses compatibility characters: it looks like {plain!r} but is a different, confusable key"
    scripts: dict[str, str] = {}
    for ch in key:
        if ch.isalpha():
            name = unicodedata.name(ch, "")
            scripts.setdefault(name.split(" ", 1)[0], f"{ch!r} is U+{ord(ch):04X} {name}")
    if len(scripts) > 1:
        names = " and ".join(sorted(s.title() for s in scripts))
        odd = next(v for k, v in scripts.items() if k != "LATIN")
        return f"mixes {names} letters ({odd}): a confusable key is silently a different key"
    return ""


class _Builder:
    def __init__(self, doc: Doc) -> None:
        self.doc = doc
        self.budget = NODE_BUDGET

    def build(self, node: yaml.Node, pointer: str, depth: int = 1) -> object:
        self.budget -= 1
        if self.budget < 0:
            line, col = _at(node.start_mark, self.doc.text)
            raise LoadFailed(
                Problem(
                    self.doc.rel,
                    line,
                    col,
                    "yaml-aliases",
                    f"document expands to more than {NODE_BUDGET} values (YAML alias bomb?)",
                    hint="do not nest anchors and aliases; write the values out",
                )
            )
        if isinstance(node, (yaml.MappingNode, yaml.SequenceNode)) and node.tag not in (MAP_TAG, SEQ_TAG):
            self._fail(
                node,
                "yaml-syntax",
                f"not valid YAML: the tag {node.tag!r} is not allowed",
                hint="custom YAML tags are not allowed; write a plain value",
            )
        if isinstance(node, (yaml.MappingNode, yaml.SequenceNode)) and depth > MAX_DEPTH:
            # aliases can nest a shallow text deeply: the built value is what callers recurse into
            raise LoadFailed(_deep_problem(self.doc.rel, *_at(node.start_mark, self.doc.text)))
        if isinstance(node, yaml.MappingNode):
            return self._mapping(node, pointer, depth)
        if isinstance(node, yaml.SequenceNode):
            return [self._child(item, f"{pointer}/{i}", depth) for i, item in enumerate(node.value)]
        assert isinstance(node, yaml.ScalarNode)  # a composer makes no fourth kind of node
        value = self._scalar(node)
        if isinstance(value, (bool, int, float)) and not node.style:  # plain: None, or "" from the C composer
            self.doc.plain[pointer] = node.value
        return value

    def _child(self, node: yaml.Node, pointer: str, depth: int) -> object:
        self.doc.positions.setdefault(pointer, _at(node.start_mark, self.doc.text))
        return self.build(node, pointer, depth + 1)

    def _scalar(self, node: yaml.ScalarNode) -> object:
        if node.tag == STR_TAG:
            return node.value
        try:
            value = _CONSTRUCT.construct_object(node, deep=True)
        except yaml.constructor.ConstructorError as exc:
            raise LoadFailed(_yaml_error(exc, self.doc.rel)) from None
        except ValueError:  # an integer past Python's 4,300-digit limit of int(text)
            raise LoadFailed(_huge_number(self.doc.rel, *_at(node.start_mark, self.doc.text), node.value)) from None
        if hasattr(value, "isoformat"):  # dates and timestamps stay text: JSON has no date type
            return node.value
        return value

    def _mapping(self, node: yaml.MappingNode, pointer: str, depth: int) -> dict[str, object]:
        out: dict[str, object] = {}
        first_seen: dict[str, int] = {}
        for key_node, value_node in node.value:
            if key_node.tag == MERGE_TAG:
                merged = self.build(value_node, pointer, depth)
                for item in merged if isinstance(merged, list) else [merged]:
                    if isinstance(item, dict):
                        for k, v in item.items():
                            out.setdefault(k, v)
                continue
            if not isinstance(key_node, yaml.ScalarNode):
                self._fail(key_node, "yaml-key", "a mapping key must be a plain value, not a list or mapping")
            key = key_node.value  # keys as written: `yes:` is the key "yes", not True
            line, col = _at(key_node.start_mark, self.doc.text)
            if key in first_seen:
                self._fail(
                    key_node,
                    "duplicate-key",
                    f"duplicate key {key!r} (first defined on line {first_seen[key]})",
                    hint="remove one of them: YAML keeps only the last, silently",
                )
            first_seen[key] = line
            if not key.isascii():
                self._confusable(key, key_node)
            child = f"{pointer}/{escape(key)}"
            self.doc.positions[child] = (line, col)
            self.doc.values[child] = _at(value_node.start_mark, self.doc.text)
            out[key] = self.build(value_node, child, depth + 1)
        return out

    def _confusable(self, key: str, node: yaml.Node) -> None:
        why = confusable(key)
        if why:
            self.doc.notes.append(
                Problem(
                    self.doc.rel,
                    *_at(node.start_mark, self.doc.text),
                    "confusable-key",
                    f"key {key!r} {why}",
                    Severity.WARNING,
                    hint="retype the key in plain ASCII letters if it is meant to be the "
                    "familiar one; as written it is a different key",
                )
            )

    def _fail(self, node: yaml.Node, rule: str, message: str, hint: str = "") -> None:
        raise LoadFailed(Problem(self.doc.rel, *_at(node.start_mark, self.doc.text), rule, message, hint=hint))


def load_json(path: Path, rel: str, max_bytes: int = MAX_BYTES, root: Path | None = None) -> Doc:
    """Parse a JSON lab file strictly (see `parse_json`)."""
    return parse_json(read_text(path, rel, max_bytes, root), rel)


def parse_json(text: str, rel: str) -> Doc:
    """Strict JSON: no duplicate keys, no NaN or infinities, at most MAX_DEPTH levels; positions are
    computed only when a problem needs one."""
    deep = _json_too_deep(text)
    if deep is not None:
        raise LoadFailed(_deep_problem(rel, *deep))
    try:
        data = json.loads(
            text,
            object_pairs_hook=_no_duplicates,
            parse_constant=_no_constant,
            parse_float=_finite,
            parse_int=_bounded_int,
        )
    except json.JSONDecodeError as exc:
        raise LoadFailed(_json_error(text, rel, exc)) from None
    except _DuplicateKey as exc:
        try:
            parse_yaml(text, rel)  # JSON is YAML: its parser points at the exact duplicate and raises
        except LoadFailed as located:
            if located.problem.rule == "duplicate-key":
                raise
        line, col = _second_key(text, exc.key)  # escapes YAML does not take (surrogate pairs)
        raise LoadFailed(
            Problem(
                rel,
                line,
                col,
                "duplicate-key",
                f"duplicate key {exc.key!r}",
                hint="remove one of them: JSON readers keep only one, silently",
            )
        ) from None
    except _HugeInt as exc:
        raise LoadFailed(_huge_number(rel, *_locate(text, exc.token[:50]), exc.token)) from None
    except _BadConstant as exc:
        line, col = _locate(text, exc.token)
        raise LoadFailed(
            Problem(
                rel,
                line,
                col,
                "json-syntax",
                f"not valid JSON: {exc.token} is not a finite number",
                hint="write a finite number or null",
            )
        ) from None
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


def _no_duplicates(pairs: list[tuple[str, object]]) -> dict[str, object]:
    out: dict[str, object] = {}
    for key, value in pairs:
        if key in out:
            raise _DuplicateKey(key)
        out[key] = value
    return out


class _BadConstant(Exception):
    def __init__(self, token: str) -> None:
        self.token = token


def _no_constant(token: str) -> NoReturn:
    raise _BadConstant(token)


_JSON_KEY = lazy_pattern(r'"(?:[^"\\]|\\.)*"(?=\s*:)')


def _second_key(text: str, key: str) -> tuple[int, int]:
    """Where `key` is written a second time (as a key); (1, 1) when it cannot be told."""
    seen = 0
    for match in _JSON_KEY().finditer(text):
        try:
            same = json.loads(match.group()) == key
        except ValueError:
            continue
        seen += same
        if seen == 2:
            return _locate_at(text, match.start())
    return (1, 1)


MAX_DIGITS = 4000  # below Python's 4,300-digit limit of int(text): no setting needs a number this long


class _HugeInt(Exception):
    def __init__(self, token: str) -> None:
        super().__init__(token)
        self.token = token


def _bounded_int(token: str) -> int:
    if len(token) > MAX_DIGITS:
        raise _HugeInt(token)
    return int(token)


def _huge_number(rel: str, line: int, col: int, token: str) -> Problem:
    return Problem(
        rel,
        line,
        col,
        "number-too-long",
        f"a number of {len(token):,} digits: no setting takes one",
        hint="write the value you mean (a number of at most a few digits), or quote it as text",
    )


def _finite(token: str) -> float:
    value = float(token)
    if not math.isfinite(value):
        raise _BadConstant(token)
    return value


def _locate(text: str, needle: str) -> tuple[int, int]:
    idx = text.find(needle)
    return (1, 1) if idx < 0 else _locate_at(text, idx)


def _json_error(text: str, rel: str, exc: json.JSONDecodeError) -> Problem:
    """A trailing comma is told alike on every Python, at the bracket after it: 3.13's json points at the
    comma ("Illegal trailing comma"), earlier ones at the bracket ("Expecting property name")."""
    at = exc.pos
    # the json module's error has no kind: its message is the only thing that names a trailing comma
    if text[at : at + 1] == "," and exc.msg.startswith("Illegal trailing comma"):
        at = len(text) - len(text[at + 1 :].lstrip(" \t\r\n"))
    elif not text[:at].rstrip(" \t\r\n").endswith(","):
        at = -1
    if text[at : at + 1] not in ("}", "]"):
        return Problem(
            rel,
            exc.lineno,
            exc.colno,
            "json-syntax",
            f"not valid JSON: {exc.msg}",
            hint="check for a missing comma or quote just before this place",
        )
    line, col = _locate_at(text, at)
    return Problem(
        rel,
        line,
        col,
        "json-syntax",
        f"not valid JSON: a trailing comma before this '{text[at]}'",
        hint="delete the comma: JSON allows none after the last item",
    )


class _Mark(Protocol):
    """A place PyYAML reports, from its Python reader or from libyaml."""

    line: int
    column: int
    index: int


def _at(mark: _Mark | None, text: str) -> tuple[int, int]:
    """A YAML mark as (line, column) counted by newlines, as an editor's line numbers and `git diff` count.

    YAML also breaks lines at a lone CR, NEL, LS and PS, and libyaml numbers a lone CR's lines its own
    way (`0:\r0` fails "at line 3"): where the text has such a break, the place comes from the mark's
    character offset instead."""
    if mark is None:
        return 1, 1
    if _breaks_only_at_newlines(text):
        return mark.line + 1, mark.column + 1
    return _locate_at(text, min(max(mark.index, 0), len(text)))


_OTHER_BREAKS = re.compile("\r(?!\n)|[\x85\u2028\u2029]")


@functools.lru_cache(maxsize=4)
def _breaks_only_at_newlines(text: str) -> bool:
    """Asked once per text, not once per mark: a file's every key and value has a mark, and a search of
    the whole text for each made loading a file quadratic in its size. The
    cache keeps the last few texts; a lookup of the same string object costs no comparison."""
    return not _OTHER_BREAKS.search(text)


def _locate_at(text: str, idx: int) -> tuple[int, int]:
    line = text.count("\n", 0, idx) + 1
    return line, idx - (text.rfind("\n", 0, idx) + 1) + 1
