"""An experiment's plugins.lock.json: parsed, and checked against the lab's plugins and the recipe."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path, PurePosixPath

from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.version import InvalidVersion, Version
from pydantic_core import ErrorDetails

from tuneplane.check.plugin_dirs import (
    NO_ALGORITHM_FRAMEWORKS,
    FileCtx,
    display_path,
    load_plugin_manifest,
    positioned_doc,
    top_level_modules,
    validate_plugin_dir,
)
from tuneplane.errors import UsageError
from tuneplane.lab import fs
from tuneplane.lab.layout import plugin_dir as plugin_path
from tuneplane.lab.modelparse import Refine, parse_model
from tuneplane.lab.yamlio import LoadFailed, parse_json
from tuneplane.models.plugin import (
    LOCK_API,
    LOCK_FILE,
    MANIFEST_FILE,
    SEGMENT,
    PluginManifest,
    PluginParam,
    PluginsLock,
    PluginsLockEntry,
)
from tuneplane.problems import Problem, Severity
from tuneplane.runtime.digest import DigestError, tree_digest
from tuneplane.runtime.records import Record


def parse_plugins_lock(text: str, file: str) -> tuple[PluginsLock | None, list[Problem]]:
    """Parse plugins.lock.json text; every problem placed at its line and column."""
    try:
        doc = parse_json(text, file)  # strict: duplicate keys, NaN and deep nesting refused
    except LoadFailed as exc:
        if exc.problem.rule != "json-syntax":
            return None, [exc.problem]
        hint = f"fix the JSON, or delete the file and lock each plugin again: {_relock(file)}"
        return None, [exc.problem.replace(rule="plugins-lock-parse", hint=hint)]
    ctx = FileCtx(file, positioned_doc(text, file))
    lock, problems = parse_model(PluginsLock, doc, "plugins-lock-schema", refine=_lock_refiner(ctx))
    return (None, problems) if lock is None else (lock, list(_lock_order(lock, ctx)))


def _lock_refiner(ctx: FileCtx) -> Refine:
    """The converter's problems, rule `plugins-lock-schema`, with how a lock is mended; a wrong value at the value."""

    def refine(err: ErrorDetails, problem: Problem) -> Problem:
        loc = [str(p) for p in err["loc"]]
        rewrite = f"rewrite the entry with {_relock(ctx.file, _entry_id(ctx.doc.data, loc))}"
        if err["type"] in ("extra_forbidden", "missing"):
            mend = problem.hint if err["type"] == "extra_forbidden" else rewrite
            return ctx.problem(
                problem.pointer, "plugins-lock-schema", problem.message, mend, key=err["type"] == "extra_forbidden"
            )
        hint = f"apiVersion is {LOCK_API}" if loc == ["apiVersion"] else rewrite
        if loc[-1:] == ["id"]:
            hint = "ids are <owner>/<name>"
        return ctx.problem(problem.pointer, "plugins-lock-schema", problem.message, hint)

    return refine


def _relock(file: str, plugin_id: str = "<owner>/<name>") -> str:
    """The command that rewrites one entry of the lock `file` (experiments/<exp>/plugins.lock.json)."""
    return f"`tp plugin lock {PurePosixPath(file).parent.name or '<experiment>'} {plugin_id}`"


def _entry_id(data: object, loc: list[str]) -> str:
    """The id of the lock entry an error is in, when it has a well-formed one (else a placeholder)."""
    entries = data.get("plugins") if isinstance(data, dict) else None
    if loc[:1] == ["plugins"] and len(loc) > 1 and loc[1].isdigit() and isinstance(entries, list):
        entry = entries[int(loc[1])] if int(loc[1]) < len(entries) else None
        plugin_id = entry.get("id") if isinstance(entry, dict) else None
        if isinstance(plugin_id, str) and re.fullmatch(f"{SEGMENT}/{SEGMENT}", plugin_id):
            return plugin_id
    return "<owner>/<name>"


def _lock_order(lock: PluginsLock, ctx: FileCtx) -> Iterator[Problem]:
    ids = [p.id for p in lock.plugins]
    for index, plugin_id in enumerate(ids):
        if plugin_id in ids[:index]:
            yield ctx.problem(
                f"/plugins/{index}/id",
                "plugins-lock-schema",
                f"{plugin_id} is locked twice",
                "keep one entry per plugin id",
            )
    if ids != sorted(ids):
        yield ctx.problem(
            "/plugins",
            "plugins-lock-order",
            "plugins are not sorted by id",
            f"{_relock(ctx.file, ids[0])} rewrites the file sorted",
            severity=Severity.WARNING,
        )


def core_admits(specifier: str, core_version: str) -> bool:
    """`requires.core` check; development builds count (prereleases admitted)."""
    if not specifier.strip():
        return True
    try:
        return SpecifierSet(specifier).contains(Version(core_version), prereleases=True)
    except (InvalidSpecifier, InvalidVersion):
        return False


