"""`backends.factory`: the one place a Backend is made, and cheap to import."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

PKG = Path(__file__).resolve().parents[1] / "tuneplane"


def test_backends_are_made_only_by_the_factory() -> None:
    """Outside each engine's own package, no module constructs a `…Backend` itself."""
    made = []
    for path in sorted(PKG.rglob("*.py")):
        rel = path.relative_to(PKG).as_posix()
        if rel.startswith("backends/"):
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name | ast.Attribute):
                name = node.func.id if isinstance(node.func, ast.Name) else node.func.attr
                if name.endswith("Backend") and name[0].isupper():
                    made.append(f"{rel}:{node.lineno}: {ast.unparse(node)}")
    assert not made, "make it through tuneplane.backends.factory:\n" + "\n".join(made)


def test_importing_the_factory_loads_no_engine_and_no_pipeline() -> None:
    """`tp job ls` asks the factory for a run's backend: importing it must not load the pipeline."""
    code = (
        "import sys, tuneplane.backends.factory; "
        "print(sorted(m for m in ('tuneplane.plan.resolve', 'tuneplane.backends.local', "
        "'tuneplane.backends.kubernetes', 'tuneplane.backends.slurm', 'kubernetes', 'jinja2') "
        "if m in sys.modules))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert done.stdout.strip() == "[]", done.stdout + done.stderr
