"""recipe.lock.json: what `tp new` writes, and whether the catalog in force admits it (CONTRACT §4).

Admission states each get their own test: a lock made by `tp new` against a private copy of the
catalog, then the catalog is copied again (a fresh root, so nothing cached) and changed the way a
catalog maintainer would change it.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tuneplane import __version__
from tuneplane.lab.catalog import load_catalog, packaged_catalog_root
from tuneplane.lab.locks import digest_consistent, make_lock, runtime_key
from tuneplane.models.lock import RecipeLock

EXP = "exp"
METHOD = "pytorch/image-classification"
LOCK_REL = f"experiments/{EXP}/recipe.lock.json"
RECIPE_REL = "pytorch/image-classification/recipe.yaml"
FIX = f"tp recipe upgrade {EXP}"


# ── what a lock holds ───────────────────────────────────────────────────────────────────────────────


@pytest.mark.parametrize("method", load_catalog(packaged_catalog_root()).ids)
def test_make_lock_pins_the_catalog_entry(method: str) -> None:
    catalog = load_catalog(packaged_catalog_root())
    recipe = catalog.recipe(method)
    key, runtime_id = runtime_key(recipe, None)
    lock = make_lock(catalog, method, key)
    digest, manifest, template = catalog.digests(method)
    assert lock["apiVersion"] == "tuneplane/recipe-lock/v1"
    assert lock["recipe"] == {
        "name": method,
        "version": recipe.version,
        "digest": digest,
        "manifest_digest": manifest,
        "template_digest": template,
    }
    assert lock["framework"] == {"kind": recipe.framework, "version": key, "runtime_id": runtime_id}
    assert lock["created_by"] == {"core_version": __version__}
    assert lock["requires"] == {"core": recipe.requires.core}
    bindings = lock["bindings"]
    assert bindings["params"] == {n: {"path": p.path, "type": p.type} for n, p in recipe.params.items()}
    assert bindings["entrypoint"] == {"kind": recipe.entrypoint.kind, "value": recipe.entrypoint.value}
    parsed = RecipeLock.model_validate(lock)
    assert digest_consistent(parsed) and not parsed.legacy


def test_runtime_key_defaults_and_names_the_known_versions() -> None:
    recipe = load_catalog(packaged_catalog_root()).recipe(METHOD)
    assert runtime_key(recipe, None)[0] == recipe.runtime.default_version
    other = next(k for k in recipe.runtime.versions if k != recipe.runtime.default_version)
    assert runtime_key(recipe, other) == (other, recipe.runtime.versions[other].runtime_id)
    with pytest.raises(ValueError) as info:
        runtime_key(recipe, "0.0.1")
    assert "0.0.1" in str(info.value)
    assert all(k in str(info.value) for k in recipe.runtime.versions)


def test_custom_is_user_managed_and_takes_no_version() -> None:
    recipe = load_catalog(packaged_catalog_root()).recipe("custom/custom")
    assert runtime_key(recipe, None) == ("user-managed", "")
    assert runtime_key(recipe, "user-managed") == ("user-managed", "")
    with pytest.raises(ValueError, match="brings its own"):
        runtime_key(recipe, "1.0")


def test_lock_file_is_canonical_json(lab: Path, tp: Any) -> None:
    assert tp("new", EXP, "--method", METHOD).code == 0
    text = (lab / LOCK_REL).read_text(encoding="utf-8")
    assert text == json.dumps(json.loads(text), indent=2, sort_keys=True, ensure_ascii=False) + "\n"


def test_consistency_accepts_both_digest_forms_and_nothing_else() -> None:
    catalog = load_catalog(packaged_catalog_root())
    lock = make_lock(catalog, METHOD, runtime_key(catalog.recipe(METHOD), None)[0])
    assert digest_consistent(RecipeLock.model_validate(lock))
    from tuneplane.runtime.digest import bundle_digest

    r = lock["recipe"]
    r["digest"] = bundle_digest(r["manifest_digest"], r["template_digest"])  # the StarForge form
    assert digest_consistent(RecipeLock.model_validate(lock))
    r["digest"] = bundle_digest(r["template_digest"])
    assert not digest_consistent(RecipeLock.model_validate(lock))


# ── admission: helpers ──────────────────────────────────────────────────────────────────────────────


def json_line(text: str, *keys: str) -> int:
    """Line of `keys` (a path) in pretty-printed JSON: each key is looked for after the one before."""
    lines = text.splitlines()
    start = 0
    for key in keys:
        start = next(i for i in range(start, len(lines)) if lines[i].lstrip().startswith(f'"{key}":'))
        start += 1
    return start


@pytest.fixture()
def locked(lab: Path, make_catalog: Callable[..., Path], tp: Any) -> Path:
    """An experiment locked by `tp new` against a private catalog copy; returns that catalog."""
    catalog = make_catalog()
    result = tp("new", EXP, "--method", METHOD)
    assert result.code == 0, result.output
    return catalog


def changed_catalog(make_catalog: Callable[..., Path], current: Path, change: Callable[[Path], None]) -> Path:
    """A fresh copy of `current`, changed and put in force."""
    target = make_catalog(current)
    change(target)
    return target


def edit(rel: str, old: str, new: str) -> Callable[[Path], None]:
    def change(root: Path) -> None:
        path = root / rel
        text = path.read_text(encoding="utf-8")
        assert text.count(old) == 1, f"{old!r} is not once in {rel}: the catalog changed, update the test"
        path.write_text(text.replace(old, new), encoding="utf-8")

    return change


def param_line(root: Path, name: str) -> str:
    line = next(
        x for x in (root / RECIPE_REL).read_text(encoding="utf-8").splitlines() if x.lstrip().startswith(f"{name}: {{")
    )
    return line


def validate(tp: Any, *extra: str) -> tuple[int, dict[str, Any]]:
    result = tp("validate", EXP, "--format", "json", *extra)
    assert "Traceback" not in result.output
    return result.code, json.loads(result.out)


def lock_problems(report: dict[str, Any], rule: str) -> list[dict[str, Any]]:
    return [p for p in report["problems"] if p["file"] == LOCK_REL and p["rule"] == rule]


def assert_blocked(lab: Path, tp: Any, *path: str, says: str, fix: str = FIX) -> None:
    code, report = validate(tp)
    found = lock_problems(report, "lock-blocking")
    assert found, report["problems"]
    expected = json_line((lab / LOCK_REL).read_text(encoding="utf-8"), *path)
    assert [p["line"] for p in found] == [expected], found
    assert says in found[0]["message"] and fix in found[0]["hint"]
    assert found[0]["severity"] == "error"
    assert code == 1
    ls = tp("ls", "--json")
    assert json.loads(ls.out)[0]["lock"].startswith("blocked")


# ── admission: one test per state ───────────────────────────────────────────────────────────────────


def test_current_lock_has_no_problems(lab: Path, locked: Path, tp: Any) -> None:
    code, report = validate(tp)
    assert (code, report["errors"], report["warnings"]) == (0, 0, 0), report["problems"]
    assert json.loads(tp("ls", "--json").out)[0]["lock"] == "current"


def test_edited_template_is_advisory_drift(lab: Path, locked: Path, make_catalog: Any, tp: Any) -> None:
    def touch_template(root: Path) -> None:
        with (root / "pytorch/image-classification/template/README.md").open("a", encoding="utf-8") as fh:
            fh.write("\nOne more line from the catalog maintainers.\n")

    changed_catalog(make_catalog, locked, touch_template)
    code, report = validate(tp)
    drift = lock_problems(report, "lock-drift")
    assert len(drift) == 1 and report["errors"] == 0, report["problems"]
    assert drift[0]["severity"] == "warning"
    assert "template digest" in drift[0]["message"] and "manifest digest" not in drift[0]["message"]
    assert drift[0]["line"] == json_line((lab / LOCK_REL).read_text(encoding="utf-8"), "recipe")
    assert FIX in drift[0]["hint"]
    assert code == 0
    assert validate(tp, "--strict")[0] == 1
    assert json.loads(tp("ls", "--json").out)[0]["lock"] == "upgrade available"


def test_new_recipe_version_is_advisory_drift(lab: Path, locked: Path, make_catalog: Any, tp: Any) -> None:
    changed_catalog(make_catalog, locked, edit(RECIPE_REL, 'version: "1.0.0"', 'version: "1.0.1"'))
    code, report = validate(tp)
    drift = lock_problems(report, "lock-drift")
    assert len(drift) == 1 and report["errors"] == 0, report["problems"]
    assert "version" in drift[0]["message"] and "manifest digest" in drift[0]["message"]
    assert code == 0


def test_framework_kind_changed_blocks(lab: Path, locked: Path, make_catalog: Any, tp: Any) -> None:
    changed_catalog(make_catalog, locked, edit(RECIPE_REL, "framework: pytorch\n", "framework: torch\n"))
    assert_blocked(lab, tp, "framework", "kind", says="'torch'")


def test_runtime_id_changed_blocks(lab: Path, locked: Path, make_catalog: Any, tp: Any) -> None:
    changed_catalog(make_catalog, locked, edit(RECIPE_REL, "runtime_id: pytorch-2.14.0,", "runtime_id: pt-2.14.0-b,"))
    assert_blocked(lab, tp, "framework", "runtime_id", says="pt-2.14.0-b")


def test_locked_runtime_version_removed_blocks(lab: Path, locked: Path, make_catalog: Any, tp: Any) -> None:
    def drop_version(root: Path) -> None:
        edit(RECIPE_REL, 'default_version: "2.14.0"', 'default_version: "2.13.0"')(root)
        line = next(
            x for x in (root / RECIPE_REL).read_text(encoding="utf-8").splitlines() if x.strip().startswith('"2.14.0":')
        )
        edit(RECIPE_REL, line + "\n", "")(root)

    changed_catalog(make_catalog, locked, drop_version)
    assert_blocked(lab, tp, "framework", "version", says="2.13.0")


def test_requires_core_excluding_this_tool_blocks(lab: Path, locked: Path, make_catalog: Any, tp: Any) -> None:
    changed_catalog(make_catalog, locked, edit(RECIPE_REL, 'requires: {core: ">=0.1,<1"}', 'requires: {core: ">=99"}'))
    assert_blocked(lab, tp, "requires", "core", says=__version__)


def test_bound_param_removed_blocks(lab: Path, locked: Path, make_catalog: Any, tp: Any) -> None:
    def drop_seed(root: Path) -> None:
        edit(RECIPE_REL, param_line(root, "seed") + "\n", "")(root)

    changed_catalog(make_catalog, locked, drop_seed)
    assert_blocked(lab, tp, "bindings", "params", "seed", says="'seed'")


def test_bound_param_moved_blocks(lab: Path, locked: Path, make_catalog: Any, tp: Any) -> None:
    changed_catalog(
        make_catalog,
        locked,
        edit(RECIPE_REL, "seed: {type: int, path: seed,", "seed: {type: int, path: training.seed,"),
    )
    assert_blocked(lab, tp, "bindings", "params", "seed", says="training.seed")


def test_bound_param_type_changed_blocks(lab: Path, locked: Path, make_catalog: Any, tp: Any) -> None:
    changed_catalog(
        make_catalog, locked, edit(RECIPE_REL, "seed: {type: int, path: seed,", "seed: {type: float, path: seed,")
    )
    assert_blocked(lab, tp, "bindings", "params", "seed", says="float")


def test_entrypoint_moved_blocks(lab: Path, locked: Path, make_catalog: Any, tp: Any) -> None:
    changed_catalog(
        make_catalog,
        locked,
        edit(
            RECIPE_REL,
            "  kind: experiment\n  value: train.py\n",
            "  kind: experiment\n  value: main.py\n",
        ),
    )
    assert_blocked(lab, tp, "bindings", "entrypoint", says="main.py")


def test_recipe_removed_blocks(lab: Path, locked: Path, make_catalog: Any, tp: Any) -> None:
    changed_catalog(make_catalog, locked, lambda root: shutil.rmtree(root / "pytorch/image-classification"))
    assert_blocked(lab, tp, "recipe", "name", says="not in the catalog", fix="tp methods")


def test_deprecated_runtime_is_a_warning(lab: Path, locked: Path, make_catalog: Any, tp: Any) -> None:
    changed_catalog(
        make_catalog,
        locked,
        edit(
            RECIPE_REL,
            'image: "pytorch/pytorch:2.14.0-cuda12.8-cudnn9-runtime", deprecated: false}',
            'image: "pytorch/pytorch:2.14.0-cuda12.8-cudnn9-runtime", deprecated: true}',
        ),
    )
    code, report = validate(tp)
    found = lock_problems(report, "runtime-deprecated")
    assert len(found) == 1 and report["errors"] == 0, report["problems"]
    assert found[0]["severity"] == "warning" and FIX in found[0]["hint"]
    assert found[0]["line"] == json_line((lab / LOCK_REL).read_text(encoding="utf-8"), "framework", "version")
    assert code == 0


def test_catalog_env_points_at_the_copy(locked: Path) -> None:
    """The admission tests above are only meaningful if the copy, not the packaged catalog, is in force."""
    assert Path(os.environ["TUNEPLANE_CATALOG"]) == locked
    assert load_catalog().root == locked
