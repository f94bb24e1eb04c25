"""Plugins on the developer's side: the plugin.yaml model, validate/publish checks, scaffolding, locking.

`validate_plugin_dir` is the publish gate (schema, entrypoint, sys.path shadowing, escaping symlinks);
`lock_plugin` pins a lab plugin into an experiment's plugins.lock.json; `check_experiment_plugins` is
what `tp validate` asks about an experiment's plugins. Everything returns Problems or raises
UsageError; nothing here prints.
"""

from __future__ import annotations

import ast
import json
import os
import re
import sys
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Literal

from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.version import InvalidVersion, Version
from pydantic import ConfigDict, Field, ValidationError, field_validator, model_validator
from pydantic_core import PydanticCustomError

from tuneplane.digest import DigestError, tree_digest
from tuneplane.errors import UsageError
from tuneplane.models.base import Strict
from tuneplane.problems import Problem, Severity
from tuneplane.yamlio import Doc, LoadFailed, escape, parse_yaml, write_json

PLUGIN_SCHEMA = "tuneplane/plugin/v1"
PLUGIN_SCHEMA_URL = "https://tuneplane.dev/schemas/plugin.schema.json"
LEGACY_SCHEMAS = ("lab-plugin/v1", "forge/plugin/v1")  # StarForge: read, warn, `tp migrate` rewrites
LOCK_API = "tuneplane/plugins-lock/v1"
LOCK_FILE = "plugins.lock.json"
MANIFEST_FILE = "plugin.yaml"

SEGMENT = r"[A-Za-z0-9][A-Za-z0-9._-]*"
ENTRYPOINT = r"[A-Za-z_][A-Za-z0-9_.]*:[A-Za-z_][A-Za-z0-9_]*"
DIGEST = r"sha256:[0-9a-f]{64}"
CAPABILITIES = ("algorithm", "environment", "data-prep", "framework-integration",
                "recipe", "benchmark", "playbook", "prompt")
# Algorithm providers patch the bridge that runs a framework's Python entrypoint; these two never use it.
NO_ALGORITHM_FRAMEWORKS = frozenset({"custom", "evalkit"})
# The plugin root is put first on sys.path in the job: these names would replace the real module.
RESERVED_MODULES = frozenset({"tuneplane", "nemo_rl", "common", "ray", "torch", "transformers", "vllm",
                              "trl", "verl", "numpy", "yaml", "json", "os", "sys"})
MODULE_SUFFIXES = (".py", ".pyc", ".pyo", ".pyd", ".so", ".pth")


# ── models ─────────────────────────────────────────────────────────────────────────────────────────


class StrictModel(Strict):
    """What users write, and no type coercion either (a YAML 1.0 is not the string "1.0")."""

    model_config = ConfigDict(**Strict.model_config, strict=True)


def _specifier(value: str) -> str:
    try:
        SpecifierSet(value)
    except InvalidSpecifier:
        raise ValueError(f"{value!r} is not a PEP 440 version specifier (e.g. \">=0.1,<1\")") from None
    return value


class PluginRequires(StrictModel):
    """What a plugin needs from the job that loads it."""

    core: str = Field("", description="PEP 440 specifier the running tuneplane must satisfy.")
    python: str = Field("", description="PEP 440 specifier for the job's Python.")
    frameworks: list[str] = Field(default_factory=list,
                                  description="Frameworks the plugin supports; empty means any.")

    _check_core = field_validator("core", "python")(_specifier)

    @field_validator("frameworks")
    @classmethod
    def _framework_names(cls, value: list[str]) -> list[str]:
        bad = [f for f in value if not re.fullmatch(SEGMENT, f)]
        if bad:
            raise ValueError(f"not framework names: {', '.join(map(repr, bad))}")
        return value


