"""`tp recipe upgrade`: rewrite experiments' recipe locks against the current catalog.

Only the lock is rewritten (it is tp's file); the experiment's own files are never touched.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from tuneplane.errors import UsageError
from tuneplane.lab.catalog import Catalog, load_catalog
from tuneplane.lab.fs import write_json
from tuneplane.lab.load import Lab
from tuneplane.lab.locks import LOCK_FILE, make_lock, runtime_key


@dataclass(frozen=True)
class Upgrade:
    experiment: str
    method: str
    old_version: str
    new_version: str
    changes: list[str]

    @property
    def changed(self) -> bool:
        return bool(self.changes)


def plan_upgrade(lab: Lab, name: str, catalog: Catalog) -> tuple[Upgrade, dict[str, object]]:
    path = lab.experiment_dir(name) / LOCK_FILE
    try:
        old = json.loads(path.read_text(encoding="utf-8"))
        method = old["recipe"]["name"]
        old_key = old.get("framework", {}).get("version", "")
    except (OSError, ValueError, KeyError, TypeError):
        raise UsageError(f"experiments/{name}/{LOCK_FILE} is missing or unreadable",
                         hint=f"run `tp validate {name}` to see why") from None
    catalog.require(method)
    recipe = catalog.recipe(method)
    try:
        key, _ = runtime_key(recipe, old_key)
    except ValueError:
        key, _ = runtime_key(recipe, None)  # the locked version is gone: move to the default
    new = make_lock(catalog, method, key)
    if recipe.runtime.versions.get(key) and recipe.runtime.versions[key].deprecated:
        key, _ = runtime_key(recipe, None)
        new = make_lock(catalog, method, key)
    new["created_by"] = old.get("created_by", new["created_by"]) if _same(old, new) else new["created_by"]
    return Upgrade(name, method, str(old_key), key, _diff(old, new)), new


def _same(old: dict[str, object], new: dict[str, object]) -> bool:
    """Equal apart from who wrote them."""
    return _without_author(old) == _without_author(new)


def _without_author(lock: dict[str, object]) -> dict[str, object]:
    return {k: v for k, v in lock.items() if k != "created_by"}


def _diff(old: dict[str, object], new: dict[str, object], prefix: str = "") -> list[str]:
    out = []
    for key in sorted(set(old) | set(new)):
        a, b = old.get(key), new.get(key)
        if isinstance(a, dict) and isinstance(b, dict):
            out += _diff(a, b, f"{prefix}{key}.")
        elif a != b and key != "created_by":
            out.append(f"{prefix}{key}: {_short(a)} -> {_short(b)}")
    return out


def _short(value: object) -> str:
    text = json.dumps(value) if value is not None else "(none)"
    return text if len(text) <= 40 else text[:37] + "…"


def upgrade(lab: Lab, names: list[str], dry_run: bool, catalog: Catalog | None = None) -> list[Upgrade]:
    catalog = catalog or load_catalog()
    results = []
    for name in names:
        result, lock = plan_upgrade(lab, name, catalog)
        if result.changed and not dry_run:
            write_json(lab.experiment_dir(name) / LOCK_FILE, lock)
        results.append(result)
    return results


