"""The records that replaced `@dataclass` on the start-up path behave as the dataclasses did: each is
compared here with the dataclass it replaced, declared the old way."""

from __future__ import annotations

import copy
import itertools
import os
import pickle
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import pytest

from tuneplane.check.images import ImageRef
from tuneplane.check.scope import Scope
from tuneplane.lab.load import Lab
from tuneplane.lab.starforge import LegacyUse
from tuneplane.lab.yamlio import Doc
from tuneplane.problems import Problem, Severity
from tuneplane.runtime.records import FrozenError, FrozenRecord, Record
from tuneplane.runtime.records import field as record_field
from tuneplane.runtime.versions import Version, parse_version

ROOT = Path(__file__).resolve().parents[1]


@dataclass(frozen=True, order=True)
class OldProblem:
    file: str
    line: int
    col: int
    rule: str
    message: str
    severity: Severity = Severity.ERROR
    pointer: str = ""
    hint: str = field(default="", compare=False)


def _problem_args() -> list[tuple[Any, ...]]:
    values = [
        ("a.yaml", "b.yaml"),
        (0, 3),
        (1,),
        ("r1", "r2"),
        ("m",),
        (Severity.ERROR, Severity.WARNING),
        ("", "/x"),
        ("", "hint"),
    ]
    return list(itertools.product(*values))


def _same_class_name(text: str) -> str:
    return text.replace("OldProblem(", "Problem(")


def test_problem_equals_orders_hashes_and_prints_as_the_dataclass_did():
    args = _problem_args()
    new = [Problem(*a) for a in args]
    old = [OldProblem(*a) for a in args]
    for (n1, o1), (n2, o2) in itertools.product(zip(new, old, strict=True), repeat=2):
        assert (n1 == n2) == (o1 == o2)
        assert (n1 < n2) == (o1 < o2) and (n1 <= n2) == (o1 <= o2)
        assert (n1 > n2) == (o1 > o2) and (n1 >= n2) == (o1 >= o2)
        assert (hash(n1) == hash(n2)) == (hash(o1) == hash(o2))
    assert [repr(p) for p in sorted(set(new))] == [_same_class_name(repr(p)) for p in sorted(set(old))]
    assert len(set(new)) == len(set(old)) < len(new)  # the hint is not part of equality


def test_problem_keywords_and_defaults_as_before():
    p = Problem("f", 1, 2, "r", "m", hint="h")
    assert (p.severity, p.pointer, p.hint) == (Severity.ERROR, "", "h")
    assert Problem(file="f", line=1, col=2, rule="r", message="m") == p
    assert p.is_error and p.location() == "f:1:2"


def test_a_record_is_equal_only_to_its_own_class():
    p = Problem("f", 1, 2, "r", "m")
    assert p != OldProblem("f", 1, 2, "r", "m")
    assert p != ("f", 1, 2, "r", "m", Severity.ERROR, "")
    with pytest.raises(TypeError):
        _ = p < OldProblem("f", 1, 2, "r", "m")  # type: ignore[operator]
    assert ImageRef("a", "b", "c", "d", "e") != LegacyUse(1, 2, "a", "b")


@pytest.mark.parametrize(
    "record",
    [
        Problem("f", 1, 2, "r", "m"),
        Version(0, (1, 2), None, None, None, ""),
        ImageRef("t", "h", "r", "", ""),
        LegacyUse(1, 2, "starforge", "tuneplane"),
    ],
)
def test_frozen_records_refuse_assignment_and_deletion(record: FrozenRecord):
    name = record._fields[0]
    before = getattr(record, name)
    with pytest.raises(FrozenError, match="cannot assign"):
        setattr(record, name, "changed")
    with pytest.raises(AttributeError, match="cannot delete"):
        delattr(record, name)
    with pytest.raises(AttributeError):
        record.not_a_field = 1  # type: ignore[attr-defined]
    assert getattr(record, name) is before


def test_replace_copies_and_refuses_unknown_fields():
    p = Problem("f", 1, 2, "r", "m", hint="h")
    q = p.replace(rule="other", hint="")
    assert (q.rule, q.hint, q.file, p.rule) == ("other", "", "f", "r")
    with pytest.raises(TypeError, match="no field"):
        p.replace(rules="x")
    lab = Lab(Path("/lab"), None, None)
    assert lab.replace(legacy=True) == Lab(Path("/lab"), None, None, [], legacy=True)


