"""Reading YAML the tests did not write: the catalog's recipes and configs, CRDs, rendered documents.

libyaml's safe loader, the same YAML 1.1 safe-load semantics as `yaml.safe_load`; PyYAML's pure-Python
scanner took most of the fast lane's YAML time (a recipe is parsed once per test that reads it).
The product's own reading is not replaced here: a test of how `tp` parses goes through `tp`."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

_LOADER: type[yaml.SafeLoader] = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def load_yaml(source: str | Path) -> Any:
    """One document from a text or a file (None when it is empty)."""
    text = source.read_text(encoding="utf-8") if isinstance(source, Path) else source
    return yaml.load(text, Loader=_LOADER)
