"""`tp migrate`: turn a StarForge lab into a TunePlane lab, in place.

Every change is computed in memory first; then all new files are written next to their targets and
renamed into place together, so a failure leaves the lab as it was. YAML is edited round-trip (ruamel)
so people's comments and key order survive.

Only the lab's own files change: vendored packages (a `site-packages`, `vendor/` or `third_party/`
tree, a virtualenv, StarForge's own sources kept in the lab) and the lab's tests are left as they are
and named in the list. Every StarForge dialect we know is converted (`requires.sdk` and
`created_by.sdk_version` of the older locks and manifests, `kind:` plugins, the SDK's version
numbering); what cannot be is listed, and `checked()` runs `tp validate` on the result so that no
error is left that the list does not name.
"""

from __future__ import annotations

import io
import json
import os
import re
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from ruamel.yaml import YAML
from ruamel.yaml.comments import CommentedMap

from tuneplane.author.scaffold import lab_files
from tuneplane.errors import UsageError
from tuneplane.lab.catalog import Catalog, load_catalog
from tuneplane.lab.fs import atomic_write_all
from tuneplane.lab.load import LAB_DIRS, LAB_FILE, LEGACY_LAB_FILE
from tuneplane.lab.locks import LOCK_FILE
from tuneplane.lab.starforge import ENV_RENAMES, core_requirement, core_version, find_uses, rewrite
from tuneplane.lab.yamlio import LoadFailed, load_json
from tuneplane.models.lock import LEGACY_LOCK_APIS, RECIPE_LOCK_API
from tuneplane.models.plugin import LEGACY_SCHEMAS
from tuneplane.problems import Problem, location
from tuneplane.runtime.digest import bundle_digest
from tuneplane.runtime.records import Record, field

__all__ = ["ENV_RENAMES", "MigrationPlan", "apply", "checked", "plan_migration", "unconverted"]
CODE_SUFFIXES = (".py", ".sh", ".bash", ".yaml", ".yml")
SKIP_DIRS = frozenset({".git", "runs", "status", "node_modules", "__pycache__", ".venv", "venv", ".tox"})
# Folders that hold someone else's code, whatever the lab around them: rewriting it would break it.
VENDORED_DIRS = frozenset(
    {"site-packages", "dist-packages", "vendor", "vendored", "_vendor", "third_party", "third-party", "thirdparty"}
)
TEST_DIRS = frozenset({"tests", "test"})
VENV = "a virtual environment"
STARFORGE_PACKAGE = re.compile(r"star_?forge\w*", re.IGNORECASE)  # starforge_cli/, starforge_sdk/ …
TEST_FILE = re.compile(r"(?:test_.*|.*_test|conftest)\.py")
MAX_FILES = 20_000  # a lab is walked once; a bigger tree is not a lab
MAX_CODE_BYTES = 1024 * 1024
SHARED_CODE_DIRS = ("common",)
# Locks of StarForge's older CLI (`lab`) with the same fields as forge/recipe-lock/v3 (SDK-numbered).
OLDER_LOCK_APIS = ("lab/recipe-lock/v3",)
LOCK_RULES = frozenset({"lock-schema", "lock-version", "lock-blocking", "lock-tampered"})
# `tp validate` rules about the formats migrate converts: one left means migrate failed at its own job
FORMAT_RULES = frozenset(
    {
        *LOCK_RULES - {"lock-blocking"},
        "lock-legacy",
        "plugin-schema",
        "plugin-parse",
        "plugin-legacy-schema",
        "plugin-requires-core",
        "starforge-lab",
        "lab-schema",
        "lab-version",
        "lab-layout",
    }
)


