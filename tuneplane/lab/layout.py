"""Where a lab keeps things: experiment roots, shared code, data sets, plugin folders. Pure over the tree.

`tuneplane.yaml` may name several experiment roots (`experiments/`, `smoke/`), shared code folders
(`common/`) and data sets; plugins may sit in group folders (`plugins/examples/<name>/plugin.yaml`).
Every lookup of "the directory of experiment X" or "the directory of plugin Y" goes through here.
"""

from __future__ import annotations

import keyword
import os
import re
import sys
from pathlib import Path, PurePosixPath

from tuneplane.lab.yamlio import Doc
from tuneplane.models.lab import LabFile
from tuneplane.problems import Problem, Severity
from tuneplane.runtime.patterns import lazy_pattern

PLUGINS_DIR = "plugins"
RESERVED_ROOTS = frozenset({"runs", "status", "plugins", ".git", ".github", ".tuneplane", "tuneplane_plugins"})
# Shared code joins the job's PYTHONPATH by its folder name: these would hide the real module.
SHADOWED = frozenset(
    {
        "tuneplane",
        "nemo_rl",
        "ray",
        "torch",
        "transformers",
        "vllm",
        "trl",
        "verl",
        "numpy",
        "yaml",
        "tuneplane_plugins",
    }
) | frozenset(sys.stdlib_module_names)
MAX_PLUGIN_DEPTH = 3  # plugins/<group>/<subgroup>/<name>/plugin.yaml at most
DATASET_NAME = lazy_pattern(r"^[A-Za-z][A-Za-z0-9_-]*$")


def dataset_variable(name: str) -> str:
    """`alpaca` → `ALPACA_DATA_DIR`, `image-net` → `IMAGE_NET_DATA_DIR`."""
    return re.sub(r"[^A-Za-z0-9]", "_", name).upper() + "_DATA_DIR"


def _relative_inside(value: str) -> bool:
    pure = PurePosixPath(value)
    return (
        bool(value)
        and not pure.is_absolute()
        and ".." not in pure.parts
        and "\\" not in value
        and value not in (".", "")
    )


# ── experiments ─────────────────────────────────────────────────────────────────────────────────────


def _folder(entry: os.DirEntry[str]) -> bool:
    """A folder, or a link to one; a link that loops is neither (`DirEntry.is_dir` raises for it where
    `Path.is_dir` says no), so one such entry does not stop the whole index."""
    try:
        return entry.is_dir()
    except OSError:
        return False


def experiment_index(root: Path, settings: LabFile) -> dict[str, list[str]]:
    """Experiment name → the lab-relative directories that hold one of that name (normally one)."""
    found: dict[str, list[str]] = {}
    for base in settings.experiment_roots:
        if not _relative_inside(base):
            continue
        folder = root / base
        if not folder.is_dir():  # missing, a file, a dangling or looping link: layout_problems says so
            continue
        # scandir: a lab of thousands of experiments is read without a stat per entry (its type comes
        # with the listing), which `tp validate EXP` pays on every save
        with os.scandir(folder) as entries:
            names = sorted(e.name for e in entries if not e.name.startswith(".") and _folder(e))
        prefix = str(PurePosixPath(base))
        for name in names:
            found.setdefault(name, []).append(f"{prefix}/{name}")
    return found


# ── plugins ─────────────────────────────────────────────────────────────────────────────────────────


def plugin_index(root: Path) -> dict[str, list[str]]:
    """Plugin name → lab-relative directories holding a plugin.yaml of that name's folder.

    A folder without plugin.yaml under plugins/ is a group of plugins, searched to a bounded depth.
    """
    found: dict[str, list[str]] = {}
    base = root / PLUGINS_DIR
    if not base.is_dir():
        return found
    stack = [(base, 0)]
    while stack:
        folder, depth = stack.pop()
        for entry in sorted(folder.iterdir(), reverse=True):
            if not entry.is_dir() or entry.name.startswith((".", "__")) or entry.is_symlink():
                continue
            if (entry / "plugin.yaml").exists():
                found.setdefault(entry.name, []).append(entry.relative_to(root).as_posix())
            elif depth < MAX_PLUGIN_DEPTH and _has_subfolders(entry):
                stack.append((entry, depth + 1))
            else:
                found.setdefault(entry.name, []).append(entry.relative_to(root).as_posix())  # a broken plugin
    return {name: sorted(dirs) for name, dirs in sorted(found.items())}


def _has_subfolders(folder: Path) -> bool:
    try:
        return any(p.is_dir() for p in folder.iterdir())
    except OSError:
        return False


