"""`tp recipe upgrade`: rewrite experiments' recipe locks against the current catalog.

Only the lock is rewritten (it is tp's file); the experiment's own files are never touched.
"""

from __future__ import annotations

import json
from typing import Any

from tuneplane.author.editor import write_schemas
from tuneplane.errors import UsageError
from tuneplane.lab.catalog import Catalog, load_catalog
from tuneplane.lab.fs import atomic_write, present, write_json
from tuneplane.lab.load import Lab
from tuneplane.lab.locks import LOCK_FILE, lock_missing_hint, make_lock, method_without_lock, runtime_key
from tuneplane.lab.modelparse import first_problem_error
from tuneplane.lab.schemarefs import comment_line, config_schema_rel, with_comment
from tuneplane.lab.yamlio import LoadFailed, load_json
from tuneplane.runtime.records import FrozenRecord


class Upgrade(FrozenRecord):
    experiment: str
    method: str
    new_version: str
    changes: list[str]

    @property
    def changed(self) -> bool:
        return bool(self.changes)


def plan_upgrade(lab: Lab, name: str, catalog: Catalog, method: str | None = None) -> tuple[Upgrade, dict[str, object]]:
    """The new lock of experiment `name`; `method` locks an experiment that has no lock (yet)."""
    path = lab.experiment_dir(name) / LOCK_FILE
    if not present(path):
        old: dict[str, object] = {}
        method, old_key = method or _method_without_lock(lab, name), ""
    else:
        method, old, old_key = _locked(lab, name, method)
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
    return Upgrade(name, method, key, _diff(old, new)), new


def _locked(lab: Lab, name: str, method: str | None) -> tuple[str, dict[str, Any], str]:
    """(method, lock, locked version key) of the experiment's lock; `method` must agree with it."""
    path = lab.experiment_dir(name) / LOCK_FILE
    rel = lab.rel(path)
    try:  # the lab's reader: a link out of the lab, a directory or bad JSON is said as every command says it
        old = load_json(path, rel, root=lab.root).data
    except LoadFailed as exc:
        raise first_problem_error([exc.problem], f"run `tp validate {name}` for every problem") from None
    try:
        locked = old["recipe"]["name"]
        key = old.get("framework", {}).get("version", "")
    except (AttributeError, KeyError, TypeError):
        raise UsageError(
            f"{rel}: not a recipe lock (no recipe.name)", hint=f"run `tp validate {name}` to see why"
        ) from None
    if method not in (None, locked):
        raise UsageError(
            f"{name} is locked to {locked}; --method locks only an experiment without {LOCK_FILE}",
            hint=f"start another experiment for {method}: tp new NAME --method {method}",
        )
    return str(locked), old, str(key)


def _method_without_lock(lab: Lab, name: str) -> str:
    """The recipe an experiment without a lock names: its config.yaml's schema line, as `tp new` wrote it."""
    exp_dir = lab.experiment_dir(name)
    if not exp_dir.is_dir():
        raise UsageError(f"no experiment {name!r} in this lab", hint="see `tp ls` for the experiments of this lab")
    method = method_without_lock(exp_dir, lab.root)
    if method is None:
        raise UsageError(
            f"{lab.rel(exp_dir / LOCK_FILE)} is missing, and nothing in {name} names its recipe",
            hint=lock_missing_hint(name, None),
        )
    return method


def _same(old: dict[str, object], new: dict[str, object]) -> bool:
    """Equal apart from who wrote them."""
    return _without_author(old) == _without_author(new)


def _without_author(lock: dict[str, object]) -> dict[str, object]:
    """What a lock says; who wrote it and where editors find its schema do not count as a change."""
    return {k: v for k, v in lock.items() if k not in ("created_by", "$schema")}


def _diff(old: dict[str, object], new: dict[str, object], prefix: str = "") -> list[str]:
    out = []
    for key in sorted(set(old) | set(new)):
        a, b = old.get(key), new.get(key)
        if isinstance(a, dict) and isinstance(b, dict):
            out += _diff(a, b, f"{prefix}{key}.")
        elif a != b and key not in ("created_by", "$schema"):
            out.append(f"{prefix}{key}: {_short(a)} -> {_short(b)}")
    return out


def _short(value: object) -> str:
    text = json.dumps(value) if value is not None else "(none)"
    return text if len(text) <= 40 else text[:37] + "…"


def upgrade(
    lab: Lab, names: list[str], dry_run: bool, catalog: Catalog | None = None, method: str | None = None
) -> list[Upgrade]:
    """Re-lock each experiment; `method` names the recipe of experiments whose lock is missing."""
    catalog = catalog or load_catalog()
    results = []
    for name in names:
        result, lock = plan_upgrade(lab, name, catalog, method)
        if result.changed and not dry_run:
            write_json(lab.experiment_dir(name) / LOCK_FILE, lock)
        results.append(result)
    if not dry_run:
        refresh_editor_schemas(lab, catalog, results)
    return results


def refresh_editor_schemas(lab: Lab, catalog: Catalog, results: list[Upgrade]) -> None:
    """The lab's copies of the schemas follow this tp and its catalog; config.yaml files name theirs."""
    recipes = {r.method: catalog.recipe(r.method) for r in results if catalog.has(r.method)}
    write_schemas(lab.root, recipes)
    for result in results:
        recipe = recipes.get(result.method)
        config = lab.experiments_dir() / result.experiment / "config.yaml"
        if recipe is None or not recipe.params or not config.is_file():
            continue
        text = config.read_text(encoding="utf-8")
        line = comment_line(lab.rel(config), config_schema_rel(result.method))
        if not text.startswith(line + "\n"):
            atomic_write(config, with_comment(text, line))
