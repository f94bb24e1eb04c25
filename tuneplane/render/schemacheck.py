"""Validate rendered manifests before anyone sees them. Pure (reads packaged schemas only).

Core kinds are checked against the real Kubernetes OpenAPI schemas that `kubernetes-validate` ships,
pinned to one minor version, in strict mode (unknown fields refused). JobSet and RayJob are checked
against our own hand-written schemas in `schemas/k8s/` (the fields we emit, nothing else), and the
Jobs and pod templates embedded in them against the real core schemas as well.

Speed: a general validator costs milliseconds per manifest, so each schema is compiled once per
process into a plain predicate over the small keyword set these schemas use (`_Compiler`); a schema
using any other keyword is left to jsonschema. The predicate only says valid or not: for an invalid
manifest jsonschema runs and supplies the messages. tests/test_render_schemacheck.py checks that both agree.
"""

from __future__ import annotations

import importlib.util
import json
import re
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from functools import cache
from importlib.resources import files
from pathlib import Path
from typing import Protocol
from urllib.parse import urldefrag, urljoin

from tuneplane.constants import EXIT_INTERNAL
from tuneplane.errors import UsageError
from tuneplane.runtime.jsonvalue import JSONObject, JSONValue

K8S_VERSION = "1.31"  # the Kubernetes minor the core schemas are pinned to
_STRICT_DIR = f"v{K8S_VERSION}.0-local-strict"
CORE_SCHEMAS = {
    ("batch/v1", "Job"): "job-batch-v1.json",
    ("v1", "PodTemplate"): "podtemplate-v1.json",
    ("v1", "Secret"): "secret-v1.json",
}
OWN_SCHEMAS = {
    ("jobset.x-k8s.io/v1alpha2", "JobSet"): "jobset.v1alpha2.schema.json",
    ("ray.io/v1", "RayJob"): "rayjob.v1.schema.json",
}
OWN_SCHEMA_FILES = ("pod-template.schema.json", "object-meta.schema.json", *OWN_SCHEMAS.values())

Check = Callable[[object], bool]


class SchemaError(Protocol):
    """What a jsonschema error tells: where in the document, and what is wrong."""

    @property
    def absolute_path(self) -> Sequence[str | int]: ...

    @property
    def message(self) -> str: ...


class Validator(Protocol):
    """The part of a jsonschema validator used here (jsonschema ships no types)."""

    def iter_errors(self, instance: object) -> Iterable[SchemaError]: ...

    def is_valid(self, instance: object) -> bool: ...


class ManifestInvalid(UsageError):
    """A rendered manifest failed its schema: a bug in tp or a lab setting the manifest cannot carry."""

    exit_code = EXIT_INTERNAL


def validate_manifest(doc: Mapping[str, object]) -> None:
    """Raise ManifestInvalid naming the first error of `doc` (and of the templates inside it)."""
    for error in manifest_errors(doc):
        kind, name = doc.get("kind", "?"), _mapping(doc.get("metadata")).get("name", "?")
        raise ManifestInvalid(
            f"rendered {kind} {name} is invalid: {error}",
            hint="check the lab settings in tuneplane.yaml (profiles, cluster); "
            "if they are right, this is a bug in tp: report it with "
            "TUNEPLANE_DEBUG=1 output",
        )


def manifest_errors(doc: Mapping[str, object]) -> Iterator[str]:
    """Every schema error of `doc` as `path: message` (nothing when valid)."""
    key = (str(doc.get("apiVersion")), str(doc.get("kind")))
    if key in CORE_SCHEMAS:
        yield from _checked(CORE_SCHEMAS[key], doc, "", core=True)
    elif key in OWN_SCHEMAS:
        yield from _checked(OWN_SCHEMAS[key], doc, "", core=False)
        for where, embedded in embedded_objects(doc):
            core_file = CORE_SCHEMAS[(str(embedded["apiVersion"]), str(embedded["kind"]))]
            yield from _checked(core_file, embedded, where, core=True)
    else:
        yield f"no schema for apiVersion {key[0]!r} kind {key[1]!r}"


