"""The one way the tests make a lab: what `tp init` writes, made once per test process and copied.

`tp init` costs about a fifth of a second (its templates, `git init`, the first commit) and a copy a
few milliseconds; `tp init` writes no path of the folder it writes into, so a copy is the lab it would
have made there. Each set of `tp init` arguments is made once, in a private folder and environment (no
HOME, git config or `TUNEPLANE_*` of the shell reaches it); a test then lays its own lab file,
experiments and files on its copy and commits them together.
"""

from __future__ import annotations

import atexit
import io
import itertools
import os
import shutil
import tempfile
from collections.abc import Iterator, Mapping
from contextlib import contextmanager, redirect_stderr, redirect_stdout
from pathlib import Path

from support.repos import git

# The identity of every test's commits (the `lab` fixture's environment sets it for the test's own).
GIT_IDENTITY = {
    "GIT_AUTHOR_NAME": "Test Author",
    "GIT_AUTHOR_EMAIL": "author@example.org",
    "GIT_COMMITTER_NAME": "Test Committer",
    "GIT_COMMITTER_EMAIL": "committer@example.org",
}
LEAKY_PREFIXES = ("TUNEPLANE_", "GITHUB_", "GIT_", "FORGE_", "STARFORGE_")

_made: dict[tuple[str, str, bool, str], Path] = {}
_SERIAL = itertools.count(1)
_folder: list[Path] = []


def new_lab(
    root: Path,
    name: str = "test-lab",
    *,
    backend: str = "local",
    use_git: bool = True,
    tool_requirement: str = "",
    settings: str | None = None,
    experiments: Mapping[str, str] | None = None,
    files: Mapping[str, str] | None = None,
    message: str = "lab",
) -> Path:
    """The lab `tp init` writes at `root` (`--name`, `--backend`, `--no-git`, `--tool-requirement`), then
    `settings` as its `tuneplane.yaml`, `experiments` (name → method of the packaged catalog, as `tp new`)
    and `files` (path → text), committed as `message` when the lab is a git repository and any of them
    is given."""
    shutil.copytree(_template(name, backend, use_git, tool_requirement), root, symlinks=True)
    if use_git:  # its own first commit, dated now, as its own `tp init` would make: no two labs share history.
        # git dates are whole seconds, so two labs copied in the same second would get the same first
        # commit: a trailer naming this process and a serial number keeps each one its own
        trailer = f"Test-Lab: {os.getpid()}-{next(_SERIAL)}"
        git(root, "commit", "-q", "--amend", "--no-edit", "--reset-author", "--trailer", trailer, env=GIT_IDENTITY)
    if settings is not None:
        (root / "tuneplane.yaml").write_text(settings, encoding="utf-8")
    if experiments:  # from the packaged catalog, whatever the environment says
        from tuneplane.author.scaffold import new_experiment
        from tuneplane.lab.catalog import load_catalog, packaged_catalog_root
        from tuneplane.lab.load import load_lab

        lab, catalog = load_lab(root), load_catalog(packaged_catalog_root())
        for experiment, method in experiments.items():
            new_experiment(lab, experiment, method, None, catalog=catalog)
    for rel, text in (files or {}).items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    if use_git and (settings is not None or experiments or files):
        git(root, "add", "-A")
        git(
            root, "commit", "-q", "--allow-empty", "-m", message, env=GIT_IDENTITY
        )  # a module's fixture has no test's identity yet
    return root


def _template(name: str, backend: str, use_git: bool, tool_requirement: str) -> Path:
    key = (name, backend, use_git, tool_requirement)
    if key not in _made:
        from tuneplane.cli.main import run

        target = _templates() / str(len(_made)) / "lab"
        argv = ["init", str(target), "--name", name, "--backend", backend, "--yes"]
        argv += ["--tool-requirement", tool_requirement] if tool_requirement else []
        argv += [] if use_git else ["--no-git"]
        told = io.StringIO()
        with _private_environment(target.parent / "home"), redirect_stdout(told), redirect_stderr(told):
            try:
                code = run(argv)
            except SystemExit as exc:
                code = exc.code if isinstance(exc.code, int) else 1
        assert code == 0, f"tp {' '.join(argv)} failed ({code}):\n{told.getvalue()}"
        _made[key] = target
    return _made[key]


def _templates() -> Path:
    if not _folder:
        _folder.append(Path(tempfile.mkdtemp(prefix="tp-lab-templates-")))
        atexit.register(shutil.rmtree, _folder[0], True)
    return _folder[0]


@contextmanager
def _private_environment(home: Path) -> Iterator[None]:
    """This process's environment, for a moment: a HOME of its own, the tests' git identity, no
    system git config and nothing of the shell's TunePlane, GitHub or git settings."""
    saved = dict(os.environ)
    home.mkdir(parents=True)
    try:
        for key in list(os.environ):
            if key.startswith(LEAKY_PREFIXES):
                del os.environ[key]
        os.environ.update(
            {
                **GIT_IDENTITY,
                "HOME": str(home),
                "XDG_CACHE_HOME": str(home / ".cache"),
                "XDG_CONFIG_HOME": str(home / ".config"),
                "GIT_CONFIG_NOSYSTEM": "1",
            }
        )
        yield
    finally:
        os.environ.clear()
        os.environ.update(saved)