class PluginManifest(StrictModel):
    """plugin.yaml: a versioned, digest-pinned extension package."""

    schema_: Literal["tuneplane/plugin/v1"] = Field(alias="schema", description="Always tuneplane/plugin/v1.")
    name: str = Field(pattern=f"^{SEGMENT}$", description="The plugin name; `install_deferred` takes it.")
    version: str = Field(pattern=f"^{SEGMENT}$", description="The plugin version, a string.")
    capability: Literal["algorithm", "environment", "data-prep", "framework-integration", "recipe",
                        "benchmark", "playbook", "prompt"] = Field(description="What the plugin provides.")
    execution: Literal["local", "job"] | None = Field(
        None, description="data-prep only: runs on your machine (local) or in a job.")
    summary: str = Field("", description="One line saying what the plugin changes.")
    entrypoint: str | None = Field(None, pattern=f"^{ENTRYPOINT}$",
                                   description="module:function the launcher calls (algorithm).")
    load: Literal["eager", "deferred"] = Field(
        "eager", description="eager: install(params) before training; deferred: the trainer calls "
                             "tuneplane.plugins.install_deferred(name, **ctx).")
    requires: PluginRequires = Field(default_factory=PluginRequires)
    scope: Literal["entrypoint"] = Field("entrypoint", description="Where it applies: the entrypoint.")

    @model_validator(mode="after")
    def _capability_rules(self) -> PluginManifest:
        if self.capability == "data-prep" and self.execution is None:
            raise PydanticCustomError("plugin_rule", "a data-prep plugin needs `execution: local` or "
                                      "`execution: job`", {"field": "capability"})
        if self.capability != "data-prep" and self.execution is not None:
            raise PydanticCustomError(
                "plugin_rule", f"`execution` is only for data-prep; a {self.capability} plugin's location "
                "follows from its capability", {"field": "execution"})
        if self.capability == "algorithm" and not self.entrypoint:
            raise PydanticCustomError(
                "plugin_rule", "an algorithm plugin needs `entrypoint: module:function`",
                {"field": "capability"})
        return self

    @property
    def module(self) -> str:
        """The entrypoint's dotted module path ("" when there is none)."""
        return (self.entrypoint or "").partition(":")[0]


class PluginsLockEntry(StrictModel):
    id: str = Field(pattern=f"^{SEGMENT}/{SEGMENT}$", description="<owner>/<name>.")
    version: str = Field(pattern=f"^{SEGMENT}$")
    digest: str = Field(pattern=f"^{DIGEST}$", description="The plugin directory digest.")

    @property
    def name(self) -> str:
        return self.id.split("/", 1)[1]

    @property
    def ref(self) -> str:
        return f"{self.id}@{self.version}"


class PluginsLock(StrictModel):
    """experiments/<exp>/plugins.lock.json."""

    api_version: Literal["tuneplane/plugins-lock/v1"] = Field(alias="apiVersion")
    plugins: list[PluginsLockEntry] = Field(default_factory=list)


def _escape(key: str) -> str:
    return escape(key)


def _doc(text: str, file: str) -> Doc:
    """Positions of every key and value; text that does not parse gets none (reported elsewhere)."""
    try:
        return parse_yaml(text, file)
    except LoadFailed:
        return Doc(rel=file, data=None, text=text)


# ── plugin.yaml ────────────────────────────────────────────────────────────────────────────────────


@dataclass
class _Ctx:
    """Where problems found in one file are reported."""

    file: str
    doc: Doc

    def problem(self, pointer: str, rule: str, message: str, hint: str = "", *, key: bool = False,
                severity: Severity = Severity.ERROR) -> Problem:
        line, col = self.doc.where(pointer, value=not key)
        return Problem(self.file, line, col, rule, message, severity, pointer, hint)


def _display(path: Path, root: Path | None) -> str:
    if root is not None:
        # abspath, not resolve: a symlink must be shown where it sits, not where it points
        for shown, base in ((os.path.abspath(path), os.path.abspath(root)),
                            (os.path.join(os.path.realpath(path.parent), path.name), os.path.realpath(root))):
            try:
                return Path(shown).relative_to(base).as_posix()
            except ValueError:
                continue
    return path.as_posix()


def parse_plugin_manifest(text: str, file: str) -> tuple[PluginManifest | None, list[Problem]]:
    """Parse plugin.yaml text into the model, turning every failure into a placed Problem.

    StarForge manifests (`lab-plugin/v1`, `forge/plugin/v1`) are read with a warning naming `tp migrate`.
    """
    return _parse_manifest(text, _Ctx(file, _doc(text, file)))


