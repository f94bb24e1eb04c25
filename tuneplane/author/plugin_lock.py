"""`tp plugin lock`: pin a lab plugin's version and digest into an experiment's plugins.lock.json."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from pathlib import Path

from tuneplane import __version__
from tuneplane.check.plugin_dirs import display_path, load_plugin_manifest, validate_plugin_dir
from tuneplane.check.plugin_locks import check_lock_text, parse_plugins_lock
from tuneplane.errors import UsageError
from tuneplane.lab import fs
from tuneplane.lab.fs import write_json
from tuneplane.lab.layout import plugin_dir as plugin_path
from tuneplane.lab.load import open_lab
from tuneplane.lab.schemarefs import reference, schema_rel
from tuneplane.lab.yamlio import LoadFailed, load_json, parse_json
from tuneplane.models.plugin import LOCK_API, LOCK_FILE, SEGMENT, PluginManifest, PluginsLockEntry
from tuneplane.runtime.digest import DigestError, tree_digest
from tuneplane.runtime.records import FrozenRecord


def parse_plugin_ref(text: str) -> tuple[str, str, str | None]:
    """`owner/name[@version]` -> (owner, name, version or None)."""
    m = re.fullmatch(f"({SEGMENT})/({SEGMENT})(?:@({SEGMENT}))?", text)
    if m is None:
        raise UsageError(f"{text!r} is not a plugin reference", "write OWNER/NAME or OWNER/NAME@VERSION")
    return m[1], m[2], m[3]


class LockResult(FrozenRecord):
    path: Path
    entry: PluginsLockEntry
    previous: PluginsLockEntry | None


def lock_plugin(lab_root: Path, experiment: str, ref: str) -> LockResult:
    """Pin `plugins/<name>/` of the lab into `experiments/<experiment>/plugins.lock.json`."""
    owner, name, version = parse_plugin_ref(ref)
    exp_dir = _experiment_dir(lab_root, experiment)
    plugin_dir = plugin_path(lab_root, name)
    manifest = _lockable_manifest(lab_root, plugin_dir, f"{owner}/{name}", version)
    try:
        digest = tree_digest(plugin_dir)
    except DigestError as exc:
        raise UsageError(f"cannot digest plugins/{name}: {exc}", f"tp plugin validate plugins/{name}") from None
    entry = PluginsLockEntry(id=f"{owner}/{name}", version=manifest.version, digest=digest)
    lock_path = exp_dir / LOCK_FILE
    entries = _existing_entries(lock_path, lab_root, entry.id)
    previous = next((e for e in entries if e.id == entry.id), None)
    kept = sorted([e for e in entries if e.id != entry.id] + [entry], key=lambda e: e.id)
    schema = reference(f"experiments/{exp_dir.name}/{LOCK_FILE}", schema_rel("plugins-lock"))
    data = {"$schema": schema, "apiVersion": LOCK_API, "plugins": [e.model_dump() for e in kept]}
    _refuse_what_validate_refuses(lab_root, exp_dir, data, kept.index(entry))
    write_json(lock_path, data)
    return LockResult(lock_path, entry, previous)


def _refuse_what_validate_refuses(lab_root: Path, exp_dir: Path, data: Mapping[str, object], index: int) -> None:
    """Check the lock about to be written as `tp validate` will; refuse the errors of the new entry."""
    text = json.dumps(data, indent=2, sort_keys=True) + "\n"
    problems = check_lock_text(lab_root, exp_dir, _framework(lab_root, exp_dir), [], __version__, text)
    shown = display_path(exp_dir / LOCK_FILE, lab_root)
    mine = [p for p in problems if p.is_error and (p.file != shown or p.pointer.startswith(f"/plugins/{index}/"))]
    if mine:
        lines = "\n".join(f"  {p.location()}: {p.message}" for p in mine)
        raise UsageError(
            f"{shown} was left as it is; `tp validate` would refuse this lock:\n{lines}",
            mine[0].hint or f"tp validate {exp_dir.name}",
        )


def _framework(lab_root: Path, exp_dir: Path) -> str:
    """The experiment's framework from its recipe lock ("" when it cannot be read: validate says why)."""
    return str(_recipe_lock(lab_root, exp_dir).get("framework", {}).get("kind", ""))


