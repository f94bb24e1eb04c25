"""`tuneplane.constants` is the one home of exit codes, phase sets and the shared `TUNEPLANE_*` names:
no module spells one of them again, the job side that reads a name included."""

from __future__ import annotations

import ast
from collections import defaultdict
from typing import get_args

from support.package import nodes, package_trees

from tuneplane import constants
from tuneplane.errors import ProblemsFound, RunFailed, TunePlaneError, UsageError
from tuneplane.render.schemacheck import ManifestInvalid

# The job side (which keeps its own exit codes and phases out of these rules) and the home itself.
JOB_SIDE = ("report/", "collector/", "lifecycle/", "runtime/", "launcher.py", "plugins.py", "constants.py")
RENAME_TABLE = "lab/starforge.py"  # StarForge's names beside their TunePlane names, the data `tp migrate` applies
PHASES = set(get_args(constants.Phase))


def _developer_side() -> list[tuple[str, ast.Module]]:
    return [(rel, tree) for rel, tree in package_trees().items() if not rel.startswith(JOB_SIDE)]


def _every_module() -> list[tuple[str, ast.Module]]:
    """Both sides: an environment name is written by the developer side and read by the job side."""
    return [(rel, tree) for rel, tree in package_trees().items() if rel not in ("constants.py", RENAME_TABLE)]


def _strings(tree: ast.Module) -> list[ast.Constant]:
    docstrings = {
        id(node.body[0].value)
        for node in nodes(tree)
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)
        and node.body
        and isinstance(node.body[0], ast.Expr)
    }
    return [
        node
        for node in nodes(tree)
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings
    ]


def test_a_shared_name_is_spelled_only_in_constants() -> None:
    shared = {
        value: name
        for name, value in vars(constants).items()
        if name.isupper() and isinstance(value, str) and value.startswith(("TUNEPLANE_", "HF_TOKEN"))
    }
    found = [
        f"{rel}:{node.lineno}: {node.value!r} is constants.{shared[node.value]}"
        for rel, tree in _every_module()
        for node in _strings(tree)
        if node.value in shared
    ]
    assert not found, "\n".join(found)


def test_a_tuneplane_name_two_modules_use_lives_in_constants() -> None:
    users: dict[str, set[str]] = defaultdict(set)
    for rel, tree in _every_module():
        for node in _strings(tree):
            if node.value.startswith("TUNEPLANE_") and node.value.isupper():
                users[node.value].add(rel)
    spread = {name: sorted(files) for name, files in users.items() if len(files) > 1}
    assert not spread, f"move these to tuneplane.constants: {spread}"


def test_exit_codes_are_the_constants() -> None:
    literal = []
    for rel, tree in _developer_side():
        for node in nodes(tree):
            targets = node.targets if isinstance(node, ast.Assign) else []
            named = [t for t in targets if getattr(t, "id", getattr(t, "attr", "")) == "exit_code"]
            value = getattr(node, "value", None)
            if named and isinstance(value, ast.Constant) and isinstance(value.value, int):
                literal.append(f"{rel}:{node.lineno}: exit_code = {value.value!r}")
            in_cli = rel.startswith("cli/")
            if (
                in_cli
                and isinstance(node, ast.Return)
                and isinstance(node.value, ast.Constant)
                and type(node.value.value) is int
                and node.value.value
            ):  # a bool is no exit code
                literal.append(f"{rel}:{node.lineno}: return {node.value.value}")
    assert not literal, "\n".join(literal)
    assert (TunePlaneError.exit_code, UsageError.exit_code) == (constants.EXIT_USAGE, constants.EXIT_USAGE)
    assert ProblemsFound.exit_code == RunFailed.exit_code == constants.EXIT_PROBLEMS
    assert ManifestInvalid.exit_code == constants.EXIT_INTERNAL


def test_sets_of_phases_are_the_constants() -> None:
    """`TERMINAL`, `UNDER_WAY`, `RAN_TO_END`: not a tuple of phase names written again in a module.
    The Kubernetes backend's sets are of Kubernetes' own pod phases and stay with it."""
    again = []
    for rel, tree in _developer_side():
        if rel.startswith("backends/kubernetes/"):
            continue
        for node in nodes(tree):
            if (
                isinstance(node, ast.Tuple | ast.Set | ast.List)
                and len(node.elts) > 1
                and all(isinstance(e, ast.Constant) and e.value in PHASES for e in node.elts)
            ):
                again.append(f"{rel}:{node.lineno}: {ast.unparse(node)}")
    assert not again, "\n".join(again)
    assert constants.TERMINAL | constants.UNDER_WAY | {"Submitted"} == PHASES
    assert constants.RAN_TO_END < constants.TERMINAL
    assert set(get_args(constants.ObservedPhase)) == PHASES - {"Submitted"} | {"Unknown"}


def test_scalar_is_written_once() -> None:
    """`Scalar` (a `--set` value, a rule's `in:` list) is `constants.Scalar`, not the union spelled again."""
    spelled = [
        f"{rel}:{node.lineno}"
        for rel, tree in _developer_side()
        for node in nodes(tree)
        if isinstance(node, ast.BinOp) and ast.unparse(node) == "bool | int | float | str"
    ]
    assert not spelled, spelled
