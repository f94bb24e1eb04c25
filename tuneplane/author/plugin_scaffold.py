"""`tp plugin new`: scaffold a plugin folder, its plugin.yaml and the module its entrypoint names."""

from __future__ import annotations

from pathlib import Path

from tuneplane.author.editor import write_schemas
from tuneplane.errors import UsageError
from tuneplane.lab import fs
from tuneplane.lab.fs import atomic_write
from tuneplane.lab.schemarefs import comment_line, schema_rel
from tuneplane.models.base import name_error
from tuneplane.models.plugin import MANIFEST_FILE, PLUGIN_SCHEMA, module_name_for


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
