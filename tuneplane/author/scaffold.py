"""`tp init` and `tp new`: write a lab or an experiment from packaged templates, never clobbering.

Everything is rendered to memory (or a staging directory) first and put in place at the end, so a
failure leaves nothing half-written.
"""

from __future__ import annotations

import re
import shutil
import tempfile
from collections.abc import Mapping
from pathlib import Path, PurePosixPath

from tuneplane import __version__
from tuneplane.author.editor import packaged_schemas, write_schemas
from tuneplane.author.toolsource import ToolSource, installed_source
from tuneplane.errors import UsageError
from tuneplane.lab.catalog import Catalog, load_catalog
from tuneplane.lab.fs import atomic_write, publish_dir, write_json
from tuneplane.lab.gitrepo import GitRepo
from tuneplane.lab.load import LAB_DIRS, LAB_FILE, LEGACY_LAB_FILE, Lab
from tuneplane.lab.locks import LOCK_FILE, make_lock, runtime_key
from tuneplane.lab.runs import SPARSE_CHECKOUT
from tuneplane.lab.schemarefs import comment_line, config_schema_rel, reference, schema_rel, with_comment
from tuneplane.lab.yamlio import LoadFailed, load_json
from tuneplane.models.backendkinds import BACKEND_KINDS, DEFAULT_BACKEND, BackendKind, backend_kind
from tuneplane.models.base import name_error
from tuneplane.models.recipe import Recipe
from tuneplane.render.templating import render
from tuneplane.runtime.digest import SKIP_NAMES, SKIP_PARTS, SKIP_SUFFIXES
from tuneplane.runtime.records import FrozenRecord

CONFIG_FILE = "config.yaml"
# The actions the lab's workflow pins by commit; .github/dependabot.yml keeps them current.
ACTIONS = {
    "checkout": {"sha": "3d3c42e5aac5ba805825da76410c181273ba90b1", "version": "v7.0.1"},
    "setup_python": {"sha": "5fda3b95a4ea91299a34e894583c3862153e4b97", "version": "v7.0.0"},
    "create_github_app_token": {"sha": "1b10c78c7865c340bc4f6099eb2f838309f1e8c3", "version": "v3.1.1"},
}
# How the bot jobs push their status commits (docs/gitops.md, the bot's push identity). A deploy key by
# default: one secret, this repository only, and a ruleset can let it past a protected branch, which no
# bypass list can do for GITHUB_TOKEN.
PUSH_IDENTITIES = ("deploy-key", "github-app", "github-token")


class InitResult(FrozenRecord):
    root: Path
    name: str
    files: list[str]
    commit: str | None


DEFAULT_RUNNER = "tuneplane"  # the self-hosted runner label of a local or Slurm lab's bot jobs


def lab_files(
    name: str,
    backend: str = DEFAULT_BACKEND,
    tool: ToolSource | None = None,
    runner: str = DEFAULT_RUNNER,
    extra: Mapping[str, str] | None = None,
    push_identity: str = PUSH_IDENTITIES[0],
) -> dict[str, str]:
    """The files of a new lab, rendered in memory; `tool` says how CI and pre-commit install tp; `extra`:
    files a layer above writes (the Kubernetes bot's RBAC, which the backend declares)."""
    tool = tool or installed_source(__version__)
    kind = backend_kind(backend)
    files = {
        LAB_FILE: render(
            "lab/tuneplane.yaml.j2",
            name=name,
            backend=backend,
            tool=tool,
            schema_ref=reference(LAB_FILE, schema_rel("lab")),
        ),
        "README.md": render("lab/README.md.j2", name=name),
        ".gitignore": render("lab/gitignore"),
        ".pre-commit-config.yaml": render("lab/pre-commit-config.yaml.j2", hook=_hook(tool)),
        ".github/workflows/tuneplane.yml": render(
            "lab/workflow.yml.j2",
            branch="main",
            actions=ACTIONS,
            push_identity=push_identity,
            sparse=SPARSE_CHECKOUT,
            **_bot_runner(kind, runner),
        ),
        ".github/dependabot.yml": render("lab/dependabot.yml.j2"),
        **({".github/actionlint.yaml": _runner_labels(runner)} if kind.bot_machine else {}),
        **packaged_schemas(),
        **(extra or {}),
    }
    for d in LAB_DIRS:
        files[f"{d}/.gitkeep"] = ""
    return files


