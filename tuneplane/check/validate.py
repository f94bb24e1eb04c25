"""`validate`: every problem of the lab's experiments and run requests, all at once. Pure over the files.

Loading an experiment parses its lock and config once; the rules in `tuneplane.check.rules` then read the
parsed documents. Nothing here prints or exits.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from pathlib import Path

from tuneplane.check.rules import experiment_rules, lab_rules, run_rules
from tuneplane.check.rules.code import ShellCheck, check_shared
from tuneplane.check.rules.context import ExperimentContext
from tuneplane.check.rules.lint import lint_shared_code
from tuneplane.lab.catalog import Catalog, load_catalog
from tuneplane.lab.fs import present
from tuneplane.lab.layout import plugin_index
from tuneplane.lab.load import UPGRADE_TP, Lab
from tuneplane.lab.locks import LOCK_FILE, lock_missing_hint, method_without_lock
from tuneplane.lab.modelparse import M, parse_model
from tuneplane.lab.yamlio import Doc, LoadFailed, load_json, load_yaml
from tuneplane.models.base import name_error
from tuneplane.models.experiment import EXPERIMENT_API, EXPERIMENT_FILE, ExperimentManifest
from tuneplane.models.lock import LEGACY_LOCK_APIS, RECIPE_LOCK_API, RecipeLock
from tuneplane.problems import Problem, did_you_mean

CONFIG_FILE = "config.yaml"
UNREADABLE = "experiment-unreadable"


def validate(
    lab: Lab,
    experiments: Iterable[str],
    runs: Iterable[Path] = (),
    catalog: Catalog | None = None,
    plugins: Iterable[str] = (),
    shell_check: ShellCheck | None = None,
) -> list[Problem]:
    """Every problem; `shell_check` (lab.shellsyntax.bash_syntax) checks shell scripts, none without it."""
    catalog = catalog or load_catalog()
    problems = list(lab.problems)
    for lab_rule in lab_rules():
        problems.extend(lab_rule(lab))
    plugins = list(plugins)
    if plugins:
        problems += _plugin_problems(lab, plugins)
    experiments = list(experiments)
    problems += _duplicates(lab, experiments)
    if lab.config.shared_code:
        problems += lint_shared_code(lab)
        problems += check_shared(lab, shell_check)
    contexts: dict[str, ExperimentContext] = {}
    for name in experiments:
        ctx = load_experiment(lab, catalog, name)
        ctx.shell_check = shell_check
        contexts[name] = ctx
        problems += ctx.problems
        if any(p.rule == UNREADABLE for p in ctx.problems):
            continue
        for rule in experiment_rules():
            problems.extend(rule(ctx))
    runs = list(runs)
    owners = run_id_owners(lab) if runs else {}
    checked = set(runs)
    for path in runs:
        # the second of two files with one run id is the error; the first only when the second is not checked
        # now (a pull request that adds the file sorting first names that file)
        same = [p for p in owners.get(path.stem, []) if p != path]
        clash = next((p for p in same if p < path or p not in checked), None)
        problems += validate_run(lab, catalog, path, contexts, clash)
    if (lab.root / "sweeps").is_dir():  # the sweep files' folder (models.sweep.SWEEPS_DIR)
        from tuneplane.check.sweepfiles import validate_sweeps  # lazy: only a lab with sweeps pays for them

        problems += validate_sweeps(lab, catalog, {*experiments, *(p.parent.name for p in runs)}, contexts)
    return sorted(set(problems))


def run_id_owners(lab: Lab) -> dict[str, list[Path]]:
    """Every run request file of the lab by its run id (the file name), in path order: a run id names
    one run across the lab (status files, run directories and cluster objects are found by it)."""
    owners: dict[str, list[Path]] = {}
    for path in run_files(lab):
        owners.setdefault(path.stem, []).append(path)
    return owners


def _plugin_problems(lab: Lab, names: list[str]) -> list[Problem]:
    # lazy: plugin checks load only when the lab has plugins
    from tuneplane.check.plugin_dirs import validate_plugin_dir

    index = plugin_index(lab.root)
    problems = []
    for name in names:
        dirs = index.get(name) or [f"plugins/{name}"]
        if len(dirs) > 1:
            problems.append(
                Problem(
                    f"{dirs[1]}/plugin.yaml",
                    1,
                    1,
                    "plugin-duplicate",
                    f"two plugins are named {name!r}: {' and '.join(dirs)}",
                    hint="a lock names a plugin by its name: rename or remove one of them",
                )
            )
        for rel in dirs:
            problems += validate_plugin_dir(lab.root / rel, display_root=lab.root)
    return problems


def _duplicates(lab: Lab, experiments: list[str]) -> list[Problem]:
    out = []
    for name in experiments:
        dirs = lab.experiment_index.get(name, [])
        if len(dirs) > 1:
            out.append(
                Problem(
                    dirs[1],
                    0,
                    0,
                    "experiment-duplicate",
                    f"experiment {name!r} exists twice: {' and '.join(dirs)}",
                    hint="runs and status files are keyed by the experiment name: rename one folder",
                )
            )
    return out


def load_experiment(lab: Lab, catalog: Catalog, name: str) -> ExperimentContext:
    exp_dir = lab.experiment_dir(name)
    ctx = ExperimentContext(lab, catalog, name, exp_dir)
    if error := name_error(name, "experiment name"):
        ctx.problems.append(
            Problem(
                ctx.rel,
                0,
                0,
                "experiment-name",
                error,
                hint="use ASCII letters, digits, '.', '_' and '-', starting with a letter "
                "or digit; rename the directory",
            )
        )
        return ctx
    if not exp_dir.is_dir():
        ctx.problems.append(
            Problem(ctx.rel, 0, 0, "experiment-missing", f"no experiment named {name!r}", hint=_known(lab, name))
        )
        return ctx
    try:
        os.listdir(exp_dir)
    except OSError as exc:  # a folder tp may not read: every check of its files would stop on it
        ctx.problems.append(
            Problem(
                ctx.rel,
                0,
                0,
                UNREADABLE,
                f"the experiment folder cannot be read: {exc.strerror or exc}",
                hint=f"make it readable: chmod -R u+rwX {ctx.rel}",
            )
        )
        return ctx
    _load_lock(ctx)
    if ctx.lock is not None and catalog.has(ctx.lock.recipe.name):
        ctx.recipe = catalog.recipe(ctx.lock.recipe.name)
    _load_config(ctx)
    _load_manifest(ctx)
    return ctx


def _known(lab: Lab, name: str) -> str:
    names = lab.experiment_names()
    return did_you_mean(name, names) or "see `tp ls` for the experiments of this lab"


def _load_lock(ctx: ExperimentContext) -> None:
    path = ctx.dir / LOCK_FILE
    rel = f"{ctx.rel}/{LOCK_FILE}"
    if not present(path):
        ctx.problems.append(
            Problem(
                rel,
                0,
                0,
                "lock-missing",
                "recipe.lock.json is missing",
                hint=lock_missing_hint(ctx.name, _named_method(ctx)),
            )
        )
        return
    ctx.lock_doc = _read(ctx, lambda: load_json(path, rel, root=ctx.lab.root))
    if ctx.lock_doc is not None:
        ctx.lock = _parse_versioned(
            ctx,
            ctx.lock_doc,
            RecipeLock,
            "lock-schema",
            _unsupported_api(
                ctx.lock_doc,
                (RECIPE_LOCK_API, *LEGACY_LOCK_APIS),
                "lock-version",
                "lock",
                f"expected {RECIPE_LOCK_API}; re-lock with `tp recipe upgrade {ctx.name}`",
            ),
        )


def _named_method(ctx: ExperimentContext) -> str | None:
    """The catalog recipe a lock-less experiment's config.yaml names (None: the person must name it)."""
    method = method_without_lock(ctx.dir, ctx.lab.root)
    return method if method is not None and ctx.catalog.has(method) else None


