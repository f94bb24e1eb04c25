"""Reporters turn Problems into text, JSON, GitHub workflow commands, a Markdown summary and SARIF."""

from __future__ import annotations

import json
import re

import jsonschema
import pytest

from tuneplane.check import reporters
from tuneplane.problems import Problem, Severity

ERR = Problem(
    "experiments/a/config.yaml",
    3,
    5,
    "config-range",
    "epochs: 0 is below the minimum 1",
    pointer="/epochs",
    hint="parameter epochs: passes over the data",
)
WARN = Problem(
    "experiments/a/train.sh", 38, 1, "lint-scaffold", "train.sh is still the scaffold", severity=Severity.WARNING
)
WHOLE = Problem("experiments/a b", 0, 0, "experiment-name", "experiment name 'a b' is not allowed")

# The parts of SARIF 2.1.0 a consumer (GitHub code scanning) relies on, written from the spec.
SARIF_SCHEMA = {
    "type": "object",
    "required": ["version", "runs"],
    "properties": {
        "version": {"const": "2.1.0"},
        "$schema": {"type": "string"},
        "runs": {
            "type": "array",
            "minItems": 1,
            "items": {
                "type": "object",
                "required": ["tool", "results"],
                "properties": {
                    "tool": {
                        "type": "object",
                        "required": ["driver"],
                        "properties": {
                            "driver": {
                                "type": "object",
                                "required": ["name"],
                                "properties": {
                                    "name": {"type": "string"},
                                    "version": {"type": "string"},
                                    "rules": {"type": "array", "items": {"type": "object", "required": ["id"]}},
                                },
                            }
                        },
                    },
                    "results": {
                        "type": "array",
                        "items": {
                            "type": "object",
                            "required": ["message", "ruleId", "level", "locations"],
                            "properties": {
                                "ruleId": {"type": "string"},
                                "level": {"enum": ["none", "note", "warning", "error"]},
                                "message": {"type": "object", "required": ["text"]},
                                "locations": {
                                    "type": "array",
                                    "items": {
                                        "type": "object",
                                        "properties": {
                                            "physicalLocation": {
                                                "type": "object",
                                                "required": ["artifactLocation"],
                                                "properties": {
                                                    "artifactLocation": {"type": "object", "required": ["uri"]},
                                                    "region": {
                                                        "type": "object",
                                                        "properties": {
                                                            "startLine": {"type": "integer", "minimum": 1},
                                                            "startColumn": {"type": "integer", "minimum": 1},
                                                        },
                                                    },
                                                },
                                            }
                                        },
                                    },
                                },
                            },
                        },
                    },
                },
            },
        },
    },
}


def many(n: int, severity: Severity = Severity.ERROR) -> list[Problem]:
    return [
        Problem(f"experiments/e{i:02d}/config.yaml", i + 1, 1, "config-type", f"problem {i}", severity=severity)
        for i in range(n)
    ]


# ── text and JSON ───────────────────────────────────────────────────────────────────────────────────


def test_text_lists_each_problem_with_place_rule_and_hint() -> None:
    out = reporters.text([ERR, WARN, WHOLE], "1 experiment(s)")
    lines = out.splitlines()
    assert lines[0] == "experiments/a/config.yaml:3:5: error [config-range] epochs: 0 is below the minimum 1"
    assert lines[1] == "    hint: parameter epochs: passes over the data"
    assert lines[2].startswith("experiments/a/train.sh:38:1: warning [lint-scaffold]")
    assert lines[3].startswith("experiments/a b: error [experiment-name]")  # line 0: no :0:0
    assert lines[-1] == "2 errors, 1 warning in 3 files (1 experiment(s))"


def test_text_summary_when_clean() -> None:
    assert reporters.text([], "2 experiment(s)") == "ok: 2 experiment(s), no problems\n"


def test_summary_counts_are_singular_and_plural() -> None:
    assert reporters.summary_line([ERR], "x") == "1 error, 0 warnings in 1 file (x)"