class MigrationPlan(Record):
    writes: dict[str, str] = field(default_factory=dict)  # relative path → new content
    deletes: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # what a person should check afterwards
    # (file, rule) of the `tp validate` errors the notes account for: what migrate knows it left
    expected: set[tuple[str, str]] = field(default_factory=set)
    left_alone: dict[str, str] = field(default_factory=dict)  # folder → why migrate did not touch it
    renumbered: dict[str, list[str]] = field(default_factory=dict)  # how a requires.core was mapped → files

    def expect(self, rel: str, rules: frozenset[str] | set[str], note: str) -> None:
        self.notes.append(note)
        self.expected |= {(rel, rule) for rule in rules}


def plan_migration(root: Path, catalog: Catalog | None = None) -> MigrationPlan:
    catalog = catalog or load_catalog()
    if (root / LAB_FILE).exists():
        raise UsageError(f"{root} already has {LAB_FILE}", hint="nothing to migrate")
    if not (root / LEGACY_LAB_FILE).is_file():
        raise UsageError(f"no {LEGACY_LAB_FILE} in {root}", hint="run tp migrate at the root of a StarForge lab")
    plan = MigrationPlan()
    files = _lab_tree(root, plan.left_alone)
    locks = [f for f in files if f.name == LOCK_FILE and len(f.relative_to(root).parts) >= 3]
    _lab_file(root, plan, _experiment_roots(root, locks), _shared_code(root))
    for lock in locks:
        _lock(root, lock, plan, catalog)
    for manifest in (f for f in files if f.name == "plugin.yaml"):
        _plugin(root, manifest, plan)
    for code in (f for f in files if f.suffix in CODE_SUFFIXES and f.name not in (LEGACY_LAB_FILE, "plugin.yaml")):
        _code(root, code, plan)
    for d in LAB_DIRS:
        if not (root / d).exists():
            plan.writes[f"{d}/.gitkeep"] = ""
    for why, rels in plan.renumbered.items():
        plan.notes.append(f"requires.core {why} ({len(rels)} file(s): {', '.join(rels)})")
    for folder, why in plan.left_alone.items():
        _left_alone(root, folder, why, plan)
    return plan


def _lab_tree(root: Path, left_alone: dict[str, str]) -> list[Path]:
    """Every regular file of the lab, in order, without git's, the bot's or a virtualenv's folders;
    the folders of vendored code and tests go into `left_alone` with the reason."""
    found: list[Path] = []
    for dirpath, dirnames, filenames in os.walk(root):
        here = Path(dirpath)
        kept = []
        for d in sorted(d for d in dirnames if d not in SKIP_DIRS and not d.startswith(".")):
            why = _not_lab_code(here / d)
            if not why:
                kept.append(d)
            elif why != VENV:  # an environment is nobody's code to update: not listed
                left_alone[(here / d).relative_to(root).as_posix()] = why
        dirnames[:] = kept
        for name in sorted(filenames):
            path = here / name
            if TEST_FILE.fullmatch(name):
                left_alone[path.relative_to(root).as_posix()] = "a test of the lab"
            elif path.is_file() and not path.is_symlink():
                found.append(path)
        if len(found) > MAX_FILES:
            raise UsageError(
                f"{root} holds more than {MAX_FILES} files; that is not a lab",
                hint="run tp migrate at the root of the StarForge lab",
            )
    return found


def _not_lab_code(folder: Path) -> str:
    """Why `folder` is not the lab's own code to rewrite, or "" (an experiment, whatever its name)."""
    name = folder.name
    if (folder / LOCK_FILE).is_file():
        return ""
    if name in VENDORED_DIRS or name.endswith((".dist-info", ".egg-info")):
        return "vendored packages"
    if (folder / "pyvenv.cfg").is_file():
        return VENV
    if name in TEST_DIRS:
        return "the lab's tests"
    if STARFORGE_PACKAGE.fullmatch(name) and (
        (folder / "__init__.py").is_file() or (folder / "pyproject.toml").is_file()
    ):
        return "StarForge's own sources, kept in the lab"
    return ""


