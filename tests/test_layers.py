"""The layering of docs/architecture.md: import-linter's contracts, plus what they cannot say (AST)."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

from support.package import nodes, package_trees

PKG = Path(__file__).resolve().parents[1] / "tuneplane"

JOB_SIDE = (
    "tuneplane.constants",
    "tuneplane.report",
    "tuneplane.collector",
    "tuneplane.launcher",
    "tuneplane.plugins",
    "tuneplane.runtime.digest",
    "tuneplane.runtime.files",
    "tuneplane.runtime.pinned",
    "tuneplane.runtime.versions",
    "tuneplane.runtime.records",
    "tuneplane.runtime.patterns",
    "tuneplane.runtime.streams",
    "tuneplane.runtime.gpuwatch",
    "tuneplane.runtime.attempts",
    "tuneplane.runtime.supervise",
    "tuneplane.runtime.entry",
    "tuneplane.runtime.launchline",
    "tuneplane.lifecycle",
)
JOB_SIDE_EXCEPTIONS = {
    ("tuneplane.runtime.digest", "yaml"),
    ("tuneplane.lifecycle.flatconfig", "yaml"),
    # the generic evaluation runs in training images, which have these
    ("tuneplane.lifecycle.hf_eval", "datasets"),
    ("tuneplane.lifecycle.hf_eval", "torch"),
    ("tuneplane.lifecycle.hf_eval", "transformers"),
    ("tuneplane.lifecycle.trl_support", "yaml"),
    ("tuneplane.lifecycle.trl_support", "datasets"),
    ("tuneplane.lifecycle.trl_support", "transformers"),
    ("tuneplane.lifecycle.trl_support", "peft"),
    ("tuneplane.lifecycle.trl_export", "transformers"),
    ("tuneplane.lifecycle.trl_export", "peft"),
    ("tuneplane.lifecycle.cli_flags", "yaml"),
    ("tuneplane.lifecycle.nemo_rl_export", "yaml"),
    ("tuneplane.lifecycle.nemo_rl_export", "nemo_rl"),
    # under `if TYPE_CHECKING:` only, for a user's type checker (test_report_sdk_import_is_light: never run)
    ("tuneplane.report._callback", "transformers"),
}


def _module_name(path: Path) -> str:
    rel = path.relative_to(PKG.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _imports(tree: ast.Module) -> list[tuple[str, int]]:
    found = []
    for node in nodes(tree):
        if isinstance(node, ast.Import):
            found += [(alias.name, node.lineno) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.append((node.module, node.lineno))
            found += [(f"{node.module}.{alias.name}", node.lineno) for alias in node.names]
    return found


def _trees() -> dict[Path, ast.Module]:
    """Every module's path and syntax tree: the package parsed once per test process (`package_trees`),
    when a test first asks, not while pytest collects this file on every worker."""
    return {PKG / rel: tree for rel, tree in package_trees().items()}


def _all_imports() -> list[tuple[str, str, int]]:
    rows = []
    for path, tree in _trees().items():
        mod = _module_name(path)
        rows += [(mod, imported, line) for imported, line in _imports(tree)]
    return rows


def _within(name: str, prefixes: tuple[str, ...] | str) -> bool:
    prefixes = (prefixes,) if isinstance(prefixes, str) else prefixes
    return any(name == p or name.startswith(p + ".") for p in prefixes)


def test_import_contracts_hold():
    """The stage order, backend independence and one-module-per-system rules of `.importlinter`."""
    code = "import sys; from importlinter.cli import lint_imports_command; sys.exit(lint_imports_command())"
    done = subprocess.run(
        [sys.executable, "-c", code, "--config", str(PKG.parent / ".importlinter"), "--no-cache"],
        capture_output=True,
        text=True,
        cwd=PKG.parent,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "BROKEN" not in done.stdout and "KEPT" in done.stdout


def test_no_relative_imports():
    """Every import names its module in full, so the contracts and a reader see the same thing."""
    relative = []
    for path, tree in _trees().items():
        relative += [
            (_module_name(path), n.lineno) for n in nodes(tree) if isinstance(n, ast.ImportFrom) and n.level > 0
        ]
    assert relative == []


def test_job_side_uses_only_the_standard_library():
    stdlib = set(sys.stdlib_module_names)
    offenders = []
    for mod, imported, line in _all_imports():
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


def _import_groups(tree: ast.AST) -> list[tuple[list[ast.stmt], ast.stmt]]:
    """Each run of import statements inside a function, with the statement whose comments may give the
    reason: the run itself, or the `try:` around it (`try: import x` / `except ImportError: import y`)."""
    parents = {child: node for node in nodes(tree) for child in ast.iter_child_nodes(node)}
    groups: list[tuple[list[ast.stmt], ast.stmt]] = []
    functions = [n for n in nodes(tree) if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)]
    for node in {inner for fn in functions for inner in ast.walk(fn) if inner is not fn} | set(functions):
        for field in ("body", "orelse", "finalbody"):
            body = getattr(node, field, None)
            if not isinstance(body, list):
                continue
            run: list[ast.stmt] = []
            for stmt in [*body, None]:
                if isinstance(stmt, ast.Import | ast.ImportFrom):
                    run.append(stmt)
                    continue
                if run:
                    holder = parents.get(node) if isinstance(node, ast.ExceptHandler) else node
                    in_try = isinstance(holder, ast.Try) and body[0] is run[0]
                    groups.append((run, holder if in_try else run[0]))  # type: ignore[arg-type]
                run = []
    return groups


def _reason_given(lines: list[str], run: list[ast.stmt], anchor: ast.stmt) -> bool:
    text = lines[run[0].lineno - 1 : run[-1].end_lineno or run[-1].lineno]
    text.append(lines[anchor.lineno - 1])
    for first in {run[0].lineno, anchor.lineno}:
        above = first - 2
        while above >= 0 and lines[above].strip().startswith("#"):
            text.append(lines[above])
            above -= 1
    return any("# lazy:" in line for line in text)


def test_every_function_level_import_says_why():
    """A function-level import protects start-up time (or waits for an optional package): one short
    `# lazy: <reason>` comment on it or just above says so; anything else belongs at the top."""
    missing = []
    for path, tree in _trees().items():
        lines = path.read_text(encoding="utf-8").splitlines()
        for run, anchor in _import_groups(tree):
            if not _reason_given(lines, run, anchor):
                missing.append(f"{path.relative_to(PKG.parent)}:{run[0].lineno}: {lines[run[0].lineno - 1].strip()}")
    assert not missing, "function-level imports without a `# lazy: <reason>` comment:\n" + "\n".join(missing)


# The one home of the backends' names: the table of their kinds, and the engines' own packages.
NAMES_HOME = ("backends/", "models/backendkinds.py")
# The words a backend is named by, meaning something else in these files: how many, and what they are.
NOT_A_BACKEND: dict[str, tuple[int, str]] = {
    "runtime/versions.py": (2, "a PEP 440 version's local label"),
    "models/plugin.py": (1, "a data-prep plugin that runs on your machine (`execution: local`)"),
    "check/plugin_dirs.py": (1, "the same, read from a StarForge manifest"),
    "author/migrate.py": (1, "the same, written by tp migrate"),
    "models/lab.py": (1, "the profile of a lab that names none"),
}
# Backend names still written outside the home by code another change owns, with how many times each:
# remove an entry once its file asks `backend_kind` (`models.backendkinds`) instead.
BACKEND_NAME_PENDING: dict[str, int] = {}


def _backend_names(tree: ast.AST) -> list[int]:
    """The lines of `tree` holding a string that is exactly a backend's name (a comparison, a default)."""
    from tuneplane.models.backendkinds import BACKEND_KINDS

    return [
        node.lineno
        for node in nodes(tree)
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in BACKEND_KINDS
    ]


