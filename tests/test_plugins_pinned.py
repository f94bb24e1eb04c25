"""Pinned means pinned: a job imports exactly the plugin bytes its lock pins (issue #29, item 5).

Hostile cases against `tp validate`, `tp plugin lock` and the job's launcher: a re-cut digest (a data
file split into a data file plus a new `.py` keeps the CONTRACT §3 digest), a file swapped between the
check and the import, a committed unchecked-hash `.pyc` read by a spawned worker, a `.venv/` shipped
inside a plugin, an `install()` that raises SystemExit, and a plugin folder that is a symlink.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path

import pytest
from support.hostile import ALLOW, assert_clear, build_base_lab, copy_lab, plugin_digest, tp
from support.repos import git
from test_plugins_hostile import CACHE_TAG, GOOD, TRAIN, evil_pyc, job_package, launch, write_spec

import tuneplane.launcher as launcher
from tuneplane import plugins

CONFIG_ERROR_EXIT = 78
PLUGINS_LOCK = "experiments/img/plugins.lock.json"


@pytest.fixture(scope="module")
def base_lab(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_base_lab(tmp_path_factory.mktemp("pinned-plugins") / "lab")


@pytest.fixture()
def lab(base_lab: Path, tmp_path: Path) -> Path:
    return copy_lab(base_lab, tmp_path / "lab")


# ── the re-cut digest ──────────────────────────────────────────────────────────────────────────────

MERGED = b"weights\0zz_evil.py\0import pathlib; pathlib.Path('PWNED').write_text('evil')\n"


def _split(root: Path) -> None:
    """The same digest stream, re-cut: the data file's tail becomes a new module."""
    (root / "data.bin").write_bytes(b"weights")
    (root / "zz_evil.py").write_bytes(b"import pathlib; pathlib.Path('PWNED').write_text('evil')\n")


def test_the_contract_digest_alone_cannot_tell_the_split(tmp_path: Path) -> None:
    """The premise: without length framing both trees give one digest, so the lock must refuse one."""
    merged, split = tmp_path / "merged", tmp_path / "split"
    merged.mkdir()
    split.mkdir()
    (merged / "data.bin").write_bytes(MERGED)
    _split(split)
    assert plugin_digest(merged) == plugin_digest(split)


def test_plugin_lock_refuses_a_file_holding_a_nul_byte(lab: Path) -> None:
    (lab / "plugins/p/data.bin").write_bytes(MERGED)
    before = (lab / PLUGINS_LOCK).read_text(encoding="utf-8")
    assert_clear(tp("plugin", "lock", "img", "me/p", cwd=lab), says=["data.bin", "NUL"], codes=(2,))
    assert (lab / PLUGINS_LOCK).read_text(encoding="utf-8") == before


def test_validate_refuses_a_file_holding_a_nul_byte(lab: Path) -> None:
    (lab / "plugins/p/data.bin").write_bytes(MERGED)
    git(lab, "add", "-A")
    assert_clear(tp("validate", cwd=lab, env=ALLOW), file="plugins/p/data.bin", says=["NUL"])


def test_launcher_refuses_a_file_holding_a_nul_byte(tmp_path: Path) -> None:
    root = job_package(tmp_path, GOOD)
    (root / "data.bin").write_bytes(MERGED)
    write_spec(tmp_path, root, TRAIN)
    result = launch(tmp_path)
    assert_clear(result, says=["data.bin", "NUL"], codes=(CONFIG_ERROR_EXIT,))
    assert not (tmp_path / "TRAINED").exists()


# ── time of check, time of use ─────────────────────────────────────────────────────────────────────


