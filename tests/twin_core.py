"""The API server's core validation beyond the schema, for the twin: what a structurally valid object can
still be refused for.

The schema (twin_schemas) says a toleration is an object with string fields; the API server's own
validation (`ValidatePodSpec`, `ValidateJob`, `ValidateObjectMeta` upstream) says more: an empty key
needs `operator: Exists`, `Exists` takes no value, a node selector value is a label value, a quantity
parses, a GPU request equals its limit, a volume mount names a volume. Every Pod, Job and Deployment
written to the twin is held to these rules, by a client (422, or 400 for a quantity that does not
decode, as a real server answers) and by the twin's controllers (the pod or Job is not created: the
controller records a `Warning` Event with the API server's message, and the owner waits, as upstream's
controllers do). The rules are written from upstream's validation, in its words; only the rules that a
value a lab can set reaches are modelled (docs/architecture.md lists the rest).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from fractions import Fraction
from typing import Any

# resource.ParseQuantity: a signed decimal number, then a binary or decimal suffix or a decimal exponent
_QUANTITY = re.compile(r"^([+-]?)([0-9]*)(?:\.([0-9]*))?(Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE]|[eE][+-]?[0-9]+)?$")
_SCALE = {"n": -9, "u": -6, "m": -3, "": 0, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}
_BINARY = {"Ki": 10, "Mi": 20, "Gi": 30, "Ti": 40, "Pi": 50, "Ei": 60}
QUANTITY_REGEX = "^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$"  # what the decoder's message quotes

_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_NAME_PART = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")
_LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
_ENV_NAME = re.compile(r"^[-._a-zA-Z][-._a-zA-Z0-9]*$")
_STANDARD_RESOURCES = frozenset({"cpu", "memory", "ephemeral-storage"})
_EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")
_FIELD_PATHS = (
    "metadata.name",
    "metadata.namespace",
    "metadata.uid",
    "spec.nodeName",
    "spec.serviceAccountName",
    "status.hostIP",
    "status.hostIPs",
    "status.podIP",
    "status.podIPs",
)
_FIELD_PATH_MAPS = re.compile(r"^metadata\.(labels|annotations)\['[^']+'\]$")
MAX_ANNOTATIONS_BYTES = 256 * 1024

_DNS_LABEL_MESSAGE = (
    "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start "
    "and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is "
    "'[a-z0-9]([-a-z0-9]*[a-z0-9])?')"
)
_LABEL_VALUE_MESSAGE = (
    "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must "
    "start and end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or '12345', regex used "
    "for validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')"
)
_NAME_PART_MESSAGE = (
    "name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an "
    "alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is "
    "'([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')"
)


class Undecodable(Exception):
    """A value the API server cannot even decode (a quantity): 400 BadRequest, not 422."""


def _q(value: Any) -> str:
    """A value as upstream's field errors quote it."""
    return f'"{value}"' if isinstance(value, str) else str(value)


def invalid(path: str, value: Any, detail: str) -> str:
    return f"{path}: Invalid value: {_q(value)}: {detail}"


def parse_quantity(text: Any) -> Fraction:
    """The value of a quantity, as `resource.ParseQuantity` reads it; Undecodable when it does not parse."""
    if isinstance(text, bool) or not isinstance(text, (str, int, float)):
        raise Undecodable(f"quantities must match the regular expression '{QUANTITY_REGEX}'")
    match = _QUANTITY.match(str(text))
    if match is None or not (match.group(2) or match.group(3)):
        raise Undecodable(f"quantities must match the regular expression '{QUANTITY_REGEX}'")
    sign, whole, part, suffix = match.group(1), match.group(2) or "0", match.group(3) or "", match.group(4) or ""
    number = Fraction(int(whole)) + (Fraction(int(part), 10 ** len(part)) if part else 0)
    if suffix in _BINARY:
        number *= 2 ** _BINARY[suffix]
    elif suffix[:1] in ("e", "E"):
        number *= Fraction(10) ** int(suffix[1:])
    else:
        number *= Fraction(10) ** _SCALE[suffix]
    return -number if sign == "-" else number


