"""Fixtures every test file may use.

Autouse, for every test: no outbound network (loopback and unix sockets stay open), `$HOME` and the XDG
directories in a temporary folder, a fixed git identity, `TUNEPLANE_STORAGE_ROOT` in a temporary folder,
and no `TUNEPLANE_*`, `GITHUB_*` or `GIT_*` variable leaking in from the shell that started pytest.

For tests to request:
- `build_tree(root, {path: content})`: write an input tree declared inline (str → UTF-8 text,
  bytes → raw bytes, a dict → a sub-tree, None → an empty directory).
- `tp(*args, cwd=None, env=None, input=None) -> TpResult`: the CLI in this process (fast).
- `tp_subprocess(*args, cwd=None, env=None, input=None, timeout=120) -> TpResult`: the CLI as a real
  `python -m tuneplane` process (honest about exit codes, stderr and tracebacks).
- `lab`: a fresh lab made by `tp init` (git repo, one commit); the test runs with it as the cwd.
- `make_catalog(src=None) -> Path`: a private copy of the packaged catalog (or of `src`) in a fresh
  directory, made the catalog in force through `$TUNEPLANE_CATALOG`. Edit it freely.
- `git(root, *args) -> str`: `support.repos.git`, git in `root` with the test identity; its stdout, stripped.
- `home`: the private `$HOME` of this test.
- `shared_dir`: the read-only `../shared` folder (CRDs, StarForge fixtures); skipped with the reason
  when absent (a failure in CI). `require_shared(*parts)` does the same for module-level helpers.
"""

from __future__ import annotations

import gc
import ipaddress
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import support.repos
from support.labs import GIT_IDENTITY, LEAKY_PREFIXES, new_lab
from support.procs import child_env
from support.shared import require_shared

REPO_ROOT = Path(__file__).resolve().parents[1]

# PYTHONDONTWRITEBYTECODE (many CI images set it) also stops pytest from keeping the test modules it
# rewrote for its assertion messages, so every worker of every run would rewrite all of them again
sys.dont_write_bytecode = False

_LOCAL_NAMES = {"localhost", "localhost.localdomain", "ip6-localhost"}

Tree = Mapping[str, "str | bytes | None | Tree"]


# ── network ─────────────────────────────────────────────────────────────────────────────────────────


class NetworkBlocked(OSError):
    """Raised instead of opening a connection that would leave this machine."""


def _is_local_host(host: object) -> bool:
    if isinstance(host, bytes):
        host = host.decode("ascii", "replace")
    if not isinstance(host, str):
        return False
    if host.lower() in _LOCAL_NAMES:
        return True
    try:
        return ipaddress.ip_address(host.split("%", 1)[0]).is_loopback
    except ValueError:
        return False


def _allowed_address(sock: socket.socket, address: Any) -> bool:
    if getattr(socket, "AF_UNIX", None) is not None and sock.family == socket.AF_UNIX:
        return True
    host = address[0] if isinstance(address, tuple) and address else address
    return _is_local_host(host)


def _guard_connect(original: Callable[..., Any], what: str) -> Callable[..., Any]:
    def guarded(self: socket.socket, address: Any) -> Any:
        if not _allowed_address(self, address):
            raise NetworkBlocked(f"tests may not reach the network ({what} to {address!r})")
        return original(self, address)

    return guarded


def _guard_sendto(original: Callable[..., Any]) -> Callable[..., Any]:
    def guarded(self: socket.socket, data: Any, *rest: Any) -> Any:
        # sendto(data, address) or sendto(data, flags, address): the address comes last
        if rest and not _allowed_address(self, rest[-1]):
            raise NetworkBlocked(f"tests may not reach the network (sendto {rest[-1]!r})")
        return original(self, data, *rest)

    return guarded


def _guard_getaddrinfo(original: Callable[..., Any]) -> Callable[..., Any]:
    def guarded(host: Any, *args: Any, **kwargs: Any) -> Any:
        if host is not None and not _is_local_host(host):
            raise NetworkBlocked(f"tests may not resolve {host!r}")
        return original(host, *args, **kwargs)

    return guarded


@pytest.fixture(autouse=True)
def _no_network(monkeypatch: pytest.MonkeyPatch) -> None:
    """Outbound connections and name lookups fail at once, except to loopback and unix sockets."""
    monkeypatch.setattr(socket.socket, "connect", _guard_connect(socket.socket.connect, "connect"))
    monkeypatch.setattr(socket.socket, "connect_ex", _guard_connect(socket.socket.connect_ex, "connect_ex"))
    monkeypatch.setattr(socket.socket, "sendto", _guard_sendto(socket.socket.sendto))
    monkeypatch.setattr(socket, "getaddrinfo", _guard_getaddrinfo(socket.getaddrinfo))


