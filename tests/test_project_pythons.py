"""The project on every Python it claims: pyproject and the wheel say 3.11 to 3.13, and where a python3.12 or
python3.13 is installed beside the one running the suite (pyenv's shims included), the wheel runs on it: the job
side in a bare venv with every warning an error, and the README's quickstart (tp init, new, validate,
submit --local) in a venv holding tp's dependencies, with no deprecation raised from our code.

The suite itself runs on one Python; these tests keep the others true without a second full run. CI does not
install the other interpreters (no Debian package has them; building them would take most of a CI run): where
none is found the test skips and says which one is missing."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tomllib
import zipfile
from email.parser import Parser
from pathlib import Path

import pytest
from packaging.specifiers import SpecifierSet
from test_project import JOB_SIDE_CALLS, _bare_env, venv_with, wheel  # noqa: F401  (wheel: the fixture that builds it)

ROOT = Path(__file__).resolve().parents[1]
CLAIMED = ("3.11", "3.12", "3.13")
OTHERS = [v for v in CLAIMED if v != f"{sys.version_info[0]}.{sys.version_info[1]}"]
PROBE = "import sys; print('%d.%d' % sys.version_info[:2])"


def _is_version(exe: str | Path, version: str) -> bool:
    try:
        done = subprocess.run([str(exe), "-c", PROBE], capture_output=True, text=True, timeout=60, env=_bare_env())
    except OSError:
        return False
    return done.returncode == 0 and done.stdout.strip() == version


def find_python(version: str) -> Path | None:
    """python3.X on PATH; through pyenv when its shim is on PATH but that version is not selected."""
    exe = shutil.which(f"python{version}")
    if exe and _is_version(exe, version):
        return Path(exe)
    pyenv = shutil.which("pyenv")
    if not pyenv:
        return None
    whence = subprocess.run([pyenv, "whence", f"python{version}"], capture_output=True, text=True, timeout=60)
    for name in whence.stdout.split():
        prefix = subprocess.run([pyenv, "prefix", name], capture_output=True, text=True, timeout=60).stdout.strip()
        candidate = Path(prefix) / "bin" / f"python{version}"
        if prefix and _is_version(candidate, version):
            return candidate
    return None


def _python_or_skip(version: str) -> Path:
    found = find_python(version)
    if found is None:
        pytest.skip(
            f"python{version} is not installed here (not on PATH, not a pyenv version): the project claims "
            f"{version}, so install it to run this check"
        )
    return found


def test_pyproject_and_the_wheel_claim_exactly_the_pythons_tested(wheel):  # noqa: F811
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    spec = SpecifierSet(project["project"]["requires-python"])
    assert [v for v in ("3.10", *CLAIMED, "3.14") if v in spec] == list(CLAIMED), spec
    assert project["tool"]["ruff"]["target-version"] == "py" + CLAIMED[0].replace(".", "")
    with zipfile.ZipFile(wheel) as archive:
        name = next(n for n in archive.namelist() if n.endswith(".dist-info/METADATA"))
        metadata = Parser().parsestr(archive.read(name).decode("utf-8"))
    assert SpecifierSet(metadata["Requires-Python"]) == spec
    versions = [
        c.rsplit(" :: ", 1)[1]
        for c in metadata.get_all("Classifier") or []
        if re.fullmatch(r"Programming Language :: Python :: 3\.\d+", c)
    ]
    assert versions == list(CLAIMED), metadata.get_all("Classifier")
    assert "Programming Language :: Python :: 3 :: Only" in metadata.get_all("Classifier")


@pytest.fixture(scope="module", params=OTHERS)
def other_bare(request, tmp_path_factory, wheel):  # noqa: F811
    """The wheel alone, without its dependencies, in a venv of another claimed Python."""
    python = _python_or_skip(request.param)
    py = venv_with(
        tmp_path_factory.mktemp(f"bare-{request.param}") / "venv", wheel, "--no-deps", "--no-index", python=str(python)
    )
    return py


@pytest.mark.slow
def test_the_job_side_runs_on_every_claimed_python_with_warnings_as_errors(other_bare, tmp_path):
    """tuneplane.report, the launcher, the collector and every job-side module, under -W error."""
    for call, args in JOB_SIDE_CALLS.items():
        done = subprocess.run(
            [str(other_bare), "-W", "error", *args],
            cwd=tmp_path,
            env=_bare_env(),
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode == 0 and not done.stderr, f"{call}: {done.stdout}{done.stderr}"
    done = subprocess.run(
        [str(other_bare.parent / "tuneplane-launch"), "--help"],
        cwd=tmp_path,
        env=_bare_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0 and "tuneplane-launch" in done.stdout, done.stdout + done.stderr
    tp = subprocess.run(
        [str(other_bare), "-W", "error", "-m", "tuneplane", "--help"],
        cwd=tmp_path,
        env=_bare_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert tp.returncode == 1 and tp.stderr.startswith("error: tp needs the Python package '"), tp.stderr


# `path:line: DeprecationWarning: text`, as Python prints a warning it shows
WARNING_LINE = re.compile(r"^(?P<file>\S.*?):\d+: (?:Pending)?DeprecationWarning: (?P<text>.*)$", re.M)


def ours(stderr: str) -> list[str]:
    """The deprecations our code raised or caused: those not raised inside another installed package's files
    (a stdlib function warns at its caller, or, as fork() with threads running does, in the stdlib itself)."""
    found = []
    for match in WARNING_LINE.finditer(stderr):
        parts = Path(match["file"]).parts
        third_party = "site-packages" in parts and parts[parts.index("site-packages") + 1 :][:1] != ("tuneplane",)
        if not third_party:
            found.append(match[0])
    return found


def test_ours_tells_our_deprecations_from_third_party_ones():
    text = (
        "/v/lib/python3.13/site-packages/tuneplane/lab/fs.py:3: DeprecationWarning: utcnow\n"
        "/v/lib/python3.13/site-packages/pydantic/main.py:9: DeprecationWarning: theirs\n"
        "/p/lib/python3.13/multiprocessing/popen_fork.py:66: DeprecationWarning: This process is multi-threaded\n"
        "<string>:1: PendingDeprecationWarning: soon\n  warnings.warn(x)\n"
    )
    assert ours(text) == [line for line in text.splitlines() if "pydantic" not in line and "warn(" not in line]
    assert ours("all fine\n") == []


@pytest.fixture(scope="module", params=OTHERS)
def other_full(request, tmp_path_factory, wheel):  # noqa: F811
    """The wheel with its dependencies from the package index, in a venv of another claimed Python."""
    python = _python_or_skip(request.param)
    return venv_with(tmp_path_factory.mktemp(f"full-{request.param}") / "venv", wheel, python=str(python))


@pytest.mark.slow
def test_the_quickstart_runs_on_every_claimed_python_without_our_deprecations(other_full, tmp_path):
    """The README's first command: tp init, tp new, tp validate, tp submit --local to a Succeeded status file;
    the job runs on the same Python. Every deprecation is shown, and none may come from our code."""
    env = {
        **_bare_env(),
        "PATH": f"{other_full.parent}{os.pathsep}{os.environ.get('PATH', '')}",
        "PYTHONWARNINGS": "always::DeprecationWarning,always::PendingDeprecationWarning",
        "TUNEPLANE_STORAGE_ROOT": str(tmp_path / "storage"),
    }
    help_ = subprocess.run(
        [str(other_full.parent / "tp"), "--help"], env=env, capture_output=True, text=True, timeout=120
    )
    assert help_.returncode == 0 and "validate" in help_.stdout and not ours(help_.stderr), help_.stderr
    done = subprocess.run(
        ["bash", str(ROOT / "examples" / "quickstart.sh"), str(tmp_path / "q")],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert not ours(done.stderr), ours(done.stderr)
    lab = tmp_path / "q" / "lab"
    (status,) = (lab / "status" / "logreg").glob("*.json")
    assert '"phase": "Succeeded"' in status.read_text(encoding="utf-8")
    (log,) = (tmp_path / "storage").rglob("run.log")
    assert not ours(log.read_text(encoding="utf-8")), ours(log.read_text(encoding="utf-8"))
    validate = subprocess.run(
        [str(other_full), "-m", "tuneplane", "validate"], cwd=lab, env=env, capture_output=True, text=True, timeout=120
    )
    assert validate.returncode == 0 and not ours(validate.stderr), validate.stdout + validate.stderr
