"""The harness of the adversarial suite: the real `tp` in a child process, fenced in.

Every hostile input runs `python -m tuneplane …` under a wall-clock timeout and an address-space cap
(`RLIMIT_AS`), with a file-size cap so a runaway writer cannot fill the disk. A hang, a memory blow-up,
a crash or a traceback fails the case with what happened; a clear outcome is an exit code (1 problems,
2 usage), the file and line in the output, and the rule or words of the message.
"""

from __future__ import annotations

import os
import resource
import shutil
import signal
import subprocess
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from support.procs import child_env
from support.repos import git

MEMORY_CAP = 1024 * 1024 * 1024  # address space: tp needs ~300 MiB; a file read whole blows past it
FILE_SIZE_CAP = 64 * 1024 * 1024
TIMEOUT = 20.0
RUN_ID = "20260101-120000-abcdef"
RUN_REQUEST = f"runs/img/{RUN_ID}.yaml"
IMAGE = "registry.example.com/team/trainer:1.0"
ALLOW = {"TUNEPLANE_ALLOWED_IMAGE_REGISTRIES": "registry.example.com"}


@dataclass(frozen=True)
class Outcome:
    code: int
    out: str
    err: str

    @property
    def output(self) -> str:
        return self.out + self.err


def _fence(memory: int) -> None:
    os.setsid()  # its own process group, so a timeout kills it and whatever it started
    resource.setrlimit(resource.RLIMIT_AS, (memory, memory))
    resource.setrlimit(resource.RLIMIT_FSIZE, (FILE_SIZE_CAP, FILE_SIZE_CAP))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))


def fenced(
    argv: Sequence[str],
    cwd: Path,
    env: Mapping[str, str | None] | None = None,
    timeout: float = TIMEOUT,
    memory: int = MEMORY_CAP,
    stdin: str = "",
) -> Outcome:
    """Run `argv` under the fence; AssertionError when it hangs or dies of a signal."""
    proc = subprocess.Popen(
        list(argv),
        cwd=cwd,
        env=child_env(env),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=lambda: _fence(memory),
    )
    try:
        out, err = proc.communicate(stdin, timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        raise AssertionError(f"{' '.join(argv)} hung for more than {timeout}s\n{out}{err}") from None
    if proc.returncode < 0:
        raise AssertionError(f"{' '.join(argv)} died of signal {-proc.returncode}\n{out}{err}")
    return Outcome(proc.returncode, out, err)


def tp(
    *args: str,
    cwd: Path,
    env: Mapping[str, str | None] | None = None,
    timeout: float = TIMEOUT,
    memory: int = MEMORY_CAP,
) -> Outcome:
    return fenced([sys.executable, "-m", "tuneplane", *args], cwd, env, timeout, memory)


def assert_clear(
    result: Outcome,
    *,
    file: str | None = None,
    line: int | None = None,
    says: Sequence[str] = (),
    codes: Sequence[int] = (1, 2),
) -> None:
    """A located, clear refusal: one of `codes`, no traceback, `file:line:` and the words `says`."""
    text = result.output
    assert "Traceback" not in text, text
    assert "internal error" not in text, text
    assert result.code in codes, f"exit {result.code}, expected one of {list(codes)}:\n{text}"
    if file is not None:
        place = f"{file}:{line}:" if line is not None else file
        assert place in text, f"{place!r} is not in the output:\n{text}"
    for words in says:
        assert words.lower() in text.lower(), f"{words!r} is not in the output:\n{text}"


# ── the lab every case starts from ──────────────────────────────────────────────────────────────────

RUN_TEXT = (
    f"apiVersion: tuneplane/run/v1\nkind: RunRequest\nexperiment: img\nrun_id: {RUN_ID}\n"
    "profile: h200:8\nimage: registry.example.com/team/trainer:1.0\n"
)


def build_base_lab(root: Path) -> Path:
    """A committed lab: a PyTorch experiment `img` locking algorithm plugin me/p, a custom `byo`,
    and one run request for `img`. Built through the CLI only, so it does not depend on modules."""
    parent = root.parent
    steps = [
        ("init", str(root), "--name", "hostile"),
        ("new", "--method", "pytorch/image-classification", "img"),
        ("new", "--method", "custom/custom", "byo"),
        ("plugin", "new", "p"),
        ("plugin", "lock", "img", "me/p"),
    ]
    for step in steps:
        result = tp(*step, cwd=root if step[0] != "init" else parent, timeout=120)
        assert result.code == 0, result.output
    (root / RUN_REQUEST).parent.mkdir(parents=True, exist_ok=True)
    (root / RUN_REQUEST).write_text(RUN_TEXT, encoding="utf-8")
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "base")
    assert tp("validate", cwd=root).code == 0
    return root


def copy_lab(base: Path, target: Path) -> Path:
    shutil.copytree(base, target, symlinks=True)
    return target


def replace(path: Path, kind: str, outside: Path | None = None) -> None:
    """Put something hostile where a lab file was: a FIFO, a device, a socket, a link, a huge file."""
    import socket

    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    elif path.exists() or path.is_symlink():
        path.unlink()
    path.parent.mkdir(parents=True, exist_ok=True)
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "dev-zero":
        path.symlink_to("/dev/zero")
    elif kind == "dev-null":
        path.symlink_to("/dev/null")
    elif kind == "socket":
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        here = os.getcwd()
        try:  # bound by its name from inside the folder: a temp path can pass AF_UNIX's 108 bytes
            os.chdir(path.parent)
            sock.bind(path.name)
        finally:
            os.chdir(here)
            sock.close()
    elif kind == "outside":
        assert outside is not None
        outside.write_text("apiVersion: tuneplane/run/v1\n", encoding="utf-8")
        path.symlink_to(outside)
    elif kind == "loop":
        path.symlink_to(path.name)
    elif kind == "dangling":
        path.symlink_to(path.name + ".gone")
    elif kind == "huge":
        with open(path, "wb") as fh:  # sparse: 3 GiB of zeros that cost no disk
            fh.truncate(3 * 1024 * 1024 * 1024)
    elif kind == "directory":
        path.mkdir()
    else:
        raise ValueError(kind)


_SKIP_PARTS = {"__pycache__", ".git", ".venv", ".mypy_cache", ".ruff_cache"}


def plugin_digest(root: Path) -> str:
    """The plugin directory digest as CONTRACT §3 defines it, written out independently of tp."""
    import hashlib

    h = hashlib.sha256()
    files = []
    for path in root.rglob("*"):
        rel = path.relative_to(root)
        if (
            not path.is_file()
            or _SKIP_PARTS.intersection(rel.parts)
            or rel.name == ".DS_Store"
            or rel.suffix in (".pyc", ".pyo")
        ):
            continue
        files.append((rel.as_posix(), path))
    for rel_posix, path in sorted(files):
        h.update(rel_posix.encode("utf-8") + b"\0" + path.read_bytes() + b"\0")
    return "sha256:" + h.hexdigest()
