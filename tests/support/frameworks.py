"""The real argument parsers of OpenRLHF and ms-swift, for checking every flag tp renders for them.

OpenRLHF does not install without GPU packages (its wheel requires deepspeed, flash-attn, pynvml), but
each of its CLI modules builds a plain argparse parser in its `__main__` block from literals. We fetch
the release's wheel (`pip download --no-deps`, a few hundred KB), build that parser from the wheel's
own source, parse the rendered flags with it and run the module's own checks on the result, stopping
before `train(args)`; nothing of OpenRLHF beyond argparse and its `hierarchize` helper runs.

ms-swift's wheel installs without its dependencies next to the test extras (torch, transformers, trl,
datasets): a venv that sees them, plus the few pure-Python packages `swift.arguments` imports, gives
its real argument dataclasses. Its Megatron arguments import Megatron-Core and Transformer Engine
(CUDA), so those recipes keep the flag list copied from the docs.

Downloads land in the pytest cache and are reused; without network they skip, in CI they fail.
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import fcntl
import io
import json
import shutil
import site
import subprocess
import sys
import zipfile
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from support.shared import in_ci

# What `swift.arguments` imports beyond the test extras, pinned; pure Python, installed without their
# dependencies too.
SWIFT_EXTRAS = ["modelscope==1.40.2", "modelscope-hub==0.5.1", "json-repair==0.64.6"]


def unavailable(reason: str) -> None:
    if in_ci():
        pytest.fail(reason)
    pytest.skip(reason)


def _locked(cache: Path, name: str) -> Any:
    cache.mkdir(parents=True, exist_ok=True)
    handle = open(cache / f".{name}.lock", "w")  # closed (and so unlocked) by the caller's `with`
    fcntl.flock(handle, fcntl.LOCK_EX)  # xdist workers may arrive together
    return handle


def openrlhf_wheel(cache: Path, version: str) -> Path:
    """OpenRLHF's wheel of `version` (cp311 manylinux, the only kind it publishes), downloaded once."""
    where = cache / f"openrlhf-{version}"
    with _locked(cache, f"openrlhf-{version}"):
        found = sorted(where.glob(f"openrlhf-{version}-*.whl"))
        if found:
            return found[0]
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "pip",
                "download",
                "-q",
                "--no-deps",
                "--only-binary=:all:",
                "--python-version",
                "3.11",
                "--implementation",
                "cp",
                "--abi",
                "cp311",
                "--platform",
                "manylinux1_x86_64",
                f"openrlhf=={version}",
                "-d",
                str(where),
            ],
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
        found = sorted(where.glob(f"openrlhf-{version}-*.whl"))
        if done.returncode or not found:
            unavailable(f"cannot download openrlhf=={version}: {done.stderr.strip()[-300:]}")
        return found[0]


def _wheel_source(wheel: Path, module_path: str) -> str:
    with zipfile.ZipFile(wheel) as zf:
        names = [n for n in zf.namelist() if n.endswith(module_path)]
        if not names:
            raise AssertionError(f"{wheel.name} has no {module_path}")
        return zf.read(names[0]).decode("utf-8")


def _main_block(tree: ast.Module, module: str) -> list[ast.stmt]:
    for node in tree.body:
        if isinstance(node, ast.If) and "__main__" in ast.unparse(node.test):
            return node.body
    raise AssertionError(f"{module} has no `if __name__ == '__main__':` block")


def _stdlib_imports(tree: ast.Module) -> list[ast.stmt]:
    """The module's top-level imports of the standard library (`os`, `datetime`: the parser uses them)."""

    def stdlib(name: str | None) -> bool:
        return (name or "").split(".")[0] in sys.stdlib_module_names

    return [
        s
        for s in tree.body
        if (isinstance(s, ast.Import) and all(stdlib(a.name) for a in s.names))
        or (isinstance(s, ast.ImportFrom) and s.level == 0 and stdlib(s.module))
    ]


def _parser(wheel: Path, module: str) -> tuple[argparse.ArgumentParser, list[ast.stmt], dict[str, Any]]:
    """The parser `module` builds (from the wheel's source), the statements after `parse_args`, and the
    namespace they run in (with OpenRLHF's own `hierarchize`)."""
    tree = ast.parse(_wheel_source(wheel, module.replace(".", "/") + ".py"))
    body = _main_block(tree, module)
    cut = next(i for i, s in enumerate(body) if "parse_args" in ast.unparse(s))
    config_ns: dict[str, Any] = {}
    exec(compile(_wheel_source(wheel, "openrlhf/utils/config.py"), "openrlhf/utils/config.py", "exec"), config_ns)
    ns: dict[str, Any] = {"hierarchize": config_ns["hierarchize"]}
    build = ast.Module(body=[*_stdlib_imports(tree), *body[:cut]], type_ignores=[])
    exec(compile(build, f"{module} (parser)", "exec"), ns)
    return ns["parser"], body[cut + 1 :], ns