def _parse_manifest(text: str, ctx: _Ctx) -> tuple[PluginManifest | None, list[Problem]]:
    data, problems = _load_yaml_mapping(text, ctx)
    if data is None:
        return None, problems
    schema = data.get("schema")
    if isinstance(schema, str) and (newer := _newer_schema(schema)):
        return None, problems + [ctx.problem("/schema", "plugin-schema", newer, "upgrade tuneplane")]
    if schema in LEGACY_SCHEMAS:
        data, warning = _from_legacy(data, ctx)
        problems.append(warning)
    try:
        manifest = PluginManifest.model_validate(data)
    except ValidationError as exc:
        errors = [e for e in exc.errors() if not _explained_elsewhere(e, data)]
        return None, problems + [_schema_problem(err, ctx) for err in errors]
    return manifest, problems


def _load_yaml_mapping(text: str, ctx: _Ctx) -> tuple[dict[str, Any] | None, list[Problem]]:
    try:
        data = parse_yaml(text, ctx.file).data if text.strip() else None
    except LoadFailed as exc:
        rule = "plugin-schema" if exc.problem.rule == "duplicate-key" else "plugin-parse"
        return None, [replace(exc.problem, rule=rule)]
    if not isinstance(data, dict):
        got = "an empty file" if data is None else type(data).__name__
        return None, [ctx.problem("", "plugin-schema", f"plugin.yaml must be a mapping, got {got}",
                                  f"start from `tp plugin new <name>`; begin with `schema: {PLUGIN_SCHEMA}`")]
    return data, []


def _newer_schema(schema: str) -> str:
    m = re.fullmatch(r"tuneplane/plugin/v(\d+)", schema)
    if m and int(m[1]) > 1:
        return f"schema {schema!r} is newer than this tuneplane understands ({PLUGIN_SCHEMA})"
    return ""


def _from_legacy(data: dict[str, Any], ctx: _Ctx) -> tuple[dict[str, Any], Problem]:
    """Read a StarForge manifest as tuneplane/plugin/v1: `kind` is `capability`, data-prep ran locally."""
    legacy = str(data["schema"])
    data = dict(data, schema=PLUGIN_SCHEMA)
    if "kind" in data and "capability" not in data:
        data["capability"] = data.pop("kind")
        for table in (ctx.doc.positions, ctx.doc.values):
            if "/kind" in table:
                table["/capability"] = table["/kind"]
    if data.get("capability") == "data-prep" and "execution" not in data:
        data["execution"] = "local"  # StarForge data-prep scripts only ever ran on the user's machine
    warning = ctx.problem("/schema", "plugin-legacy-schema",
                          f"StarForge plugin manifest ({legacy}) read for compatibility",
                          f"run `tp migrate` to rewrite it as `schema: {PLUGIN_SCHEMA}` "
                          "(`kind:` becomes `capability:`)", severity=Severity.WARNING)
    return data, warning


_ALLOWED_KEYS = ", ".join(f.alias or n for n, f in PluginManifest.model_fields.items())


def _explained_elsewhere(err: Any, data: dict[str, Any]) -> bool:
    """A missing `capability` next to a StarForge `kind:`: the unknown-key problem already says it."""
    return err["type"] == "missing" and tuple(err["loc"]) == ("capability",) and "kind" in data


def _schema_problem(err: Any, ctx: _Ctx) -> Problem:
    loc = [str(p) for p in err["loc"]]
    kind = err["type"]
    if kind == "plugin_rule":
        field = str(err["ctx"]["field"])
        return ctx.problem(f"/{field}", "plugin-schema", err["msg"])
    pointer = "".join(f"/{_escape(p)}" for p in loc)
    dotted = ".".join(loc) or "plugin.yaml"
    if kind == "extra_forbidden":
        hint = f"allowed keys: {_ALLOWED_KEYS}"
        if loc == ["kind"]:
            hint = "write `capability:`; `kind:` is the StarForge spelling"
        return ctx.problem(pointer, "plugin-schema", f"unknown key {dotted!r}", hint, key=True)
    if kind == "missing":
        return ctx.problem(pointer, "plugin-schema", f"missing required key {dotted!r}",
                           "see `tp plugin new` for a complete plugin.yaml")
    return ctx.problem(pointer, "plugin-schema", f"{dotted}: {_reason(err)}", _hint_for(kind, loc, err))


