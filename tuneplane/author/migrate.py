"""`tp migrate`: turn a StarForge lab into a TunePlane lab, in place.

Every change is computed in memory first; then all new files are written next to their targets and
renamed into place together, so a failure leaves the lab as it was. YAML is edited round-trip (ruamel)
so people's comments and key order survive.
"""

from __future__ import annotations

import io
import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path

from ruamel.yaml import YAML

from tuneplane.author.scaffold import lab_files
from tuneplane.errors import UsageError
from tuneplane.lab.catalog import Catalog, load_catalog
from tuneplane.lab.fs import atomic_write_all
from tuneplane.lab.load import LAB_DIRS, LAB_FILE, LEGACY_LAB_FILE
from tuneplane.lab.locks import LOCK_FILE
from tuneplane.lab.starforge import ENV_RENAMES, find_uses, rewrite
from tuneplane.lab.yamlio import LoadFailed, load_json
from tuneplane.models.lock import LEGACY_LOCK_APIS, RECIPE_LOCK_API
from tuneplane.models.plugin import LEGACY_SCHEMAS
from tuneplane.problems import location
from tuneplane.runtime.digest import bundle_digest

__all__ = ["ENV_RENAMES", "MigrationPlan", "apply", "plan_migration"]
CODE_SUFFIXES = (".py", ".sh", ".bash", ".yaml", ".yml")
SKIP_DIRS = frozenset({".git", "runs", "status", "node_modules", "__pycache__", ".venv", "venv", ".tox"})
MAX_FILES = 20_000  # a lab is walked once; a bigger tree is not a lab
MAX_CODE_BYTES = 1024 * 1024
SHARED_CODE_DIRS = ("common",)


@dataclass
class MigrationPlan:
    writes: dict[str, str] = field(default_factory=dict)  # relative path → new content
    deletes: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # what a person should check afterwards


def plan_migration(root: Path, catalog: Catalog | None = None) -> MigrationPlan:
    catalog = catalog or load_catalog()
    if (root / LAB_FILE).exists():
        raise UsageError(f"{root} already has {LAB_FILE}", hint="nothing to migrate")
    if not (root / LEGACY_LAB_FILE).is_file():
        raise UsageError(f"no {LEGACY_LAB_FILE} in {root}", hint="run tp migrate at the root of a StarForge lab")
    plan = MigrationPlan()
    files = _lab_tree(root)
    locks = [f for f in files if f.name == LOCK_FILE and len(f.relative_to(root).parts) >= 3]
    _lab_file(root, plan, _experiment_roots(root, locks), _shared_code(root))
    for lock in locks:
        _lock(root, lock, plan, catalog)
    for manifest in (f for f in files if f.name == "plugin.yaml"):
        _plugin(root, manifest, plan)
    for code in (f for f in files if f.suffix in CODE_SUFFIXES and f.name not in (LEGACY_LAB_FILE, "plugin.yaml")):
        _code(root, code, plan)
    for d in LAB_DIRS:
        if not (root / d).exists():
            plan.writes[f"{d}/.gitkeep"] = ""
    return plan


def _lab_tree(root: Path) -> list[Path]:
    """Every regular file of the lab, in order, without git's, the bot's or a virtualenv's folders."""
    found: list[Path] = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if d not in SKIP_DIRS and not d.startswith("."))
        for name in sorted(filenames):
            path = Path(dirpath) / name
            if path.is_file() and not path.is_symlink():
                found.append(path)
        if len(found) > MAX_FILES:
            raise UsageError(
                f"{root} holds more than {MAX_FILES} files; that is not a lab",
                hint="run tp migrate at the root of the StarForge lab",
            )
    return found


def _experiment_roots(root: Path, locks: list[Path]) -> list[str]:
    """The folders that hold experiments (`experiments/`, `smoke/`, …): where the locks are."""
    roots = {lock.parent.parent.relative_to(root).as_posix() for lock in locks}
    return sorted(roots | {"experiments"}, key=lambda r: (r != "experiments", r))


def _shared_code(root: Path) -> list[str]:
    return [d for d in SHARED_CODE_DIRS if (root / d).is_dir() and any((root / d).rglob("*.py"))]


def _yaml() -> YAML:
    y = YAML()
    y.preserve_quotes = True
    y.width = 4096
    return y


def _dump(y: YAML, data: object) -> str:
    buf = io.StringIO()
    y.dump(data, buf)
    return buf.getvalue()


