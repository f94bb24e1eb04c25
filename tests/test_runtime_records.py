"""The records that replaced `@dataclass` on the start-up path behave as the dataclasses did: each is
compared here with the dataclass it replaced, declared the old way."""

from __future__ import annotations

import copy
import itertools
import pickle
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from tuneplane.check.images import ImageRef
from tuneplane.check.scope import Scope
from tuneplane.lab.load import Lab
from tuneplane.lab.starforge import LegacyUse
from tuneplane.lab.yamlio import Doc
from tuneplane.problems import Problem, Severity
from tuneplane.runtime.records import FrozenError, FrozenRecord, Record
from tuneplane.runtime.versions import Version, parse_version


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