def plugin_dir(root: Path, name: str) -> Path:
    """The directory of plugin `name` (plugins/<name>, or inside a group folder); plugins/<name> if none."""
    dirs = plugin_index(root).get(name)
    return root / dirs[0] if dirs else root / PLUGINS_DIR / name


# ── checks of tuneplane.yaml against the tree ───────────────────────────────────────────────────────


def layout_problems(root: Path, doc: Doc, settings: LabFile) -> list[Problem]:
    problems = _roots(root, doc, settings) + _shared(root, doc, settings) + _datasets(doc, settings)
    return problems


def _roots(root: Path, doc: Doc, settings: LabFile) -> list[Problem]:
    out = []
    for index, base in enumerate(settings.experiment_roots):
        at = f"/experiment_roots/{index}"
        if not _relative_inside(base):
            out.append(
                doc.problem(
                    at,
                    "lab-layout",
                    f"experiment root {base!r} must be a folder inside the lab",
                    hint="name it relative to the lab root, without '..', e.g. smoke",
                )
            )
        elif PurePosixPath(base).parts[0] in RESERVED_ROOTS:
            out.append(
                doc.problem(
                    at,
                    "lab-layout",
                    f"experiment root {base!r} is a folder tp owns",
                    hint="keep experiments out of runs/, status/ and plugins/",
                )
            )
        elif not (root / base).is_dir():
            out.append(
                doc.problem(
                    at,
                    "lab-layout",
                    f"experiment root {base!r} does not exist",
                    hint=f"create {base}/ or remove it from experiment_roots",
                    severity=Severity.WARNING,
                )
            )
    return out


def _shared(root: Path, doc: Doc, settings: LabFile) -> list[Problem]:
    out = []
    for index, folder in enumerate(settings.shared_code):
        at = f"/shared_code/{index}"
        name = PurePosixPath(folder).name
        if not _relative_inside(folder):
            out.append(
                doc.problem(
                    at,
                    "lab-layout",
                    f"shared code {folder!r} must be a folder inside the lab",
                    hint="name it relative to the lab root, without '..', e.g. common",
                )
            )
        elif not name.isidentifier() or keyword.iskeyword(name):
            out.append(
                doc.problem(
                    at,
                    "lab-layout",
                    f"shared code {folder!r} cannot be imported: {name!r} is not a Python name",
                    hint="rename the folder, e.g. common",
                )
            )
        elif name in SHADOWED:
            out.append(
                doc.problem(
                    at,
                    "lab-layout",
                    f"shared code {folder!r} would hide the real {name!r} module in every job",
                    hint="rename the folder, e.g. common",
                )
            )
        elif not (root / folder).is_dir() or os.path.islink(root / folder):
            out.append(
                doc.problem(
                    at,
                    "lab-layout",
                    f"shared code {folder!r}: no folder {folder}/ in the lab",
                    hint=f"create {folder}/ or remove it from shared_code",
                )
            )
    return out


def _datasets(doc: Doc, settings: LabFile) -> list[Problem]:
    out: list[Problem] = []
    seen: dict[str, str] = {}
    for name, ds in settings.datasets.items():
        at = f"/datasets/{name}"
        variable = dataset_variable(name)
        if not DATASET_NAME().match(name):
            out.append(
                doc.problem(
                    at,
                    "lab-dataset",
                    f"data set name {name!r} is not allowed",
                    hint="start with a letter; use letters, digits, '_' and '-'",
                )
            )
        elif variable in seen:
            out.append(
                doc.problem(
                    at,
                    "lab-dataset",
                    f"data sets {seen[variable]!r} and {name!r} both set {variable}",
                    hint="rename one of them",
                )
            )
        seen.setdefault(variable, name)
        if bool(ds.path) == bool(ds.volume):
            out.append(
                doc.problem(
                    at,
                    "lab-dataset",
                    f"data set {name!r} needs exactly one of `path` or `volume`",
                    hint="path: a folder on the lab's storage; volume: a PersistentVolumeClaim of its own",
                )
            )
        elif ds.path and not _relative_inside(ds.path):
            out.append(
                doc.problem(
                    f"{at}/path",
                    "lab-dataset",
                    f"data set {name!r}: path {ds.path!r} must stay inside the storage root",
                    hint="name it relative to the storage root, without '..', e.g. datasets/alpaca",
                )
            )
        elif ds.volume and not re.fullmatch(r"[a-z0-9]([-a-z0-9.]*[a-z0-9])?", ds.volume):
            out.append(
                doc.problem(
                    f"{at}/volume",
                    "lab-dataset",
                    f"data set {name!r}: {ds.volume!r} is not a PersistentVolumeClaim name",
                    hint="lower-case letters, digits, '-' and '.'",
                )
            )
    return out