def _left_alone(root: Path, rel: str, why: str, plan: MigrationPlan) -> None:
    """List a folder migrate did not touch, with how many of its files still name StarForge."""
    target = root / rel
    paths = [target] if target.is_file() else sorted(p for p in target.rglob("*") if p.suffix in CODE_SUFFIXES)
    named = 0
    for path in paths[:MAX_FILES]:
        try:
            if path.is_file() and path.stat().st_size <= MAX_CODE_BYTES:
                named += bool(find_uses(path.read_text(encoding="utf-8")))
        except (OSError, UnicodeDecodeError):
            continue
    if named:
        plan.notes.append(
            f"{rel}{'' if target.is_file() else '/'}: left as it is ({why}); {named} file(s) there still "
            "use StarForge names: update them yourself if they are yours"
        )


def _experiment_roots(root: Path, locks: list[Path]) -> list[str]:
    """The folders that hold experiments (`experiments/`, `smoke/`, …): where the locks are."""
    roots = {lock.parent.parent.relative_to(root).as_posix() for lock in locks}
    return sorted(roots | {"experiments"}, key=lambda r: (r != "experiments", r))


def _shared_code(root: Path) -> list[str]:
    return [d for d in SHARED_CODE_DIRS if (root / d).is_dir() and any((root / d).rglob("*.py"))]


def _yaml() -> YAML:
    y = YAML()
    y.preserve_quotes = True
    y.width = 4096
    return y


def _dump(y: YAML, data: object) -> str:
    buf = io.StringIO()
    y.dump(data, buf)
    return buf.getvalue()


def _lab_file(root: Path, plan: MigrationPlan, roots: list[str], shared: list[str]) -> None:
    y = _yaml()
    data = y.load((root / LEGACY_LAB_FILE).read_text(encoding="utf-8")) or {}
    name = re.sub(r"[^A-Za-z0-9._-]+", "-", str(data.get("name") or root.name)).strip("-.") or "lab"
    header = "".join(
        line + "\n"
        for line in (root / LEGACY_LAB_FILE).read_text(encoding="utf-8").splitlines()
        if line.startswith("#")
    )
    new_lab = lab_files(name)[LAB_FILE]
    first, _, rest = new_lab.partition("\n")
    layout = ""
    if roots != ["experiments"] or shared:
        layout = (
            "\n# Where this lab keeps its experiments, and code every job of the lab imports.\n"
            f"experiment_roots: [{', '.join(roots)}]\n"
        )
        layout += f"shared_code: [{', '.join(shared)}]\n" if shared else ""
    plan.writes[LAB_FILE] = f"{first}\n# Migrated from {LEGACY_LAB_FILE}; its comments follow.\n{header}{rest}{layout}"
    plan.deletes.append(LEGACY_LAB_FILE)
    plan.notes.append(
        f"{LAB_FILE}: written from {LEGACY_LAB_FILE} (name {name!r}); review profiles, images and cluster settings"
    )


_JSON_KINDS = {list: "array", str: "string", int: "number", float: "number", bool: "boolean", type(None): "null"}


