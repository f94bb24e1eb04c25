"""Checks of a plugin directory: its manifest, entrypoint, sys.path shadowing and escaping symlinks.

`validate_plugin_dir` is the publish gate. Everything returns Problems or raises UsageError; nothing
here prints.
"""

from __future__ import annotations

import ast
import os
import re
import shlex
import sys
from collections.abc import Iterator
from pathlib import Path, PurePosixPath

from pydantic_core import ErrorDetails

from tuneplane.errors import UsageError
from tuneplane.lab import fs
from tuneplane.lab.layout import PLUGINS_DIR
from tuneplane.lab.modelparse import parse_model
from tuneplane.lab.yamlio import Doc, LoadFailed, parse_yaml
from tuneplane.models.plugin import LEGACY_SCHEMAS, MANIFEST_FILE, PLUGIN_SCHEMA, PluginManifest, module_name_for
from tuneplane.problems import Problem, Severity
from tuneplane.runtime.digest import SKIP_NAMES, SKIP_PARTS, SKIP_SUFFIXES, UNPINNED_FOLDERS
from tuneplane.runtime.records import Record

# Algorithm providers patch the bridge that runs a framework's Python entrypoint; these two never use it.
NO_ALGORITHM_FRAMEWORKS = frozenset({"custom", "evalkit"})


# The plugin root is put first on sys.path in the job: these names would replace the real module.
RESERVED_MODULES = frozenset(
    {
        "tuneplane",
        "nemo_rl",
        "common",
        "ray",
        "torch",
        "transformers",
        "vllm",
        "trl",
        "verl",
        "numpy",
        "yaml",
        "json",
        "os",
        "sys",
    }
)


MODULE_SUFFIXES = (".py", ".pyc", ".pyo", ".pyd", ".so", ".pth")
BYTECODE_SUFFIXES = (".pyc", ".pyo")
SOURCE_LIMIT = 4 * fs.MAX_BYTES
FILE_LIMIT = 16 * 1024 * 1024  # any one file of a plugin


def positioned_doc(text: str, file: str) -> Doc:
    """Positions of every key and value; text that does not parse gets none (reported elsewhere)."""
    try:
        return parse_yaml(text, file)
    except LoadFailed:
        return Doc(rel=file, data=None, text=text)


class FileCtx(Record):
    """Where problems found in one file are reported."""

    file: str
    doc: Doc

    def problem(
        self,
        pointer: str,
        rule: str,
        message: str,
        hint: str = "",
        *,
        key: bool = False,
        severity: Severity = Severity.ERROR,
    ) -> Problem:
        line, col = self.doc.where(pointer, value=not key)
        return Problem(self.file, line, col, rule, message, severity, pointer, hint)


def new_plugin_hint(plugin_dir: PurePosixPath) -> str:
    """`tp plugin new` for a plugin folder that lacks its manifest: it fills the folder, keeping its files."""
    where = "" if plugin_dir.parent.as_posix() == PLUGINS_DIR else f" --dir {shlex.quote(plugin_dir.parent.as_posix())}"
    return f"`tp plugin new {shlex.quote(plugin_dir.name)}{where}`"


def display_path(path: Path, root: Path | None) -> str:
    if root is not None:
        # abspath, not resolve: a symlink must be shown where it sits, not where it points
        for shown, base in (
            (os.path.abspath(path), os.path.abspath(root)),
            (os.path.join(os.path.realpath(path.parent), path.name), os.path.realpath(root)),
        ):
            try:
                return Path(shown).relative_to(base).as_posix()
            except ValueError:
                continue
    return path.as_posix()


def parse_plugin_manifest(text: str, file: str) -> tuple[PluginManifest | None, list[Problem]]:
    """Parse plugin.yaml text into the model, turning every failure into a placed Problem.

    StarForge manifests (`lab-plugin/v1`, `forge/plugin/v1`) are read with a warning naming `tp migrate`.
    """
    return _parse_manifest(text, FileCtx(file, positioned_doc(text, file)))


