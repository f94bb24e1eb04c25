"""Property-based tests of the positioned YAML/JSON loader: any input gives data or one located Problem.

Bounded for CI: a fixed number of examples per property, a per-example deadline, no example database.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from tuneplane.lab.yamlio import MAX_DEPTH, LoadFailed, load_json, parse_json, parse_yaml

BOUNDED = settings(
    max_examples=120,
    deadline=10_000,
    database=None,  # generous: CI machines are shared
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)

scalars = (
    st.none()
    | st.booleans()
    | st.integers(-(2**53), 2**53)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=12)
)
values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=25,
)


def _lines(text: str) -> int:
    return text.count("\n") + 1


def _assert_located(problem_line: int, text: str) -> None:
    assert 0 <= problem_line <= _lines(text) + 1


@BOUNDED
@given(values)
def test_json_round_trips(value: object) -> None:
    text = json.dumps({"v": value}, indent=1)
    assert parse_json(text, "x.json").data == {"v": value}


@BOUNDED
@given(values)
def test_yaml_round_trips(value: object) -> None:
    text = yaml.safe_dump({"v": value})  # escaped: PyYAML writes a raw NEL that YAML then folds
    assert parse_yaml(text, "x.yaml").data == {"v": value}


@BOUNDED
@given(st.text(max_size=300))
@example("0:\r0")  # a lone CR: libyaml placed its error on line 3 of a one-line file
@example("a: 1\u2028b: [")
def test_any_text_is_data_or_a_located_yaml_problem(text: str) -> None:
    try:
        parse_yaml(text, "x.yaml")
    except LoadFailed as exc:
        assert exc.problem.file == "x.yaml" and exc.problem.message
        _assert_located(exc.problem.line, text)


@BOUNDED
@given(st.text(alphabet='[]{}":,\n 1a-', max_size=300))
def test_bracket_soup_is_data_or_a_located_problem(text: str) -> None:
    for parse in (parse_yaml, parse_json):
        try:
            parse(text, "x")
        except LoadFailed as exc:
            _assert_located(exc.problem.line, text)


@BOUNDED
@given(st.binary(max_size=400))
def test_any_bytes_on_disk_are_data_or_a_located_json_problem(
    tmp_path_factory: pytest.TempPathFactory, raw: bytes
) -> None:
    path = Path(tmp_path_factory.mktemp("bytes")) / "x.json"
    path.write_bytes(raw)
    try:
        load_json(path, "x.json")
    except LoadFailed as exc:
        assert exc.problem.file == "x.json"
        assert 0 <= exc.problem.line <= raw.count(b"\n") + 2


@BOUNDED
@given(st.integers(1, 4 * MAX_DEPTH), st.sampled_from(["flow-seq", "flow-map", "block-map", "json"]))
def test_depth_is_capped_at_the_offending_line(depth: int, shape: str) -> None:
    if shape == "flow-seq":
        text, parse = "a: " + "[" * depth + "]" * depth + "\n", parse_yaml
    elif shape == "flow-map":
        text, parse = "a: " + "{b: " * depth + "1" + "}" * depth + "\n", parse_yaml
    elif shape == "block-map":
        text, parse = "".join(f"{' ' * i}k:\n" for i in range(depth)) + " " * depth + "v: 1\n", parse_yaml
    else:
        text, parse = '{"a":\n' + "[" * depth + "]" * depth + "}\n", parse_json
    levels = depth + 1  # the top-level mapping is a level too
    try:
        parse(text, "x")
    except LoadFailed as exc:
        assert levels > MAX_DEPTH, exc.problem
        assert exc.problem.rule == "too-deep"
        _assert_located(exc.problem.line, text)
        if shape != "block-map":
            assert exc.problem.line == (1 if shape != "json" else 2)
    else:
        assert levels <= MAX_DEPTH


@BOUNDED
@given(st.dictionaries(st.text(min_size=1, max_size=6), scalars, min_size=1, max_size=6), st.data())
def test_a_duplicate_json_key_is_refused_at_its_line(mapping: dict[str, object], data: st.DataObject) -> None:
    key = data.draw(st.sampled_from(sorted(mapping)))
    body = [f"  {json.dumps(k)}: {json.dumps(v)}" for k, v in mapping.items()]
    body.append(f"  {json.dumps(key)}: 1")
    text = "{\n" + ",\n".join(body) + "\n}\n"
    with pytest.raises(LoadFailed) as caught:
        parse_json(text, "x.json")
    assert caught.value.problem.rule == "duplicate-key"
    assert caught.value.problem.line == len(body) + 1


@BOUNDED
@given(values, st.data())
def test_one_edited_character_gives_data_or_a_located_problem(value: object, data: st.DataObject) -> None:
    text = json.dumps({"v": value})
    at = data.draw(st.integers(0, len(text)))
    char = data.draw(st.sampled_from(list('[]{}",:\\\0x\u0435')))
    edited = text[:at] + char + text[at + 1 :]
    for parse in (parse_json, parse_yaml):
        try:
            parse(edited, "x")
        except LoadFailed as exc:
            _assert_located(exc.problem.line, edited)


def test_places_in_a_file_with_lone_carriage_returns_count_newlines() -> None:
    """What an editor and `git diff` number: a file whose lines end in CR alone is one line to them."""
    doc = parse_yaml("a: 1\rb: 2\nc: 3\n", "x.yaml")
    assert doc.data == {"a": 1, "b": 2, "c": 3}
    assert (doc.positions["/b"], doc.positions["/c"]) == ((1, 6), (2, 1))  # YAML's own count: lines 2 and 3


def test_a_file_is_searched_for_other_line_breaks_once_not_once_per_node(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every key and value has a place; searching the whole text for each made a load quadratic in the
    file's size (a catalog recipe's 600 nodes cost a tenth of a second each, `tp methods` 5 s)."""
    from tuneplane.lab import yamlio

    searched: list[int] = []
    real = yamlio._OTHER_BREAKS

    class Counting:
        def search(self, text: str) -> object:
            searched.append(len(text))
            return real.search(text)

    monkeypatch.setattr(yamlio, "_OTHER_BREAKS", Counting())
    yamlio._breaks_only_at_newlines.cache_clear()
    text = "".join(f"key{i}:\n  value: {i}\n  list: [1, 2, {i}]\n" for i in range(500))
    doc = parse_yaml(text, "big.yaml")
    assert doc.positions["/key499/list/2"] == (1500, 16)
    assert len(searched) == 1
