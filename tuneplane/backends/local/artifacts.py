"""The artifacts a run left in its out dir: the recipe's globs, realpath-checked, as `artifacts.json`."""

from __future__ import annotations

import glob
import os
from pathlib import Path
from typing import Any

from tuneplane.backends.local.files import _STEP, ARTIFACTS_VERSION, _write_json

# ── artifacts ────────────────────────────────────────────────────────────────────────────────────


def collect_artifacts(out_dir: Path, globs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Matches of the recipe's globs that really are inside the out dir (symlinks out are dropped)."""
    root = os.path.realpath(out_dir)
    found: list[dict[str, Any]] = []
    seen: set[str] = set()
    for item in globs:
        for match in sorted(glob.glob(os.path.join(glob.escape(str(out_dir)), item["pattern"]))):
            real = os.path.realpath(match)
            rel = os.path.relpath(match, out_dir)
            if rel in seen or not _inside(real, root) or rel == "artifacts.json":
                continue
            seen.add(rel)
            entry: dict[str, Any] = {
                "kind": item["kind"],
                "path": rel.replace(os.sep, "/"),
                "format": item.get("format") or _format_of(real),
                "size_bytes": _size(real, root),
            }
            step = _STEP.search(os.path.basename(match))
            if step:
                entry["step"] = int(step.group(1))
            found.append(entry)
    return found


def _write_artifacts(out_dir: Path, globs: list[dict[str, Any]], run_id: str) -> str:
    try:
        items = collect_artifacts(out_dir, globs)
        _write_json(
            out_dir / "artifacts.json", {"version": ARTIFACTS_VERSION, "run_id": run_id, "artifacts": items}
        )
    except OSError as exc:
        return f"could not list artifacts: {exc}"
    return ""


def _inside(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip(os.sep) + os.sep)


def _format_of(path: str) -> str:
    if os.path.isdir(path):
        return "directory"
    suffix = os.path.splitext(path)[1].lstrip(".")
    return suffix or "file"


def _size(path: str, root: str) -> int:
    if os.path.isfile(path):
        return os.path.getsize(path)
    total = 0
    for base, _dirs, files in os.walk(path):
        for name in files:
            full = os.path.join(base, name)
            real = os.path.realpath(full)
            if _inside(real, root) and os.path.isfile(real):
                total += os.path.getsize(real)
    return total