def _parse_manifest(
    text: str, ctx: FileCtx, in_starforge_lab: bool = False
) -> tuple[PluginManifest | None, list[Problem]]:
    data, problems = _load_yaml_mapping(text, ctx)
    if data is None:
        return None, problems
    schema = data.get("schema")
    if isinstance(schema, str) and (newer := _newer_schema(schema)):
        return None, problems + [ctx.problem("/schema", "plugin-schema", newer, "upgrade tuneplane")]
    if schema in LEGACY_SCHEMAS:
        data, warning = _from_legacy(data, ctx, in_starforge_lab)
        problems.append(warning)
    refiner = _SchemaRefiner(ctx, starforge_kind="kind" in data)
    manifest, found = parse_model(
        PluginManifest,
        Doc(ctx.file, data, ctx.doc.positions, ctx.doc.text, ctx.doc.values),
        "plugin-schema",
        refine=refiner,
    )
    return manifest, problems + [p for p in found if not any(p is said for said in refiner.explained)]


def _load_yaml_mapping(text: str, ctx: FileCtx) -> tuple[dict[str, object] | None, list[Problem]]:
    try:
        data = parse_yaml(text, ctx.file).data if text.strip() else None
    except LoadFailed as exc:
        rule = "plugin-schema" if exc.problem.rule == "duplicate-key" else "plugin-parse"
        return None, [exc.problem.replace(rule=rule)]
    if not isinstance(data, dict):
        got = "an empty file" if data is None else type(data).__name__
        return None, [
            ctx.problem(
                "",
                "plugin-schema",
                f"plugin.yaml must be a mapping, got {got}",
                f"{new_plugin_hint(PurePosixPath(ctx.file).parent)} writes a complete one; "
                f"or begin with `schema: {PLUGIN_SCHEMA}`",
            )
        ]
    return data, []


def _newer_schema(schema: str) -> str:
    m = re.fullmatch(r"tuneplane/plugin/v(\d+)", schema)
    if m and int(m[1]) > 1:
        return f"schema {schema!r} is newer than this tuneplane understands ({PLUGIN_SCHEMA})"
    return ""


def _from_legacy(data: dict[str, object], ctx: FileCtx, in_starforge_lab: bool) -> tuple[dict[str, object], Problem]:
    """Read a StarForge manifest as tuneplane/plugin/v1: `kind` is `capability`, data-prep ran locally.

    `tp migrate` rewrites it only while the lab is still StarForge's; in a TunePlane lab it refuses."""
    legacy = str(data["schema"])
    data = dict(data, schema=PLUGIN_SCHEMA)
    if "kind" in data and "capability" not in data:
        data["capability"] = data.pop("kind")
        for table in (ctx.doc.positions, ctx.doc.values):
            if "/kind" in table:
                table["/capability"] = table["/kind"]
    if data.get("capability") == "data-prep" and "execution" not in data:
        data["execution"] = "local"  # StarForge data-prep scripts only ever ran on the user's machine
    warning = ctx.problem(
        "/schema",
        "plugin-legacy-schema",
        f"StarForge plugin manifest ({legacy}) read for compatibility",
        f"run `tp migrate` to rewrite it as `schema: {PLUGIN_SCHEMA}` (`kind:` becomes `capability:`)"
        if in_starforge_lab
        else f"write `schema: {PLUGIN_SCHEMA}`, and `capability:` for `kind:` (as converting a StarForge lab does)",
        severity=Severity.WARNING,
    )
    return data, warning


class _SchemaRefiner:
    """The converter's problems, with plugin.yaml's own advice, and a wrong value placed at the value.
    `explained` collects the problems another one already says: a missing `capability` next to a
    StarForge `kind:`, whose unknown-key problem tells to write `capability:`."""

    def __init__(self, ctx: FileCtx, *, starforge_kind: bool) -> None:
        self.ctx = ctx
        self.starforge_kind = starforge_kind
        self.explained: list[Problem] = []

    def __call__(self, err: ErrorDetails, problem: Problem) -> Problem:
        ctx = self.ctx
        loc = [str(p) for p in err["loc"]]
        kind = err["type"]
        if kind == "plugin_rule":
            return ctx.problem(f"/{err['ctx']['field']}", "plugin-schema", err["msg"])
        if kind == "extra_forbidden":
            hint = "write `capability:`; `kind:` is the StarForge spelling" if loc == ["kind"] else problem.hint
            return ctx.problem(problem.pointer, "plugin-schema", problem.message, hint, key=True)
        if kind == "missing":
            refined = problem.replace(hint="see `tp plugin new` for a complete plugin.yaml")
            if loc == ["capability"] and self.starforge_kind:
                self.explained.append(refined)
            return refined
        return ctx.problem(problem.pointer, "plugin-schema", problem.message, _hint_for(loc) or problem.hint)