def _lab_file(root: Path, plan: MigrationPlan, roots: list[str], shared: list[str]) -> None:
    y = _yaml()
    data = y.load((root / LEGACY_LAB_FILE).read_text(encoding="utf-8")) or {}
    name = re.sub(r"[^A-Za-z0-9._-]+", "-", str(data.get("name") or root.name)).strip("-.") or "lab"
    header = "".join(
        line + "\n"
        for line in (root / LEGACY_LAB_FILE).read_text(encoding="utf-8").splitlines()
        if line.startswith("#")
    )
    new_lab = lab_files(name)[LAB_FILE]
    first, _, rest = new_lab.partition("\n")
    layout = ""
    if roots != ["experiments"] or shared:
        layout = (
            "\n# Where this lab keeps its experiments, and code every job of the lab imports.\n"
            f"experiment_roots: [{', '.join(roots)}]\n"
        )
        layout += f"shared_code: [{', '.join(shared)}]\n" if shared else ""
    plan.writes[LAB_FILE] = f"{first}\n# Migrated from {LEGACY_LAB_FILE}; its comments follow.\n{header}{rest}{layout}"
    plan.deletes.append(LEGACY_LAB_FILE)
    plan.notes.append(
        f"{LAB_FILE}: written from {LEGACY_LAB_FILE} (name {name!r}); review profiles, images and cluster settings"
    )


_JSON_KINDS = {list: "array", str: "string", int: "number", float: "number", bool: "boolean", type(None): "null"}


def _lock(root: Path, path: Path, plan: MigrationPlan, catalog: Catalog) -> None:
    rel = path.relative_to(root).as_posix()
    try:  # the lab's reader: a regular file of bounded size, strict JSON
        data = load_json(path, rel).data
    except LoadFailed as exc:
        raise UsageError(
            f"{exc.problem.location()}: cannot read the lock: {exc.problem.message}",
            hint="fix or delete it, then run tp migrate again",
        ) from None
    recipe = data.get("recipe", {}) if isinstance(data, dict) else None
    if not isinstance(recipe, dict):
        what, where = (data, "it is") if not isinstance(data, dict) else (recipe, "its `recipe` is")
        raise UsageError(
            f"{rel}: cannot read the lock: {where} a JSON {_JSON_KINDS.get(type(what), 'value')}, not an object",
            hint="a recipe lock is a JSON object whose `recipe` is one too; fix or "
            "delete it, then run tp migrate again",
        )
    if data.get("apiVersion") not in LEGACY_LOCK_APIS:
        return
    data["apiVersion"] = RECIPE_LOCK_API
    if "manifest_digest" in recipe:
        recipe["digest"] = bundle_digest(recipe["manifest_digest"])
    method = recipe.get("name", "")
    if catalog.has(method):
        current = catalog.recipe(method)
        data.setdefault(
            "bindings",
            {
                "params": {n: {"path": p.path, "type": p.type} for n, p in sorted(current.params.items())},
                "entrypoint": {"kind": current.entrypoint.kind, "value": current.entrypoint.value},
            },
        )
        if (data.get("recipe", {}).get("manifest_digest"), recipe.get("template_digest")) != catalog.digests(method)[
            1:
        ]:
            plan.notes.append(
                f"{rel}: converted; then run `tp recipe upgrade {path.parent.name}` to adopt the "
                f"current {method} recipe"
            )
    else:
        plan.notes.append(
            f"{rel}: converted, but {method!r} is not in this catalog; pick a method from "
            f"`tp methods` and re-create it with `tp new NEW --method … --from {path.parent.name}`"
        )
    plan.writes[rel] = json.dumps(data, indent=2, sort_keys=True, ensure_ascii=False) + "\n"


def _plugin(root: Path, path: Path, plan: MigrationPlan) -> None:
    rel = path.relative_to(root).as_posix()
    y = _yaml()
    data = y.load(path.read_text(encoding="utf-8"))
    if not hasattr(data, "get") or data.get("schema") not in LEGACY_SCHEMAS:
        return
    data["schema"] = "tuneplane/plugin/v1"
    if "kind" in data and "capability" not in data:
        keys = list(data.keys())
        data.insert(keys.index("kind"), "capability", data["kind"])
        del data["kind"]
    if data.get("capability") == "data-prep" and "execution" not in data:
        data.insert(list(data.keys()).index("capability") + 1, "execution", "local")  # StarForge ran it locally
    plan.writes[rel] = _dump(y, data)
    plan.notes.append(
        f"{rel}: schema tuneplane/plugin/v1 (`kind` is now `capability`); re-lock experiments "
        "that use it with `tp plugin lock`"
    )


def _code(root: Path, path: Path, plan: MigrationPlan) -> None:
    """Rewrite the StarForge names that have an exact TunePlane equivalent; list every other one."""
    if path.stat().st_size > MAX_CODE_BYTES:
        return
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return
    rel = path.relative_to(root).as_posix()
    new = rewrite(text)
    if new != text:
        plan.writes[rel] = new
        plan.notes.append(f"{rel}: StarForge names rewritten to their TunePlane equivalents")
    for use in find_uses(new):
        plan.notes.append(f"{location(rel, use.line, use.col)}: {use.name}: {use.advice}")


def apply(root: Path, plan: MigrationPlan) -> None:
    """Write every new file beside its target, then rename all into place; delete last."""
    atomic_write_all({root / rel: text for rel, text in plan.writes.items()})
    for rel in plan.deletes:
        (root / rel).unlink(missing_ok=True)