def _recipe_lock(lab_root: Path, exp_dir: Path) -> dict[str, dict[str, object]]:
    """The experiment's recipe lock, its sections that are mappings only ({} when it cannot be read)."""
    try:
        data = load_json(exp_dir / "recipe.lock.json", f"{exp_dir.name}/recipe.lock.json", root=lab_root).data
    except LoadFailed:
        return {}
    return {k: v for k, v in data.items() if isinstance(v, dict)} if isinstance(data, dict) else {}


def _without_entry(text: str, plugin_id: str) -> str:
    """The lock text without the entries of `plugin_id` ("" when it is not a lock's strict JSON: a
    duplicate key or a NaN is damage to the whole file, never dropped silently by a rewrite)."""
    try:
        data = parse_json(text, LOCK_FILE).data
    except LoadFailed:
        return ""
    entries = data.get("plugins") if isinstance(data, dict) else None
    if not isinstance(entries, list):
        return ""
    kept = [e for e in entries if not (isinstance(e, dict) and e.get("id") == plugin_id)]
    return json.dumps({**data, "plugins": kept})


def _experiment_dir(lab_root: Path, experiment: str) -> Path:
    if not re.fullmatch(SEGMENT, experiment):
        raise UsageError(f"{experiment!r} is not an experiment name", "pass the directory name under experiments/")
    exp_dir = open_lab(lab_root).experiment_dir(experiment)
    if not exp_dir.is_dir():
        raise UsageError(
            f"no experiment {experiment!r} in {lab_root}",
            f"create it with `tp new {experiment} --method FRAMEWORK/RECIPE`, or check the name with `tp ls`",
        )
    return exp_dir


def _lockable_manifest(lab_root: Path, plugin_dir: Path, plugin_id: str, version: str | None) -> PluginManifest:
    name = plugin_id.split("/", 1)[1]
    if not plugin_dir.is_dir():
        raise UsageError(f"no plugin {name!r} in {lab_root / 'plugins'}", f"create it with `tp plugin new {name}`")
    problems = validate_plugin_dir(plugin_dir, lab_root)
    errors = [p for p in problems if p.is_error]
    if errors:
        lines = "\n".join(f"  {p.location()}: {p.message}" for p in errors)
        raise UsageError(f"plugins/{name} does not validate:\n{lines}", f"tp plugin validate plugins/{name}")
    manifest = load_plugin_manifest(plugin_dir)
    if manifest.name != name:
        raise UsageError(
            f"plugins/{name}/plugin.yaml names itself {manifest.name!r}",
            f"set `name: {name}` or move the directory to plugins/{manifest.name}",
        )
    if version is not None and version != manifest.version:
        raise UsageError(
            f"plugins/{name} is version {manifest.version}, not {version}",
            f"lock {plugin_id}@{manifest.version}, or set `version: {version}` in plugin.yaml",
        )
    return manifest


def _existing_entries(lock_path: Path, lab_root: Path, relocked: str) -> list[PluginsLockEntry]:
    """The lock's entries; a broken entry of the plugin being locked again is the one replaced."""
    if not fs.present(lock_path):
        return []
    shown = display_path(lock_path, lab_root)
    try:
        text = fs.read_text(lock_path, fs.MAX_BYTES, lab_root, shown)
    except LoadFailed as exc:
        raise UsageError(f"{shown}: {exc.problem.message}; it was left as it is", exc.problem.hint) from None
    lock, problems = parse_plugins_lock(text, shown)
    if lock is None:
        lock, _ = parse_plugins_lock(_without_entry(text, relocked), shown)
    if lock is None:
        lines = "\n".join(f"  {p.location()}: {p.message}" for p in problems if p.is_error)
        raise UsageError(
            f"{shown} is invalid; it was left as it is:\n{lines}", "fix it by hand (or delete it) and lock again"
        )
    return list(lock.plugins)