@pytest.mark.parametrize(
    "record",
    [
        Problem("f", 1, 2, "r", "m", hint="h"),
        parse_version("1.2rc1+local"),
        ImageRef("t", "h", "r", "tag", ""),
        Scope({"a"}, {Path("runs/a/x.yaml")}, set(), everything=True),
        Doc(rel="x.yaml", data={"a": 1}, positions={"/a": (1, 1)}, text="a: 1\n"),
    ],
)
def test_records_pickle_and_copy_by_their_fields(record: Record):
    for twin in (pickle.loads(pickle.dumps(record)), copy.copy(record), copy.deepcopy(record)):
        assert twin == record and twin is not record and repr(twin) == repr(record)
    if isinstance(record, Problem):
        assert pickle.loads(pickle.dumps(record)).hint == "h"


def test_mutable_records_compare_by_value_and_are_unhashable():
    a, b = Scope(), Scope()
    assert a == b and a.experiments is not b.experiments  # each gets its own empty set
    a.experiments.add("x")
    assert a != b
    with pytest.raises(TypeError):
        hash(a)
    assert Doc("x", None) == Doc("x", None, {}, "", {}, [], {})
    assert repr(Scope()) == "Scope(experiments=set(), runs=set(), plugins=set(), everything=False)"


def test_versions_compare_by_every_field():
    assert parse_version("1.0") == parse_version("1.0")
    assert parse_version("1.0") != parse_version("1.0.0")  # equal by `key`, not as records
    assert parse_version("1.0").key == parse_version("1.0.0").key
    assert len({parse_version("1.0"), parse_version("1.0"), parse_version("2")}) == 2


# ── records declared like dataclasses: fields from annotations, `__init__` built without `exec` ──


class Point(FrozenRecord):
    x: int
    y: int = 0
    tags: list[str] = record_field(default_factory=list)
    origin: ClassVar[str] = "0,0"  # a class variable, not a field
    kind: ClassVar = "point"  # bare, too


class Point3(Point):
    z: float = 1.0


class Tally(Record):
    name: str
    counts: dict[str, int] = record_field(default_factory=dict)
    total: int = record_field(default=0)


class Ranked(FrozenRecord, order=True):
    rank: int
    name: str


class Checked(FrozenRecord):
    low: int
    high: int

    def __post_init__(self) -> None:
        if self.low > self.high:
            raise ValueError("low above high")


class Derived(Record):
    a: int
    doubled: int = 0

    def __post_init__(self) -> None:
        self.doubled = 2 * self.a


def test_declared_fields_follow_the_annotations_without_class_variables():
    assert Point._fields == ("x", "y", "tags")
    assert Point3._fields == ("x", "y", "tags", "z")  # a subclass's fields follow its bases'
    assert Point.__match_args__ == ("x", "y", "tags")
    assert Point.origin == "0,0" and not hasattr(Point, "tags")  # a factory is no class attribute


def test_declared_records_compare_hash_and_print_as_dataclasses():
    assert Point(1, 2) == Point(1, 2) == Point(x=1, y=2, tags=[])
    assert Point(1, 2) != Point(1, 3) and Point(1) != Point3(1)
    assert repr(Point(1, tags=["a"])) == "Point(x=1, y=0, tags=['a'])"
    assert repr(Point3(1)) == "Point3(x=1, y=0, tags=[], z=1.0)"
    assert hash(Ranked(1, "a")) == hash(Ranked(1, "a")) == hash(OldRanked(1, "a"))
    with pytest.raises(TypeError):
        hash(Tally("t"))  # mutable: unhashable


@dataclass(frozen=True, order=True)
class OldRanked:
    rank: int
    name: str


def test_defaults_and_factories_give_each_record_its_own_value():
    a, b = Tally("a"), Tally("b")
    assert a.counts == {} and a.counts is not b.counts and a.total == 0
    a.counts["x"] = 1
    assert b.counts == {}
    assert Point(1).tags is not Point(1).tags


def test_frozen_declared_records_refuse_assignment():
    p = Point(1)
    with pytest.raises(FrozenError):
        p.x = 2  # type: ignore[misc]
    with pytest.raises(FrozenError):
        del p.y  # type: ignore[misc]
    t = Tally("t")
    t.total = 3
    assert t.total == 3


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: Point(), "missing required argument.*'x'"),
        (lambda: Point(1, 2, [], 4), "takes 4 positional arguments but 5 were given"),
        (lambda: Point(1, x=2), "multiple values for argument 'x'"),
        (lambda: Point(1, w=2), "unexpected keyword argument 'w'"),
        (lambda: Point3(1, q=2), "unexpected keyword argument 'q'"),
    ],
)
def test_bad_arguments_raise_type_error_as_a_dataclass_does(call: Any, message: str):
    with pytest.raises(TypeError, match=message):
        call()


def test_a_class_body_that_a_dataclass_refuses_is_refused():
    with pytest.raises(ValueError, match="default_factory"):

        class Shared(Record):
            items: list[int] = []  # the mistake under test

    with pytest.raises(TypeError, match="'b' without a default follows 'a'"):

        class Misordered(Record):  # type: ignore[misc]
            a: int = 0
            b: int

    with pytest.raises(TypeError, match="exactly one"):
        record_field()  # type: ignore[call-overload]