class _ExpCheck(Record):
    lab_root: Path
    exp_dir: Path
    framework: str
    core_version: str
    ctx: FileCtx
    exp_name: str


def check_experiment_plugins(
    lab_root: Path, exp_dir: Path, framework: str, recipe_plugins: list[str], core_version: str
) -> list[Problem]:
    """Problems with an experiment's plugins.lock.json against the lab's plugins and its recipe."""
    lock_path = exp_dir / LOCK_FILE
    shown = display_path(lock_path, lab_root)
    if not fs.present(lock_path):
        return [
            Problem(
                shown,
                0,
                0,
                "plugins-lock-unsatisfied",
                f"the recipe requires algorithm plugin {name!r} but {shown} does not exist",
                hint=f"tp plugin lock {exp_dir.name} <owner>/{name}",
            )
            for name in recipe_plugins
        ]
    try:
        text = fs.read_text(lock_path, fs.MAX_BYTES, lab_root, shown)
    except LoadFailed as exc:
        return [exc.problem]
    return check_lock_text(lab_root, exp_dir, framework, recipe_plugins, core_version, text)


def check_lock_text(
    lab_root: Path, exp_dir: Path, framework: str, recipe_plugins: list[str], core_version: str, text: str
) -> list[Problem]:
    """`check_experiment_plugins` of lock text not (yet) on disk: `tp plugin lock` checks before writing."""
    shown = display_path(exp_dir / LOCK_FILE, lab_root)
    lock, problems = parse_plugins_lock(text, shown)
    if lock is None:
        return problems
    ctx = FileCtx(shown, positioned_doc(text, shown))
    check = _ExpCheck(lab_root, exp_dir, framework, core_version, ctx, exp_dir.name)
    manifests: dict[int, PluginManifest] = {}
    for index, entry in enumerate(lock.plugins):
        manifest, found = _check_entry(check, index, entry)
        problems += found
        if manifest is not None:
            manifests[index] = manifest
    problems += _check_required(check, lock, manifests, recipe_plugins)
    problems += _module_collisions(check, lock, manifests)
    return problems


def _check_entry(check: _ExpCheck, index: int, entry: PluginsLockEntry) -> tuple[PluginManifest | None, list[Problem]]:
    at = f"/plugins/{index}"
    plugin_dir = plugin_path(check.lab_root, entry.name)
    fix = f"tp plugin lock {check.exp_name} {entry.id}"
    shown = plugin_dir.relative_to(check.lab_root).as_posix()  # plugins/<name>, or inside a group folder
    if not fs.present(plugin_dir / MANIFEST_FILE):
        return None, [
            check.ctx.problem(
                f"{at}/id",
                "plugins-lock-missing",
                f"{entry.ref} is locked but {shown}/ is not in the lab",
                f"restore {shown}/ or remove the entry",
            )
        ]
    # the whole publish gate, not only the manifest: what runs in the job must pass it
    errors = [p for p in validate_plugin_dir(plugin_dir, check.lab_root) if p.is_error]
    try:
        manifest = None if errors else load_plugin_manifest(plugin_dir)
    except UsageError:
        manifest = None
    if manifest is None:
        return None, errors + [
            check.ctx.problem(
                f"{at}/id", "plugins-lock-plugin-invalid", f"{shown} does not validate", f"tp plugin validate {shown}"
            )
        ]
    if manifest.name != entry.name:
        return None, [
            check.ctx.problem(
                f"{at}/id",
                "plugins-lock-name",
                f"{entry.ref} is locked as {entry.name!r} but {shown}/plugin.yaml names itself {manifest.name!r}",
                f"set `name: {entry.name}` in the manifest, or lock the plugin under its own name",
            )
        ]
    problems = _version_and_digest(check, at, entry, manifest, plugin_dir, fix)
    problems += _compatibility(check, at, entry, manifest)
    return manifest, problems


def _version_and_digest(
    check: _ExpCheck, at: str, entry: PluginsLockEntry, manifest: PluginManifest, plugin_dir: Path, fix: str
) -> list[Problem]:
    shown = plugin_dir.relative_to(check.lab_root).as_posix()
    if manifest.version != entry.version:
        return [
            check.ctx.problem(
                f"{at}/version",
                "plugins-lock-version",
                f"{entry.id} is locked at {entry.version} but {shown} is {manifest.version}",
                f"{fix}@{manifest.version}",
            )
        ]
    try:
        actual = tree_digest(plugin_dir)
    except DigestError as exc:
        return [
            check.ctx.problem(
                f"{at}/digest", "plugins-lock-digest", f"cannot digest {shown}: {exc}", f"tp plugin validate {shown}"
            )
        ]
    if actual != entry.digest:
        return [
            check.ctx.problem(
                f"{at}/digest",
                "plugins-lock-digest",
                f"{shown} changed since it was locked: the lock says {entry.digest}, the directory is {actual}",
                f"if the change is intended, re-lock it: {fix}@{manifest.version}",
            )
        ]
    return []


