"""Loading YAML and JSON with positions, and refusing what would hurt (tuneplane.lab.yamlio)."""

from __future__ import annotations

import json
import os
import tracemalloc
from pathlib import Path

import pytest

from tuneplane.lab.fs import write_json
from tuneplane.lab.yamlio import NODE_BUDGET, LoadFailed, load_json, load_yaml, parse_yaml

MB = 1024 * 1024


def refusal(text: str, rel: str = "f.yaml") -> LoadFailed:
    with pytest.raises(LoadFailed) as info:
        parse_yaml(text, rel)
    return info.value


def alias_bomb(levels: int) -> str:
    """The billion-laughs shape: each level is nine aliases of the one before."""
    lines = ["l0: &l0 [x, x, x, x, x, x, x, x, x]"]
    for i in range(1, levels):
        lines.append(f"l{i}: &l{i} [" + ", ".join([f"*l{i - 1}"] * 9) + "]")
    return "\n".join(lines) + "\n"


# ── values and positions ────────────────────────────────────────────────────────────────────────────


def test_positions_are_one_based_for_every_pointer() -> None:
    doc = parse_yaml("a: 1\nb:\n  c: [x, {d: 2}]\n  'e/f': 3\n", "f.yaml")
    assert doc.data == {"a": 1, "b": {"c": ["x", {"d": 2}], "e/f": 3}}
    assert doc.positions["/a"] == (1, 1)
    assert doc.positions["/b/c"] == (3, 3)
    assert doc.positions["/b/c/1/d"] == (3, 11)
    assert doc.positions["/b/e~1f"] == (4, 3)  # JSON-pointer escaping of '/'


def test_where_falls_back_to_the_nearest_ancestor() -> None:
    doc = parse_yaml("a:\n  b: 1\n", "f.yaml")
    assert doc.where("/a/b/missing/deeper") == (2, 3)
    assert doc.where("/nothing") == (1, 1)


def test_problem_carries_file_line_col_and_pointer() -> None:
    doc = parse_yaml("x: 1\ny:\n  z: 2\n", "dir/f.yaml")
    p = doc.problem("/y/z", "some-rule", "msg", hint="fix it")
    assert (p.file, p.line, p.col, p.rule) == ("dir/f.yaml", 3, 3, "some-rule")
    assert (p.pointer, p.hint) == ("/y/z", "fix it")


def test_yaml_1_1_scalars_dates_stay_text() -> None:
    data = parse_yaml("a: yes\nb: off\nc: 1e-6\nd: 1.0e-6\ne: 2024-01-02\nf: '3'\ng: ~\n", "f.yaml").data
    assert data == {"a": True, "b": False, "c": "1e-6", "d": 1e-6, "e": "2024-01-02", "f": "3", "g": None}


def test_empty_document_is_an_empty_mapping() -> None:
    assert parse_yaml("", "f.yaml").data == {}
    assert parse_yaml("# only a comment\n", "f.yaml").data == {}


def test_merge_keys_are_applied_without_overriding_explicit_keys() -> None:
    data = parse_yaml("base: &b {x: 1, y: 2}\nuse:\n  <<: *b\n  y: 3\n", "f.yaml").data
    assert data["use"] == {"x": 1, "y": 3}


def test_crlf_and_bom_are_read() -> None:
    assert parse_yaml("\ufeffa: 1\r\nb:\r\n  c: 2\r\n", "f.yaml").data == {"a": 1, "b": {"c": 2}}


# ── refusals, each with its place ───────────────────────────────────────────────────────────────────


def test_duplicate_key_names_both_lines() -> None:
    problem = refusal("a: 1\nb: 2\na: 3\n").problem
    assert (problem.line, problem.col, problem.rule) == (3, 1, "duplicate-key")
    assert "line 1" in problem.message


def test_duplicate_key_in_a_nested_flow_mapping() -> None:
    problem = refusal("top:\n  m: {k: 1, j: 2, k: 3}\n").problem
    assert (problem.line, problem.col, problem.rule) == (2, 19, "duplicate-key")


def test_syntax_error_points_at_the_line() -> None:
    problem = refusal("a: 1\nb: [1, 2\nc: 3\n").problem
    assert problem.rule == "yaml-syntax"
    assert problem.line in (2, 3, 4)  # libyaml reports where it gave up, at or after the opening bracket
    assert problem.hint


def test_tab_indentation_gets_its_own_message() -> None:
    problem = refusal("model:\n\tdepth: 3\n").problem
    assert (problem.line, problem.rule) == (2, "yaml-syntax")
    assert "tab" in problem.message and "spaces" in problem.hint


@pytest.mark.parametrize(
    "text",
    ["a: !custom 3\n", "a: !!python/name:os.system x\n", "a: !!python/object/apply:os.system [echo]\n"],
    ids=["scalar", "python-name", "python-apply-on-a-list"],
)
def test_custom_tags_are_refused(text: str) -> None:
    problem = refusal(text).problem
    assert (problem.line, problem.col, problem.rule) == (1, 4, "yaml-syntax")
    assert "tag" in problem.hint


def test_several_documents_are_refused() -> None:
    assert refusal("a: 1\n---\nb: 2\n").problem.rule == "yaml-syntax"


def test_complex_keys_are_refused() -> None:
    problem = refusal("? [a, b]\n: 1\n").problem
    assert (problem.line, problem.rule) == (1, "yaml-key")


@pytest.mark.bulk
def test_alias_bomb_is_refused_with_flat_memory() -> None:
    """Nine levels expand to 387 million values; the budget stops it at a few hundred thousand."""
    peaks = []
    for levels in (9, 12):
        tracemalloc.start()
        try:
            problem = refusal(alias_bomb(levels)).problem
            peaks.append(tracemalloc.get_traced_memory()[1])
        finally:
            tracemalloc.stop()
        assert problem.rule == "yaml-aliases"
        assert problem.line >= 1
        assert str(NODE_BUDGET) in problem.message
    assert max(peaks) < 64 * MB, peaks


