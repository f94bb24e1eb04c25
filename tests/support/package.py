"""The package's own source as syntax trees, parsed once per test process: the suites that read every
module (one home per concept, the constants, who makes a backend, `Any` counted) share one parse
instead of each parsing the package's 280 files again. The trees are read, never changed."""

from __future__ import annotations

import ast
from functools import cache
from pathlib import Path

PKG = Path(__file__).resolve().parents[2] / "tuneplane"


@cache
def package_trees() -> dict[str, ast.Module]:
    """`{path relative to the package: its syntax tree}` for every module, in path order."""
    return {
        path.relative_to(PKG).as_posix(): ast.parse(path.read_text(encoding="utf-8"))
        for path in sorted(PKG.rglob("*.py"))
    }


@cache
def nodes(tree: ast.AST) -> tuple[ast.AST, ...]:
    """Every node of `tree` in `ast.walk` order, walked once per process: a dozen checks walk each
    module's 300,000 nodes, and the walk, not the check, was most of their time."""
    return tuple(ast.walk(tree))
