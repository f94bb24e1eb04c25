"""Jinja environment for everything tp renders: StrictUndefined, no autoescape, and `q` for scalars.

Templates contain no logic beyond loops over prepared lists. Every scalar goes through `q`, which
writes it as a JSON scalar (a valid YAML flow scalar), so no value can add a key or change structure.
"""

from __future__ import annotations

import json
import os
import re
import shlex
from functools import cache
from importlib.resources import files

import jinja2

from tuneplane import __version__

encode_basestring = json.encoder.encode_basestring  # "…" with \n, \" escaped


# JSON leaves these raw, but YAML folds or refuses them inside a double-quoted scalar (U+0085 becomes
# a space, DEL and the C1 controls make the document unreadable): escape them too.
_YAML_UNSAFE = re.compile("[\x7f-\x9f\u2028\u2029\ufeff\ufffe\uffff]")


def quote(value: object) -> str:
    """A YAML-safe scalar: strings JSON-quoted (newlines, `: `, `{{`, tags all inert), numbers as is."""
    if isinstance(value, bool) or value is None or isinstance(value, (int, float)):
        return json.dumps(value)
    if isinstance(value, str):
        text = encode_basestring(value)
        return _YAML_UNSAFE.sub(lambda m: f"\\u{ord(m.group()):04x}", text)
    raise TypeError(f"q filter takes a scalar, got {type(value).__name__}; prepare it in Python")


def shell_quote(value: object) -> str:
    """One shell word (POSIX single quotes) for a scalar; NUL cannot be passed and is refused."""
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        raise TypeError(f"sh filter takes a string or number, got {type(value).__name__}; prepare it in Python")
    text = str(value)
    if "\0" in text:
        raise ValueError("a shell value cannot contain NUL")
    return shlex.quote(text)


@cache
def environment(package: str = "tuneplane._data.templates") -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(files(package))),
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
        autoescape=False,
        trim_blocks=True,
        lstrip_blocks=True,
        bytecode_cache=_bytecode_cache(),
    )
    env.filters["q"] = quote
    env.filters["sh"] = shell_quote
    return env


class _QuietCache(jinja2.FileSystemBytecodeCache):
    """Compiling the manifest templates is a third of one `tp render`; reuse the compiled code.

    Jinja keys each entry by template name and a checksum of its source, so an edited template is
    never served stale. A cache that cannot be written is simply not used.
    """

    def load_bytecode(self, bucket: jinja2.bccache.Bucket) -> None:
        try:
            super().load_bytecode(bucket)
        except (OSError, EOFError, ValueError):
            bucket.reset()

    def dump_bytecode(self, bucket: jinja2.bccache.Bucket) -> None:
        try:
            super().dump_bytecode(bucket)
        except OSError:
            pass


def _bytecode_cache() -> jinja2.BytecodeCache | None:
    if os.environ.get("TUNEPLANE_NO_CACHE"):
        return None
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    directory = os.path.join(base, "tuneplane", f"jinja-{__version__}")
    try:
        os.makedirs(directory, exist_ok=True)
    except OSError:
        return None
    return _QuietCache(directory)


def render(template: str, **values: object) -> str:
    return environment().get_template(template).render(**values)