def test_aliases_below_the_budget_are_fine() -> None:
    data = parse_yaml("a: &a {x: 1}\nb: *a\nc: *a\n", "f.yaml").data
    assert data["b"] == data["c"] == {"x": 1}


def test_binary_file_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "f.yaml"
    path.write_bytes(b"a: 1\n\x00\x01\x02")
    with pytest.raises(LoadFailed) as info:
        load_yaml(path, "f.yaml")
    assert (info.value.problem.line, info.value.problem.rule) == (1, "binary")


def test_non_utf8_names_the_line_column_and_byte(tmp_path: Path) -> None:
    path = tmp_path / "f.yaml"
    path.write_bytes(b"a: 1\nname: caf\xe9\n")
    with pytest.raises(LoadFailed) as info:
        load_yaml(path, "f.yaml")
    problem = info.value.problem
    assert (problem.line, problem.col, problem.rule) == (2, 10, "encoding")
    assert "0xe9" in problem.message and "UTF-8" in problem.hint


def test_too_large_is_refused_before_parsing(tmp_path: Path) -> None:
    path = tmp_path / "f.yaml"
    path.write_bytes(b"a: 1\n" * (2 * MB))  # 10 MiB
    with pytest.raises(LoadFailed) as info:
        load_yaml(path, "f.yaml")
    assert (info.value.problem.line, info.value.problem.rule) == (1, "too-large")


def test_missing_file_is_a_problem_not_an_exception(tmp_path: Path) -> None:
    with pytest.raises(LoadFailed) as info:
        load_yaml(tmp_path / "absent.yaml", "absent.yaml")
    assert info.value.problem.rule == "unreadable"


# ── JSON ────────────────────────────────────────────────────────────────────────────────────────────


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "f.json"
    path.write_text(text, encoding="utf-8")
    return path


def test_json_positions_are_computed_on_demand(tmp_path: Path) -> None:
    doc = load_json(write(tmp_path, '{\n  "a": {\n    "b": 1\n  }\n}\n'), "f.json")
    assert doc.data == {"a": {"b": 1}}
    assert doc.where("/a/b") == (3, 5)


def test_json_syntax_error_position(tmp_path: Path) -> None:
    with pytest.raises(LoadFailed) as info:
        load_json(write(tmp_path, '{\n  "a": 1,\n}\n'), "f.json")
    assert (info.value.problem.line, info.value.problem.col, info.value.problem.rule) == (3, 1, "json-syntax")


@pytest.mark.parametrize(
    "text, where, bracket",
    [('{\n  "a": 1,\n}\n', (3, 1), "}"), ('{"a": [1,\n  2,\n  ]}', (3, 3), "]"), ("[1,   ]", (1, 7), "]")],
)
def test_a_trailing_comma_is_told_alike_on_every_python(
    tmp_path: Path, text: str, where: tuple[int, int], bracket: str
) -> None:
    """Python 3.13's json points at the comma, earlier ones at the bracket with "Expecting property name":
    the problem is the same on each, at the bracket the comma stands before."""
    with pytest.raises(LoadFailed) as info:
        load_json(write(tmp_path, text), "f.json")
    problem = info.value.problem
    assert (problem.line, problem.col, problem.rule) == (*where, "json-syntax")
    assert problem.message == f"not valid JSON: a trailing comma before this '{bracket}'", problem.message
    assert "delete the comma" in problem.hint


def test_a_doubled_comma_is_not_called_trailing(tmp_path: Path) -> None:
    with pytest.raises(LoadFailed) as info:
        load_json(write(tmp_path, '{"a": 1,,}'), "f.json")
    assert "trailing" not in info.value.problem.message and info.value.problem.col == 9


def test_json_duplicate_key_at_the_top(tmp_path: Path) -> None:
    with pytest.raises(LoadFailed) as info:
        load_json(write(tmp_path, '{\n  "a": 1,\n  "a": 2\n}\n'), "f.json")
    assert (info.value.problem.line, info.value.problem.rule) == (3, "duplicate-key")


def test_json_duplicate_key_in_a_nested_object_points_at_the_duplicate(tmp_path: Path) -> None:
    """The key also appears, legitimately, in an earlier object: the problem is on line 5, not line 4."""
    text = '{\n  "recipe": {"version": "1"},\n  "framework": {\n    "version": "a",\n    "version": "b"\n  }\n}\n'
    with pytest.raises(LoadFailed) as info:
        load_json(write(tmp_path, text), "f.json")
    assert (info.value.problem.line, info.value.problem.rule) == (5, "duplicate-key")


def test_write_json_is_canonical_and_atomic(tmp_path: Path) -> None:
    path = tmp_path / "sub" / "lock.json"
    write_json(path, {"b": 1, "a": {"é": [1, 2]}})
    text = path.read_text(encoding="utf-8")
    assert text == '{\n  "a": {\n    "é": [\n      1,\n      2\n    ]\n  },\n  "b": 1\n}\n'
    assert [p.name for p in path.parent.iterdir()] == ["lock.json"]


def test_write_json_failure_keeps_the_old_file_and_no_temp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "lock.json"
    path.write_text('{"old": true}\n', encoding="utf-8")

    def disk_full(src: object, dst: object) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", disk_full)
    with pytest.raises(OSError):
        write_json(path, {"new": True})
    assert json.loads(path.read_text(encoding="utf-8")) == {"old": True}
    assert [p.name for p in tmp_path.iterdir()] == ["lock.json"]
