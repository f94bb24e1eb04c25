"""Artifacts of a Slurm run: what the recipe's globs match in its out dir on the shared filesystem.

Each match is realpath-checked and must stay inside the out dir (CONTRACT §10); a link that leaves
it is not an artifact.
"""

from __future__ import annotations

import glob
import os
import re
from pathlib import Path
from typing import Any

_STEP = re.compile(r"(?:step|checkpoint|ckpt|epoch|iter)[-_]?(\d+)", re.IGNORECASE)


def collect(out_dir: Path, globs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    root = os.path.realpath(out_dir)
    found: list[dict[str, Any]] = []
    seen: set[str] = set()
    for item in globs:
        for match in sorted(glob.glob(os.path.join(glob.escape(str(out_dir)), str(item["pattern"])))):
            real, rel = os.path.realpath(match), os.path.relpath(match, out_dir).replace(os.sep, "/")
            if rel in seen or rel == "artifacts.json" or not _inside(real, root):
                continue
            seen.add(rel)
            entry: dict[str, Any] = {"kind": item["kind"], "path": rel,
                                     "format": item.get("format") or _format(real), "size_bytes": _size(real, root)}
            step = _STEP.search(os.path.basename(match))
            if step:
                entry["step"] = int(step.group(1))
            found.append(entry)
    return found


def _inside(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip(os.sep) + os.sep)


def _format(path: str) -> str:
    return "directory" if os.path.isdir(path) else (os.path.splitext(path)[1].lstrip(".") or "file")


def _size(path: str, root: str) -> int:
    if os.path.isfile(path):
        return os.path.getsize(path)
    total = 0
    for base, _dirs, files in os.walk(path):
        for name in files:
            real = os.path.realpath(os.path.join(base, name))
            if _inside(real, root) and os.path.isfile(real):
                total += os.path.getsize(real)
    return total