def _checked(filename: str, doc: object, prefix: str, core: bool) -> Iterator[str]:
    try:
        if (core_check if core else own_check)(filename)(doc):
            return
    except _Unsupported:
        pass  # a definition this manifest reached uses a keyword the compiler leaves to jsonschema
    validator = core_validator(filename) if core else own_validator(filename)
    for error in sorted(validator.iter_errors(doc), key=lambda e: list(map(str, e.absolute_path))):
        path = ".".join(str(p) for p in error.absolute_path)
        yield f"{prefix}{path or '(top)'}: {error.message}"


def embedded_objects(doc: Mapping[str, object]) -> Iterator[tuple[str, dict[str, object]]]:
    """The Jobs and pod templates inside a JobSet or RayJob, wrapped as the core objects they are."""
    spec = _mapping(doc.get("spec"))
    for i, rjob in enumerate(_list(spec.get("replicatedJobs"))):
        template = rjob.get("template") if isinstance(rjob, dict) else None
        if isinstance(template, dict):
            yield (
                f"spec.replicatedJobs.{i}.template.",
                {
                    "apiVersion": "batch/v1",
                    "kind": "Job",
                    "metadata": template.get("metadata") or {},
                    "spec": template.get("spec"),
                },
            )
    cluster = _mapping(spec.get("rayClusterSpec"))
    groups: list[tuple[str, object]] = [("spec.rayClusterSpec.headGroupSpec.", cluster.get("headGroupSpec"))]
    groups += [
        (f"spec.rayClusterSpec.workerGroupSpecs.{i}.", g) for i, g in enumerate(_list(cluster.get("workerGroupSpecs")))
    ]
    if isinstance(spec.get("submitterPodTemplate"), dict):
        groups.append(("spec.submitterPodTemplate.", {"template": spec["submitterPodTemplate"]}))
    for where, group in groups:
        if isinstance(group, dict) and isinstance(group.get("template"), dict):
            yield where, {"apiVersion": "v1", "kind": "PodTemplate", "metadata": {}, "template": group["template"]}


def _mapping(value: object) -> dict[str, object]:
    return value if isinstance(value, dict) else {}


def _list(value: object) -> list[object]:
    return value if isinstance(value, list) else []


# ── schemas ─────────────────────────────────────────────────────────────────────────────────────────


def core_schema_dir() -> Path:
    """The strict core schemas of the pinned Kubernetes minor inside the kubernetes-validate package."""
    found = importlib.util.find_spec("kubernetes_validate")
    if found is None or not found.submodule_search_locations:
        raise UsageError("kubernetes-validate is not installed", hint="pip install 'kubernetes-validate>=1.31'")
    path = Path(list(found.submodule_search_locations)[0]) / "kubernetes-json-schema" / _STRICT_DIR
    if not path.is_dir():
        raise UsageError(
            f"this kubernetes-validate ships no schemas for Kubernetes {K8S_VERSION}",
            hint="install a kubernetes-validate release that includes it (>=1.31)",
        )
    return path


@cache
def core_documents(filename: str) -> tuple[JSONObject, JSONObject]:
    """(the kind's schema, the shared definitions it refers to)."""
    base = core_schema_dir()
    return (
        json.loads((base / filename).read_text(encoding="utf-8")),
        json.loads((base / "_definitions.json").read_text(encoding="utf-8")),
    )


@cache
def own_schema(filename: str) -> JSONObject:
    text = files("tuneplane._data.schemas").joinpath("k8s", filename).read_text(encoding="utf-8")
    schema: JSONObject = json.loads(text)
    return schema


@cache
def core_check(filename: str) -> Check:
    schema, definitions = core_documents(filename)
    return _compiled(schema, [schema, definitions], lambda: core_validator(filename))