def _hint_for(loc: list[str]) -> str:
    if loc == ["entrypoint"]:
        return "write module:function, e.g. `patch:install`"
    if loc == ["schema"]:
        return f"use `schema: {PLUGIN_SCHEMA}`"
    return ""


def load_plugin_manifest(path: Path) -> PluginManifest:
    """Read and check a plugin.yaml (or the one in directory `path`); UsageError naming each error."""
    file = path / MANIFEST_FILE if path.is_dir() else path
    try:
        text = fs.read_text(file, fs.MAX_BYTES, file.parent, file.as_posix())
    except LoadFailed as exc:
        raise UsageError(f"cannot read {file}: {exc.problem.message}", "a plugin directory holds plugin.yaml") from None
    manifest, problems = parse_plugin_manifest(text, file.as_posix())
    errors = [p for p in problems if p.is_error]
    if manifest is None or errors:
        lines = "\n".join(f"  {p.location()}: {p.message}" for p in errors)
        raise UsageError(f"invalid plugin manifest {file}:\n{lines}", f"tp plugin validate {file.parent}")
    return manifest


def _in_starforge_lab(plugin_dir: Path) -> bool:
    """Whether the lab around a plugin is still StarForge's (starforge.yaml, no tuneplane.yaml yet)."""
    try:
        root = fs.find_lab_root(plugin_dir)
    except UsageError:
        return False
    return not fs.present(root / fs.LAB_FILE)


def validate_plugin_dir(path: Path, display_root: Path | None = None) -> list[Problem]:
    """Every problem with a plugin directory: manifest, entrypoint, shadowing names, escaping symlinks.

    Paths in the Problems are shown relative to `display_root` when given.
    """
    manifest_file = path / MANIFEST_FILE
    shown = display_path(manifest_file, display_root)
    if not path.is_dir():
        return [
            Problem(
                display_path(path, display_root),
                0,
                0,
                "plugin-missing",
                "not a plugin directory",
                hint="pass the directory that holds plugin.yaml",
            )
        ]
    linked = _linked_root(path, display_root)
    if linked is not None:
        return [linked]  # nothing below it is the lab's: the digest would pin whatever the link reaches
    entries = list(_hostile_entries(path, display_root))
    if not fs.present(manifest_file):
        return [
            Problem(
                shown,
                0,
                0,
                "plugin-missing",
                "no plugin.yaml in the plugin directory",
                hint=f"{new_plugin_hint(PurePosixPath(display_path(path, display_root)))} writes one",
            )
        ] + entries
    try:
        text = fs.read_text(manifest_file, fs.MAX_BYTES, path, shown)
    except LoadFailed as exc:
        return [exc.problem] + entries
    ctx = FileCtx(shown, positioned_doc(text, shown))
    manifest, problems = _parse_manifest(text, ctx, _in_starforge_lab(path))
    problems += entries
    problems += _shadowing(path, display_root)
    if manifest is not None:
        problems += _entrypoint_problems(path, manifest, display_root, ctx)
        problems += _manifest_rules(path, manifest, ctx)
    return problems


def _linked_root(path: Path, display_root: Path | None) -> Problem | None:
    """A plugin folder that is a symlink, or reaches outside the lab through one."""
    real = os.path.realpath(path)
    leaves = display_root is not None and not Path(real).is_relative_to(os.path.realpath(display_root))
    if not (path.is_symlink() or leaves):
        return None
    return Problem(
        display_path(path, display_root),
        0,
        0,
        "plugin-symlink",
        f"the plugin folder is a symlink or lies behind one (it resolves to {real}); a plugin "
        "is pinned and shipped as the lab's own files",
        hint="replace the link with the plugin's folder itself, committed in the lab",
    )


