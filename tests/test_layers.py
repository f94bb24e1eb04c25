"""The layering of docs/architecture.md, checked on every import statement of the package (AST)."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

PKG = Path(__file__).resolve().parents[1] / "tuneplane"

JOB_SIDE = ("tuneplane.constants", "tuneplane.report", "tuneplane.launcher", "tuneplane.plugins", "tuneplane.runtime.digest",
            "tuneplane.runtime.versions", "tuneplane.lifecycle")
JOB_SIDE_EXCEPTIONS = {("tuneplane.runtime.digest", "yaml"), ("tuneplane.lifecycle.benchmark_eval", "yaml"),
                       # the generic evaluation runs in training images, which have these
                       ("tuneplane.lifecycle.hf_eval", "datasets"), ("tuneplane.lifecycle.hf_eval", "torch"),
                       ("tuneplane.lifecycle.hf_eval", "transformers"),
                       ("tuneplane.lifecycle.trl_support", "yaml"), ("tuneplane.lifecycle.trl_support", "datasets"),
                       ("tuneplane.lifecycle.trl_support", "transformers"),
                       ("tuneplane.lifecycle.trl_export", "transformers"), ("tuneplane.lifecycle.trl_export", "peft")}
PURE = (
    "tuneplane.models",
    "tuneplane.lab.load",
    "tuneplane.check.validate",
    "tuneplane.check.rules",
    "tuneplane.plan.admission",
    "tuneplane.lab.locks",
    "tuneplane.check.params",
    "tuneplane.plan.shapes",
    "tuneplane.plan.images",
    "tuneplane.plan.resolve",
    "tuneplane.plan.adapters",
    "tuneplane.plan.environment",
    "tuneplane.render.manifests",
    "tuneplane.plan.launchplan",
    "tuneplane.lab.yamlio",
    "tuneplane.problems",
)
EFFECTS = (
    "tuneplane.backends",
    "tuneplane.gitops.bot",
    "tuneplane.gitops.submit",
    "tuneplane.gitops.writeback",
    "tuneplane.lab.gitrepo",
    "subprocess",
    "tuneplane.cli",
)


def _module_name(path: Path) -> str:
    rel = path.relative_to(PKG.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _imports(path: Path) -> list[tuple[str, int]]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(alias.name, node.lineno) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.append((node.module, node.lineno))
            found += [(f"{node.module}.{alias.name}", node.lineno) for alias in node.names]
    return found


def _all_imports() -> list[tuple[str, str, int]]:
    rows = []
    for path in sorted(PKG.rglob("*.py")):
        mod = _module_name(path)
        rows += [(mod, imported, line) for imported, line in _imports(path)]
    return rows


def _within(name: str, prefixes: tuple[str, ...] | str) -> bool:
    prefixes = (prefixes,) if isinstance(prefixes, str) else prefixes
    return any(name == p or name.startswith(p + ".") for p in prefixes)


IMPORTS = _all_imports()


@pytest.mark.parametrize(
    "external, owner", [("kubernetes", "tuneplane.backends.kubernetes.backend"), ("git", "tuneplane.lab.gitrepo")]
)
def test_one_module_per_external_system(external, owner):
    offenders = [(m, i, n) for m, i, n in IMPORTS if _within(i, external) and m != owner]
    assert offenders == [], f"only {owner} may import {external}: {offenders}"


def test_only_the_cli_uses_typer():
    offenders = [
        (m, i, n)
        for m, i, n in IMPORTS
        if (_within(i, "typer") or _within(i, "tuneplane.cli"))
        and not _within(m, ("tuneplane.cli", "tuneplane.__main__", "tuneplane.dev.docgen"))
    ]
    assert offenders == []


def test_job_side_uses_only_the_standard_library():
    stdlib = set(sys.stdlib_module_names)
    offenders = []
    for mod, imported, line in IMPORTS:
        if not _within(mod, JOB_SIDE):
            continue
        top = imported.split(".")[0]
        if top in stdlib or top == "__future__" or _within(imported, JOB_SIDE) or imported == "tuneplane":
            continue
        if imported.startswith("tuneplane.__version__") or (mod, top) in JOB_SIDE_EXCEPTIONS:
            continue
        offenders.append((mod, imported, line))
    assert offenders == [], f"job-side modules must import only the standard library: {offenders}"


def test_pure_stages_do_not_reach_for_effects():
    offenders = [(m, i, n) for m, i, n in IMPORTS if _within(m, PURE) and _within(i, EFFECTS)]
    assert offenders == [], f"pure stages import effectful modules: {offenders}"


def test_tp_help_imports_no_heavy_library():
    """`tp --help` must not pay for pydantic, Jinja2, kubernetes, GitPython or PyYAML."""
    code = (
        "import sys; from tuneplane.cli.main import run; rc = run(['--help']); "
        "heavy = [m for m in ('pydantic', 'jinja2', 'kubernetes', 'git', 'yaml', 'ruamel') if m in sys.modules]; "
        "print('HEAVY', heavy)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert "HEAVY []" in out, out


def test_report_sdk_import_is_light():
    code = (
        "import sys, tuneplane.report; "
        "print('HEAVY', [m for m in ('pydantic', 'typer', 'yaml', 'transformers', 'ray', 'tuneplane.cli') "
        "if m in sys.modules])"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert "HEAVY []" in out, out