@cache
def own_check(filename: str) -> Check:
    documents = [own_schema(n) for n in OWN_SCHEMA_FILES]
    return _compiled(own_schema(filename), documents, lambda: own_validator(filename))


def _compiled(schema: JSONObject, documents: list[JSONObject], fallback: Callable[[], Validator]) -> Check:
    try:
        return _Compiler({str(doc["$id"]): doc for doc in documents}).compile(schema, str(schema["$id"]))
    except _Unsupported:
        return fallback().is_valid


@cache
def core_validator(filename: str) -> Validator:
    """jsonschema for the messages of an invalid manifest (and for tests)."""
    # lazy: jsonschema is only for messages: a valid manifest never needs it
    import jsonschema  # type: ignore[import-untyped]
    from referencing import Registry, Resource

    schema, definitions = core_documents(filename)
    registry = Resource.from_contents(definitions) @ (Resource.from_contents(schema) @ Registry())
    validator: Validator = jsonschema.Draft202012Validator(schema, registry=registry)
    return validator


@cache
def own_validator(filename: str) -> Validator:
    # lazy: jsonschema and its registry load only when a manifest is checked
    import jsonschema
    from referencing import Registry, Resource

    registry: Registry[JSONObject] = Registry()
    for name in OWN_SCHEMA_FILES:
        registry = Resource.from_contents(own_schema(name)) @ registry
    validator: Validator = jsonschema.Draft202012Validator(own_schema(filename), registry=registry)
    return validator


# ── the compiler ────────────────────────────────────────────────────────────────────────────────────

_KEYWORDS = frozenset(
    {
        "type",
        "properties",
        "additionalProperties",
        "required",
        "items",
        "$ref",
        "oneOf",
        "const",
        "enum",
        "pattern",
        "minLength",
        "maxLength",
        "minimum",
        "minItems",
        "maxItems",
        "propertyNames",
    }
)
# Annotations: no effect on validity (draft 2020-12 asserts no `format` without a format checker).
_ANNOTATIONS = frozenset({"$schema", "$id", "title", "description", "$defs", "format", "default"})
_JSON_TYPES: dict[str, Check] = {
    "object": lambda v: isinstance(v, dict),
    "array": lambda v: isinstance(v, list),
    "string": lambda v: isinstance(v, str),
    "integer": lambda v: isinstance(v, int) and not isinstance(v, bool),
    "number": lambda v: isinstance(v, (int, float)) and not isinstance(v, bool),
    "boolean": lambda v: isinstance(v, bool),
    "null": lambda v: v is None,
}


class _Unsupported(Exception):
    """The schema uses a keyword the compiler does not know: jsonschema validates it instead."""