def dns_label(path: str, value: Any) -> list[str]:
    text = str(value)
    out = []
    if len(text) > 63:
        out.append(invalid(path, text, "must be no more than 63 characters"))
    if not _DNS_LABEL.match(text):
        out.append(invalid(path, text, _DNS_LABEL_MESSAGE))
    return out


def label_value(path: str, value: Any) -> list[str]:
    text = str(value)
    out = []
    if len(text) > 63:
        out.append(invalid(path, text, "must be no more than 63 characters"))
    if not _LABEL_VALUE.match(text):
        out.append(invalid(path, text, _LABEL_VALUE_MESSAGE))
    return out


def qualified_name(path: str, key: Any) -> list[str]:
    """A label, annotation, node selector or toleration key: an optional DNS subdomain prefix, then a name."""
    text = str(key)
    prefix, slash, name = text.rpartition("/")
    out = []
    if slash and (not prefix or len(prefix) > 253 or not _DNS_SUBDOMAIN.match(prefix)):
        out.append(
            invalid(
                path,
                text,
                "prefix part a lowercase RFC 1123 subdomain must consist of lower case "
                "alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character",
            )
        )
    if not name:
        out.append(invalid(path, text, "name part must be non-empty"))
    elif len(name) > 63:
        out.append(invalid(path, text, "name part must be no more than 63 characters"))
    elif not _NAME_PART.match(name):
        out.append(invalid(path, text, _NAME_PART_MESSAGE))
    return out


def meta_errors(meta: dict[str, Any], path: str) -> list[str]:
    """Annotations of object (or template) metadata: keys are qualified names; all of it at most 256 KiB."""
    notes = meta.get("annotations") or {}
    out = [e for key in notes for e in qualified_name(f"{path}.annotations", key)]
    size = sum(len(str(k).encode()) + len(str(v).encode()) for k, v in notes.items())
    if size > MAX_ANNOTATIONS_BYTES:
        out.append(f"{path}.annotations: Too long: may not be more than {MAX_ANNOTATIONS_BYTES} bytes")
    return out


def template_labels(meta: dict[str, Any], path: str) -> list[str]:
    out = []
    for key, value in (meta.get("labels") or {}).items():
        out += qualified_name(f"{path}.labels", key) + label_value(f"{path}.labels", value)
    return out


# ── the pod spec ─────────────────────────────────────────────────────────────────────────────────
def tolerations(items: list[dict[str, Any]], path: str) -> Iterator[str]:
    """`ValidateTolerations`."""
    for i, toleration in enumerate(items):
        at = f"{path}[{i}]"
        key, operator = toleration.get("key") or "", toleration.get("operator") or ""
        value, effect = toleration.get("value") or "", toleration.get("effect") or ""
        if key:
            yield from qualified_name(f"{at}.key", key)
        elif operator != "Exists":
            yield invalid(
                f"{at}.operator",
                operator,
                'operator must be Exists when `key` is empty, which means "match all values and all keys"',
            )
        if toleration.get("tolerationSeconds") is not None and effect != "NoExecute":
            yield invalid(f"{at}.effect", effect, "effect must be 'NoExecute' when `tolerationSeconds` is set")
        if operator in ("Equal", ""):
            yield from label_value(f"{at}.operator", value)
        elif operator == "Exists":
            if value:
                yield invalid(f"{at}.operator", value, "value must be empty when `operator` is 'Exists'")
        else:
            yield f'{at}.operator: Unsupported value: "{operator}": supported values: "Equal", "Exists"'
        if effect and effect not in _EFFECTS:
            yield f'{at}.effect: Unsupported value: "{effect}": supported values: ' + ", ".join(
                f'"{e}"' for e in _EFFECTS
            )


def _extended(name: str) -> bool:
    """A resource no node overcommits (`nvidia.com/gpu`): a domain other than kubernetes.io's."""
    prefix = name.partition("/")[0] if "/" in name else ""
    return bool(prefix) and not (prefix == "kubernetes.io" or prefix.endswith(".kubernetes.io"))


