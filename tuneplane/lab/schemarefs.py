"""Where the lab keeps its editor schemas, and the relative references files carry to them.

Every YAML file tp writes for a person starts with `# yaml-language-server: $schema=<relative path>`;
JSON files (locks, status files) carry a `$schema` key. The path is relative to the file, so any clone
of the lab works offline, in any editor that follows the convention.
"""

from __future__ import annotations

import os
from pathlib import PurePosixPath

SCHEMA_DIR = PurePosixPath(".tuneplane/schemas")
CONFIG_DIR = SCHEMA_DIR / "config"
COMMENT = "# yaml-language-server: $schema="


def schema_rel(kind: str) -> PurePosixPath:
    """`.tuneplane/schemas/<kind>.schema.json`, relative to the lab root."""
    return SCHEMA_DIR / f"{kind}.schema.json"


def config_schema_rel(method: str) -> PurePosixPath:
    """`.tuneplane/schemas/config/<framework>/<recipe>.schema.json` for method `<framework>/<recipe>`."""
    return CONFIG_DIR / f"{method}.schema.json"


def method_named_by(config_text: str) -> str | None:
    """The method whose config schema the first line of a config.yaml names, or None.

    `tp new` writes that line, so an experiment whose lock was lost still says which recipe it is.
    """
    first = config_text.split("\n", 1)[0].strip()
    if not first.startswith(COMMENT):
        return None
    target = PurePosixPath(first[len(COMMENT) :].strip())
    parts = target.parts
    config = CONFIG_DIR.parts
    for start in range(len(parts) - len(config) - 2 + 1):
        if parts[start : start + len(config)] == config and len(parts) == start + len(config) + 2:
            framework, recipe = parts[-2], parts[-1].removesuffix(".schema.json")
            return f"{framework}/{recipe}" if recipe != parts[-1] else None
    return None


def reference(from_file: str | PurePosixPath, target: str | PurePosixPath) -> str:
    """The path of `target` relative to the folder of `from_file`, both relative to the lab root."""
    start = PurePosixPath(from_file).parent
    # both anchored at one made-up root: relpath of two relative paths would read the working directory,
    # which may no longer exist (a shell in a deleted folder)
    return PurePosixPath(os.path.relpath(PurePosixPath("/", target), PurePosixPath("/", start))).as_posix()


def comment_line(from_file: str | PurePosixPath, target: str | PurePosixPath) -> str:
    return COMMENT + reference(from_file, target)


def with_comment(text: str, line: str) -> str:
    """`text` whose first line is the schema comment `line` (an existing schema comment is replaced)."""
    lines = text.splitlines(keepends=True)
    if lines and lines[0].startswith(COMMENT):
        lines = lines[1:]
    return line + "\n" + "".join(lines)
