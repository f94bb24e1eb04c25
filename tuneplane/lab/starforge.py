"""StarForge, the predecessor: the names its labs and jobs used, and what TunePlane calls them now.

Pure text functions shared by `tp migrate` (which rewrites) and the `lint-legacy-env` rule (which
reports what is left). A name is rewritten only when the replacement means exactly the same thing;
everything else StarForge-like (any case) is reported with its line and column.
"""

from __future__ import annotations

import re

from tuneplane import __version__
from tuneplane.runtime.patterns import lazy_pattern
from tuneplane.runtime.records import FrozenRecord
from tuneplane.runtime.versions import version_admits

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


# StarForge numbered its job-side package twice. The SDK (`starforge-sdk`: what older locks and plugin
# manifests call `sdk_version` and `requires.sdk`) reached 2.1.0 and was then renamed `starforge-core`
# and numbered again from 0.1; TunePlane carries that 0.x line on. No starforge-core or tuneplane was
# ever numbered 2 or more, so a requirement whose every version is 2 or more is in the SDK's numbering.
SDK_RENAMED_AT = "2.1.0"  # the SDK release starforge-core 0.1 continued
SDK_SERIES_END = "3"  # the SDK's next major, which never came
CORE_FLOOR = "0.1"  # what SDK 2.1.0 became
_CLAUSE_MAJOR = lazy_pattern(r"\s*(?:===|~=|==|!=|<=|>=|<|>)\s*v?(\d+)")


class CoreRequirement(FrozenRecord):
    """A StarForge `requires.core`/`requires.sdk` in TunePlane numbering: `text` to write, or `None`
    when it cannot be translated; `why` says what was done or why not ("" when nothing changed)."""

    __slots__ = ("text", "why")
    _fields = __slots__
    text: str | None
    why: str

    def __init__(self, text: str | None, why: str) -> None:
        self._set(text, why)


def core_requirement(spec: str) -> CoreRequirement:
    """`spec` (a PEP 440 specifier from a StarForge file) in tuneplane's numbering.

    Our own numbering (every version below 2, or one admitting this tp) is kept. SDK numbering that
    admits 2.1.0 means the API starforge-core 0.1 continued: `>=0.1`, closed at `<1` when the SDK
    requirement stopped before 3, as StarForge's own re-locks wrote it. Anything else names SDK
    releases that have no counterpart.
    """
    clauses = [c for c in spec.split(",") if c.strip()]
    if not clauses:
        return CoreRequirement(spec, "")
    try:
        version_admits(spec, SDK_RENAMED_AT)
        majors = [int(_CLAUSE_MAJOR().match(c)[1]) for c in clauses]  # type: ignore[index]
    except (ValueError, TypeError):
        return CoreRequirement(None, f"{spec!r} is not a version specifier")
    if max(majors) < 2 or version_admits(spec, __version__):
        return CoreRequirement(spec, "")
    if min(majors) < 2:
        return CoreRequirement(
            None, f"{spec!r} mixes StarForge SDK numbering (2.x) with starforge-core numbering (0.x)"
        )
    if not version_admits(spec, SDK_RENAMED_AT):
        return CoreRequirement(
            None,
            f"{spec!r} is StarForge SDK numbering and excludes SDK {SDK_RENAMED_AT}, the release that "
            f"starforge-core {CORE_FLOOR} continued: no TunePlane version corresponds",
        )
    text = f">={CORE_FLOOR}" + ("" if version_admits(spec, f"{SDK_SERIES_END}.0.0") else ",<1")
    return CoreRequirement(
        text,
        f"{spec!r} is StarForge SDK numbering; SDK {SDK_RENAMED_AT} became starforge-core {CORE_FLOOR}, "
        f"which TunePlane continues, so it reads {text!r}",
    )


def core_version(sdk_version: str) -> str:
    """The starforge-core/tuneplane version an SDK-numbered `created_by.sdk_version` stands for."""
    m = _CLAUSE_MAJOR().match(f"=={sdk_version}")
    return f"{CORE_FLOOR}.0" if m and int(m[1]) >= 2 else sdk_version
