"""Plugin authoring: `tp plugin new` scaffolds a plugin, `tp plugin lock` pins one into an experiment."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from tuneplane import __version__
from tuneplane.author.editor import write_schemas
from tuneplane.check.plugin_locks import check_lock_text, parse_plugins_lock
from tuneplane.check.plugins import display_path, load_plugin_manifest, validate_plugin_dir
from tuneplane.errors import UsageError
from tuneplane.lab import fs
from tuneplane.lab.fs import atomic_write, write_json
from tuneplane.lab.layout import plugin_dir as plugin_path
from tuneplane.lab.load import open_lab
from tuneplane.lab.schemarefs import comment_line, reference, schema_rel
from tuneplane.lab.yamlio import LoadFailed, load_json, parse_json
from tuneplane.models.base import name_error
from tuneplane.models.plugin import (
    LOCK_API,
    LOCK_FILE,
    MANIFEST_FILE,
    PLUGIN_SCHEMA,
    SEGMENT,
    PluginManifest,
    PluginsLockEntry,
    module_name_for,
)
from tuneplane.runtime.digest import DigestError, tree_digest


def _manifest_text(name: str, module: str, schema_line: str) -> str:
    return (
        schema_line + f"schema: {PLUGIN_SCHEMA}\n"
        f"name: {name}\n"
        "version: 0.1.0\n"
        "capability: algorithm\n"
        "summary: Say in one line what this patch changes.\n"
        f"entrypoint: {module}:install\n"
        "load: eager\n"
        "requires:\n"
        '  core: ">=0.1,<1"\n'
        "scope: entrypoint\n"
    )


def _module_text(name: str) -> str:
    return f'''"""{name}: an algorithm plugin, applied in the training entrypoint process.

The launcher imports this module before training starts and calls `install(params)` (load: eager).
With `load: deferred` it is called later, by the trainer, as `install(params, **ctx)` through
`tuneplane.plugins.install_deferred("{name}", ...)`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

_applied = False


def install(params: Mapping[str, Any]) -> None:
    """Apply the patch. `params` is the job's spec.hyperparams, recorded with the run.

    Import the training framework here, not at module level; raise on a real problem (the job
    stops rather than train without the patch); stay idempotent (a process may call this twice).
    """
    global _applied
    if _applied:
        return
    # import some_framework.losses as losses
    # original = losses.compute_loss
    # scale = float(params.get("{name}.scale", 1.0))
    # losses.compute_loss = lambda *args, **kwargs: original(*args, **kwargs) * scale
    _applied = True
'''


def scaffold_plugin(parent: Path, name: str) -> Path:
    """Create `<parent>/<name>/` with plugin.yaml and its module; never overwrites anything.

    A folder that is there without a manifest (or with an empty one) is filled in: what `tp validate`
    says of such a folder is to run this command, and the files already in it stay as they are.
    """
    if error := name_error(name, "plugin name"):
        raise UsageError(error, "use letters, digits, '.', '_' or '-', starting with a letter or digit")
    target = parent / name
    if target.exists() and not _unfinished(target):
        raise UsageError(f"{target} already exists", "pick another name or remove it")
    module = module_name_for(name)
    target.mkdir(parents=True, exist_ok=True)
    atomic_write(target / MANIFEST_FILE, _manifest_text(name, module, _schema_line(target)))
    if not fs.present(target / f"{module}.py"):
        atomic_write(target / f"{module}.py", _module_text(name))
    return target


def _unfinished(target: Path) -> bool:
    """A real folder (not a link) whose plugin.yaml is missing or holds only white space."""
    manifest = target / MANIFEST_FILE
    if target.is_symlink() or not target.is_dir() or manifest.is_symlink():
        return False
    if not fs.present(manifest):
        return True
    return manifest.is_file() and manifest.stat().st_size < 4096 and not manifest.read_bytes().strip()


def _schema_line(plugin_dir: Path) -> str:
    """The editor-schema comment for a plugin inside a lab (a plugin outside any lab gets none)."""
    here = plugin_dir.resolve()
    root = next((p for p in here.parents if (p / "tuneplane.yaml").is_file()), None)
    if root is None:
        return ""
    write_schemas(root, {})  # a lab made by an older tp may not have them yet
    return comment_line((here / MANIFEST_FILE).relative_to(root).as_posix(), schema_rel("plugin")) + "\n"


def parse_plugin_ref(text: str) -> tuple[str, str, str | None]:
    """`owner/name[@version]` -> (owner, name, version or None)."""
    m = re.fullmatch(f"({SEGMENT})/({SEGMENT})(?:@({SEGMENT}))?", text)
    if m is None:
        raise UsageError(f"{text!r} is not a plugin reference", "write OWNER/NAME or OWNER/NAME@VERSION")
    return m[1], m[2], m[3]


@dataclass(frozen=True)
class LockResult:
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
