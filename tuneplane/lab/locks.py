"""Write `recipe.lock.json` and decide whether a lock is admitted by the current catalog (CONTRACT §4).

Blocking drift is an error; any other drift is advice that names `tp recipe upgrade`.
"""

from __future__ import annotations

from pathlib import Path

from tuneplane import __version__
from tuneplane.lab import fs
from tuneplane.lab.catalog import Catalog
from tuneplane.lab.schemarefs import method_named_by, reference, schema_rel
from tuneplane.lab.yamlio import Doc
from tuneplane.models.lock import RECIPE_LOCK_API, RecipeLock
from tuneplane.models.recipe import Recipe
from tuneplane.problems import Problem, Severity, did_you_mean
from tuneplane.runtime.digest import bundle_digest
from tuneplane.runtime.versions import version_admits

LOCK_FILE = "recipe.lock.json"
UPGRADE = "run `tp recipe upgrade {exp}` to re-lock against the current catalog"
# experiments/<exp>/recipe.lock.json → the lab's copy of the lock schema, for editors. Older tools read a
# lock by its named keys, so the extra key costs them nothing.
LOCK_SCHEMA = reference("experiments/EXP/recipe.lock.json", schema_rel("recipe-lock"))


def method_without_lock(exp_dir: Path, root: Path) -> str | None:
    """The recipe of an experiment whose lock is gone: the schema line `tp new` wrote atop config.yaml."""
    config = exp_dir / "config.yaml"
    try:
        return method_named_by(fs.read_text(config, root=root)) if fs.present(config) else None
    except fs.LoadFailed:  # the config's own check reports a file that does not read
        return None


def lock_missing_hint(exp: str, method: str | None) -> str:
    """The command that locks an experiment without a lock: the recipe named when nothing else names it."""
    if method is not None:
        return f"re-lock it with `tp recipe upgrade {exp}` (it locks {method}, which its config.yaml names)"
    return f"lock it with `tp recipe upgrade {exp} --method FRAMEWORK/RECIPE` (`tp methods` lists them)"


def runtime_key(recipe: Recipe, requested: str | None) -> tuple[str, str]:
    """(version key, runtime_id) of the runtime to lock; raises ValueError naming the known versions."""
    if recipe.user_managed:
        if requested not in (None, "", "user-managed"):
            raise ValueError(f"{recipe.name} has no framework versions: the image you pass brings its own")
        return "user-managed", ""
    key = requested or recipe.runtime.default_version
    if key not in recipe.runtime.versions:
        known = ", ".join(sorted(recipe.runtime.versions))
        raise ValueError(f"{recipe.name} has no framework version {key!r}; known versions: {known}")
    if recipe.runtime.versions[key].deprecated:  # kept only for the locks that already name it
        raise ValueError(
            f"framework version {key} of {recipe.name} is deprecated; "
            f"use {recipe.runtime.default_version} (the default)"
        )
    return key, recipe.runtime.versions[key].runtime_id


def make_lock(catalog: Catalog, method: str, version_key: str) -> dict[str, object]:
    recipe = catalog.recipe(method)
    digest, manifest, template = catalog.digests(method)
    runtime_id = recipe.runtime.versions[version_key].runtime_id if version_key in recipe.runtime.versions else ""
    return {
        "$schema": LOCK_SCHEMA,
        "apiVersion": RECIPE_LOCK_API,
        "recipe": {
            "name": recipe.name,
            "version": recipe.version,
            "digest": digest,
            "manifest_digest": manifest,
            "template_digest": template,
        },
        "framework": {"kind": recipe.framework, "version": version_key, "runtime_id": runtime_id},
        "created_by": {"core_version": __version__},
        "requires": {"core": recipe.requires.core},
        "bindings": {
            "params": {name: {"path": p.path, "type": p.type} for name, p in sorted(recipe.params.items())},
            "entrypoint": {"kind": recipe.entrypoint.kind, "value": recipe.entrypoint.value},
        },
    }


def digest_consistent(lock: RecipeLock) -> bool:
    """The recipe digest must follow from the manifest digest (legacy locks also folded the template in)."""
    r = lock.recipe
    return r.digest in (bundle_digest(r.manifest_digest), bundle_digest(r.manifest_digest, r.template_digest))


