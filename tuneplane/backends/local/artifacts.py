"""The artifacts a run left in its out dir, written as `artifacts.json` (the scan is `backends.rundir`'s)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tuneplane.backends.local.files import ARTIFACTS_VERSION
from tuneplane.backends.rundir import ARTIFACTS_FILE, collect_artifacts
from tuneplane.lab.fs import write_json


def write_artifacts(out_dir: Path, globs: list[dict[str, Any]], run_id: str) -> str:
    try:
        items = collect_artifacts(out_dir, globs)
        write_json(out_dir / ARTIFACTS_FILE, {"version": ARTIFACTS_VERSION, "run_id": run_id, "artifacts": items})
    except OSError as exc:
        return f"could not list artifacts: {exc}"
    return ""