def test_order_is_by_fields_within_one_class():
    pairs = [(1, "b"), (1, "a"), (0, "z")]
    assert [(r.rank, r.name) for r in sorted(Ranked(*p) for p in pairs)] == sorted(pairs)
    for a, b in itertools.product(pairs, repeat=2):
        assert (Ranked(*a) < Ranked(*b)) == (OldRanked(*a) < OldRanked(*b))
        assert (Ranked(*a) >= Ranked(*b)) == (OldRanked(*a) >= OldRanked(*b))
    with pytest.raises(TypeError):
        _ = Point(1) < Point(2)  # type: ignore[operator]  # no order asked for
    with pytest.raises(TypeError):
        _ = Ranked(1, "a") < OldRanked(1, "a")  # type: ignore[operator]


def test_post_init_runs_after_the_fields_are_set():
    with pytest.raises(ValueError, match="low above high"):
        Checked(2, 1)
    assert Derived(3).doubled == 6
    assert Checked(1, 2).replace(high=5) == Checked(1, 5)
    with pytest.raises(ValueError):
        Checked(1, 2).replace(low=3)


@pytest.mark.parametrize("record", [Point3(1, 2, ["a"], 3.0), Tally("t", {"a": 1}, 1), Ranked(1, "a")])
def test_declared_records_pickle_copy_and_replace(record: Record | FrozenRecord):
    for twin in (pickle.loads(pickle.dumps(record)), copy.copy(record), copy.deepcopy(record)):
        assert twin == record and twin is not record and type(twin) is type(record)
    name = record._fields[0]
    changed = record.replace(**{name: 9})
    assert getattr(changed, name) == 9 and changed != record and type(changed) is type(record)


def test_as_dict_turns_nested_records_into_dicts():
    class Line(FrozenRecord):
        start: Point
        stops: tuple[Point, ...]
        named: dict[str, Point]

    line = Line(Point(1), (Point(2),), {"p": Point(3, tags=["t"])})
    assert line.as_dict() == {
        "start": {"x": 1, "y": 0, "tags": []},
        "stops": ({"x": 2, "y": 0, "tags": []},),
        "named": {"p": {"x": 3, "y": 0, "tags": ["t"]}},
    }


def test_mypy_checks_record_constructors_as_dataclass_ones(tmp_path: Path):
    """The bases carry `dataclass_transform`: a type checker sees each record's `__init__` and that a
    frozen one refuses assignment."""
    snippet = tmp_path / "snippet.py"
    snippet.write_text(
        "from tuneplane.runtime.records import FrozenRecord, Record, field\n"
        "class P(FrozenRecord):\n"
        "    x: int\n"
        "    tags: list[str] = field(default_factory=list)\n"
        "class R(Record, order=True):\n"
        "    n: int = 0\n"
        "P(1)\n"
        "P(x=1, tags=['a'])\n"
        "R(2).n = 3\n"
        "ok: bool = R() < R(1)\n"
        "P('one')\n"  # line 11
        "P(1, colour=2)\n"  # line 12
        "P(1).x = 2\n",  # line 13
        encoding="utf-8",
    )
    config = tmp_path / "mypy.ini"
    config.write_text("[mypy]\nstrict = True\n", encoding="utf-8")
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "mypy",
            "--config-file",
            str(config),
            "--cache-dir",
            str(tmp_path / "cache"),
            str(snippet),
        ],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env={**os.environ, "MYPYPATH": str(ROOT)},
    ).stdout
    errors = sorted(int(line.split(":")[1]) for line in out.splitlines() if ": error:" in line)
    assert errors == [11, 12, 13], out


def test_a_subclass_of_a_hand_written_record_keeps_its_init():
    class Located(Doc):
        checked = False  # a plain class attribute, no field

    doc = Located("x.yaml", {"a": 1}, text="a: 1\n")
    assert doc._fields == Doc._fields and (doc.rel, doc.positions, doc.text) == ("x.yaml", {}, "a: 1\n")


def test_a_subclass_of_a_hand_written_record_may_not_declare_fields_its_init_would_ignore():
    with pytest.raises(TypeError, match="keeps the hand-written __init__"):

        class Annotated(Doc):
            extra: int = 0

    class Rewritten(Doc):  # its own __init__ and _fields: it says what it holds
        extra: int

        _fields = (*Doc._fields, "extra")

        def __init__(self, rel: str, data: object, extra: int = 0) -> None:
            super().__init__(rel, data)
            self.extra = extra

    assert Rewritten("x.yaml", {}, extra=2).extra == 2