def _lock(root: Path, path: Path, plan: MigrationPlan, catalog: Catalog) -> None:
    rel = path.relative_to(root).as_posix()
    try:  # the lab's reader: a regular file of bounded size, strict JSON
        data = load_json(path, rel).data
    except LoadFailed as exc:
        raise UsageError(
            f"{exc.problem.location()}: cannot read the lock: {exc.problem.message}",
            hint="fix or delete it, then run tp migrate again",
        ) from None
    recipe = data.get("recipe", {}) if isinstance(data, dict) else None
    if not isinstance(recipe, dict):
        what, where = (data, "it is") if not isinstance(data, dict) else (recipe, "its `recipe` is")
        raise UsageError(
            f"{rel}: cannot read the lock: {where} a JSON {_JSON_KINDS.get(type(what), 'value')}, not an object",
            hint="a recipe lock is a JSON object whose `recipe` is one too; fix or "
            "delete it, then run tp migrate again",
        )
    api = data.get("apiVersion")
    if api not in (*LEGACY_LOCK_APIS, *OLDER_LOCK_APIS):
        if isinstance(api, str) and api != RECIPE_LOCK_API:
            plan.expect(
                rel,
                LOCK_RULES,
                f"{rel}: a {api!r} lock, which tp migrate cannot convert (it has no manifest and template "
                f"digests to carry over); re-create the experiment from a current method: "
                f"`tp new NEW --method FRAMEWORK/RECIPE --from {path.parent.name}`",
            )
        return
    data["apiVersion"] = RECIPE_LOCK_API
    _sdk_fields(rel, data, plan)
    if "manifest_digest" in recipe:
        recipe["digest"] = bundle_digest(recipe["manifest_digest"])
    method = recipe.get("name", "")
    if catalog.has(method):
        current = catalog.recipe(method)
        data.setdefault(
            "bindings",
            {
                "params": {n: {"path": p.path, "type": p.type} for n, p in sorted(current.params.items())},
                "entrypoint": {"kind": current.entrypoint.kind, "value": current.entrypoint.value},
            },
        )
        framework = data.get("framework")
        version = framework.get("version") if isinstance(framework, dict) else None
        if not current.user_managed and version not in current.runtime.versions:
            plan.expect(
                rel,
                {"lock-blocking"},
                f"{rel}: converted; framework version {version!r} of {method} is no longer offered: "
                f"`tp recipe upgrade {path.parent.name}` moves it to {current.runtime.default_version}",
            )
        elif (data.get("recipe", {}).get("manifest_digest"), recipe.get("template_digest")) != catalog.digests(method)[
            1:
        ]:
            plan.notes.append(
                f"{rel}: converted; then run `tp recipe upgrade {path.parent.name}` to adopt the "
                f"current {method} recipe"
            )
    else:
        plan.expect(
            rel,
            {"lock-blocking"},
            f"{rel}: converted, but {method!r} is not in this catalog; pick a method from "
            f"`tp methods` and re-create it with `tp new NEW --method … --from {path.parent.name}`",
        )
    plan.writes[rel] = json.dumps(data, indent=2, sort_keys=True, ensure_ascii=False) + "\n"


def _sdk_fields(rel: str, data: dict[str, object], plan: MigrationPlan) -> None:
    """The older locks' `created_by.sdk_version` and `requires.sdk`, in starforge-core's names and numbering."""
    created = data.get("created_by")
    if isinstance(created, dict) and "sdk_version" in created and "core_version" not in created:
        created["core_version"] = core_version(str(created.pop("sdk_version")))
    requires = data.get("requires")
    if not isinstance(requires, dict):
        return
    if "sdk" in requires and "core" not in requires:
        requires["core"] = requires.pop("sdk")
    if isinstance(requires.get("core"), str):
        mapped = core_requirement(requires["core"])
        if mapped.text is not None:
            requires["core"] = mapped.text
        if mapped.why:
            # the lock only records it: `tp recipe upgrade` writes the catalog recipe's own
            plan.renumbered.setdefault(mapped.why, []).append(rel)


def _plugin(root: Path, path: Path, plan: MigrationPlan) -> None:
    rel = path.relative_to(root).as_posix()
    y = _yaml()
    data = y.load(path.read_text(encoding="utf-8"))
    if not hasattr(data, "get") or data.get("schema") not in LEGACY_SCHEMAS:
        return
    data["schema"] = "tuneplane/plugin/v1"
    if "kind" in data and "capability" not in data:
        _rename(data, "kind", "capability")
    if data.get("capability") == "data-prep" and "execution" not in data:
        data.insert(list(data.keys()).index("capability") + 1, "execution", "local")  # StarForge ran it locally
    requires = data.get("requires")
    if hasattr(requires, "insert") and "sdk" in requires and "core" not in requires:
        _rename(requires, "sdk", "core")
    if hasattr(requires, "get") and isinstance(requires.get("core"), str):
        _plugin_core(rel, requires, plan)
    plan.writes[rel] = _dump(y, data)
    plan.notes.append(
        f"{rel}: schema tuneplane/plugin/v1 (`kind` is now `capability`); re-lock experiments "
        "that use it with `tp plugin lock`"
    )