def resources(spec: dict[str, Any], path: str) -> Iterator[str]:
    """`ValidateResourceRequirements`: names, non-negative values, whole extended resources, request ≤ limit
    (= limit for an extended resource, which needs one)."""
    limits = {str(k): parse_quantity(v) for k, v in (spec.get("limits") or {}).items()}
    requests = {str(k): parse_quantity(v) for k, v in (spec.get("requests") or {}).items()}
    for where, values in (("limits", limits), ("requests", requests)):
        for name, value in values.items():
            at = f"{path}.{where}[{name}]"
            if "/" not in name and name not in _STANDARD_RESOURCES and not name.startswith("hugepages-"):
                yield invalid(at, name, "must be a standard resource type or fully qualified")
            elif "/" in name:
                yield from qualified_name(at, name)
            if value < 0:
                yield invalid(at, _text(spec, where, name), "must be greater than or equal to 0")
            if _extended(name) and value.denominator != 1:
                yield invalid(at, _text(spec, where, name), "must be an integer")
    for name, value in requests.items():
        at = f"{path}.requests[{name}]"
        if name in limits and _extended(name) and value != limits[name]:
            yield invalid(
                at, _text(spec, "requests", name), f"must be equal to {name} limit of {_text(spec, 'limits', name)}"
            )
        elif name in limits and value > limits[name]:
            yield invalid(
                at,
                _text(spec, "requests", name),
                f"must be less than or equal to {name} limit of {_text(spec, 'limits', name)}",
            )
        elif name not in limits and _extended(name):
            yield f"{path}.limits: Required value: Limit must be set for non overcommitable resources"


def _text(spec: dict[str, Any], where: str, name: str) -> str:
    return str((spec.get(where) or {}).get(name))


def env(entries: list[dict[str, Any]], path: str) -> Iterator[str]:
    for i, entry in enumerate(entries):
        at = f"{path}[{i}]"
        name = str(entry.get("name") or "")
        if not name:
            yield f"{at}.name: Required value"
        elif not _ENV_NAME.match(name):
            yield invalid(
                f"{at}.name",
                name,
                "a valid environment variable name must consist of alphabetic characters, digits, '_', '-', or "
                "'.', and must not start with a digit (e.g. 'my.env-name',  or 'MY_ENV.NAME',  or 'MyEnvName1', "
                "regex used for validation is '[-._a-zA-Z][-._a-zA-Z0-9]*')",
            )
        source = entry.get("valueFrom")
        if source is None:
            continue
        if entry.get("value"):
            yield invalid(f"{at}.valueFrom", "", "may not be specified when `value` is not empty")
        if len([k for k, v in source.items() if v is not None]) > 1:
            yield invalid(f"{at}.valueFrom", "", "may not have more than one field specified at a time")
        field_path = (source.get("fieldRef") or {}).get("fieldPath")
        if field_path is not None and field_path not in _FIELD_PATHS and not _FIELD_PATH_MAPS.match(field_path):
            yield f'{at}.valueFrom.fieldRef.fieldPath: Unsupported value: "{field_path}": supported values: ' + (
                ", ".join(f'"{p}"' for p in _FIELD_PATHS)
            )


def containers(pod: dict[str, Any], path: str, volumes: set[str]) -> Iterator[str]:
    names: set[str] = set()
    for group in ("initContainers", "containers"):
        for i, container in enumerate(pod.get(group) or []):
            at = f"{path}.{group}[{i}]"
            name = str(container.get("name") or "")
            if not name:
                yield f"{at}.name: Required value"
            elif name in names:
                yield f'{at}.name: Duplicate value: "{name}"'
            else:
                yield from dns_label(f"{at}.name", name)
            names.add(name)
            if not container.get("image"):
                yield f"{at}.image: Required value"
            yield from env(container.get("env") or [], f"{at}.env")
            yield from resources(container.get("resources") or {}, f"{at}.resources")
            paths: set[str] = set()
            for j, mount in enumerate(container.get("volumeMounts") or []):
                where = f"{at}.volumeMounts[{j}]"
                if mount.get("name") not in volumes:
                    yield f'{where}.name: Not found: "{mount.get("name")}"'
                mount_path = str(mount.get("mountPath") or "")
                if not mount_path:
                    yield f"{where}.mountPath: Required value"
                elif mount_path in paths:
                    yield invalid(f"{where}.mountPath", mount_path, "must be unique")
                paths.add(mount_path)


