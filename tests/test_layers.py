"""The layering of docs/architecture.md: import-linter's contracts, plus what they cannot say (AST)."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

PKG = Path(__file__).resolve().parents[1] / "tuneplane"

JOB_SIDE = ("tuneplane.constants", "tuneplane.report", "tuneplane.collector", "tuneplane.launcher",
            "tuneplane.plugins", "tuneplane.runtime.digest", "tuneplane.runtime.pinned",
            "tuneplane.runtime.versions", "tuneplane.runtime.records", "tuneplane.runtime.patterns",
            "tuneplane.lifecycle")
JOB_SIDE_EXCEPTIONS = {("tuneplane.runtime.digest", "yaml"), ("tuneplane.lifecycle.flatconfig", "yaml"),
                       # the generic evaluation runs in training images, which have these
                       ("tuneplane.lifecycle.hf_eval", "datasets"), ("tuneplane.lifecycle.hf_eval", "torch"),
                       ("tuneplane.lifecycle.hf_eval", "transformers"),
                       ("tuneplane.lifecycle.trl_support", "yaml"), ("tuneplane.lifecycle.trl_support", "datasets"),
                       ("tuneplane.lifecycle.trl_support", "transformers"), ("tuneplane.lifecycle.trl_support", "peft"),
                       ("tuneplane.lifecycle.trl_export", "transformers"), ("tuneplane.lifecycle.trl_export", "peft"),
                       ("tuneplane.lifecycle.cli_flags", "yaml"), ("tuneplane.lifecycle.nemo_rl_export", "yaml"),
                       ("tuneplane.lifecycle.nemo_rl_export", "nemo_rl")}


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


def test_import_contracts_hold():
    """The stage order, backend independence and one-module-per-system rules of `.importlinter`."""
    code = "import sys; from importlinter.cli import lint_imports_command; sys.exit(lint_imports_command())"
    done = subprocess.run([sys.executable, "-c", code, "--config", str(PKG.parent / ".importlinter"), "--no-cache"],
                          capture_output=True, text=True, cwd=PKG.parent, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "BROKEN" not in done.stdout and "KEPT" in done.stdout


def test_no_relative_imports():
    """Every import names its module in full, so the contracts and a reader see the same thing."""
    relative = []
    for path in sorted(PKG.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        relative += [(_module_name(path), n.lineno) for n in ast.walk(tree)
                     if isinstance(n, ast.ImportFrom) and n.level > 0]
    assert relative == []


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
