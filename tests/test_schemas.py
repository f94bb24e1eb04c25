"""The JSON Schemas are generated from the models, never drift, and accept/refuse the examples."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest

from tuneplane.dev.schemagen import models, render_all
from tuneplane.lab.modelparse import parse_model
from tuneplane.lab.yamlio import load_json, load_yaml

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = Path(__file__).parent / "schema_examples"
EXPECTED = json.loads((EXAMPLES / "expected-errors.json").read_text())
USER_FILES = ["lab", "recipe", "recipe-lock", "plugins-lock", "plugin", "run", "status", "experiment", "sweep"]


def _example(name: str, kind: str):
    for suffix in (".yaml", ".json"):
        path = EXAMPLES / f"{name}.{kind}{suffix}"
        if path.exists():
            return (load_yaml if suffix == ".yaml" else load_json)(path, path.name)
    raise FileNotFoundError(f"{name}.{kind}")


def test_committed_schemas_match_the_models():
    """Regenerate with `python -m tuneplane.dev.schemagen` when a model changes."""
    for filename, text in render_all().items():
        committed = (ROOT / "schemas" / filename).read_text(encoding="utf-8")
        assert committed == text, f"schemas/{filename} is stale: run python -m tuneplane.dev.schemagen"


@pytest.mark.parametrize("name", sorted(models()))
def test_schema_is_valid_draft_2020_12(name):
    schema = json.loads((ROOT / "schemas" / f"{name}.schema.json").read_text())
    assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    jsonschema.Draft202012Validator.check_schema(schema)


@pytest.mark.parametrize("name", USER_FILES)
def test_positive_example_is_accepted_by_schema_and_model(name):
    doc = _example(name, "valid")
    schema = json.loads((ROOT / "schemas" / f"{name}.schema.json").read_text())
    jsonschema.Draft202012Validator(schema).validate(doc.data)
    model, problems = parse_model(models()[name], doc, "schema")
    assert problems == [] and model is not None


@pytest.mark.parametrize("name", USER_FILES)
def test_negative_example_is_refused_with_the_committed_messages(name):
    doc = _example(name, "invalid")
    schema = json.loads((ROOT / "schemas" / f"{name}.schema.json").read_text())
    assert list(jsonschema.Draft202012Validator(schema).iter_errors(doc.data)), "the schema accepted it"
    model, problems = parse_model(models()[name], doc, "schema")
    assert model is None
    messages = [p.message for p in problems]
    for expected in EXPECTED[name]:
        assert any(expected in m for m in messages), f"{expected!r} not in {messages}"
    assert all(p.line >= 1 for p in problems), "every problem has a line"