class _Compiler:
    """Turns a draft 2020-12 schema (a subset of keywords) into one predicate; `$ref`s resolve lazily."""

    def __init__(self, documents: dict[str, JSONObject]) -> None:
        self.documents = documents
        self.refs: dict[str, Check] = {}

    def compile(self, schema: JSONValue, base: str) -> Check:
        if schema is True:
            return lambda v: True
        if schema is False:
            return lambda v: False
        if not isinstance(schema, dict):
            raise _Unsupported(f"a schema that is a {type(schema).__name__}")
        unknown = {k for k in schema if not k.startswith("x-kubernetes-")} - _KEYWORDS - _ANNOTATIONS
        if unknown:
            raise _Unsupported(sorted(unknown))
        checks: list[Check] = [
            self._keyword(key)(value, schema, base) for key, value in schema.items() if key in _KEYWORDS
        ]
        if len(checks) == 1:
            return checks[0]
        return lambda v: all(check(v) for check in checks)

    def _keyword(self, key: str) -> Callable[[JSONValue, JSONObject, str], Check]:
        """The method compiling `key`: `_` + the keyword without its `$` (`$ref` is `_ref`)."""
        method: Callable[[JSONValue, JSONObject, str], Check] = getattr(self, "_" + key.lstrip("$"))
        return method

    def _type(self, value: str | list[str], schema: JSONObject, base: str) -> Check:
        tests = [_JSON_TYPES[t] for t in ([value] if isinstance(value, str) else value)]
        return lambda v: any(t(v) for t in tests)

    def _properties(self, value: JSONObject, schema: JSONObject, base: str) -> Check:
        subs = [(name, self.compile(sub, base)) for name, sub in value.items()]
        return lambda v: not isinstance(v, dict) or all(sub(v[k]) for k, sub in subs if k in v)

    def _additionalProperties(self, value: JSONValue, schema: JSONObject, base: str) -> Check:
        known = frozenset(_mapping(schema.get("properties")))
        if value is False:
            return lambda v: not isinstance(v, dict) or known.issuperset(v)
        sub = self.compile(value, base)
        return lambda v: not isinstance(v, dict) or all(sub(x) for k, x in v.items() if k not in known)

    def _propertyNames(self, value: JSONValue, schema: JSONObject, base: str) -> Check:
        sub = self.compile(value, base)
        return lambda v: not isinstance(v, dict) or all(sub(k) for k in v)

    def _required(self, value: list[str], schema: JSONObject, base: str) -> Check:
        return lambda v: not isinstance(v, dict) or all(k in v for k in value)

    def _items(self, value: JSONValue, schema: JSONObject, base: str) -> Check:
        sub = self.compile(value, base)
        return lambda v: not isinstance(v, list) or all(sub(x) for x in v)

    def _minItems(self, value: int, schema: JSONObject, base: str) -> Check:
        return lambda v: not isinstance(v, list) or len(v) >= value

    def _maxItems(self, value: int, schema: JSONObject, base: str) -> Check:
        return lambda v: not isinstance(v, list) or len(v) <= value

    def _oneOf(self, value: list[JSONValue], schema: JSONObject, base: str) -> Check:
        subs = [self.compile(sub, base) for sub in value]
        return lambda v: sum(1 for sub in subs if sub(v)) == 1

    def _const(self, value: JSONValue, schema: JSONObject, base: str) -> Check:
        return lambda v: _json_equal(v, value)

    def _enum(self, value: list[JSONValue], schema: JSONObject, base: str) -> Check:
        return lambda v: any(_json_equal(v, e) for e in value)

    def _pattern(self, value: str, schema: JSONObject, base: str) -> Check:
        search = re.compile(value).search
        return lambda v: not isinstance(v, str) or search(v) is not None

    def _minLength(self, value: int, schema: JSONObject, base: str) -> Check:
        return lambda v: not isinstance(v, str) or len(v) >= value

    def _maxLength(self, value: int, schema: JSONObject, base: str) -> Check:
        return lambda v: not isinstance(v, str) or len(v) <= value

    def _minimum(self, value: float, schema: JSONObject, base: str) -> Check:
        return lambda v: isinstance(v, bool) or not isinstance(v, (int, float)) or v >= value

    def _ref(self, value: str, schema: JSONObject, base: str) -> Check:
        """Compiled on first use: a manifest reaches a few dozen of the thousand core definitions."""
        target = urljoin(base, value)
        refs = self.refs

        def check(v: object) -> bool:
            if target not in refs:
                uri, fragment = urldefrag(target)
                refs[target] = self.compile(_pointer(self.documents[uri], fragment), uri)
            return refs[target](v)

        return check


def _pointer(document: JSONValue, fragment: str) -> JSONValue:
    node = document
    for part in [p for p in fragment.split("/") if p]:
        key = part.replace("~1", "/").replace("~0", "~")
        if isinstance(node, list):
            node = node[int(key)]
        elif isinstance(node, dict):
            node = node[key]
        else:
            raise KeyError(fragment)
    return node


def _json_equal(a: object, b: object) -> bool:
    """JSON equality: true is not 1."""
    if isinstance(a, bool) or isinstance(b, bool):
        return isinstance(a, bool) and isinstance(b, bool) and a is b
    return bool(a == b)