def _holds_nul(path: Path) -> bool:
    try:
        with open(path, "rb") as fh:
            while chunk := fh.read(1 << 20):
                if b"\0" in chunk:
                    return True
    except OSError:
        return False  # unreadable: the digest names it
    return False


def _digested(full: Path, root: Path) -> bool:
    rel = full.relative_to(root).parts
    return not (any(p in SKIP_PARTS for p in rel) or rel[-1] in SKIP_NAMES or rel[-1].endswith(SKIP_SUFFIXES))


MAX_PATH_BYTES = 3000  # below PATH_MAX (4096) with room for the names under the deepest folder


def _hostile_entries(root: Path, display_root: Path | None) -> Iterator[Problem]:
    """What the pin cannot vouch for: links, non-regular entries, and bytecode (outside the digest,
    and Python would run a cached or sourceless .pyc instead of the pinned source)."""
    real_root = Path(os.path.realpath(root))
    for dirpath, dirnames, filenames in os.walk(root):
        if len(os.fsencode(dirpath)) > MAX_PATH_BYTES:
            dirnames[:] = []  # a tree past the system's path limit: named once, not walked further
            yield Problem(
                display_path(Path(dirpath), display_root)[:200] + "…",
                0,
                0,
                "plugin-entry",
                f"a path in the plugin is over {MAX_PATH_BYTES} bytes long: no tool can open what lies "
                "below it (the system's limit is about 4096)",
                hint="flatten the plugin's folders; a plugin is a few source files",
            )
            continue
        for name in sorted(dirnames + filenames):
            full = Path(dirpath, name)
            shown = display_path(full, display_root)
            if name in dirnames and name in UNPINNED_FOLDERS:
                dirnames.remove(name)
                yield Problem(
                    shown,
                    0,
                    0,
                    "plugin-unpinned",
                    f"a {name}/ folder in a plugin: the plugin digest skips it, yet it would ship "
                    "with the job, unpinned",
                    hint=f"move {name}/ out of the plugin folder (a plugin is its pinned source files)",
                )
            elif full.is_symlink():
                leaves = not Path(os.path.realpath(full)).is_relative_to(real_root)
                yield Problem(
                    shown,
                    0,
                    0,
                    "plugin-symlink",
                    f"symlink {'leaves the plugin directory' if leaves else 'in a plugin'} "
                    f"(points to {os.readlink(full)}); a plugin ships exactly its files",
                    hint="copy the file into the plugin instead of linking it",
                )
            elif name in filenames and not full.is_file():
                yield Problem(
                    shown,
                    0,
                    0,
                    "plugin-entry",
                    f"is {fs.describe(full)}, not a regular file; a plugin holds only files",
                    hint="remove it from the plugin directory",
                )
            elif name in filenames and full.stat().st_size > FILE_LIMIT:
                yield Problem(
                    shown,
                    0,
                    0,
                    "plugin-entry",
                    f"is {full.stat().st_size / 1e6:.0f} MB; a plugin file may be at most "
                    f"{FILE_LIMIT // (1024 * 1024)} MiB (a plugin is code, shipped with every job)",
                    hint="keep data and weights out of the plugin; read them from storage",
                )
            elif (
                name in filenames
                and (name.endswith(BYTECODE_SUFFIXES) or "__pycache__" in full.parts)
                and not _own_cache(full)
            ):
                yield Problem(
                    shown,
                    0,
                    0,
                    "plugin-bytecode",
                    "compiled bytecode in a plugin: the digest does not pin it, and Python would "
                    "run it instead of the pinned source",
                    hint="delete it (and __pycache__/), add `__pycache__/` and `*.pyc` to "
                    ".gitignore, and commit only source",
                )
            elif name in filenames and _digested(full, root) and _holds_nul(full):
                yield Problem(
                    shown,
                    0,
                    0,
                    "plugin-nul",
                    "holds a NUL byte: the plugin digest has no length framing, so a file with NUL "
                    "bytes could be re-cut into other files (a new .py) under the same digest",
                    hint="keep binary data out of the plugin; read it from storage",
                )