def _load_config(ctx: ExperimentContext) -> None:
    if ctx.recipe is not None and ctx.recipe.config.mode == "user":
        return  # custom: config.yaml is the user's own file (it may be a template); tp never parses it
    path = ctx.dir / CONFIG_FILE
    if present(path):
        ctx.config = _read(ctx, lambda: load_yaml(path, f"{ctx.rel}/{CONFIG_FILE}", root=ctx.lab.root))


def _load_manifest(ctx: ExperimentContext) -> None:
    """experiment.yaml (optional): its version first, so a newer file says "upgrade", then its fields."""
    path = ctx.dir / EXPERIMENT_FILE
    doc = (
        _read(ctx, lambda: load_yaml(path, f"{ctx.rel}/{EXPERIMENT_FILE}", root=ctx.lab.root))
        if present(path)
        else None
    )
    if doc is not None:
        ctx.manifest = _parse_versioned(
            ctx,
            doc,
            ExperimentManifest,
            "experiment-schema",
            _unsupported_api(
                doc,
                (EXPERIMENT_API,),
                "experiment-version",
                "experiment.yaml",
                f"start the file with `apiVersion: {EXPERIMENT_API}`",
            ),
        )


def _read(ctx: ExperimentContext, load: Callable[[], Doc]) -> Doc | None:
    """A file of the experiment, its reading notes kept; a file that cannot be read is its problem."""
    try:
        doc = load()
    except LoadFailed as exc:
        ctx.problems.append(exc.problem)
        return None
    ctx.problems += doc.notes
    return doc


