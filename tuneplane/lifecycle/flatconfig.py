"""The benchmark runner's config file: YAML through PyYAML when the image has it, else a flat
`key: value` reader of our own, flattened to dotted keys. Standard library only."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from tuneplane.lifecycle.benchmark_common import BenchError

BOOLS = {"true": True, "false": False, "yes": True, "no": False, "on": True, "off": False}


def load_config(path: Path | None) -> dict[str, object]:
    """The config file as flat `{dotted key: value}`; empty without a file."""
    if path is None:
        return {}
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise BenchError(f"cannot read the config {path}: {exc.strerror or exc}") from None
    data = _parse_yaml(text, str(path))
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise BenchError(f"{path}: expected `key: value` settings, found {type(data).__name__}")
    return flatten(data)


def _parse_yaml(text: str, source: str) -> object:
    try:
        import yaml  # lazy: optional; most images have it, and the fallback reads only flat files
    except ImportError:
        return parse_flat_yaml(text, source)
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise BenchError(f"{source}: not valid YAML: {exc}") from None


def parse_flat_yaml(text: str, source: str = "config") -> dict[str, object]:
    """`key: value` lines with `#` comments, for images without PyYAML; nesting is refused, not guessed."""
    result: dict[str, object] = {}
    for number, raw in enumerate(text.splitlines(), 1):
        line = _strip_comment(raw).rstrip()
        if not line.strip() or line.strip() == "---":
            continue
        key, sep, value = line.partition(":")
        if line[0].isspace() or not sep or not key.strip():
            raise BenchError(
                f"{source}:{number}: expected a flat `key: value` line (nested YAML needs PyYAML in the image)"
            )
        result[key.strip()] = scalar(value.strip())
    return result


def _strip_comment(line: str) -> str:
    """Drop a `#` comment that starts a line or follows a space, unless it is inside quotes."""
    quote = ""
    for index, char in enumerate(line):
        if quote:
            quote = "" if char == quote else quote
        elif char in "'\"":
            quote = char
        elif char == "#" and (index == 0 or line[index - 1].isspace()):
            return line[:index]
    return line


def scalar(text: str) -> object:
    """A YAML scalar as PyYAML would read the common cases: quoted text, null, booleans, numbers."""
    if len(text) >= 2 and text[0] == text[-1] and text[0] in "'\"":
        return text[1:-1]
    lowered = text.lower()
    if lowered in ("", "~", "null"):
        return None
    if lowered in BOOLS:
        return BOOLS[lowered]
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text


def flatten(data: Mapping[object, object], prefix: str = "") -> dict[str, object]:
    """Nested mappings as dotted keys, the form `--overrides-json` uses."""
    flat: dict[str, object] = {}
    for key, value in data.items():
        name = f"{prefix}.{key}" if prefix else str(key)
        if isinstance(value, Mapping):
            flat.update(flatten(value, name))
        else:
            flat[name] = value
    return flat