def _reason(err: Any) -> str:
    msg = str(err["msg"])
    if err["type"] == "string_pattern_mismatch":
        msg = f"{err['input']!r} does not match {err['ctx']['pattern']}"
    elif err["type"] == "value_error":
        msg = msg.removeprefix("Value error, ")
    elif "input" in err and not isinstance(err["input"], dict):
        msg = f"{msg} (got {err['input']!r})"
    return msg


def _hint_for(kind: str, loc: list[str], err: Any) -> str:
    if kind == "string_type" and isinstance(err.get("input"), int | float):
        return f"quote it: {loc[-1]}: \"{err['input']}\""
    if loc == ["entrypoint"]:
        return "write module:function, e.g. `patch:install`"
    if loc == ["schema"]:
        return f"use `schema: {PLUGIN_SCHEMA}`"
    return ""


def load_plugin_manifest(path: Path) -> PluginManifest:
    """Read and check a plugin.yaml (or the one in directory `path`); UsageError naming each error."""
    file = path / MANIFEST_FILE if path.is_dir() else path
    try:
        text = file.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"cannot read {file}: {exc}", "a plugin directory holds plugin.yaml") from None
    manifest, problems = parse_plugin_manifest(text, file.as_posix())
    errors = [p for p in problems if p.is_error]
    if manifest is None or errors:
        lines = "\n".join(f"  {p.location()}: {p.message}" for p in errors)
        raise UsageError(f"invalid plugin manifest {file}:\n{lines}", f"tp plugin validate {file.parent}")
    return manifest


# ── the plugin directory (the publish gate) ───────────────────────────────────────────────────────


def validate_plugin_dir(path: Path, display_root: Path | None = None) -> list[Problem]:
    """Every problem with a plugin directory: manifest, entrypoint, shadowing names, escaping symlinks.

    Paths in the Problems are shown relative to `display_root` when given.
    """
    manifest_file = path / MANIFEST_FILE
    shown = _display(manifest_file, display_root)
    if not path.is_dir():
        return [Problem(_display(path, display_root), 0, 0, "plugin-missing", "not a plugin directory",
                        hint="pass the directory that holds plugin.yaml")]
    if not manifest_file.is_file():
        return [Problem(shown, 0, 0, "plugin-missing", "no plugin.yaml in the plugin directory",
                        hint="create one with `tp plugin new <name>`")]
    try:
        text = manifest_file.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        return [Problem(shown, 0, 0, "plugin-parse", f"cannot read plugin.yaml: {exc}")]
    ctx = _Ctx(shown, _doc(text, shown))
    manifest, problems = _parse_manifest(text, ctx)
    problems += _escaping_symlinks(path, display_root)
    problems += _shadowing(path, display_root)
    if manifest is not None:
        problems += _entrypoint_problems(path, manifest, display_root, ctx)
        problems += _manifest_rules(path, manifest, ctx)
    return problems


def _escaping_symlinks(root: Path, display_root: Path | None) -> Iterator[Problem]:
    real_root = Path(os.path.realpath(root))
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            full = Path(dirpath, name)
            if full.is_symlink() and not Path(os.path.realpath(full)).is_relative_to(real_root):
                yield Problem(_display(full, display_root), 0, 0, "plugin-symlink",
                              f"symlink leaves the plugin directory (points to {os.readlink(full)})",
                              hint="copy the file into the plugin instead; only the directory is shipped")


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
            yield Problem(_display(root / entry.rstrip("/"), display_root), 0, 0, "plugin-shadowing",
                          f"top-level name {module!r} would shadow {what} module {module!r}: the plugin "
                          "root goes first on sys.path in the job",
                          hint=f"rename it, e.g. `{prefix}_{module}` (and `entrypoint:` if it names it)")