def _parse_versioned(ctx: ExperimentContext, doc: Doc, model: type[M], rule: str, wrong: Problem | None) -> M | None:
    """The file as `model`, unless its apiVersion is already wrong (then only that is said)."""
    if wrong is not None:
        ctx.problems.append(wrong)
        return None
    parsed, problems = parse_model(model, doc, rule)
    ctx.problems += problems
    return parsed


def _unsupported_api(doc: Doc, accepted: tuple[str, ...], rule: str, what: str, fix: str) -> Problem | None:
    """The problem when `doc`'s apiVersion is not one of `accepted`: a newer version of the same kind
    means tp is too old; anything else is the file's own mistake, with `fix` as the hint."""
    api = doc.data.get("apiVersion") if isinstance(doc.data, dict) else None
    if api in accepted:
        return None
    kind = accepted[0].rsplit("/", 1)[0] + "/"
    newer = isinstance(api, str) and api.startswith(kind)
    return doc.problem(
        "/apiVersion",
        rule,
        f"unsupported {what} apiVersion {api!r}",
        hint=UPGRADE_TP if newer else fix,
    )


def validate_run(
    lab: Lab, catalog: Catalog, path: Path, contexts: dict[str, ExperimentContext], clash: Path | None = None
) -> list[Problem]:
    """The request's problems; `clash` is another request file with the same run id."""
    # lazy: run-request rules load only when requests are checked
    from tuneplane.check.rules.runs import RunContext

    rel = lab.rel(path)
    try:
        doc: Doc = load_yaml(path, rel, root=lab.root)
    except LoadFailed as exc:
        return [exc.problem]
    exp = path.parent.name
    if exp not in contexts:
        contexts[exp] = load_experiment(lab, catalog, exp)
    ctx = RunContext(lab, catalog, path, doc, contexts[exp])
    out: list[Problem] = list(doc.notes)
    if clash is not None:
        out.append(
            doc.problem(
                "/run_id",
                "run-id-duplicate",
                f"run id {path.stem} is also the run id of {lab.rel(clash)}: a run id names one run "
                "across the lab (its status file, run directory and cluster objects)",
                hint="give this request a new run id: `tp submit` makes one; rename the file and its run_id together",
            )
        )
    for rule in run_rules():
        out.extend(rule(ctx))
    return out


def run_files(lab: Lab, experiments: Iterable[str] | None = None) -> list[Path]:
    base = lab.root / "runs"
    if not base.is_dir():
        return []
    names = sorted(experiments) if experiments is not None else sorted(p.name for p in base.iterdir() if p.is_dir())
    found: list[Path] = []
    for name in names:
        d = base / name
        if d.is_dir():
            found += sorted(p for p in d.iterdir() if p.suffix in (".yaml", ".yml"))
    return found