def test_the_launcher_imports_the_bytes_it_verified(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The plugin's source is swapped right after the digest matched: the import must not see it."""
    name = "toctou"
    root = job_package(tmp_path, "def install(params):\n    params['ran'].append('good')\n", name=name)
    write_spec(tmp_path, root, TRAIN)
    verify = launcher.verify_plugin

    def verify_then_swap(work: Path, plugin: launcher.PluginRef, *args: object) -> Path:
        checked = verify(work, plugin)
        (root / f"{name}_plugin.py").write_text(
            "def install(params):\n    params['ran'].append('evil')\n", encoding="utf-8"
        )
        return checked

    monkeypatch.setattr(launcher, "verify_plugin", verify_then_swap)
    monkeypatch.setattr(sys, "path", list(sys.path))
    plugins.reset()
    ran: list[str] = []
    spec = launcher.read_jobspec(tmp_path)
    spec = launcher.JobSpecView(spec.framework, {"ran": ran}, spec.plugins, spec.launch)
    try:
        launcher.install_plugins(spec, tmp_path, emit=lambda _line: None)
    finally:
        plugins.reset()
        sys.modules.pop(f"{name}_plugin", None)
    assert ran == ["good"]


# ── bytecode in a spawned worker ───────────────────────────────────────────────────────────────────

SPAWNING = """\
import multiprocessing
import pathlib

import p_plugin

if __name__ == "__main__":
    worker = multiprocessing.get_context("spawn").Process(target=p_plugin.install, args=({},))
    worker.start()
    worker.join()
    pathlib.Path("TRAINED").write_text(str(worker.exitcode))
"""


def test_a_committed_cache_is_never_read_by_a_spawned_worker(tmp_path: Path) -> None:
    root = job_package(tmp_path, GOOD)
    evil_pyc(root / "p_plugin.py", root / "__pycache__" / f"p_plugin.{CACHE_TAG}.pyc")
    (tmp_path / "train.py").write_text(SPAWNING, encoding="utf-8")
    write_spec(tmp_path, root, ["python", "train.py"])
    result = launch(tmp_path)
    assert result.code == 0, result.output
    assert (tmp_path / "TRAINED").read_text() == "0", result.output
    assert not (tmp_path / "PWNED").exists(), "a spawned worker ran the committed bytecode"


# ── folders the digest skips ───────────────────────────────────────────────────────────────────────


@pytest.mark.parametrize("folder", [".venv", ".git"])
def test_launcher_refuses_a_folder_the_digest_skips(tmp_path: Path, folder: str) -> None:
    root = job_package(tmp_path, GOOD)
    (root / folder).mkdir()
    (root / folder / "sitecustomize.py").write_text("print('unpinned')\n", encoding="utf-8")
    write_spec(tmp_path, root, TRAIN)
    result = launch(tmp_path)
    assert_clear(result, says=[folder], codes=(CONFIG_ERROR_EXIT,))
    assert not (tmp_path / "TRAINED").exists()


@pytest.mark.parametrize("folder", [".venv", ".git"])
def test_plugin_lock_and_validate_refuse_a_folder_the_digest_skips(lab: Path, folder: str) -> None:
    (lab / "plugins/p" / folder).mkdir()
    (lab / "plugins/p" / folder / "mod.py").write_text("X = 1\n", encoding="utf-8")
    assert_clear(tp("plugin", "lock", "img", "me/p", cwd=lab), says=[folder], codes=(2,))
    assert_clear(tp("validate", cwd=lab, env=ALLOW), file=f"plugins/p/{folder}", says=["digest"])


# ── install() that exits ───────────────────────────────────────────────────────────────────────────


@pytest.mark.parametrize("raised", ["SystemExit(0)", "SystemExit(3)", "KeyboardInterrupt()"])
def test_an_install_that_exits_fails_the_job_naming_the_plugin(tmp_path: Path, raised: str) -> None:
    root = job_package(tmp_path, f"def install(params):\n    raise {raised}\n")
    write_spec(tmp_path, root, TRAIN)
    result = launch(tmp_path)
    assert result.code == CONFIG_ERROR_EXIT, result.output
    last = [line for line in result.err.splitlines() if line.strip()][-1]
    assert last.startswith("tuneplane-launch: error: plugin me/p@1.0.0"), result.err
    assert raised.split("(")[0] in last
    assert not (tmp_path / "TRAINED").exists()


def test_an_import_that_exits_fails_the_job_naming_the_plugin(tmp_path: Path) -> None:
    root = job_package(tmp_path, "raise SystemExit(0)\n")
    write_spec(tmp_path, root, TRAIN)
    result = launch(tmp_path)
    assert result.code == CONFIG_ERROR_EXIT, result.output
    assert "plugin me/p@1.0.0" in result.err and "SystemExit" in result.err
    assert not (tmp_path / "TRAINED").exists()


# ── a plugin folder that is a symlink ──────────────────────────────────────────────────────────────


def test_launcher_refuses_a_plugin_folder_that_is_a_symlink(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    real = job_package(outside, GOOD)
    (tmp_path / "tuneplane_plugins").mkdir()
    os.symlink(real, tmp_path / "tuneplane_plugins" / "p")
    write_spec(tmp_path, tmp_path / "tuneplane_plugins" / "p", TRAIN)
    result = launch(tmp_path)
    assert_clear(result, says=["tuneplane_plugins/p", "symlink"], codes=(CONFIG_ERROR_EXIT,))
    assert not (tmp_path / "TRAINED").exists()


def test_lock_and_validate_refuse_a_plugin_folder_that_is_a_symlink(lab: Path, tmp_path: Path) -> None:
    outside = tmp_path / "elsewhere"
    (lab / "plugins/p").rename(outside)
    os.symlink(outside, lab / "plugins/p")
    assert_clear(tp("plugin", "lock", "img", "me/p", cwd=lab), says=["plugins/p", "symlink"], codes=(2,))
    assert_clear(tp("validate", cwd=lab, env=ALLOW), file="plugins/p", says=["symlink"])


def test_the_lock_of_a_good_plugin_still_verifies(lab: Path) -> None:
    """Compatibility: the contract's digest is what the lock holds, unchanged."""
    assert tp("plugin", "lock", "img", "me/p", cwd=lab).code == 0
    lock = json.loads((lab / PLUGINS_LOCK).read_text(encoding="utf-8"))
    assert lock["plugins"][0]["digest"] == plugin_digest(lab / "plugins/p")


# ── no bytecode from the job package, for the trainer and its children ─────────────────────────────

SPAWNING_HELPER = """\
import multiprocessing
import pathlib

import helper

if __name__ == "__main__":
    worker = multiprocessing.get_context("spawn").Process(target=helper.install, args=({},))
    worker.start()
    worker.join()
    pathlib.Path("TRAINED").write_text(str(worker.exitcode))
"""


def test_the_trainer_and_its_workers_never_read_a_committed_cache(tmp_path: Path) -> None:
    root = job_package(tmp_path, GOOD)
    (tmp_path / "helper.py").write_text("def install(params):\n    pass\n", encoding="utf-8")
    evil_pyc(tmp_path / "helper.py", tmp_path / "__pycache__" / f"helper.{CACHE_TAG}.pyc")
    (tmp_path / "train.py").write_text(SPAWNING_HELPER, encoding="utf-8")
    write_spec(tmp_path, root, ["python", "train.py"])
    result = launch(tmp_path)
    assert result.code == 0, result.output
    assert (tmp_path / "TRAINED").read_text() == "0", result.output
    assert not (tmp_path / "PWNED").exists(), "the trainer ran bytecode committed beside its source"


PREFIX_PROBE = "import pathlib, sys; pathlib.Path('PREFIX').write_text(repr(sys.pycache_prefix))"


def test_the_trainer_reads_the_images_own_bytecode(tmp_path: Path) -> None:
    """Caches beside the job's sources are removed, not hidden behind a cache prefix: under a prefix
    the trainer would compile torch and every library again in each job, reading none of the image's."""
    root = job_package(tmp_path, GOOD)
    evil_pyc(tmp_path / "helper.py", tmp_path / "exp" / "__pycache__" / f"helper.{CACHE_TAG}.pyc")
    write_spec(tmp_path, root, ["python", "-c", PREFIX_PROBE])
    result = launch(tmp_path)
    assert result.code == 0, result.output
    assert (tmp_path / "PREFIX").read_text() == "None"
    assert not (tmp_path / "exp" / "__pycache__").exists()


def test_a_cache_named_by_a_symlink_is_unlinked_and_what_it_points_to_kept(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    evil_pyc(outside / "helper.py", outside / f"helper.{CACHE_TAG}.pyc")
    work = tmp_path / "work"
    root = job_package(work, GOOD)
    (work / "helper.py").write_text("def install(params):\n    pass\n", encoding="utf-8")
    (work / "__pycache__").symlink_to(outside, target_is_directory=True)
    (work / "train.py").write_text(SPAWNING_HELPER, encoding="utf-8")
    write_spec(work, root, ["python", "train.py"])
    result = launch(work)
    assert result.code == 0, result.output
    assert not (work / "PWNED").exists(), "the trainer ran bytecode behind a symlinked cache"
    assert not (work / "__pycache__").is_symlink()
    assert (outside / f"helper.{CACHE_TAG}.pyc").is_file(), "the launcher removed a file outside the job"


def test_a_cache_that_cannot_be_removed_sends_bytecode_to_a_private_prefix(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A read-only job package keeps its caches: every process of the job then reads bytecode only
    from a private prefix, so the committed cache is still never read."""
    evil_pyc(tmp_path / "helper.py", tmp_path / "__pycache__" / f"helper.{CACHE_TAG}.pyc")

    def read_only(path: str, *args: object, **kwargs: object) -> None:
        raise PermissionError(13, "Read-only file system", path)

    monkeypatch.setattr(shutil, "rmtree", read_only)
    monkeypatch.setattr(sys, "pycache_prefix", None)
    monkeypatch.delenv(launcher.PYCACHE_PREFIX_ENV, raising=False)
    launcher.trusted_bytecode(tmp_path)
    prefix = sys.pycache_prefix
    assert prefix is not None and not prefix.startswith(str(tmp_path))
    assert os.environ[launcher.PYCACHE_PREFIX_ENV] == prefix
    assert (tmp_path / "__pycache__" / f"helper.{CACHE_TAG}.pyc").is_file()