# ── environment ─────────────────────────────────────────────────────────────────────────────────────


def _fresh_dir(factory: pytest.TempPathFactory, name: str) -> Path:
    """A new empty folder under this worker's temp root, named after `name`. pytest's own `mktemp`
    numbers its folders by listing the root on every call, which over a worker's thousand tests and three
    folders each is quadratic; `mkdtemp` picks a free name at once."""
    prefix = re.sub(r"\W", "_", name)[:30]
    return Path(tempfile.mkdtemp(prefix=f"{prefix}-", dir=factory.getbasetemp()))


@pytest.fixture()
def tmp_path(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """pytest's `tmp_path` (a new empty folder for each test, kept after the run), made by `_fresh_dir`."""
    return _fresh_dir(tmp_path_factory, request.node.name)


@pytest.fixture(autouse=True)
def _isolated_env(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A private HOME, XDG dirs, storage root and git identity; nothing leaks in from the shell."""
    for key in list(os.environ):
        if key.startswith(LEAKY_PREFIXES) or key in ("KUBECONFIG", "COLUMNS", "LINES", "NO_COLOR"):
            monkeypatch.delenv(key)  # a terminal's width or colour setting must not change what tp prints
    for key in ("COLUMNS", "LINES"):
        # Importing readline (pytest does, early) exports the terminal's size into the process's C
        # environment only: os.environ never shows it, yet every child started without `env=` inherits
        # it, and a `tp job ls` there cut its table to 80 columns in a test run on its own.
        if key not in os.environ:
            os.unsetenv(key)
    home = _fresh_dir(tmp_path_factory, "home")
    monkeypatch.setenv("HOME", str(home))
    for var, sub in (
        ("XDG_CONFIG_HOME", ".config"),
        ("XDG_DATA_HOME", ".local/share"),
        ("XDG_CACHE_HOME", ".cache"),
        ("XDG_STATE_HOME", ".local/state"),
    ):
        (home / sub).mkdir(parents=True, exist_ok=True)
        monkeypatch.setenv(var, str(home / sub))
    for key, value in GIT_IDENTITY.items():
        monkeypatch.setenv(key, value)
    monkeypatch.setenv("GIT_CONFIG_NOSYSTEM", "1")  # a machine-wide gitconfig must not change results
    # One compute thread per trainer the tests start: the suite runs more workers than the machine has
    # cores, and torch's pool of one thread per core spins while it waits for CPU time, which the other
    # workers' trainers are using (on two cores that cost a third of every training's CPU time).
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    monkeypatch.setenv("TUNEPLANE_STORAGE_ROOT", str(_fresh_dir(tmp_path_factory, "storage")))
    return home


@pytest.fixture()
def home(_isolated_env: Path) -> Path:
    """The test's private `$HOME` (write a `.gitconfig` there to give git a global identity)."""
    return _isolated_env


@pytest.fixture()
def shared_dir() -> Path:
    """`../shared`: public CRDs and fixtures, read at run time and never copied into the project."""
    return require_shared()


# ── trees and git ───────────────────────────────────────────────────────────────────────────────────


def write_tree(root: Path, files: Tree) -> Path:
    """Write `{relative path: content}` under root; returns root. Parents are created as needed."""
    root.mkdir(parents=True, exist_ok=True)
    for rel, content in files.items():
        path = root / rel
        if content is None:
            path.mkdir(parents=True, exist_ok=True)
        elif isinstance(content, Mapping):
            write_tree(path, content)
        else:
            path.parent.mkdir(parents=True, exist_ok=True)
            if isinstance(content, bytes):
                path.write_bytes(content)
            else:
                path.write_text(content, encoding="utf-8")
    return root


@pytest.fixture()
def build_tree() -> Callable[[Path, Tree], Path]:
    return write_tree


@pytest.fixture()
def git() -> Callable[..., str]:
    """The one `git()` of `support.repos` (importable as well: `from support.repos import git`)."""
    return support.repos.git


# ── the CLI ─────────────────────────────────────────────────────────────────────────────────────────


@dataclass(frozen=True)
class TpResult:
    code: int
    out: str
    err: str

    @property
    def output(self) -> str:
        return self.out + self.err


def run_tp_in_process(
    *args: object, cwd: Path | None = None, env: Mapping[str, str | None] | None = None, input: str | None = None
) -> TpResult:
    """`tp ARGS` through `tuneplane.cli.main.run`, with stdout and stderr captured separately."""
    from click.testing import CliRunner

    from tuneplane.cli.main import run

    before = os.getcwd()
    with CliRunner().isolation(input=input, env=dict(env or {})) as streams:
        try:
            if cwd is not None:
                os.chdir(cwd)
            try:
                code = run([str(a) for a in args])
            except SystemExit as exc:  # a command that exits on its own is still a result
                code = exc.code if isinstance(exc.code, int) else 1
        finally:
            os.chdir(before)
            sys.stdout.flush()
            sys.stderr.flush()
        out, err = streams[0].getvalue(), streams[1].getvalue()
    return TpResult(code, out.decode("utf-8", "replace"), err.decode("utf-8", "replace"))


def run_tp_subprocess(
    *args: object,
    cwd: Path | None = None,
    env: Mapping[str, str | None] | None = None,
    input: str | None = None,
    timeout: float = 120,
) -> TpResult:
    """`python -m tuneplane ARGS` as a child process with this test's environment."""
    done = subprocess.run(
        [sys.executable, "-m", "tuneplane", *map(str, args)],
        cwd=cwd,
        env=child_env(env),
        input=input,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    return TpResult(done.returncode, done.stdout, done.stderr)


@pytest.fixture()
def tp() -> Callable[..., TpResult]:
    return run_tp_in_process


@pytest.fixture()
def tp_subprocess() -> Callable[..., TpResult]:
    return run_tp_subprocess


@pytest.fixture()
def lab(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A lab written by `tp init` (git repository with one commit), and the working directory. Its tool
    requirement is set: CI can install tp in it (an empty one is a warning of every `tp validate`)."""
    root = new_lab(tmp_path / "lab", tool_requirement="tuneplane==0.5.0")
    monkeypatch.chdir(root)
    return root


@pytest.fixture()
def demo_lab(lab: Path, git: Callable[..., str]) -> Path:
    """`lab` with one committed custom/custom experiment, `demo`."""
    result = run_tp_in_process("new", "demo", "--method", "custom/custom")
    assert result.code == 0, result.output
    git(lab, "add", "-A")
    git(lab, "commit", "-q", "-m", "demo")
    return lab


# ── the catalog ─────────────────────────────────────────────────────────────────────────────────────


@pytest.fixture()
def make_catalog(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> Callable[..., Path]:
    """Copies of a catalog, each in a new directory (the catalog cache is per root) and put in force."""
    from tuneplane.lab.catalog import packaged_catalog_root

    def make(src: Path | None = None) -> Path:
        target = tmp_path_factory.mktemp("catalog") / "catalog"
        shutil.copytree(src or packaged_catalog_root(), target, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        monkeypatch.setenv("TUNEPLANE_CATALOG", str(target))
        return target

    return make


# ── what a test costs: the fast lane (`make test-fast`) leaves the costly kinds out ────────────────
# A test is marked by the fixtures it uses, and a test file by what all of its tests do (measured with
# `pytest --durations=0`: the files below are where the suite's minutes go). The markers are declared
# in pyproject.toml: process, cluster, trainer, slurm, bulk (a few tests mark themselves bulk or process).
_FIXTURE_COST = {
    "slurm_cluster": "slurm",
    "fake_kube": "cluster",
    "cluster": "cluster",
    "kube_client": "cluster",
    "tp_subprocess": "process",
}
_FILE_COST: dict[str, tuple[str, ...]] = {
    **dict.fromkeys(
        (
            "test_catalog_trl_runs.py",
            "test_catalog_resume.py",
            "test_report_hf.py",
            "test_report_hf_trl.py",
            "test_catalog_pytorch_template.py",
            "test_catalog_framework_parsers.py",
            "test_catalog_framework_configs.py",
            "test_catalog_framework_flags.py",  # imports TRL's config classes: seconds of import per worker
            "test_lifecycle_hf_eval.py",
            "test_lifecycle_merged_export.py",
            "test_plan_param_routing_runs.py",
        ),
        ("trainer",),
    ),
    **dict.fromkeys(
        (
            "test_backends_slurm.py",
            "test_backends_slurm_attempts.py",
            "test_backends_slurm_faults.py",
            "test_launcher_signals.py",
        ),
        ("slurm",),
    ),
    **dict.fromkeys(
        (
            "test_backends_kubernetes_podrunner.py",
            "test_backends_kubernetes_cluster.py",
            "test_fakekube.py",
            "test_fakekube_fidelity.py",
        ),
        ("cluster",),
    ),
    **dict.fromkeys(
        (
            "test_docs.py",
            "test_launcher_attempts.py",
            "test_bot_race.py",
            "test_bot_race_attempts.py",
            "test_runs_localrun.py",
            "test_project.py",
            "test_project_pythons.py",
            "test_lab_tools.py",
            "test_upstream_compat.py",
            "test_e2e_local.py",
            "test_record_ledger_adversary.py",
            "test_bench_history.py",
            "test_lab_heartbeats.py",
            "test_bot_notify.py",
            "test_report_typing.py",
            "test_author_migrate_dialects.py",
            "test_runtime_gpuwatch.py",
            "test_bot_quiet.py",
            "test_record_ledger_reality.py",
            "test_record_ledger_carried.py",
            "test_record_sweep_pages.py",
            "test_bot_shallow.py",
            "test_runs_sweep.py",
            "test_report_processes.py",
            "test_report_processes_sigterm.py",
            "test_support_shared.py",
            # every case runs `tp` as its own process, fenced by a timeout and a memory cap
            "test_lab_fs_hostile.py",
            "test_plugins_hostile.py",
            "test_plugins_pinned.py",
            "test_lab_gitrepo_refs.py",
        ),
        ("process",),
    ),
}


def pytest_configure(config: pytest.Config) -> None:
    """Compile the package once, for every process the tests start. Where PYTHONDONTWRITEBYTECODE is
    set (many CI images set it) Python writes no bytecode, so each of the suite's thousands of `tp`,
    bot and job processes would compile the whole package again (about 80 ms each). Bytecode is read
    whatever that variable says, and a stale file is ignored; a read-only checkout just compiles nothing."""
    if hasattr(config, "workerinput"):  # the controller does it, once, before any worker starts
        return
    import compileall

    import tuneplane

    compileall.compile_dir(str(Path(tuneplane.__file__).parent), quiet=2, workers=0)


# Module fixtures that cost tens of seconds of CPU: every test using one runs on the same xdist worker,
# which builds it once. Spread over the workers, each built its own: ms-swift's parser interpreters
# (three times 34 CPU-s in one run), pre-commit's hook environments.
_FIXTURE_GROUP = {"swift_results": "ms-swift", "pre_commit_home": "pre-commit"}
# Files (or tests) that import TRL, transformers or torch into the pytest worker to check against their
# classes: seconds of CPU of import on every worker that draws one, four times over in the fast lane.
_FILE_GROUP = dict.fromkeys(
    (
        "test_lifecycle_trl_support.py",
        "test_catalog_content.py",
        "test_catalog_framework_flags.py",
        "test_plan_param_routing.py",
        "test_catalog_framework_loggers.py",
        "test_collector.py::test_torch_summary_writer_scalars_are_collected",
        "test_collector.py::test_tensorboardx_scalars_are_collected",
    ),
    "frameworks",
)


# The order the test files run in, by the costliest kind each holds: the files whose tests take a
# minute (a Slurm time limit, a training) go first, so under `-n` the quick ones fill the end and the
# workers finish together. In name order the last worker ran three minutes after the first: the
# trainer files `test_report_hf*` and `test_plan_param_*` came late.
_FIRST = ("slurm", "trainer", "slow", "process", "bulk", "cluster")


@pytest.hookimpl(tryfirst=True)  # before xdist reads the groups
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        fixtures = set(getattr(item, "fixturenames", ()))
        costs = {cost for fixture, cost in _FIXTURE_COST.items() if fixture in fixtures}
        costs |= set(_FILE_COST.get(item.path.name, ()))
        for cost in sorted(costs):
            item.add_marker(cost)
        if item.get_closest_marker("slurm"):
            # One worker runs every Slurm test (`--dist loadgroup`, pyproject.toml), on one cluster: its
            # minutes of waiting on Slurm's clock overlap the other workers' work, and the three
            # clusters the other workers would start are never started.
            item.add_marker(pytest.mark.xdist_group("slurm"))
        else:
            groups = {_FIXTURE_GROUP[f] for f in fixtures if f in _FIXTURE_GROUP}
            named = (item.path.name, f"{item.path.name}::{getattr(item, 'originalname', item.name)}")
            groups |= {_FILE_GROUP[name] for name in named if name in _FILE_GROUP}
            for group in sorted(groups):
                item.add_marker(pytest.mark.xdist_group(group))
    rank: dict[Path, int] = {}
    for item in items:
        kinds = [i for i, kind in enumerate(_FIRST) if item.get_closest_marker(kind)]
        rank[item.path] = min(rank.get(item.path, len(_FIRST)), *kinds, len(_FIRST))
    items.sort(key=lambda item: rank[item.path])  # stable: a file's tests keep their order, and stay together


def pytest_collection_finish(session: pytest.Session) -> None:
    """What collection made (every test module, the libraries they import, the parametrized cases) lives
    until the worker exits, and each of the cyclic collector's full passes walked all of it for nothing:
    the passes pytest forces as a worker ends took seconds. Freeze it: later passes skip it."""
    gc.freeze()
