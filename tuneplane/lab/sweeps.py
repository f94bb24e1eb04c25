"""Sweep files on disk: `sweeps/<name>.yaml`, read with positions, written in a fixed key order."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tuneplane.errors import UsageError
from tuneplane.lab.fs import atomic_write, present
from tuneplane.lab.modelparse import first_problem_error, parse_model
from tuneplane.lab.yamlio import Doc, LoadFailed, load_yaml, yaml
from tuneplane.models.base import name_error
from tuneplane.models.sweep import SWEEPS_DIR, Sweep


def sweep_rel(name: str) -> str:
    return f"{SWEEPS_DIR}/{name}.yaml"


def sweep_files(root: Path) -> list[Path]:
    """Every sweep file of the lab, sorted by name."""
    base = root / SWEEPS_DIR
    if not base.is_dir():
        return []
    return sorted(p for p in base.iterdir() if p.suffix in (".yaml", ".yml") and p.is_file())


def load_sweep_doc(root: Path, path: Path) -> Doc:
    """The positioned document of a sweep file; LoadFailed names the file and the place."""
    return load_yaml(path, path.relative_to(root).as_posix(), root=root)


def read_sweep(root: Path, name: str) -> Sweep:
    """The sweep `name`; a UsageError that names the file, the place and the fix when it is missing or bad."""
    problem = name_error(name, "sweep name")
    if problem:
        raise UsageError(problem, hint="a sweep name is letters, digits, `.`, `_` and `-`")
    rel = sweep_rel(name)
    path = root / rel
    if not present(path):
        known = ", ".join(p.stem for p in sweep_files(root)) or "none yet"
        raise UsageError(f"no sweep {name!r}: {rel} does not exist", hint=f"sweeps in this lab: {known}")
    try:
        doc = load_sweep_doc(root, path)
    except LoadFailed as exc:
        raise first_problem_error([exc.problem]) from None
    sweep, problems = parse_model(Sweep, doc, "sweep-schema")
    if sweep is None:
        raise first_problem_error(problems, f"run `tp validate` to see every problem in {rel}")
    return sweep


def dump_sweep(sweep: Sweep) -> str:
    """The sweep as a person reviews it: fixed key order, empty optional fields left out."""
    data = sweep.model_dump(mode="json", by_alias=True, exclude={"early_stopping"})
    inputs = {k: v for k, v in data.pop("inputs").items() if v}
    body: dict[str, Any] = {k: v for k, v in data.items() if v not in ("", None, {}) or k == "grid"}
    if inputs:
        body["inputs"] = inputs
    text = yaml.safe_dump(body, sort_keys=False, allow_unicode=True, default_flow_style=None, width=1000)
    return (
        "# A sweep, written by `tp sweep`. Each trial is a run request under runs/; review them together.\n"
        "# `tp sweep extend|cancel|rerun` change it; `tp validate` checks the requests match it.\n" + text
    )


def write_sweep(root: Path, sweep: Sweep) -> Path:
    path = root / sweep_rel(sweep.name)
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(path, dump_sweep(sweep))
    return path