def _module_file(root: Path, module: str) -> Path | None:
    base = root.joinpath(*module.split("."))
    for candidate in (base.with_name(base.name + ".py"), base / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


def _entrypoint_problems(root: Path, manifest: PluginManifest, display_root: Path | None,
                         ctx: _Ctx) -> list[Problem]:
    if not manifest.entrypoint:
        return []
    module, _, func = manifest.entrypoint.partition(":")
    source = _module_file(root, module)
    if source is None:
        return [ctx.problem("/entrypoint", "plugin-entrypoint",
                            f"entrypoint module {module!r} is not in the plugin directory",
                            f"add {module.replace('.', '/')}.py next to plugin.yaml")]
    return _function_problems(source, func, ctx, _display(source, display_root))


def _function_problems(source: Path, func: str, ctx: _Ctx, shown_source: str) -> list[Problem]:
    try:
        tree = ast.parse(source.read_bytes(), filename=str(source))
    except SyntaxError as exc:
        return [Problem(shown_source, exc.lineno or 0, exc.offset or 0, "plugin-entrypoint",
                        f"syntax error: {exc.msg}")]
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name == func:
            args = node.args
            if not (args.posonlyargs or args.args or args.vararg):
                return [Problem(shown_source, node.lineno, node.col_offset + 1, "plugin-entrypoint",
                                f"{func}() takes no arguments; the launcher calls {func}(params)",
                                hint=f"def {func}(params): ...")]
            return []
        if _binds(node, func):
            return []
    return [ctx.problem("/entrypoint", "plugin-entrypoint",
                        f"{source.name} defines no top-level {func!r}", f"def {func}(params): ...")]


def _binds(node: ast.stmt, name: str) -> bool:
    """An assignment or import at module level that defines `name` (a re-exported install)."""
    if isinstance(node, ast.Assign):
        return any(isinstance(t, ast.Name) and t.id == name for t in node.targets)
    if isinstance(node, ast.ImportFrom | ast.Import):
        return any((a.asname or a.name.split(".")[0]) == name for a in node.names)
    return False


def _manifest_rules(root: Path, manifest: PluginManifest, ctx: _Ctx) -> list[Problem]:
    problems = []
    dir_name = root.resolve().name
    if manifest.name != dir_name:
        problems.append(ctx.problem("/name", "plugin-name",
                                    f"name {manifest.name!r} differs from its directory {dir_name!r}",
                                    "the lab keeps each plugin in plugins/<name>/; rename one of them",
                                    severity=Severity.WARNING))
    refused = sorted(NO_ALGORITHM_FRAMEWORKS.intersection(manifest.requires.frameworks))
    if manifest.capability == "algorithm" and refused:
        problems.append(ctx.problem("/requires/frameworks", "plugin-framework",
                                    f"algorithm plugins cannot run under {', '.join(refused)}: those "
                                    "frameworks do not start through the algorithm bridge",
                                    "remove them from requires.frameworks"))
    return problems


# ── the lab: finding it, scaffolding a plugin ─────────────────────────────────────────────────────


def module_name_for(name: str) -> str:
    """The scaffold's module: unique per plugin so two plugins never import the same `patch`."""
    ident = re.sub(r"\W", "_", name)
    return f"{ident if ident[:1].isalpha() or ident[:1] == '_' else 'p_' + ident}_plugin"


def _manifest_text(name: str, module: str) -> str:
    return (f"# yaml-language-server: $schema={PLUGIN_SCHEMA_URL}\n"
            f"schema: {PLUGIN_SCHEMA}\n"
            f"name: {name}\n"
            "version: 0.1.0\n"
            "capability: algorithm\n"
            "summary: Say in one line what this patch changes.\n"
            f"entrypoint: {module}:install\n"
            "load: eager\n"
            "requires:\n"
            "  core: \">=0.1,<1\"\n"
            "scope: entrypoint\n")


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
    """Create `<parent>/<name>/` with plugin.yaml and its module; never overwrites anything."""
    if not re.fullmatch(SEGMENT, name):
        raise UsageError(f"{name!r} is not a plugin name", "use letters, digits, '.', '_' or '-', "
                         "starting with a letter or digit")
    target = parent / name
    if target.exists():
        raise UsageError(f"{target} already exists", "pick another name or remove it")
    module = module_name_for(name)
    target.mkdir(parents=True)
    (target / MANIFEST_FILE).write_text(_manifest_text(name, module), encoding="utf-8")
    (target / f"{module}.py").write_text(_module_text(name), encoding="utf-8")
    return target


# ── plugins.lock.json ─────────────────────────────────────────────────────────────────────────────


def parse_plugin_ref(text: str) -> tuple[str, str, str | None]:
    """`owner/name[@version]` -> (owner, name, version or None)."""
    m = re.fullmatch(f"({SEGMENT})/({SEGMENT})(?:@({SEGMENT}))?", text)
    if m is None:
        raise UsageError(f"{text!r} is not a plugin reference", "write OWNER/NAME or OWNER/NAME@VERSION")
    return m[1], m[2], m[3]


def parse_plugins_lock(text: str, file: str) -> tuple[PluginsLock | None, list[Problem]]:
    """Parse plugins.lock.json text; every problem placed at its line and column."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        return None, [Problem(file, exc.lineno, exc.colno, "plugins-lock-parse", f"not valid JSON: {exc.msg}",
                              hint="rewrite it with `tp plugin lock`")]
    ctx = _Ctx(file, _doc(text, file))
    try:
        lock = PluginsLock.model_validate(data)
    except ValidationError as exc:
        return None, [_lock_problem(err, ctx) for err in exc.errors()]
    return lock, list(_lock_order(lock, ctx))


def _lock_problem(err: Any, ctx: _Ctx) -> Problem:
    loc = [str(p) for p in err["loc"]]
    pointer = "".join(f"/{_escape(p)}" for p in loc)
    where = ".".join(loc) or LOCK_FILE
    if err["type"] == "extra_forbidden":
        return ctx.problem(pointer, "plugins-lock-schema", f"unknown key {where!r}",
                           "a lock entry has only id, version and digest", key=True)
    if err["type"] == "missing":
        return ctx.problem(pointer, "plugins-lock-schema", f"missing key {where!r}",
                           "rewrite the entry with `tp plugin lock`")
    hint = f"apiVersion is {LOCK_API}" if loc == ["apiVersion"] else "rewrite the entry with `tp plugin lock`"
    if loc[-1:] == ["id"]:
        hint = "ids are <owner>/<name>"
    return ctx.problem(pointer, "plugins-lock-schema", f"{where}: {_reason(err)}", hint)


def _lock_order(lock: PluginsLock, ctx: _Ctx) -> Iterator[Problem]:
    ids = [p.id for p in lock.plugins]
    for index, plugin_id in enumerate(ids):
        if plugin_id in ids[:index]:
            yield ctx.problem(f"/plugins/{index}/id", "plugins-lock-schema",
                              f"{plugin_id} is locked twice", "keep one entry per plugin id")
    if ids != sorted(ids):
        yield ctx.problem("/plugins", "plugins-lock-order", "plugins are not sorted by id",
                          "`tp plugin lock` rewrites the file sorted", severity=Severity.WARNING)


@dataclass(frozen=True)
class LockResult:
    path: Path
    entry: PluginsLockEntry
    previous: PluginsLockEntry | None


def lock_plugin(lab_root: Path, experiment: str, ref: str) -> LockResult:
    """Pin `plugins/<name>/` of the lab into `experiments/<experiment>/plugins.lock.json`."""
    owner, name, version = parse_plugin_ref(ref)
    exp_dir = _experiment_dir(lab_root, experiment)
    plugin_dir = lab_root / "plugins" / name
    manifest = _lockable_manifest(lab_root, plugin_dir, f"{owner}/{name}", version)
    try:
        digest = tree_digest(plugin_dir)
    except DigestError as exc:
        raise UsageError(f"cannot digest plugins/{name}: {exc}",
                         f"tp plugin validate plugins/{name}") from None
    entry = PluginsLockEntry(id=f"{owner}/{name}", version=manifest.version, digest=digest)
    lock_path = exp_dir / LOCK_FILE
    entries = _existing_entries(lock_path, lab_root)
    previous = next((e for e in entries if e.id == entry.id), None)
    kept = sorted([e for e in entries if e.id != entry.id] + [entry], key=lambda e: e.id)
    write_json(lock_path, {"apiVersion": LOCK_API, "plugins": [e.model_dump() for e in kept]})
    return LockResult(lock_path, entry, previous)


def _experiment_dir(lab_root: Path, experiment: str) -> Path:
    if not re.fullmatch(SEGMENT, experiment):
        raise UsageError(f"{experiment!r} is not an experiment name",
                         "pass the directory name under experiments/")
    exp_dir = lab_root / "experiments" / experiment
    if not exp_dir.is_dir():
        raise UsageError(f"no experiment {experiment!r} in {lab_root / 'experiments'}",
                         "create it with `tp new`, or check the name with `tp ls`")
    return exp_dir


def _lockable_manifest(lab_root: Path, plugin_dir: Path, plugin_id: str,
                       version: str | None) -> PluginManifest:
    name = plugin_id.split("/", 1)[1]
    if not plugin_dir.is_dir():
        raise UsageError(f"no plugin {name!r} in {lab_root / 'plugins'}",
                         f"create it with `tp plugin new {name}`")
    problems = validate_plugin_dir(plugin_dir, lab_root)
    errors = [p for p in problems if p.is_error]
    if errors:
        lines = "\n".join(f"  {p.location()}: {p.message}" for p in errors)
        raise UsageError(f"plugins/{name} does not validate:\n{lines}", f"tp plugin validate plugins/{name}")
    manifest = load_plugin_manifest(plugin_dir)
    if manifest.name != name:
        raise UsageError(f"plugins/{name}/plugin.yaml names itself {manifest.name!r}",
                         f"set `name: {name}` or move the directory to plugins/{manifest.name}")
    if version is not None and version != manifest.version:
        raise UsageError(f"plugins/{name} is version {manifest.version}, not {version}",
                         f"lock {plugin_id}@{manifest.version}, or set `version: {version}` in plugin.yaml")
    return manifest


def _existing_entries(lock_path: Path, lab_root: Path) -> list[PluginsLockEntry]:
    if not lock_path.exists():
        return []
    shown = _display(lock_path, lab_root)
    lock, problems = parse_plugins_lock(lock_path.read_text(encoding="utf-8"), shown)
    if lock is None:
        lines = "\n".join(f"  {p.location()}: {p.message}" for p in problems if p.is_error)
        raise UsageError(f"{shown} is invalid; it was left as it is:\n{lines}",
                         "fix it by hand (or delete it) and lock again")
    return list(lock.plugins)


# ── what `tp validate` asks about an experiment ──────────────────────────────────────────────────


def core_admits(specifier: str, core_version: str) -> bool:
    """`requires.core` check; development builds count (prereleases admitted)."""
    if not specifier.strip():
        return True
    try:
        return SpecifierSet(specifier).contains(Version(core_version), prereleases=True)
    except (InvalidSpecifier, InvalidVersion):
        return False


@dataclass
class _ExpCheck:
    lab_root: Path
    exp_dir: Path
    framework: str
    core_version: str
    ctx: _Ctx
    exp_name: str


def check_experiment_plugins(lab_root: Path, exp_dir: Path, framework: str, recipe_plugins: list[str],
                             core_version: str) -> list[Problem]:
    """Problems with an experiment's plugins.lock.json against the lab's plugins and its recipe."""
    lock_path = exp_dir / LOCK_FILE
    shown = _display(lock_path, lab_root)
    if not lock_path.is_file():
        return [Problem(shown, 0, 0, "plugins-lock-unsatisfied",
                        f"the recipe requires algorithm plugin {name!r} but {shown} does not exist",
                        hint=f"tp plugin lock {exp_dir.name} <owner>/{name}") for name in recipe_plugins]
    text = lock_path.read_text(encoding="utf-8")
    lock, problems = parse_plugins_lock(text, shown)
    if lock is None:
        return problems
    ctx = _Ctx(shown, _doc(text, shown))
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


def _check_entry(check: _ExpCheck, index: int, entry: PluginsLockEntry) -> tuple[PluginManifest | None,
                                                                                  list[Problem]]:
    at = f"/plugins/{index}"
    plugin_dir = check.lab_root / "plugins" / entry.name
    fix = f"tp plugin lock {check.exp_name} {entry.id}"
    if not (plugin_dir / MANIFEST_FILE).is_file():
        return None, [check.ctx.problem(f"{at}/id", "plugins-lock-missing",
                                        f"{entry.ref} is locked but plugins/{entry.name}/ is not in the lab",
                                        f"restore plugins/{entry.name}/ or remove the entry")]
    try:
        manifest = load_plugin_manifest(plugin_dir)
    except UsageError:
        return None, [check.ctx.problem(f"{at}/id", "plugins-lock-plugin-invalid",
                                        f"plugins/{entry.name}/plugin.yaml does not validate",
                                        f"tp plugin validate plugins/{entry.name}")]
    problems = _version_and_digest(check, at, entry, manifest, plugin_dir, fix)
    problems += _compatibility(check, at, entry, manifest)
    return manifest, problems


def _version_and_digest(check: _ExpCheck, at: str, entry: PluginsLockEntry, manifest: PluginManifest,
                        plugin_dir: Path, fix: str) -> list[Problem]:
    if manifest.version != entry.version:
        return [check.ctx.problem(f"{at}/version", "plugins-lock-version",
                                  f"{entry.id} is locked at {entry.version} but plugins/{entry.name} is "
                                  f"{manifest.version}", f"{fix}@{manifest.version}")]
    try:
        actual = tree_digest(plugin_dir)
    except DigestError as exc:
        return [check.ctx.problem(f"{at}/digest", "plugins-lock-digest",
                                  f"cannot digest plugins/{entry.name}: {exc}",
                                  f"tp plugin validate plugins/{entry.name}")]
    if actual != entry.digest:
        return [check.ctx.problem(f"{at}/digest", "plugins-lock-digest",
                                  f"plugins/{entry.name} changed since it was locked: the lock says "
                                  f"{entry.digest}, the directory is {actual}",
                                  f"if the change is intended, re-lock it: {fix}@{manifest.version}")]
    return []


def _compatibility(check: _ExpCheck, at: str, entry: PluginsLockEntry,
                   manifest: PluginManifest) -> list[Problem]:
    problems = []
    if not core_admits(manifest.requires.core, check.core_version):
        problems.append(check.ctx.problem(
            f"{at}/id", "plugin-requires-core",
            f"{entry.ref} requires tuneplane {manifest.requires.core}; this is {check.core_version}",
            "lock a plugin version that supports this tuneplane, or upgrade tuneplane"))
    if manifest.capability == "algorithm" and check.framework in NO_ALGORITHM_FRAMEWORKS:
        problems.append(check.ctx.problem(
            f"{at}/id", "plugin-framework",
            f"{entry.ref} is an algorithm plugin; the {check.framework} framework does not run algorithm "
            "plugins (its entrypoint does not start through the algorithm bridge)",
            "remove it from plugins.lock.json, or use a catalog framework that supports plugins"))
    wanted = manifest.requires.frameworks
    if wanted and check.framework not in wanted:
        problems.append(check.ctx.problem(
            f"{at}/id", "plugin-framework",
            f"{entry.ref} supports {', '.join(wanted)}, not {check.framework}",
            "remove it, or lock a version that supports this framework"))
    return problems


def _check_required(check: _ExpCheck, lock: PluginsLock, manifests: dict[int, PluginManifest],
                    recipe_plugins: list[str]) -> list[Problem]:
    problems = []
    for name in recipe_plugins:
        matches = [e for e in lock.plugins if e.name == name]
        if not matches:
            problems.append(check.ctx.problem(
                "/plugins", "plugins-lock-unsatisfied",
                f"the recipe requires algorithm plugin {name!r}; no entry in the lock provides it",
                f"tp plugin lock {check.exp_name} <owner>/{name}"))
        elif len(matches) > 1:
            problems.append(check.ctx.problem(
                "/plugins", "plugins-lock-unsatisfied",
                f"the recipe requires {name!r} and {len(matches)} entries provide it: "
                f"{', '.join(e.ref for e in matches)}", "keep exactly one"))
        else:
            index = lock.plugins.index(matches[0])
            manifest = manifests.get(index)
            if manifest is not None and manifest.capability != "algorithm":
                problems.append(check.ctx.problem(
                    f"/plugins/{index}/id", "plugins-lock-unsatisfied",
                    f"the recipe requires algorithm {name!r} but {matches[0].ref} is a {manifest.capability} "
                    "plugin", "lock the algorithm plugin of that name"))
    return problems


def _module_collisions(check: _ExpCheck, lock: PluginsLock,
                       manifests: dict[int, PluginManifest]) -> list[Problem]:
    """Two loaded plugins with one top-level module: the second import would silently get the first."""
    owners: dict[str, str] = {}
    problems = []
    for index, manifest in sorted(manifests.items()):
        if manifest.capability != "algorithm":
            continue
        entry = lock.plugins[index]
        for module in top_level_modules(check.lab_root / "plugins" / entry.name, packages_only=True):
            if module in owners:
                problems.append(check.ctx.problem(
                    f"/plugins/{index}/id", "plugin-module-collision",
                    f"{entry.id} and {owners[module]} both ship a top-level module {module!r}; in one "
                    "job only the first would be imported", "rename the module in one of them"))
            owners.setdefault(module, entry.id)
    return problems