def _own_cache(pyc: Path) -> bool:
    """A cache Python wrote here for the source beside it (timestamp-checked, matching that source's
    mtime and size, as a local run leaves and `.gitignore` keeps out of git). A committed cache cannot
    match a fresh checkout's mtimes, and hash-based caches (the UNCHECKED_HASH attack) never count."""
    if pyc.parent.name != "__pycache__" or not pyc.name.endswith(".pyc"):
        return False
    source = pyc.parent.parent / (pyc.name.split(".", 1)[0] + ".py")
    try:
        header = fs.read_bytes(pyc, 1 << 26)[:16]
        st = os.stat(source)
    except (LoadFailed, OSError):
        return False
    if len(header) < 16 or int.from_bytes(header[4:8], "little") != 0:
        return False
    mtime, size = int.from_bytes(header[8:12], "little"), int.from_bytes(header[12:16], "little")
    return mtime == int(st.st_mtime) & 0xFFFFFFFF and size == st.st_size & 0xFFFFFFFF


def top_level_modules(root: Path, packages_only: bool = False) -> dict[str, str]:
    """Importable top-level names in a plugin root (module name -> entry name).

    Any directory counts unless `packages_only`: even without __init__.py it is a namespace package
    that `import name` finds when the real module is missing.
    """
    found: dict[str, str] = {}
    for entry in sorted(root.iterdir()):
        if entry.name.startswith((".", "__")):
            continue
        if entry.is_dir():
            if entry.name.isidentifier() and (not packages_only or (entry / "__init__.py").is_file()):
                found.setdefault(entry.name, entry.name + "/")
        elif entry.name.endswith(MODULE_SUFFIXES):
            stem = entry.name.split(".", 1)[0]
            if stem.isidentifier():
                found.setdefault(stem, entry.name)
    return found


def _shadowing(root: Path, display_root: Path | None) -> Iterator[Problem]:
    prefix = module_name_for(root.resolve().name).removesuffix("_plugin")
    for module, entry in top_level_modules(root).items():
        if module in RESERVED_MODULES or module in sys.stdlib_module_names:
            what = "the standard library's" if module in sys.stdlib_module_names else "the dependency"
            yield Problem(
                display_path(root / entry.rstrip("/"), display_root),
                0,
                0,
                "plugin-shadowing",
                f"top-level name {module!r} would shadow {what} module {module!r}: the plugin "
                "root goes first on sys.path in the job",
                hint=f"rename it, e.g. `{prefix}_{module}` (and `entrypoint:` if it names it)",
            )


def _module_file(root: Path, module: str) -> Path | None:
    base = root.joinpath(*module.split("."))
    for candidate in (base.with_name(base.name + ".py"), base / "__init__.py"):
        if fs.present(candidate):  # a FIFO or a link in its place is for the reader to refuse, by name
            return candidate
    return None


def _entrypoint_problems(
    root: Path, manifest: PluginManifest, display_root: Path | None, ctx: FileCtx
) -> list[Problem]:
    if not manifest.entrypoint:
        return []
    module, _, func = manifest.entrypoint.partition(":")
    source = _module_file(root, module)
    if source is None:
        return [
            ctx.problem(
                "/entrypoint",
                "plugin-entrypoint",
                f"entrypoint module {module!r} is not in the plugin directory",
                f"add {module.replace('.', '/')}.py next to plugin.yaml",
            )
        ]
    return _function_problems(source, func, ctx, root, display_root)