def pod_spec(pod: dict[str, Any], path: str) -> list[str]:
    """`ValidatePodSpec`, the parts a lab's values reach."""
    out: list[str] = []
    volumes: set[str] = set()
    for i, volume in enumerate(pod.get("volumes") or []):
        name = str(volume.get("name") or "")
        if name in volumes:
            out.append(f'{path}.volumes[{i}].name: Duplicate value: "{name}"')
        else:
            out += dns_label(f"{path}.volumes[{i}].name", name)
        volumes.add(name)
        size = (volume.get("emptyDir") or {}).get("sizeLimit")
        if size is not None and parse_quantity(size) < 0:
            out.append(invalid(f"{path}.volumes[{i}].emptyDir.sizeLimit", size, "must be greater than or equal to 0"))
    out += containers(pod, path, volumes)
    for key, value in (pod.get("nodeSelector") or {}).items():
        out += qualified_name(f"{path}.nodeSelector", key) + label_value(f"{path}.nodeSelector", value)
    out += tolerations(pod.get("tolerations") or [], f"{path}.tolerations")
    for field_name in ("hostname", "subdomain"):
        if pod.get(field_name):
            out += dns_label(f"{path}.{field_name}", pod[field_name])
    for i, ref in enumerate(pod.get("imagePullSecrets") or []):
        if not ref.get("name"):
            out.append(f"{path}.imagePullSecrets[{i}].name: Required value")
    policy = pod.get("restartPolicy")
    if policy not in (None, "Always", "OnFailure", "Never"):
        out.append(
            f'{path}.restartPolicy: Unsupported value: "{policy}": supported values: "Always", "OnFailure", "Never"'
        )
    return out


def _template(obj: dict[str, Any], path: str) -> list[str]:
    template = obj.get("template") or {}
    meta = template.get("metadata") or {}
    return (
        template_labels(meta, f"{path}.metadata")
        + meta_errors(meta, f"{path}.metadata")
        + pod_spec(template.get("spec") or {}, f"{path}.spec")
    )


def job(obj: dict[str, Any]) -> list[str]:
    """`ValidateJob`: the pod template, its restart policy, the name the defaulted `job-name` label carries
    (so at most 63 characters) and, for an Indexed Job, the host name of its last index's pod."""
    spec = obj.get("spec") or {}
    out = _template(spec, "spec.template")
    name = str((obj.get("metadata") or {}).get("name") or "")
    if len(name) > 63:
        out.append(invalid("spec.template.labels", name, "must be no more than 63 characters"))
    completions = spec.get("completions")
    if spec.get("completionMode") == "Indexed" and isinstance(completions, int) and completions > 0:
        host = f"{name}-{completions - 1}"  # the last index's pod hostname, which the controller sets
        if dns_label("", host):
            out.append(invalid("metadata.name", name, f"will not able to create pod with invalid DNS label: {host}"))
    policy = ((spec.get("template") or {}).get("spec") or {}).get("restartPolicy") or "Always"  # defaulted first
    if policy not in ("OnFailure", "Never"):
        out.append(
            f'spec.template.spec.restartPolicy: Unsupported value: "{policy}": supported values: "OnFailure", "Never"'
        )
    elif spec.get("podFailurePolicy") and policy != "Never":
        out.append(
            invalid(
                "spec.template.spec.restartPolicy",
                policy,
                'only "Never" is supported when podFailurePolicy is specified',
            )
        )
    return out


def errors(obj: dict[str, Any], kind: str) -> list[str]:
    """What core validation refuses in a schema-valid `obj` ("path: message" each). Raises Undecodable."""
    meta = obj.get("metadata") or {}
    out = meta_errors(meta, "metadata")
    if kind == "Pod":
        out += pod_spec(obj.get("spec") or {}, "spec")
    elif kind == "Job":
        out += job(obj)
    elif kind == "Deployment":
        out += _template(obj.get("spec") or {}, "spec.template")
    return out