def admit(lock: RecipeLock, doc: Doc, catalog: Catalog, exp: str, starforge_lab: bool = False) -> list[Problem]:
    """Problems of a parsed lock against the catalog in force; empty means current. In a lab still
    StarForge's (`starforge.yaml`), `tp migrate` converts a StarForge lock with the rest of the lab."""
    fix = UPGRADE.format(exp=exp)
    out: list[Problem] = []
    if not digest_consistent(lock):
        out.append(
            doc.problem(
                "/recipe/digest",
                "lock-tampered",
                "recipe.digest does not follow from recipe.manifest_digest: the lock was edited",
                hint=fix,
            )
        )
    if lock.legacy:
        out.append(
            doc.problem(
                "/apiVersion",
                "lock-legacy",
                f"{lock.api_version} is a StarForge lock",
                hint="run `tp migrate` to convert it" if starforge_lab else f"re-lock it: {UPGRADE.format(exp=exp)}",
                severity=Severity.WARNING,
            )
        )
    if not catalog.has(lock.recipe.name):
        catalog_hint = _did_you_mean(catalog, lock.recipe.name)
        out.append(
            doc.problem(
                "/recipe/name", "lock-blocking", f"recipe {lock.recipe.name!r} is not in the catalog", hint=catalog_hint
            )
        )
        return out
    return out + _drift(lock, doc, catalog.recipe(lock.recipe.name), catalog, fix)


def _did_you_mean(catalog: Catalog, name: str) -> str:
    return did_you_mean(name, catalog.ids, cutoff=0.5, then="see `tp methods` for the catalog")


def _drift(lock: RecipeLock, doc: Doc, recipe: Recipe, catalog: Catalog, fix: str) -> list[Problem]:
    out = _blocking(lock, doc, recipe, fix)
    if out:
        return out
    digest, manifest, template = catalog.digests(recipe.name)
    changed = [
        name
        for name, old, new in (
            ("version", lock.recipe.version, recipe.version),
            ("manifest digest", lock.recipe.manifest_digest, manifest),
            ("template digest", lock.recipe.template_digest, template),
        )
        if old != new
    ]
    if changed:
        out.append(
            doc.problem(
                "/recipe",
                "lock-drift",
                f"{recipe.name} changed in the catalog since this lock ({', '.join(changed)})",
                hint=fix,
                severity=Severity.WARNING,
            )
        )
    runtime = recipe.runtime.versions.get(lock.framework.version)
    if runtime is not None and runtime.deprecated:
        out.append(
            doc.problem(
                "/framework/version",
                "runtime-deprecated",
                f"framework version {lock.framework.version} of {recipe.name} is deprecated "
                f"(current: {recipe.runtime.default_version})",
                hint=fix,
                severity=Severity.WARNING,
            )
        )
    return out


def _blocking(lock: RecipeLock, doc: Doc, recipe: Recipe, fix: str) -> list[Problem]:
    out: list[Problem] = []

    def block(pointer: str, message: str) -> None:
        out.append(doc.problem(pointer, "lock-blocking", message, hint=fix))

    if lock.framework.kind != recipe.framework:
        block("/framework/kind", f"framework changed from {lock.framework.kind!r} to {recipe.framework!r}")
    if not recipe.user_managed and lock.framework.version != "user-managed":
        runtime = recipe.runtime.versions.get(lock.framework.version)
        if runtime is None:
            block(
                "/framework/version",
                f"framework version {lock.framework.version!r} is no longer offered "
                f"(known: {', '.join(sorted(recipe.runtime.versions))})",
            )
        elif lock.framework.runtime_id and runtime.runtime_id != lock.framework.runtime_id:
            block(
                "/framework/runtime_id",
                f"runtime {lock.framework.runtime_id!r} is now {runtime.runtime_id!r} for this version",
            )
    if not _core_admits(recipe.requires.core):
        block(
            "/requires/core", f"this tp ({__version__}) is outside the recipe's requires.core {recipe.requires.core!r}"
        )
    out += _binding_drift(lock, doc, recipe, fix)
    return out


def _binding_drift(lock: RecipeLock, doc: Doc, recipe: Recipe, fix: str) -> list[Problem]:
    out: list[Problem] = []
    if lock.bindings is None:
        return out
    for name, bound in lock.bindings.params.items():
        param = recipe.params.get(name)
        ptr = f"/bindings/params/{name}"
        if param is None:
            out.append(doc.problem(ptr, "lock-blocking", f"bound param {name!r} no longer exists", hint=fix))
        elif param.path != bound.path:
            out.append(
                doc.problem(
                    ptr, "lock-blocking", f"param {name!r} moved from {bound.path!r} to {param.path!r}", hint=fix
                )
            )
        elif param.type != bound.type:
            out.append(
                doc.problem(
                    ptr, "lock-blocking", f"param {name!r} changed type from {bound.type} to {param.type}", hint=fix
                )
            )
    ep = lock.bindings.entrypoint
    if ep is not None and (ep.kind, ep.value) != (recipe.entrypoint.kind, recipe.entrypoint.value):
        out.append(
            doc.problem(
                "/bindings/entrypoint",
                "lock-blocking",
                f"entrypoint moved from {ep.kind}:{ep.value} to {recipe.entrypoint.kind}:{recipe.entrypoint.value}",
                hint=fix,
            )
        )
    return out


def _core_admits(spec: str) -> bool:
    try:
        return version_admits(spec, __version__)
    except ValueError:
        return False


def lock_path(exp_dir: Path) -> Path:
    return exp_dir / LOCK_FILE
