"""Generate `schemas/*.schema.json` (JSON Schema draft 2020-12) from the models.

Run `python -m tuneplane.dev.schemagen` after changing a model; tests fail when the committed files drift.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from tuneplane.constants import EXIT_OK
from tuneplane.lab.fs import atomic_write
from tuneplane.models.experiment import ExperimentManifest
from tuneplane.models.jobspec import JobSpec
from tuneplane.models.lab import LabFile
from tuneplane.models.lock import RecipeLock
from tuneplane.models.plugin import PluginManifest, PluginsLock
from tuneplane.models.recipe import Recipe
from tuneplane.models.run import RunRequest, RunStatus
from tuneplane.models.sweep import Sweep
from tuneplane.runtime.reporter import plain

SCHEMA_BASE = "https://tuneplane.dev/schemas"
DIALECT = "https://json-schema.org/draft/2020-12/schema"


def models() -> dict[str, type[BaseModel]]:
    return {
        "lab": LabFile,
        "recipe": Recipe,
        "recipe-lock": RecipeLock,
        "plugins-lock": PluginsLock,
        "plugin": PluginManifest,
        "run": RunRequest,
        "status": RunStatus,
        "jobspec": JobSpec,
        "experiment": ExperimentManifest,
        "sweep": Sweep,
    }


def schema_for(name: str, model: type[BaseModel]) -> dict[str, Any]:
    body = model.model_json_schema(by_alias=True, mode="validation")
    return {"$schema": DIALECT, "$id": f"{SCHEMA_BASE}/{name}.schema.json", **body}


def render_all() -> dict[str, str]:
    return {
        f"{name}.schema.json": json.dumps(schema_for(name, model), indent=2, sort_keys=True, ensure_ascii=False) + "\n"
        for name, model in models().items()
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tuneplane.dev.schemagen", description="Write schemas/*.schema.json from the models."
    )
    parser.add_argument("out", nargs="?", default="schemas", help="the folder to write (default: schemas)")
    out = Path(parser.parse_args(sys.argv[1:] if argv is None else argv).out)  # run from the repository root
    if not out.is_dir():
        parser.error(f"{out} is not a folder: run from the repository root, or name the schemas folder")
    for filename, text in render_all().items():
        atomic_write(out / filename, text)
        plain.line(f"wrote {out / filename}")
    return EXIT_OK


if __name__ == "__main__":
    raise SystemExit(main())
