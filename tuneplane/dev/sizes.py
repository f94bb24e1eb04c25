"""A report of the package's shape for reviewers: the largest modules and the longest functions.

    python -m tuneplane.dev.sizes [--modules 15] [--functions 15]

Size is a prompt to look, not a rule: a module holds one concept whatever its length, and splitting a
module to stay under a number only scatters one job over several files. So nothing fails on a size;
this report shows where a reviewer should ask whether a module still has one job.
"""

from __future__ import annotations

import argparse
import ast
import sys
from pathlib import Path

from tuneplane.constants import EXIT_OK
from tuneplane.runtime.records import FrozenRecord
from tuneplane.runtime.reporter import plain


class Sized(FrozenRecord, order=True):
    lines: int
    name: str


def module_sizes(package: Path) -> list[Sized]:
    """Every module of `package` by its number of lines, largest first."""
    sizes = [
        Sized(len(path.read_text(encoding="utf-8").splitlines()), path.relative_to(package.parent).as_posix())
        for path in package.rglob("*.py")
    ]
    return sorted(sizes, reverse=True)


def function_sizes(package: Path) -> list[Sized]:
    """Every function and method of `package` by its number of lines, longest first."""
    found: list[Sized] = []
    for path in package.rglob("*.py"):
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        module = path.relative_to(package.parent).as_posix()
        for node in ast.walk(tree):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.end_lineno is not None:
                found.append(Sized(node.end_lineno - node.lineno + 1, f"{module}:{node.lineno} {node.name}"))
    return sorted(found, reverse=True)


def report(package: Path, modules: int, functions: int) -> str:
    all_modules = module_sizes(package)
    all_functions = function_sizes(package)
    median = sorted(f.lines for f in all_functions)[len(all_functions) // 2] if all_functions else 0
    lines = [
        f"{len(all_modules)} modules, {sum(m.lines for m in all_modules)} lines; "
        f"{len(all_functions)} functions, median {median} lines",
        "",
        "largest modules:",
    ]
    lines += [f"  {m.lines:5d}  {m.name}" for m in all_modules[:modules]]
    lines += ["", "longest functions:"]
    lines += [f"  {f.lines:5d}  {f.name}" for f in all_functions[:functions]]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tuneplane.dev.sizes", description=__doc__.splitlines()[0])
    parser.add_argument("--modules", type=int, default=15, help="how many of the largest modules to list")
    parser.add_argument("--functions", type=int, default=15, help="how many of the longest functions to list")
    args = parser.parse_args(argv)
    plain.text(report(Path(__file__).resolve().parents[1], args.modules, args.functions))
    return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
