"""The platform's validated overrides (dotted config path → value) laid over a nested config.

Job side: the standard library only. The TRL templates (through `trl_support`) and the CLI-flags
runner of ms-swift and OpenRLHF (`cli_flags`) apply them the same way.
"""

from __future__ import annotations


def apply_overrides(config: dict[str, object], overrides: dict[str, object]) -> None:
    """Set each dotted path; nested mappings are created, so a key absent from the file still works."""
    for dotted, value in overrides.items():
        node = config
        *parents, leaf = dotted.split(".")
        for part in parents:
            child = node.setdefault(part, {})
            if not isinstance(child, dict):
                raise SystemExit(f"override {dotted!r}: {part!r} is not a mapping in the config")
            node = child
        node[leaf] = value