def _bot_runner(kind: BackendKind, runner: str) -> dict[str, object]:
    """Where the bot jobs run: a hosted runner reaches a Kubernetes API server (with the kubeconfig the
    workflow writes); a local run or `sbatch` needs a machine that stays (the backend's `bot_machine`),
    so those labs' bots run on a self-hosted runner with the given label."""
    if not kind.bot_machine:
        return {
            "runs_on": "ubuntu-latest",
            "kubeconfig": kind.runs_in_pods,
            "runner_why": "The bot jobs reach the cluster's API server from a hosted runner.",
        }
    return {
        "runs_on": f"[self-hosted, {runner}]",
        "kubeconfig": kind.runs_in_pods,
        "runner_why": f"The bot jobs run on {kind.bot_machine}: a self-hosted runner labelled {runner}\n  # (a "
        "hosted runner is gone after each job, and with it every run it started).",
    }


def _runner_labels(runner: str) -> str:
    """actionlint's settings: the self-hosted runner label the bot jobs ask for is one of the lab's."""
    return (
        "# The lab's self-hosted runner labels, for actionlint (tp init wrote this).\n"
        f"self-hosted-runner:\n  labels:\n    - {runner}\n"
    )


def _hook(tool: ToolSource) -> dict[str, str]:
    """The project's own hook at a release tag when the project's repository is known, else a local one."""
    if tool.hook_repo:
        return {"repo": tool.hook_repo, "rev": tool.hook_rev}
    why = (
        "the project's repository is not known here, so the hook installs tp as tool.requirement says"
        if tool.requirement
        else "tp's source is not known here: this hook runs the tp on your PATH"
    )
    return {"repo": "", "why": why, "requirement": tool.requirement}


def default_lab_name(root: Path) -> str:
    name = re.sub(r"[^A-Za-z0-9._-]+", "-", root.resolve().name).strip("-.") or "lab"
    return name


def init_lab(
    root: Path,
    name: str | None,
    use_git: bool,
    backend: str = DEFAULT_BACKEND,
    tool: ToolSource | None = None,
    runner: str = DEFAULT_RUNNER,
    extra: Mapping[str, str] | None = None,
    push_identity: str = PUSH_IDENTITIES[0],
) -> InitResult:
    root = root.resolve()
    if root.exists() and not root.is_dir():
        raise UsageError(f"{root} is a file, not a directory", hint="pass a directory for the new lab")
    if (root / LAB_FILE).exists():
        raise UsageError(
            f"{root} is already a TunePlane lab ({LAB_FILE} exists)",
            hint="nothing to do; use `tp new` to add an experiment",
        )
    if (root / LEGACY_LAB_FILE).exists():
        raise UsageError(f"{root} is a StarForge lab", hint="run `tp migrate` to convert it in place")
    name = name or default_lab_name(root)
    if error := name_error(name, "lab name", lab=True):
        raise UsageError(error, hint="use letters, digits, '.', '_' and '-'")
    if backend not in BACKEND_KINDS:
        raise UsageError(f"backend {backend!r} is not known", hint=f"choose one of: {', '.join(BACKEND_KINDS)}")
    if error := name_error(runner, "runner label"):
        raise UsageError(error, hint="use letters, digits, '.', '_' and '-', starting with a letter or digit")
    if push_identity not in PUSH_IDENTITIES:
        raise UsageError(
            f"push identity {push_identity!r} is not known",
            hint=f"choose one of: {', '.join(PUSH_IDENTITIES)} (docs/gitops.md: the bot's push identity)",
        )
    files = lab_files(name, backend, tool, runner, extra, push_identity)
    clashes = [rel for rel in files if (root / rel).exists() and not rel.endswith(".gitkeep")]
    folders = {str(Path(rel).parent) for rel in files if "/" in rel}
    folders |= {str(p) for f in list(folders) for p in Path(f).parents if str(p) != "."}
    clashes += sorted(d for d in folders if (root / d).exists() and not (root / d).is_dir())
    if clashes:
        raise UsageError(
            f"refusing to overwrite existing files: {', '.join(clashes)}",
            hint="move them away or run `tp init` in an empty directory",
        )
    root.mkdir(parents=True, exist_ok=True)  # only now: a refused init leaves no folder behind
    written = []
    for rel, text in files.items():
        path = root / rel
        if path.exists():
            continue
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write(path, text)
        written.append(rel)
    commit = _first_commit(root, written, name) if use_git else None
    return InitResult(root, name, written, commit)