def test_json_carries_every_field() -> None:
    data = json.loads(reporters.as_json([ERR, WARN], "checked"))
    assert (data["errors"], data["warnings"], data["checked"]) == (1, 1, "checked")
    assert data["problems"][0] == {
        "file": ERR.file,
        "line": 3,
        "col": 5,
        "pointer": "/epochs",
        "rule": "config-range",
        "severity": "error",
        "message": ERR.message,
        "hint": ERR.hint,
    }


def test_json_keeps_non_ascii() -> None:
    problem = Problem("experiments/données", 0, 0, "experiment-name", "é")
    assert "données" in reporters.as_json([problem], "x")


# ── GitHub ──────────────────────────────────────────────────────────────────────────────────────────

ANNOTATION = re.compile(r"^::(error|warning) file=([^,]+),line=(\d+),col=(\d+),title=([^:]+)::(.*)$")


def test_github_annotation_shape() -> None:
    lines = reporters.github([ERR], "x").splitlines()
    m = ANNOTATION.match(lines[0])
    assert m, lines[0]
    assert m.groups()[:5] == ("error", "experiments/a/config.yaml", "3", "5", "config-range")
    assert "%0A" in m.group(6)  # the hint on a second line, escaped
    assert lines[-1] == reporters.summary_line([ERR], "x")


def test_github_caps_error_annotations_at_ten_and_says_so() -> None:
    problems = many(15) + many(12, Severity.WARNING)
    out = reporters.github(problems, "x")
    errors = [line for line in out.splitlines() if line.startswith("::error ")]
    warnings = [line for line in out.splitlines() if line.startswith("::warning ")]
    assert len(errors) == 10 and len(warnings) == 10
    assert "7 more problem(s)" in out


def test_github_escapes_data_and_properties() -> None:
    problem = Problem("dir,with:odd%chars/f.yaml", 1, 1, "r", "50% done\nsecond line\r", hint="")
    line = reporters.github([problem], "x").splitlines()[0]
    assert "file=dir%2Cwith%3Aodd%25chars/f.yaml," in line
    assert line.endswith("::50%25 done%0Asecond line%0D")


def test_github_whole_file_problem_has_no_line() -> None:
    line = reporters.github([WHOLE], "x").splitlines()[0]
    assert line.startswith("::error file=experiments/a b,title=experiment-name::")


def test_markdown_summary_lists_everything_and_escapes_pipes() -> None:
    problem = Problem("f.yaml", 1, 1, "r", "a | b", hint="c\nd")
    out = reporters.markdown(many(15) + [problem], "x")
    rows = [line for line in out.splitlines() if line.startswith("| ❌")]
    assert len(rows) == 16
    assert "a \\| b" in out and "c d" in out


# ── SARIF ───────────────────────────────────────────────────────────────────────────────────────────


@pytest.mark.parametrize("problems", [[], [ERR, WARN, WHOLE]], ids=["empty", "mixed"])
def test_sarif_is_valid_2_1_0(problems: list[Problem]) -> None:
    doc = json.loads(reporters.sarif(problems, "x"))
    jsonschema.validate(doc, SARIF_SCHEMA)
    assert len(doc["runs"][0]["results"]) == len(problems)


def test_sarif_results_carry_rule_level_and_region() -> None:
    doc = json.loads(reporters.sarif([ERR, WARN, WHOLE], "x"))
    run = doc["runs"][0]
    rule_ids = {r["id"] for r in run["tool"]["driver"]["rules"]}
    assert rule_ids == {"config-range", "lint-scaffold", "experiment-name"}
    first, second, third = run["results"]
    assert (first["ruleId"], first["level"]) == ("config-range", "error")
    assert first["locations"][0]["physicalLocation"]["region"] == {"startLine": 3, "startColumn": 5}
    assert first["locations"][0]["physicalLocation"]["artifactLocation"]["uri"] == ERR.file
    assert second["level"] == "warning"
    assert "region" not in third["locations"][0]["physicalLocation"]