def _function_problems(
    source: Path, func: str, ctx: FileCtx, root: Path, display_root: Path | None, hops: int = 0
) -> list[Problem]:
    """The entrypoint must be a plain function defined with `def` in the plugin's own code (a re-export
    from another module of the plugin is followed): anything else is foreign or not callable as
    `install(params)`."""
    shown_source = display_path(source, display_root)
    try:
        tree = ast.parse(fs.read_bytes(source, SOURCE_LIMIT, root, shown_source), filename=str(source))
    except LoadFailed as exc:
        return [exc.problem]
    except (SyntaxError, ValueError) as exc:
        line, col = (exc.lineno or 0, exc.offset or 0) if isinstance(exc, SyntaxError) else (0, 0)
        return [Problem(shown_source, line, col, "plugin-entrypoint", f"syntax error: {exc}")]
    binding = next((node for node in reversed(tree.body) if _binds(node, func)), None)
    here = f"entrypoint {func!r} in {source.name}"
    if binding is None:
        return [
            ctx.problem(
                "/entrypoint",
                "plugin-entrypoint",
                f"{source.name} defines no top-level {func!r}",
                f"def {func}(params): ...",
            )
        ]
    if isinstance(binding, ast.FunctionDef):
        args = binding.args
        if not (args.posonlyargs or args.args or args.vararg):
            return [
                Problem(
                    shown_source,
                    binding.lineno,
                    binding.col_offset + 1,
                    "plugin-entrypoint",
                    f"{func}() takes no arguments; the launcher calls {func}(params)",
                    hint=f"def {func}(params): ...",
                )
            ]
        return []
    if isinstance(binding, ast.ImportFrom) and hops < 5:
        target = _own_module(root, source, binding)
        if target is not None:
            original = next(a.name for a in binding.names if (a.asname or a.name) == func)
            return _function_problems(target, original, ctx, root, display_root, hops + 1)
    what = {
        ast.AsyncFunctionDef: "an async function, which the launcher would not await",
        ast.ClassDef: "a class, not a function",
        ast.Import: "imported from outside the plugin",
        ast.ImportFrom: "imported from outside the plugin",
    }.get(type(binding), "assigned a value, not defined with def")
    return [
        Problem(
            shown_source,
            binding.lineno,
            binding.col_offset + 1,
            "plugin-entrypoint",
            f"{here} is {what}: the entrypoint must be a function the plugin defines itself",
            hint=f"def {func}(params): ... in {source.name}",
        )
    ]


def _own_module(root: Path, source: Path, node: ast.ImportFrom) -> Path | None:
    """The plugin's own module file a `from X import name` refers to, None when X is outside it."""
    if node.level:
        base = source.parent
        for _ in range(node.level - 1):
            base = base.parent
        dotted = base.relative_to(root).parts + tuple((node.module or "").split(".") if node.module else ())
        return _module_file(root, ".".join(dotted)) if dotted else None
    return _module_file(root, node.module or "") if node.module else None


def _binds(node: ast.stmt, name: str) -> bool:
    """A top-level statement that (re)binds `name`: the last one is what the launcher gets."""
    if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
        return node.name == name
    if isinstance(node, ast.Assign | ast.AnnAssign | ast.AugAssign):
        targets = node.targets if isinstance(node, ast.Assign) else [node.target]
        return any(isinstance(n, ast.Name) and n.id == name for t in targets for n in ast.walk(t))
    if isinstance(node, ast.ImportFrom | ast.Import):
        return any((a.asname or a.name.split(".")[0]) == name for a in node.names)
    return False


def _manifest_rules(root: Path, manifest: PluginManifest, ctx: FileCtx) -> list[Problem]:
    problems = []
    dir_name = root.resolve().name
    if manifest.name != dir_name:
        problems.append(
            ctx.problem(
                "/name",
                "plugin-name",
                f"name {manifest.name!r} differs from its directory {dir_name!r}",
                "the lab keeps each plugin in plugins/<name>/; rename one of them",
                severity=Severity.WARNING,
            )
        )
    if manifest.capability == "data-prep" and manifest.execution == "job":
        problems.append(
            ctx.problem(
                "/execution",
                "plugin-data-prep-job",
                "a data-prep plugin never runs in a job: the launcher loads only algorithm plugins and "
                "skips this one, whatever `execution` says",
                "run it on your machine before you submit, and write `execution: local`",
                severity=Severity.WARNING,
            )
        )
    refused = sorted(NO_ALGORITHM_FRAMEWORKS.intersection(manifest.requires.frameworks))
    if manifest.capability == "algorithm" and refused:
        problems.append(
            ctx.problem(
                "/requires/frameworks",
                "plugin-framework",
                f"algorithm plugins cannot run under {', '.join(refused)}: those "
                "frameworks do not start through the algorithm bridge",
                "remove them from requires.frameworks",
            )
        )
    return problems