def _compatibility(check: _ExpCheck, at: str, entry: PluginsLockEntry, manifest: PluginManifest) -> list[Problem]:
    problems = []
    if not core_admits(manifest.requires.core, check.core_version):
        problems.append(
            check.ctx.problem(
                f"{at}/id",
                "plugin-requires-core",
                f"{entry.ref} requires tuneplane {manifest.requires.core}; this is {check.core_version}",
                "lock a plugin version that supports this tuneplane, or upgrade tuneplane",
            )
        )
    if manifest.capability == "algorithm" and check.framework in NO_ALGORITHM_FRAMEWORKS:
        problems.append(
            check.ctx.problem(
                f"{at}/id",
                "plugin-framework",
                f"{entry.ref} is an algorithm plugin; the {check.framework} framework does not run algorithm "
                "plugins (its entrypoint does not start through the algorithm bridge)",
                "remove it from plugins.lock.json, or use a catalog framework that supports plugins",
            )
        )
    wanted = manifest.requires.frameworks
    if wanted and check.framework not in wanted:
        problems.append(
            check.ctx.problem(
                f"{at}/id",
                "plugin-framework",
                f"{entry.ref} supports {', '.join(wanted)}, not {check.framework}",
                "remove it, or lock a version that supports this framework",
            )
        )
    return problems


def _check_required(
    check: _ExpCheck, lock: PluginsLock, manifests: dict[int, PluginManifest], recipe_plugins: list[str]
) -> list[Problem]:
    problems = []
    for name in recipe_plugins:
        matches = [e for e in lock.plugins if e.name == name]
        if not matches:
            problems.append(
                check.ctx.problem(
                    "/plugins",
                    "plugins-lock-unsatisfied",
                    f"the recipe requires algorithm plugin {name!r}; no entry in the lock provides it",
                    f"tp plugin lock {check.exp_name} <owner>/{name}",
                )
            )
        elif len(matches) > 1:
            problems.append(
                check.ctx.problem(
                    "/plugins",
                    "plugins-lock-unsatisfied",
                    f"the recipe requires {name!r} and {len(matches)} entries provide it: "
                    f"{', '.join(e.ref for e in matches)}",
                    "keep exactly one",
                )
            )
        else:
            index = lock.plugins.index(matches[0])
            manifest = manifests.get(index)
            if manifest is not None and manifest.capability != "algorithm":
                problems.append(
                    check.ctx.problem(
                        f"/plugins/{index}/id",
                        "plugins-lock-unsatisfied",
                        f"the recipe requires algorithm {name!r} but {matches[0].ref} is a {manifest.capability} "
                        "plugin",
                        "lock the algorithm plugin of that name",
                    )
                )
    return problems


def _module_collisions(check: _ExpCheck, lock: PluginsLock, manifests: dict[int, PluginManifest]) -> list[Problem]:
    """Two loaded plugins with one top-level module: the second import would silently get the first."""
    owners: dict[str, str] = {}
    problems = []
    for index, manifest in sorted(manifests.items()):
        if manifest.capability != "algorithm":
            continue
        entry = lock.plugins[index]
        for module in top_level_modules(plugin_path(check.lab_root, entry.name), packages_only=True):
            if module in owners:
                problems.append(
                    check.ctx.problem(
                        f"/plugins/{index}/id",
                        "plugin-module-collision",
                        f"{entry.id} and {owners[module]} both ship a top-level module {module!r}; in one "
                        "job only the first would be imported",
                        "rename the module in one of them",
                    )
                )
            owners.setdefault(module, entry.id)
    return problems


def locked_plugin_params(lab_root: Path, exp_dir: Path) -> tuple[dict[str, PluginParam], bool]:
    """(parameters the experiment's locked algorithm plugins declare, whether any algorithm plugin is
    locked). A lock or manifest that does not read gives nothing: its own rule reports it."""
    lock_path = exp_dir / LOCK_FILE
    if not fs.present(lock_path):
        return {}, False
    try:
        lock, _ = parse_plugins_lock(fs.read_text(lock_path, root=lab_root), LOCK_FILE)
    except (OSError, LoadFailed):  # the lock's own rule reports a file that does not read
        return {}, False
    params: dict[str, PluginParam] = {}
    locked = False
    for entry in lock.plugins if lock else []:
        try:
            manifest = load_plugin_manifest(plugin_path(lab_root, entry.name))
        except UsageError:
            continue
        if manifest.capability == "algorithm":
            locked = True
            params.update({name: p.model_copy(update={"path": name}) for name, p in manifest.params.items()})
    return params, locked
