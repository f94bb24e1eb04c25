"""Our hand-written JobSet/RayJob schemas against the real CRDs, read from ../shared at test time.

(a) every property path our schemas allow exists in the CRD's openAPIV3Schema (served version) with a
    compatible type; (b) every golden JobSet/RayJob validates against the CRD's own schema (extracted
    into a tmp dir here, never committed); (c) the compiled validators agree with jsonschema on valid
    and broken manifests, and broken ones are refused with the messages below.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator
from functools import cache
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml
from support.shared import require_shared

from tuneplane.render.schemacheck import (
    CORE_SCHEMAS,
    K8S_VERSION,
    OWN_SCHEMA_FILES,
    OWN_SCHEMAS,
    core_check,
    core_documents,
    core_schema_dir,
    core_validator,
    embedded_objects,
    manifest_errors,
    own_check,
    own_schema,
    own_validator,
)

CRD_FILES = {"JobSet": "jobset.x-k8s.io_jobsets.yaml", "RayJob": "ray.io_rayjobs.yaml"}
SERVED = {"JobSet": "v1alpha2", "RayJob": "v1"}
GOLDEN = Path(__file__).parent / "golden"
OWN_BY_KIND = {kind: filename for (_, kind), filename in OWN_SCHEMAS.items()}
OBJECT_META = "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"


def golden_docs(kind: str | None = None) -> list[dict[str, Any]]:
    return copy.deepcopy([d for d in _goldens() if kind is None or d["kind"] == kind])


@cache
def _goldens() -> tuple[dict[str, Any], ...]:
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    return tuple(
        d for path in sorted(GOLDEN.glob("*.yaml")) for d in yaml.load_all(path.read_text(), Loader=loader) if d
    )


@pytest.fixture(scope="module", params=sorted(CRD_FILES))
def kind(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@cache
def crd_schema(kind: str) -> dict[str, Any]:
    path = require_shared("k8s-crds", CRD_FILES[kind])
    crd = yaml.load(path.read_text(), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    (version,) = [v for v in crd["spec"]["versions"] if v["name"] == SERVED[kind]]
    assert version["served"] is True
    return version["schema"]["openAPIV3Schema"]  # type: ignore[no-any-return]


# ── walking our schemas ─────────────────────────────────────────────────────────────────────────────


def _resolve(node: dict[str, Any], base: str) -> tuple[dict[str, Any], str]:
    from urllib.parse import urldefrag, urljoin

    while "$ref" in node:
        uri, fragment = urldefrag(urljoin(base, node["$ref"]))
        target: Any = {own_schema(n)["$id"]: own_schema(n) for n in OWN_SCHEMA_FILES}[uri]
        for part in [p for p in fragment.split("/") if p]:
            target = target[part]
        node, base = target, uri
    return node, base


def _types(node: dict[str, Any]) -> set[str]:
    if "type" in node:
        return set([node["type"]] if isinstance(node["type"], str) else node["type"])
    values = [node["const"]] if "const" in node else node.get("enum", [])
    names = {bool: "boolean", int: "integer", str: "string", float: "number"}
    return {names[type(v)] for v in values}


def our_paths(
    node: dict[str, Any], base: str, path: tuple[str, ...] = ()
) -> Iterator[tuple[tuple[str, ...], set[str]]]:
    """(path, JSON types) for every place a value may sit; `*` is a map value, `[]` a list item."""
    node, base = _resolve(node, base)
    if path:
        yield path, _types(node)
    for name, sub in node.get("properties", {}).items():
        yield from our_paths(sub, base, path + (name,))
    if isinstance(node.get("additionalProperties"), dict):
        yield from our_paths(node["additionalProperties"], base, path + ("*",))
    if isinstance(node.get("items"), dict):
        yield from our_paths(node["items"], base, path + ("[]",))


def crd_node(schema: dict[str, Any], path: tuple[str, ...]) -> dict[str, Any] | None:
    node: dict[str, Any] | None = schema
    for part in path:
        if node is None:
            return None
        if part == "*":
            extra = node.get("additionalProperties")
            node = extra if isinstance(extra, dict) else None
        elif part == "[]":
            node = node.get("items")
        else:
            node = node.get("properties", {}).get(part)
    return node


def crd_types(node: dict[str, Any]) -> set[str]:
    if node.get("x-kubernetes-int-or-string"):
        return {"integer", "string"}
    if "type" in node:
        return {node["type"]}
    return {t for branch in node.get("anyOf", []) for t in crd_types(branch)}


def object_meta() -> dict[str, Any]:
    _, definitions = core_documents("job-batch-v1.json")
    meta = definitions["$defs"][OBJECT_META]
    return {
        "type": "object",
        "properties": {name: _core_types(sub, definitions) for name, sub in meta["properties"].items()},
    }


def _core_types(node: dict[str, Any], definitions: dict[str, Any]) -> dict[str, Any]:
    types = node.get("type", [])
    types = [types] if isinstance(types, str) else types
    out: dict[str, Any] = {"type": next((t for t in types if t != "null"), "object")}
    if isinstance(node.get("additionalProperties"), dict):
        out["additionalProperties"] = _core_types(node["additionalProperties"], definitions)
    return out


# ── (a) our schemas are a subset of the CRDs ────────────────────────────────────────────────────────


def mismatches(kind: str, ours: dict[str, Any]) -> tuple[list[str], int]:
    """Paths of `ours` the CRD lacks or types differently, and how many paths were checked."""
    crd, meta = crd_schema(kind), object_meta()
    found, checked = [], 0
    for path, types in our_paths(ours, ours["$id"]):
        if path[0] in ("apiVersion", "kind"):
            target: dict[str, Any] | None = crd.get("properties", {}).get(path[0])
        elif path[0] == "metadata":  # the API server checks ObjectMeta; the CRD leaves it open
            target = meta if len(path) == 1 else crd_node(meta, path[1:])
        else:
            target = crd_node(crd, path)
        checked += 1
        if target is None:
            found.append(f"{'.'.join(path)} is not in the CRD")
            continue
        allowed = crd_types(target) if path[0] != "metadata" or len(path) == 1 else {target["type"]}
        if not types or not types <= allowed:
            found.append(f"{'.'.join(path)} is {sorted(types)} here, {sorted(allowed)} in the CRD")
    return found, checked


def test_every_path_of_our_schema_exists_in_the_crd_with_a_compatible_type(kind: str) -> None:
    found, checked = mismatches(kind, own_schema(OWN_BY_KIND[kind]))
    assert found == []
    assert checked > 100  # the walk reached the pod templates


def test_the_cross_check_catches_a_made_up_path_and_a_wrong_type(kind: str) -> None:
    ours = copy.deepcopy(own_schema(OWN_BY_KIND[kind]))
    ours["properties"]["spec"]["properties"]["madeUpField"] = {"type": "string"}
    ours["properties"]["spec"]["properties"]["ttlSecondsAfterFinished"] = {"type": "string"}
    found, _ = mismatches(kind, ours)
    assert found == [
        "spec.ttlSecondsAfterFinished is ['string'] here, ['integer'] in the CRD",
        "spec.madeUpField is not in the CRD",
    ]


# ── (b) goldens against the CRDs' own schemas ───────────────────────────────────────────────────────


def test_goldens_validate_against_the_crd_schema(kind: str, tmp_path: Path) -> None:
    extracted = tmp_path / f"{kind}.schema.json"
    extracted.write_text(json.dumps(crd_schema(kind)))  # x-kubernetes-* are unknown keywords: ignored
    validator = jsonschema.Draft7Validator(json.loads(extracted.read_text()))
    docs = golden_docs(kind)
    assert docs, f"no golden {kind}"
    for doc in docs:
        errors = [f"{'.'.join(map(str, e.absolute_path))}: {e.message}" for e in validator.iter_errors(doc)]
        assert errors == [], f"{doc['metadata']['name']}: {errors[:3]}"


def test_the_crd_schema_refuses_a_wrong_type(kind: str) -> None:
    validator = jsonschema.Draft7Validator(crd_schema(kind))
    doc = copy.deepcopy(golden_docs(kind)[0])
    doc["spec"]["ttlSecondsAfterFinished"] = "soon"
    assert not validator.is_valid(doc)


# ── (c) our validators: goldens pass, broken manifests fail, compiled == jsonschema ─────────────────


def test_core_schemas_are_pinned() -> None:
    assert K8S_VERSION == "1.31" and core_schema_dir().name == "v1.31.0-local-strict"
    for filename in CORE_SCHEMAS.values():
        assert (core_schema_dir() / filename).is_file()


def test_every_golden_manifest_is_valid() -> None:
    docs = golden_docs()
    assert {d["kind"] for d in docs} == {"Job", "JobSet", "RayJob"}
    for doc in docs:
        assert list(manifest_errors(doc)) == []


def _pairs(doc: dict[str, Any]) -> Iterator[tuple[Any, Any, dict[str, Any]]]:
    """(compiled check, jsonschema validator, instance) for a manifest and everything embedded in it."""
    key = (doc["apiVersion"], doc["kind"])
    if key in CORE_SCHEMAS:
        yield core_check(CORE_SCHEMAS[key]), core_validator(CORE_SCHEMAS[key]), doc
        return
    yield own_check(OWN_SCHEMAS[key]), own_validator(OWN_SCHEMAS[key]), doc
    for _, inner in embedded_objects(doc):
        name = CORE_SCHEMAS[(inner["apiVersion"], inner["kind"])]
        yield core_check(name), core_validator(name), inner


def _pod(doc: dict[str, Any]) -> dict[str, Any]:
    if doc["kind"] == "Job":
        return doc["spec"]["template"]["spec"]  # type: ignore[no-any-return]
    if doc["kind"] == "JobSet":
        return doc["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]  # type: ignore[no-any-return]
    return doc["spec"]["rayClusterSpec"]["workerGroupSpecs"][0]["template"]["spec"]  # type: ignore[no-any-return]


BREAKAGES = {
    "unknown key in a container": lambda d: _pod(d)["containers"][0].update(bogus=1),
    "string for an integer": lambda d: _pod(d)["containers"][0]["resources"]["limits"].update({"cpu": [1]}),
    "env var without a name": lambda d: _pod(d)["containers"][0]["env"][0].pop("name"),
    "restart policy Always": lambda d: _pod(d).update(restartPolicy=7),
    "volumes not a list": lambda d: _pod(d).update(volumes={"a": 1}),
    "label value with a newline": lambda d: d["metadata"]["labels"].update({"tuneplane.dev/run": ["x"]}),
}


@pytest.mark.parametrize("breakage", sorted(BREAKAGES))
@pytest.mark.parametrize("kind_name", ["Job", "JobSet", "RayJob"])
def test_compiled_validators_agree_with_jsonschema(kind_name: str, breakage: str) -> None:
    good = golden_docs(kind_name)[0]
    for check, validator, instance in _pairs(good):
        assert check(instance) is True and validator.is_valid(instance) is True
    bad = copy.deepcopy(good)
    BREAKAGES[breakage](bad)
    verdicts = [(check(instance), validator.is_valid(instance)) for check, validator, instance in _pairs(bad)]
    assert all(compiled == reference for compiled, reference in verdicts), verdicts
    assert not all(ok for ok, _ in verdicts), f"{breakage} was accepted"
    assert list(manifest_errors(bad))


OWN_NEGATIVE = {
    "replicas must be 1": (
        lambda d: d["spec"]["replicatedJobs"][0].update(replicas=2),
        "spec.replicatedJobs.0.replicas: 1 was expected",
    ),
    "bad object name": (
        lambda d: d["metadata"].update(name="Bad_Name"),
        "metadata.name: 'Bad_Name' does not match",
    ),
    "label value too long": (
        lambda d: d["metadata"]["labels"].update({"tuneplane.dev/run": "x" * 64}),
        "is too long",
    ),
    "unknown spec field": (
        lambda d: d["spec"].update(suspend=True),
        "Additional properties are not allowed ('suspend' was unexpected)",
    ),
    "restartPolicy Always": (
        lambda d: _pod(d).update(restartPolicy="Always"),
        "'Always' is not one of ['Never']",
    ),
}


@pytest.mark.parametrize("case", sorted(OWN_NEGATIVE))
def test_our_jobset_schema_refuses_with_these_messages(case: str) -> None:
    breakage, message = OWN_NEGATIVE[case]
    doc = copy.deepcopy(golden_docs("JobSet")[0])
    breakage(doc)
    assert own_check(OWN_BY_KIND["JobSet"])(doc) is False
    errors = list(manifest_errors(doc))
    assert any(message in e for e in errors), errors


def test_our_rayjob_schema_refuses_a_gpu_head_group_missing_its_template() -> None:
    doc = copy.deepcopy(golden_docs("RayJob")[0])
    del doc["spec"]["rayClusterSpec"]["headGroupSpec"]["template"]
    errors = list(manifest_errors(doc))
    assert any("'template' is a required property" in e for e in errors), errors


def test_an_unknown_keyword_falls_back_to_jsonschema() -> None:
    from tuneplane.render.schemacheck import _compiled

    schema = {"$id": "https://example.org/s.json", "type": "object", "dependentRequired": {"a": ["b"]}}

    class Fallback:
        def is_valid(self, value: Any) -> bool:
            return jsonschema.Draft202012Validator(schema).is_valid(value)

    check = _compiled(schema, [schema], Fallback)
    assert check({"a": 1, "b": 2}) is True and check({"a": 1}) is False