def _first_commit(root: Path, files: list[str], name: str) -> str:
    repo = GitRepo(root) if (root / ".git").exists() else GitRepo.init(root)
    repo.ensure_identity()
    return repo.add_and_commit(files, f"Create TunePlane lab {name}\n\nWritten by tp init {__version__}.")


def check_experiment_name(name: str) -> None:
    if error := name_error(name, "experiment name"):
        raise UsageError(
            error,
            hint="use ASCII letters, digits, '.', '_' and '-', starting with a letter or digit "
            "(e.g. sft_qwen3-8b_alpaca_v1)",
        )


def _ignore(directory: str, names: list[str]) -> set[str]:
    return {n for n in names if n in SKIP_PARTS or n in SKIP_NAMES or n.endswith(SKIP_SUFFIXES)}


def experiment_root(lab: Lab, root: str | None) -> Path:
    """The declared experiment root `tp new --root` names (`smoke`, `smoke/`, `./smoke`), or the first
    one; an undeclared root is refused with the declared ones."""
    declared = lab.config.experiment_roots
    if root is None:
        return lab.experiments_dir()
    wanted = PurePosixPath(root.replace("\\", "/"))
    for base in declared:
        if PurePosixPath(base) == wanted:
            return lab.root / base
    names = ", ".join(declared) if declared else "none"
    raise UsageError(
        f"--root {root!r} is not an experiment root of this lab (declared in {LAB_FILE}: {names})",
        hint=f"pick one of them, or add {str(wanted)!r} to experiment_roots in {LAB_FILE} first",
    )


def new_experiment(
    lab: Lab,
    name: str,
    method: str | None,
    framework_version: str | None,
    source: str | None = None,
    catalog: Catalog | None = None,
    root: str | None = None,
) -> Path:
    """Scaffold `name` into the experiment root `root` (the first declared one by default)."""
    catalog = catalog or load_catalog()
    check_experiment_name(name)
    base = experiment_root(lab, root)
    target = base / name
    if target.exists() or target.is_symlink() or name in lab.experiment_index:
        where = lab.rel(target) if target.exists() or target.is_symlink() else lab.experiment_rel(name)
        raise UsageError(
            f"experiment {name!r} already exists at {where}",
            hint="choose another name (names are unique across the experiment roots), or delete the directory first",
        )
    src_dir, method = _source(lab, source, method)
    catalog.require(method)
    recipe = catalog.recipe(method)
    try:
        key, _ = runtime_key(recipe, framework_version)
    except ValueError as exc:
        raise UsageError(str(exc), hint="omit --framework-version for the default") from None
    template = src_dir or catalog.template_dir(method)
    base.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".tp-new-{name}-", dir=base))
    try:
        shutil.copytree(template, staging / name, ignore=_ignore, symlinks=False)
        write_json(staging / name / LOCK_FILE, make_lock(catalog, method, key))
        _point_config_at_its_schema(lab, staging / name, f"{lab.rel(target)}/{CONFIG_FILE}", method, recipe)
        publish_dir(staging / name, target)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return target


def _point_config_at_its_schema(lab: Lab, exp_dir: Path, rel: str, method: str, recipe: Recipe) -> None:
    """Write the recipe's config schema into the lab and name it on config.yaml's first line (`rel`:
    where config.yaml will be, relative to the lab)."""
    config = exp_dir / CONFIG_FILE
    write_schemas(lab.root, {method: recipe})
    if not recipe.params or not config.is_file():
        return  # custom: config.yaml is the user's own, nothing reads it
    line = comment_line(rel, config_schema_rel(method))
    atomic_write(config, with_comment(config.read_text(encoding="utf-8"), line))


def _source(lab: Lab, source: str | None, method: str | None) -> tuple[Path | None, str]:
    if source is None:
        if not method:
            raise UsageError("tp new needs --method FRAMEWORK/RECIPE", hint="see `tp methods` for the catalog")
        return None, method
    src = lab.experiment_dir(source) if "/" not in source else Path(source)  # in any root
    if not src.is_dir():
        raise UsageError(f"--from {source!r}: no such experiment", hint="name an experiment of this lab (`tp ls`)")
    if method is None:
        lock = src / LOCK_FILE
        try:  # the lab's reader: a regular file of bounded size, strict JSON
            method = load_json(lock, str(lock)).data["recipe"]["name"]
        except (LoadFailed, KeyError, TypeError):
            raise UsageError(f"--from {source!r} has no readable {LOCK_FILE}", hint="pass --method too") from None
    return src, str(method)