def openrlhf_check(wheel: Path, module: str, argv: list[str]) -> str | None:
    """Parse `argv` with the parser `module` (openrlhf.cli.X) builds and run its own checks after
    parsing, up to where its work starts (`train(args)`); None when all pass, else what OpenRLHF says."""
    parser, after, ns = _parser(wheel, module)
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err):
            ns["args"] = parser.parse_args(argv)
    except SystemExit:
        return err.getvalue().strip().splitlines()[-1]
    defined = {
        n.name
        for n in ast.parse(_wheel_source(wheel, module.replace(".", "/") + ".py")).body
        if isinstance(n, ast.FunctionDef)
    }
    checks = [s for s in after if not _is_import(s) and not _calls_one_of(s, defined)]
    out = io.StringIO()
    try:
        with contextlib.redirect_stdout(out):
            exec(compile(ast.Module(body=checks, type_ignores=[]), f"{module} (checks)", "exec"), ns)
    except AssertionError as exc:
        return f"assertion: {exc}"
    except Exception as exc:  # the module itself fails on these arguments: as it would in the job
        return f"{type(exc).__name__}: {exc}"
    warnings = [line for line in out.getvalue().splitlines() if "[Warning]" in line]
    return "; ".join(warnings) or None


def _is_import(stmt: ast.stmt) -> bool:
    return isinstance(stmt, (ast.Import, ast.ImportFrom))


def _calls_one_of(stmt: ast.stmt, functions: set[str]) -> bool:
    """`train(args)`, `apply_lora(...)`: where the module's work starts, after its checks."""
    return (
        isinstance(stmt, ast.Expr)
        and isinstance(stmt.value, ast.Call)
        and isinstance(stmt.value.func, ast.Name)
        and stmt.value.func.id in functions
    )


def openrlhf_args(wheel: Path, module: str, argv: list[str]) -> SimpleNamespace:
    """The parsed, hierarchized arguments (for asserting what a value became)."""
    parser, _, ns = _parser(wheel, module)
    return ns["hierarchize"](parser.parse_args(argv))  # type: ignore[no-any-return]


# ── ms-swift ─────────────────────────────────────────────────────────────────────────────────────


def swift_python(cache: Path, version: str) -> str:
    """A venv that sees the test extras and holds ms-swift `version` without its dependencies."""
    venv = cache / f"ms-swift-{version}"
    python = venv / "bin" / "python"
    with _locked(cache, f"ms-swift-{version}"):
        if (venv / ".ready").exists():
            return str(python)
        shutil.rmtree(venv, ignore_errors=True)
        made = subprocess.run(
            [sys.executable, "-m", "venv", "--system-site-packages", str(venv)],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        if made.returncode:
            unavailable(f"cannot create a venv for ms-swift: {made.stderr.strip()[-300:]}")
        # the test extras wherever this interpreter has them (a venv's own, not only the base's),
        # after the venv's own packages
        [own] = (venv / "lib").glob("python*/site-packages")
        (own / "_test_extras.pth").write_text("\n".join(site.getsitepackages()) + "\n", encoding="utf-8")
        pip = subprocess.run(
            [str(python), "-m", "pip", "install", "-q", "--no-deps", f"ms-swift=={version}", *SWIFT_EXTRAS],
            capture_output=True,
            text=True,
            timeout=600,
            check=False,
        )
        if pip.returncode:
            unavailable(f"cannot install ms-swift=={version} without its dependencies: {pip.stderr.strip()[-300:]}")
        (venv / ".ready").touch()
    return str(python)


SWIFT_CHECK = r"""
import argparse, contextlib, io, json, sys
from transformers import HfArgumentParser
import swift.arguments as arguments
from swift.utils.utils import _patch_get_type_hints

out = {}
for key, (cls_name, argv) in json.loads(sys.stdin.read()).items():
    with _patch_get_type_hints():
        parser = HfArgumentParser([getattr(arguments, cls_name)])
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err):
            ns, rest = argparse.ArgumentParser.parse_known_args(parser, argv)
        plain = (bool, int, float, str, type(None))
        out[key] = {"unknown": rest, "values": {k: v if isinstance(v, plain) else str(v) for k, v in vars(ns).items()}}
    except SystemExit:
        out[key] = {"error": err.getvalue().strip().splitlines()[-1]}
print(json.dumps(out))
"""


def swift_check(python: str, cases: dict[str, tuple[str, list[str]]]) -> dict[str, Any]:
    """Each case's argv parsed by ms-swift's own parser (HfArgumentParser over the arguments class, as
    `swift.utils.parse_args` builds it), stopping before the dataclass is built (its __post_init__ loads
    the model): {case: {"unknown": [...], "values": {...}} or {"error": "..."}}."""
    done = subprocess.run(
        [python, "-c", SWIFT_CHECK], input=json.dumps(cases), capture_output=True, text=True, timeout=600, check=False
    )
    if done.returncode:
        raise AssertionError(f"ms-swift's parser did not run: {done.stderr.strip()[-2000:]}")
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))
