"""Turn a list of Problems into text, JSON, GitHub workflow commands or SARIF. Pure: returns strings."""

from __future__ import annotations

import json
from collections.abc import Sequence

from tuneplane import __version__
from tuneplane.problems import Problem

GITHUB_ANNOTATION_CAP = 10  # GitHub shows at most 10 error and 10 warning annotations per step


def counts(problems: Sequence[Problem]) -> tuple[int, int]:
    errors = sum(1 for p in problems if p.is_error)
    return errors, len(problems) - errors


def summary_line(problems: Sequence[Problem], checked: str) -> str:
    errors, warnings = counts(problems)
    if not problems:
        return f"ok: {checked}, no problems"
    files = len({p.file for p in problems})
    return (
        f"{errors} error{'s' * (errors != 1)}, {warnings} warning{'s' * (warnings != 1)} in {files} "
        f"file{'s' * (files != 1)} ({checked})"
    )


def text(problems: Sequence[Problem], checked: str) -> str:
    lines = []
    for p in problems:
        lines.append(f"{p.location()}: {p.severity.value} [{p.rule}] {p.message}")
        if p.hint:
            lines.append(f"    hint: {p.hint}")
    lines.append(summary_line(problems, checked))
    return "\n".join(lines) + "\n"


def as_json(problems: Sequence[Problem], checked: str) -> str:
    errors, warnings = counts(problems)
    body = {
        "checked": checked,
        "errors": errors,
        "warnings": warnings,
        "problems": [
            {
                "file": p.file,
                "line": p.line,
                "col": p.col,
                "pointer": p.pointer,
                "rule": p.rule,
                "severity": p.severity.value,
                "message": p.message,
                "hint": p.hint,
            }
            for p in problems
        ],
    }
    return json.dumps(body, indent=2, ensure_ascii=False) + "\n"


def _gh_data(value: str) -> str:
    return value.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def _gh_prop(value: str) -> str:
    return _gh_data(value).replace(":", "%3A").replace(",", "%2C")


def github(problems: Sequence[Problem], checked: str) -> str:
    """Workflow commands for the first problems of each severity (GitHub's cap), then a plain summary."""
    lines: list[str] = []
    shown = {"error": 0, "warning": 0}
    for p in problems:
        sev = p.severity.value
        if shown[sev] >= GITHUB_ANNOTATION_CAP:
            continue
        shown[sev] += 1
        props = f"file={_gh_prop(p.file)}"
        if p.line:
            props += f",line={p.line},col={max(p.col, 1)}"
        props += f",title={_gh_prop(p.rule)}"
        message = p.message + (f"\n{p.hint}" if p.hint else "")
        lines.append(f"::{sev} {props}::{_gh_data(message)}")
    hidden = len(problems) - sum(shown.values())
    if hidden:
        lines.append(
            f"{hidden} more problem(s) are not annotated (GitHub shows {GITHUB_ANNOTATION_CAP} of each "
            "kind per step); all are in the job summary"
        )
    lines.append(summary_line(problems, checked))
    return "\n".join(lines) + "\n"


def markdown(problems: Sequence[Problem], checked: str) -> str:
    """The full report for $GITHUB_STEP_SUMMARY."""
    out = ["## tp validate", "", summary_line(problems, checked), ""]
    if problems:
        out += ["| | place | rule | problem | how to fix |", "|---|---|---|---|---|"]
        for p in problems:
            icon = "❌" if p.is_error else "⚠️"
            out.append(f"| {icon} | `{_md(p.location())}` | `{p.rule}` | {_md(p.message)} | {_md(p.hint)} |")
    return "\n".join(out) + "\n"


def _md(value: str) -> str:
    return value.replace("|", "\\|").replace("\n", " ")


def sarif(problems: Sequence[Problem], checked: str) -> str:
    rules = sorted({p.rule for p in problems})
    results = []
    for p in problems:
        region = {"startLine": p.line, "startColumn": max(p.col, 1)} if p.line else {}
        location = {"physicalLocation": {"artifactLocation": {"uri": p.file}, **({"region": region} if region else {})}}
        results.append(
            {
                "ruleId": p.rule,
                "level": p.severity.value,
                "message": {"text": p.message + (f" (hint: {p.hint})" if p.hint else "")},
                "locations": [location],
            }
        )
    run = {
        "tool": {
            "driver": {
                "name": "tuneplane",
                "version": __version__,
                "informationUri": "https://tuneplane.dev",
                "rules": [{"id": r} for r in rules],
            }
        },
        "results": results,
    }
    doc = {"$schema": "https://json.schemastore.org/sarif-2.1.0.json", "version": "2.1.0", "runs": [run]}
    return json.dumps(doc, indent=2, ensure_ascii=False) + "\n"


FORMATS = {"text": text, "json": as_json, "github": github, "sarif": sarif}