def _plugin_core(rel: str, requires: CommentedMap, plan: MigrationPlan) -> None:
    """A manifest's `requires.core` in tuneplane's numbering, or kept and listed when it has none."""
    mapped = core_requirement(requires["core"])
    if mapped.text is not None:
        requires["core"] = mapped.text
        if mapped.why:
            plan.renumbered.setdefault(mapped.why, []).append(rel)
        return
    plan.expect(
        rel,
        {"plugin-requires-core"},
        f"{rel}: requires.core {mapped.why}; write the tuneplane versions the plugin works with "
        "(a range that admits this tp) before `tp plugin lock`, which refuses it until then",
    )


def _rename(mapping: CommentedMap, old: str, new: str) -> None:
    """Rename a key of a round-trip YAML mapping in place, keeping its position and its comment."""
    position = list(mapping.keys()).index(old)
    comment = mapping.ca.items.pop(old, None)
    value = mapping.pop(old)
    mapping.insert(position, new, value)
    if comment is not None:
        mapping.ca.items[new] = comment


def _code(root: Path, path: Path, plan: MigrationPlan) -> None:
    """Rewrite the StarForge names that have an exact TunePlane equivalent; list every other one."""
    if path.stat().st_size > MAX_CODE_BYTES:
        return
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return
    rel = path.relative_to(root).as_posix()
    new = rewrite(text)
    if new != text:
        plan.writes[rel] = new
        plan.notes.append(f"{rel}: StarForge names rewritten to their TunePlane equivalents")
    for use in find_uses(new):
        plan.notes.append(f"{location(rel, use.line, use.col)}: {use.name}: {use.advice}")


def apply(root: Path, plan: MigrationPlan) -> None:
    """Write every new file beside its target, then rename all into place; delete last."""
    atomic_write_all({root / rel: text for rel, text in plan.writes.items()})
    for rel in plan.deletes:
        (root / rel).unlink(missing_ok=True)


def unconverted(problems: list[Problem]) -> list[Problem]:
    """Of the errors `checked` found, those about a StarForge format migrate did not convert."""
    return [p for p in problems if p.rule in FORMAT_RULES]


def checked(root: Path, plan: MigrationPlan, *, applied: bool) -> list[Problem]:
    """The errors `tp validate` finds in the migrated lab that the plan's notes do not account for.

    After `apply` the lab itself is checked; before it (a dry run) a scratch copy of the lab's files
    with the plan applied, so both say the same.
    """
    if applied:
        return _unexpected(root, plan)
    with _staged(root, plan) as scratch:
        return _unexpected(scratch, plan)


def _unexpected(where: Path, plan: MigrationPlan) -> list[Problem]:
    # lazy: only the check after a migration needs the validator
    from tuneplane.check.scope import scope_all
    from tuneplane.check.validate import validate
    from tuneplane.lab.load import load_lab
    from tuneplane.lab.shellsyntax import bash_syntax

    lab = load_lab(where)
    scope = scope_all(lab)
    problems = validate(
        lab, sorted(scope.experiments), sorted(scope.runs), plugins=sorted(scope.plugins), shell_check=bash_syntax
    )
    return [p for p in problems if p.is_error and (p.file, p.rule) not in plan.expected]


@contextmanager
def _staged(root: Path, plan: MigrationPlan) -> Iterator[Path]:
    """A scratch copy of the lab's own files (linked where the disk allows) with `plan` applied."""
    with tempfile.TemporaryDirectory(prefix="tp-migrate-") as tmp:
        scratch = Path(tmp) / root.name
        for path in _lab_tree(root, {}):
            target = scratch / path.relative_to(root)
            target.parent.mkdir(parents=True, exist_ok=True)
            try:
                os.link(path, target)  # `apply` replaces files by rename, so the lab's own stay untouched
            except OSError:
                shutil.copyfile(path, target)
        apply(scratch, plan)
        yield scratch
