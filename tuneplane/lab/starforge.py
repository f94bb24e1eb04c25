"""StarForge, the predecessor: the names its labs and jobs used, and what TunePlane calls them now.

Pure text functions shared by `tp migrate` (which rewrites) and the `lint-legacy-env` rule (which
reports what is left). A name is rewritten only when the replacement means exactly the same thing;
everything else StarForge-like (any case) is reported with its line and column.
"""

from __future__ import annotations

import re

from tuneplane.runtime.patterns import lazy_pattern
from tuneplane.runtime.records import FrozenRecord

# StarForge variable → the TunePlane variable a job sees with the same meaning.
ENV_RENAMES = {
    "FORGE_WORK_DIR": "TUNEPLANE_WORK_DIR",
    "FORGE_EXP_DIR": "TUNEPLANE_EXP_DIR",
    "FORGE_OUT_DIR": "TUNEPLANE_OUT_DIR",
    "FORGE_FRAMEWORK": "TUNEPLANE_FRAMEWORK",
    "FORGE_RECIPE": "TUNEPLANE_RECIPE",
    "FORGE_CLUSTER_NUM_NODES": "TUNEPLANE_CLUSTER_NUM_NODES",
    "FORGE_CLUSTER_GPUS_PER_NODE": "TUNEPLANE_CLUSTER_GPUS_PER_NODE",
    "FORGE_EXTERNAL_OBSERVABILITY_URL": "TUNEPLANE_EXTERNAL_OBSERVABILITY_URL",
    "FORGE_ALLOWED_IMAGE_REGISTRIES": "TUNEPLANE_ALLOWED_IMAGE_REGISTRIES",
    "STARFORGE_ENDPOINT": "TUNEPLANE_JOB_ENDPOINT",
    "STARFORGE_RUN_ID": "TUNEPLANE_JOB_RUN_ID",
    "STARFORGE_TOKEN": "TUNEPLANE_JOB_TOKEN",
    "STARFORGE_ENABLED": "TUNEPLANE_JOB_ENABLED",
    "STARFORGE_MONITOR_INTERVAL": "TUNEPLANE_JOB_MONITOR_INTERVAL",
}
# Python names of the reporting SDK.
CODE_RENAMES = {
    "starforge.report": "tuneplane.report",
    "StarForgeCallback": "TunePlaneCallback",
}
_FROM_PACKAGE = lazy_pattern(r"\bfrom(\s+)starforge(\s+)import(\s+)report\b")
_KNOWN = lazy_pattern(
    r"\b(" + "|".join(re.escape(k) for k in sorted({**ENV_RENAMES, **CODE_RENAMES}, key=len, reverse=True)) + r")\b"
)
# Anything else that still looks like StarForge, whatever its case: `starforge`, `StarForge.x`,
# `FORGE_SOMETHING`, a bare `"STARFORGE_"` prefix composed at run time.
LEGACY = re.compile(r"star_?forge\w*(?:\.\w+)*|\b(?:STAR)?FORGE_\w*", re.IGNORECASE)


class LegacyUse(FrozenRecord):
    __slots__ = ("line", "col", "name", "replacement")
    _fields = __slots__
    line: int
    col: int
    name: str
    replacement: str  # "" when TunePlane has no equivalent

    def __init__(self, line: int, col: int, name: str, replacement: str) -> None:
        self._set(line, col, name, replacement)

    @property
    def advice(self) -> str:
        if self.replacement:
            return f"use {self.replacement}"
        return "no TunePlane equivalent: rewrite it by hand (see docs/migrating-from-starforge.md)"


def replacement(name: str) -> str:
    return {**ENV_RENAMES, **CODE_RENAMES}.get(name, "")


def rewrite(text: str) -> str:
    """`text` with every StarForge name that has an exact equivalent replaced; nothing else changes."""
    text = _FROM_PACKAGE().sub(lambda m: f"from{m[1]}tuneplane{m[2]}import{m[3]}report", text)
    return _KNOWN().sub(lambda m: replacement(m[1]), text)


def find_uses(text: str) -> list[LegacyUse]:
    """Every StarForge-like name in `text` (1-based line and column), with its equivalent if any."""
    found = []
    for number, line in enumerate(text.splitlines(), 1):
        for m in LEGACY.finditer(line):
            known = _KNOWN().match(line, m.start())
            name = known[1] if known else m.group(0)
            found.append(LegacyUse(number, m.start() + 1, name, replacement(name)))
    return found
