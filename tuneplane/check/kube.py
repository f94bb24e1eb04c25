"""What a Kubernetes API server's core validation says of the values a lab hands it. Pure.

Each function returns why a value is refused ("" when it is fine), in the API server's own terms, so
`tp validate` refuses on the pull request what the cluster would refuse after the merge:
resource quantities (`resource.ParseQuantity`), label keys and values (node selectors), and
tolerations (`ValidateTolerations`).
"""

from __future__ import annotations

from fractions import Fraction

from tuneplane.runtime.patterns import lazy_pattern

# resource.ParseQuantity: a signed decimal number (`1`, `1.5`, `.5`, `1.`), then a binary suffix
# (Ki … Ei), a decimal one (n u m "" k M G T P E) or a decimal exponent (e3, E-2). The digit counts
# are bounded so that no absurd text reaches the arithmetic below.
_QUANTITY = lazy_pattern(
    r"([+-]?)([0-9]{0,40})(?:\.([0-9]{0,40}))?"
    r"(Ki|Mi|Gi|Ti|Pi|Ei|[eE][+-]?[0-9]{1,3}|[numkMGTPE])?\Z"
)
_DECIMAL = {
    "n": Fraction(1, 10**9),
    "u": Fraction(1, 10**6),
    "m": Fraction(1, 1000),
    "": Fraction(1),
    "k": Fraction(10**3),
    "M": Fraction(10**6),
    "G": Fraction(10**9),
    "T": Fraction(10**12),
    "P": Fraction(10**15),
    "E": Fraction(10**18),
    "Ki": Fraction(2**10),
    "Mi": Fraction(2**20),
    "Gi": Fraction(2**30),
    "Ti": Fraction(2**40),
    "Pi": Fraction(2**50),
    "Ei": Fraction(2**60),
}
MAX_QUANTITY = 2**63 - 1  # a quantity's value is an int64 on the server

_LABEL_NAME = lazy_pattern(r"([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]\Z")
_DNS_SUBDOMAIN = lazy_pattern(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*\Z")
MAX_LABEL = 63
MAX_PREFIX = 253

# metadata.annotations: keys and values together, in bytes (ValidateAnnotationsSize)
MAX_ANNOTATIONS_BYTES = 256 * 1024


def parse_quantity(text: str) -> Fraction:
    """The value of a Kubernetes quantity, as the API server reads it; ValueError says why not."""
    match = _QUANTITY().match(text)
    if match is None or not (match.group(2) or match.group(3)):
        raise ValueError(
            f"{text!r} is not a Kubernetes quantity: a number with an optional suffix "
            "(Ki Mi Gi Ti Pi Ei, or m k M G T P E), e.g. 500m, 8, 64Gi, 1500M"
        )
    sign, whole, fraction, suffix = match.group(1), match.group(2), match.group(3) or "", match.group(4) or ""
    number = Fraction(int(whole or "0")) + (Fraction(int(fraction), 10 ** len(fraction)) if fraction else 0)
    if suffix[:1] in ("e", "E") and len(suffix) > 1:
        exponent = int(suffix[1:])
        value = number * (Fraction(10) ** exponent)
    else:
        value = number * _DECIMAL[suffix]
    if value > MAX_QUANTITY:
        raise ValueError(f"{text!r} is larger than a Kubernetes quantity can hold (2^63-1)")
    return -value if sign == "-" else value


def quantity_error(text: str) -> str:
    """Why `text` is not a resource request the API server takes ("" when it is): a quantity, not negative."""
    try:
        value = parse_quantity(text)
    except ValueError as exc:
        return str(exc)
    if value < 0:
        return f"{text!r} is negative: a resource request must be 0 or more"
    return ""


def label_value_error(value: str) -> str:
    """Why `value` is not a label value (node selector values are): at most 63 characters, alphanumerics
    with `-`, `_` and `.` inside, or empty."""
    if value == "":
        return ""
    if len(value) > MAX_LABEL:
        return f"{value[:20]!r}… is {len(value)} characters long; a label value has at most {MAX_LABEL}"
    if not _LABEL_NAME().match(value):
        return (
            f"{value!r} is not a label value: letters, digits, '-', '_' and '.' only, starting and ending "
            "with a letter or digit"
        )
    return ""


def label_key_error(key: str) -> str:
    """Why `key` is not a label key (a qualified name: an optional DNS subdomain prefix and `/`, then a
    name of at most 63 characters)."""
    prefix, slash, name = key.rpartition("/")
    if slash and not prefix:
        return f"{key!r} is not a label key: the prefix before '/' is empty"
    if prefix.count("/"):
        return f"{key!r} is not a label key: at most one '/' separates the prefix from the name"
    if prefix and (len(prefix) > MAX_PREFIX or not _DNS_SUBDOMAIN().match(prefix)):
        return (
            f"{key!r} is not a label key: its prefix {prefix!r} must be a DNS subdomain (lower-case "
            "letters, digits, '-' and '.', at most 253 characters)"
        )
    if not name:
        return f"{key!r} is not a label key: the name is empty"
    if len(name) > MAX_LABEL:
        return f"{key!r} is not a label key: its name is {len(name)} characters long; at most {MAX_LABEL}"
    if not _LABEL_NAME().match(name):
        return (
            f"{key!r} is not a label key: its name may hold letters, digits, '-', '_' and '.' only, "
            "starting and ending with a letter or digit"
        )
    return ""


def toleration_errors(key: str, operator: str, value: str) -> list[tuple[str, str]]:
    """(field, why) for each way a toleration breaks core validation (ValidateTolerations)."""
    out: list[tuple[str, str]] = []
    if key:
        if error := label_key_error(key):
            out.append(("key", error))
    elif operator != "Exists":
        out.append(
            (
                "operator",
                f"operator {operator!r} with an empty key: an empty key matches every taint only with operator Exists",
            )
        )
    if operator == "Exists" and value:
        out.append(
            ("value", f"value {value!r} with operator Exists: Exists matches any value, so the value must be empty")
        )
    elif operator == "Equal" and (error := label_value_error(value)):
        out.append(("value", error))
    return out


def text_bytes(value: str) -> int:
    """Its size where the API server counts it: UTF-8 bytes (a lone surrogate counted as the 3 it becomes)."""
    return len(value.encode("utf-8", "surrogatepass"))
