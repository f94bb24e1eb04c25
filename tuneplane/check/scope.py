"""Which experiments and run requests a command covers: names, paths, `--all` or `--changed`."""

from __future__ import annotations

import os
from pathlib import Path

from tuneplane.check.validate import run_files
from tuneplane.errors import UsageError
from tuneplane.lab.fs import find_lab_root, present
from tuneplane.lab.layout import plugin_index
from tuneplane.lab.load import Lab
from tuneplane.lab.yamlio import LoadFailed, load_json
from tuneplane.runtime.records import Record


class Scope(Record):
    __slots__ = ("experiments", "runs", "plugins", "everything")
    _fields = __slots__

    def __init__(
        self,
        experiments: set[str] | None = None,
        runs: set[Path] | None = None,
        plugins: set[str] | None = None,
        everything: bool = False,
    ) -> None:
        self.experiments = set() if experiments is None else experiments
        self.runs: set[Path] = set() if runs is None else runs
        self.plugins = set() if plugins is None else plugins
        self.everything = everything

    def describe(self) -> str:
        text = f"{len(self.experiments)} experiment(s), {len(self.runs)} run request(s)"
        return text + (f", {len(self.plugins)} plugin(s)" if self.plugins else "")


def plugin_names(lab: Lab) -> set[str]:
    return set(plugin_index(lab.root))


def _experiment_root(lab: Lab, parts: tuple[str, ...]) -> int:
    """How many leading parts of a path name the experiment root it lies in (0: none)."""
    for base in lab.config.experiment_roots:
        depth = len(Path(base).parts)
        if len(parts) > depth and parts[:depth] == Path(base).parts:
            return depth
    return 0


def _plugins(lab: Lab) -> dict[str, list[str]]:
    return plugin_index(lab.root)


def scope_all(lab: Lab) -> Scope:
    return Scope(set(lab.experiment_names()), set(run_files(lab)), plugin_names(lab), everything=True)


def scope_for_paths(lab: Lab, paths: list[str]) -> Scope:
    """Map changed or named files (relative to the lab root) to what must be re-checked.

    A file inside an experiment checks that experiment; a run request checks itself; a file of a
    plugin checks the plugin and every experiment locking it; `tuneplane.yaml` or the catalog checks
    everything. Anything else (`README.md`, `status/`, a folder's `.gitkeep`) has nothing to check.
    """
    scope = Scope()
    plugins: set[str] = set()
    for rel in paths:
        parts = Path(rel).parts
        if rel == "tuneplane.yaml" or (parts and parts[0] == "catalog"):
            return scope_all(lab)
        root = _experiment_root(lab, parts)
        if root:
            folder = lab.root.joinpath(*parts[: root + 1])
            if not parts[root].startswith(".") and folder.is_dir():  # not a root's .gitkeep or a gone folder
                scope.experiments.add(parts[root])
        elif any(Path(rel).is_relative_to(d) for d in lab.config.shared_code):
            return scope_all(lab)  # shared code reaches every experiment
        elif len(parts) >= 3 and parts[0] == "runs" and rel.endswith((".yaml", ".yml")):
            if present(lab.root / rel):  # the reader refuses a FIFO or a link there, by name
                scope.runs.add(lab.root / rel)
        elif len(parts) == 2 and parts[0] == "sweeps" and rel.endswith((".yaml", ".yml")):
            scope.experiments |= _sweep_experiment(lab, lab.root / rel)  # its experiment checks its sweeps
        elif len(parts) >= 2 and parts[0] == "plugins":
            plugins |= {name for name, dirs in _plugins(lab).items() if any(Path(rel).is_relative_to(d) for d in dirs)}
    if plugins:
        scope.plugins |= plugins
        scope.experiments |= experiments_locking(lab, plugins)
    return scope