def _backend_names_in(path: Path) -> list[int]:
    return _backend_names(ast.parse(path.read_text(encoding="utf-8")))


def test_no_backend_is_named_outside_backends():
    """Every package but backends/ asks a backend's kind (`backend_kind(name).runs_here`, `cluster_kind`,
    `backend_name`) what it can do, and `cluster.backend` takes its names from the kinds' table, so a new
    backend touches backends/ and its row in `models.backendkinds` alone."""
    found = {}
    for rel, tree in package_trees().items():
        lines = [] if rel.startswith(NAMES_HOME) else _backend_names(tree)
        if lines:
            found[rel] = lines
    elsewhere = {rel: len(found.pop(rel, [])) for rel in NOT_A_BACKEND}
    assert elsewhere == {rel: count for rel, (count, _) in NOT_A_BACKEND.items()}, "update NOT_A_BACKEND"
    pending = {rel: len(found.pop(rel, [])) for rel in BACKEND_NAME_PENDING}
    assert found == {}, f"backend names outside backends/ (ask models.backendkinds.backend_kind): {found}"
    assert pending == BACKEND_NAME_PENDING, "a pending file changed: update BACKEND_NAME_PENDING"


def test_backend_names_are_found(tmp_path: Path):
    """The scan sees a comparison with a backend's name, and not the word inside prose."""
    path = tmp_path / "mod.py"
    path.write_text('"""A local run."""\n\nLOCAL = ref.backend == "slurm"\n', encoding="utf-8")
    assert _backend_names_in(path) == [3]
