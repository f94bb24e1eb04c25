"""Job side: plugins run exactly the source their digest pins, and a refusal is one line everywhere.

The directory digest (CONTRACT §3) skips `__pycache__/` and `*.pyc`, so bytecode beside a plugin's
source is not pinned. Python would prefer a cached `.pyc` compiled with `UNCHECKED_HASH` over the
source, and import a sourceless `.pyc` as a module. `guard_imports(root)` gives directories inside a
plugin root finders whose loader compiles the `.py` every time, never reads bytecode and never writes
any; `bytecode_files(root)` names the sourceless files the launcher refuses.

`report_failure(line)` puts the launcher's one-line error where each consumer looks: last on stderr,
in the status message file (`TUNEPLANE_TERMINATION_LOG`, else Kubernetes' `/dev/termination-log`),
and in the file of the launcher that started this rank (`TUNEPLANE_LAUNCH_ERROR_FILE`), so a rank
under torchrun ends the job with exit 78 and that line rather than torchrun's traceback.
Standard library only.
"""

from __future__ import annotations

import importlib.machinery
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path
from types import FrameType

from tuneplane.constants import TERMINATION_LOG_ENV

BYTECODE_SUFFIXES = (".pyc", ".pyo")
LAUNCH_ERROR_ENV = "TUNEPLANE_LAUNCH_ERROR_FILE"
K8S_TERMINATION_LOG = "/dev/termination-log"
MESSAGE_LIMIT = 4096  # Kubernetes keeps at most 4096 bytes of a termination message

_PLUGIN_ROOTS: list[str] = []


class _SourceOnlyLoader(importlib.machinery.SourceFileLoader):
    """Compiles the pinned `.py`: a cached `.pyc` is never read, and none is written into the plugin."""

    def get_data(self, path: str) -> bytes:
        if path.endswith(BYTECODE_SUFFIXES):
            raise OSError(f"bytecode is never read for a plugin: {path}")  # SourceLoader compiles instead
        return super().get_data(path)

    def set_data(self, path: str, data: object, *, _mode: int = 0o666) -> None:
        return None


def _inside_a_plugin(path: str) -> bool:
    real = os.path.realpath(path or ".")
    return any(real == root or real.startswith(root + os.sep) for root in _PLUGIN_ROOTS)


def _plugin_path_hook(path: str) -> importlib.machinery.FileFinder:
    if not _inside_a_plugin(path):
        raise ImportError("not inside a plugin root")  # the standard hooks take it from here
    return importlib.machinery.FileFinder(
        path,
        (_SourceOnlyLoader, importlib.machinery.SOURCE_SUFFIXES),
        (importlib.machinery.ExtensionFileLoader, importlib.machinery.EXTENSION_SUFFIXES),
    )


def guard_imports(root: Path) -> None:
    """From now on, modules under `root` are imported from their source only."""
    real = os.path.realpath(root)
    if real not in _PLUGIN_ROOTS:
        _PLUGIN_ROOTS.append(real)
    if _plugin_path_hook not in sys.path_hooks:
        sys.path_hooks.insert(0, _plugin_path_hook)
    for entry in list(sys.path_importer_cache):
        if _inside_a_plugin(entry):
            del sys.path_importer_cache[entry]


def bytecode_files(root: Path) -> list[str]:
    """Sourceless bytecode under `root` (relative paths); `__pycache__/` is unreachable, so not listed."""
    found = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if d != "__pycache__")
        found += [
            os.path.relpath(os.path.join(dirpath, n), root) for n in sorted(filenames) if n.endswith(BYTECODE_SUFFIXES)
        ]
    return found


def drop_caches(root: Path) -> bool:
    """Remove every `__pycache__` under `root` (a symlink by that name too, never what it points to).

    True when none is left; False when one could not be removed (a read-only package). A cache a
    sibling process removed first counts as removed. `.git/` is skipped: Python never imports from it.
    """
    removed = True
    for dirpath, dirnames, _ in os.walk(root):
        for name in [d for d in dirnames if d in ("__pycache__", ".git")]:
            dirnames.remove(name)
            if name == ".git":
                continue
            path = os.path.join(dirpath, name)
            try:
                if os.path.islink(path):
                    os.unlink(path)
                else:
                    shutil.rmtree(path)
            except FileNotFoundError:
                pass
            except OSError:
                removed = False
    return removed


def report_failure(line: str) -> None:
    """The one-line error: last on stderr, in the status message file, and for the parent launcher."""
    print(line, file=sys.stderr, flush=True)
    _write(os.environ.get(LAUNCH_ERROR_ENV, ""), line, first_wins=True)
    _write(termination_log(), line, first_wins=False)


def termination_log() -> str:
    """Where the job's status message goes: `TUNEPLANE_TERMINATION_LOG`, else the container's
    termination message file where the kubelet made one (a pod), else nowhere ('')."""
    target = os.environ.get(TERMINATION_LOG_ENV, "")
    if not target and os.access(K8S_TERMINATION_LOG, os.W_OK):
        target = K8S_TERMINATION_LOG
    return target


def _write(target: str, line: str, first_wins: bool) -> None:
    if not target:
        return
    flags = os.O_WRONLY | os.O_CREAT | (os.O_EXCL if first_wins else os.O_TRUNC)
    try:
        fd = os.open(target, flags, 0o644)
    except OSError:
        return  # another rank got there first, or nowhere to write: stderr has the line
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        fh.write(line.encode("utf-8")[: MESSAGE_LIMIT - 1].decode("utf-8", "ignore") + "\n")


def run_ranks(argv: list[str], error_file: Path) -> tuple[int, str]:
    """Run a launcher (torchrun, accelerate, a shell) whose ranks re-enter tuneplane.launcher, as a
    child with signals passed on; returns its exit code and the first rank's one-line error ("")."""
    error_file.unlink(missing_ok=True)
    env = dict(os.environ, **{LAUNCH_ERROR_ENV: str(error_file)})
    sys.stdout.flush()
    sys.stderr.flush()
    child = subprocess.Popen(argv, env=env)

    def forward(signum: int, _frame: FrameType | None) -> None:
        child.send_signal(signum)

    previous = {sig: signal.signal(sig, forward) for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)}
    try:
        code = child.wait()
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    try:
        line = error_file.read_text(encoding="utf-8").strip().splitlines()[0]
    except (OSError, IndexError):
        line = ""
    return (128 - code if code < 0 else code), line