def experiments_locking(lab: Lab, plugins: set[str]) -> set[str]:
    """Experiments whose lock names one of `plugins`; a lock that cannot be read counts (validate says why)."""
    found = set()
    for name in lab.experiment_names():
        path = lab.experiment_dir(name) / "plugins.lock.json"
        if not present(path):
            continue
        try:
            data = load_json(path, lab.rel(path), root=lab.root).data
        except LoadFailed:
            found.add(name)
            continue
        entries = data.get("plugins", []) if isinstance(data, dict) else []
        if not isinstance(entries, list):
            found.add(name)
            continue
        ids = {str(e.get("id", "")).rsplit("/", 1)[-1] for e in entries if isinstance(e, dict)}
        if ids & plugins:
            found.add(name)
    return found


def scope_for_args(lab: Lab, args: list[str]) -> Scope:
    """Arguments may be experiment names or file paths (as pre-commit passes them, from any folder)."""
    scope = Scope()
    names = set(lab.experiment_names())
    for arg in args:
        path = Path(arg)
        if present(path) and ("/" in arg or arg not in names):
            rel = _lab_rel(lab, path)
            if rel is None:
                _refuse_other_lab(lab, arg, path)
                continue  # outside every lab (pre-commit in a larger repository): nothing of ours to check
            sub = scope_for_paths(lab, [rel])
            scope.experiments |= sub.experiments
            scope.runs |= sub.runs
            scope.plugins |= sub.plugins
        else:
            # a known name (here even when a path of that name is too: it was tried first), or a bare
            # word that names no path (its check says there is no such experiment, and the closest)
            bare = "/" not in arg.strip("/")
            name = arg if arg in names or (bare and not present(path)) else _missing_experiment(lab, arg)
            scope.experiments.add(name)
            scope.runs |= set(run_files(lab, [name]))
    return scope


def _refuse_other_lab(lab: Lab, arg: str, path: Path) -> None:
    """A file of another lab is that lab's to check: "no problems" here would be a false all-clear."""
    try:
        other = find_lab_root(path.absolute().parent)
    except UsageError:
        return
    if other.resolve() != lab.root.resolve():
        raise UsageError(
            f"{arg} belongs to the lab at {other}, not to this one ({lab.root})",
            hint=f"check it in its own lab: cd {other} && tp validate {os.path.abspath(path)}",
        )


def _missing_experiment(lab: Lab, arg: str) -> str:
    """A path that is not there: under an experiment root it names that experiment (whose check then
    says it does not exist, with the closest name); anything else is a mistyped argument."""
    rel = _lab_rel(lab, Path(arg)) or arg
    parts = [p for p in rel.strip("/").split("/") if p]
    for experiment_root in lab.config.experiment_roots:
        depth = len([p for p in experiment_root.strip("/").split("/") if p])
        if len(parts) > depth and "/".join(parts[:depth]) == experiment_root.strip("/"):
            return parts[depth]
    raise UsageError(
        f"{arg}: no such file or experiment", hint="pass experiment names (see `tp ls`) or files of the lab"
    )


def _lab_rel(lab: Lab, path: Path) -> str | None:
    """`path` relative to the lab root (a link judged where it sits); the lab root itself is its marker."""
    for base, target in (
        (os.path.abspath(lab.root), os.path.abspath(path)),
        (os.path.realpath(lab.root), os.path.realpath(path)),
    ):
        if target == base:
            return "tuneplane.yaml"
        if target.startswith(base.rstrip(os.sep) + os.sep):
            return Path(target).relative_to(base).as_posix()
    return None


def _sweep_experiment(lab: Lab, path: Path) -> set[str]:
    """The experiment a changed sweep file names, when it is one of the lab's (validate checks a sweep
    with its experiment); nothing for a file that is gone or cannot be read (then every sweep whose
    experiment cannot be read is checked anyway)."""
    from tuneplane.lab.sweeps import load_sweep_doc  # lazy: only a change to a sweep reads one

    if not present(path):
        return set()
    try:
        data = load_sweep_doc(lab.root, path).data
    except LoadFailed:
        return set()
    name = data.get("experiment") if isinstance(data, dict) else None
    return {name} if isinstance(name, str) and name in lab.experiment_names() else set()
