"""Plugins run exactly what is pinned: hostile plugin trees against `tp validate`, `tp plugin validate`,
`tp plugin lock` and the job's launcher, each under a timeout and a memory cap.

The bytecode attack: `__pycache__/` and `*.pyc` are outside the directory digest, so a committed
`.pyc` compiled with `UNCHECKED_HASH` would run other code than the lock pins. It is refused at validate
and never read at launch. Entrypoints are checked statically (a function defined in the plugin's own
module); the manifest name must match the lock; `tp plugin lock` refuses what `tp validate` refuses;
a failing `install()` ends the job with exit 78 and one line, under torchrun too.
"""

from __future__ import annotations

import json
import py_compile
import shlex
import shutil
import sys
from pathlib import Path

import pytest
import yaml
from support.hostile import (
    ALLOW,
    RUN_REQUEST,
    Outcome,
    assert_clear,
    build_base_lab,
    copy_lab,
    fenced,
    git,
    plugin_digest,
    replace,
    tp,
)

MANIFEST = "plugins/p/plugin.yaml"
MODULE = "plugins/p/p_plugin.py"
PLUGINS_LOCK = "experiments/img/plugins.lock.json"
CACHE_TAG = sys.implementation.cache_tag
EVIL = "import pathlib\npathlib.Path('PWNED').write_text('evil')\ndef install(params):\n    pass\n"
CONFIG_ERROR_EXIT = 78


@pytest.fixture(scope="module")
def base_lab(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_base_lab(tmp_path_factory.mktemp("hostile-plugins") / "lab")


@pytest.fixture()
def lab(base_lab: Path, tmp_path: Path) -> Path:
    return copy_lab(base_lab, tmp_path / "lab")


def evil_pyc(source_py: Path, target: Path) -> None:
    """Compile EVIL as if it were `source_py`, with a hash the import system does not check."""
    tmp = target.parent / "evil_src.py"
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp.write_text(EVIL, encoding="utf-8")
    py_compile.compile(
        str(tmp),
        cfile=str(target),
        dfile=str(source_py),
        doraise=True,
        invalidation_mode=py_compile.PycInvalidationMode.UNCHECKED_HASH,
    )
    tmp.unlink()


def relock(lab: Path) -> None:
    result = tp("plugin", "lock", "img", "me/p", cwd=lab)
    assert result.code == 0, result.output


def validate(lab: Path, *args: str) -> Outcome:
    return tp("validate", *args, cwd=lab, env=ALLOW)


# ── bytecode inside a plugin ───────────────────────────────────────────────────────────────────────


PYC = f"plugins/p/__pycache__/p_plugin.{CACHE_TAG}.pyc"
BYTECODE = {
    "pycache": PYC,
    "pycache-helper": f"plugins/p/__pycache__/helper.{CACHE_TAG}.pyc",
    "sourceless": "plugins/p/helper.pyc",
    "pyo": "plugins/p/helper.pyo",
    "nested-pycache": f"plugins/p/pkg/__pycache__/mod.{CACHE_TAG}.pyc",
}


@pytest.mark.parametrize("case", list(BYTECODE))
def test_committed_bytecode_is_refused_by_validate(lab: Path, case: str) -> None:
    rel = BYTECODE[case]
    evil_pyc(lab / MODULE, lab / rel)
    git(lab, "add", "-f", rel)
    git(lab, "commit", "-q", "-m", "add bytecode")
    result = validate(lab)
    assert_clear(result, file=rel, says=["bytecode"], codes=(1,))


@pytest.mark.parametrize("case", ["pycache", "sourceless"])
def test_plugin_validate_refuses_bytecode(lab: Path, case: str) -> None:
    evil_pyc(lab / MODULE, lab / BYTECODE[case])
    assert_clear(tp("plugin", "validate", "plugins/p", cwd=lab), file=BYTECODE[case], says=["bytecode"], codes=(1,))


def test_a_cache_python_wrote_for_the_source_beside_it_is_not_an_error(lab: Path) -> None:
    """A local run leaves timestamp caches (ignored by git); only bytecode that is not that is refused."""
    py_compile.compile(str(lab / MODULE), doraise=True)  # the cache CPython itself would write
    assert list((lab / "plugins/p/__pycache__").iterdir())
    result = tp("plugin", "validate", "plugins/p", cwd=lab)
    assert result.code == 0, result.output


def test_a_timestamp_cache_that_does_not_match_its_source_is_refused(lab: Path) -> None:
    py_compile.compile(str(lab / MODULE), doraise=True)
    (lab / MODULE).write_text((lab / MODULE).read_text(encoding="utf-8") + "# edited after\n", encoding="utf-8")
    assert_clear(tp("plugin", "validate", "plugins/p", cwd=lab), file=PYC, says=["bytecode"], codes=(1,))


def test_plugin_lock_refuses_bytecode(lab: Path) -> None:
    evil_pyc(lab / MODULE, lab / PYC)
    before = (lab / PLUGINS_LOCK).read_text(encoding="utf-8")
    assert_clear(tp("plugin", "lock", "img", "me/p", cwd=lab), says=["bytecode"], codes=(2,))
    assert (lab / PLUGINS_LOCK).read_text(encoding="utf-8") == before


def test_the_digest_is_unchanged_by_the_attack_so_validate_must_look(lab: Path) -> None:
    """The premise: the pin alone cannot see the .pyc (CONTRACT §3 skips it)."""
    before = json.loads((lab / PLUGINS_LOCK).read_text(encoding="utf-8"))
    evil_pyc(lab / MODULE, lab / PYC)
    relocked = tp("plugin", "lock", "img", "me/p", cwd=lab)
    after = json.loads((lab / PLUGINS_LOCK).read_text(encoding="utf-8"))
    assert relocked.code != 0 or after == before


@pytest.mark.parametrize("kind", ["huge", "fifo", "dev-zero", "socket"])
def test_a_hostile_data_file_in_a_plugin_is_refused_without_reading_it(lab: Path, kind: str) -> None:
    """Not the entrypoint: a file the digest would read whole, or block on."""
    replace(lab / "plugins/p/data.bin", kind)
    result = validate(lab)
    assert_clear(result, file="plugins/p/data.bin", codes=(1,))


# ── the launcher: a job package carrying bytecode ──────────────────────────────────────────────────


def job_package(work: Path, source: str, *, argv: list[str] | None = None, name: str = "p") -> Path:
    """A job package with one algorithm plugin; the trainer is `python -c` writing TRAINED."""
    root = work / "tuneplane_plugins" / name
    root.mkdir(parents=True)
    (root / "plugin.yaml").write_text(
        f"schema: tuneplane/plugin/v1\nname: {name}\nversion: 1.0.0\n"
        f"capability: algorithm\nentrypoint: {name}_plugin:install\n",
        encoding="utf-8",
    )
    (root / f"{name}_plugin.py").write_text(source, encoding="utf-8")
    return root


def write_spec(work: Path, root: Path, argv: list[str]) -> None:
    name = root.name
    spec = {
        "apiVersion": "tuneplane/v1",
        "kind": "TrainingJob",
        "spec": {
            "framework": {"kind": "pytorch"},
            "hyperparams": {},
            "plugins": [
                {
                    "id": f"me/{name}",
                    "name": name,
                    "version": "1.0.0",
                    "digest": plugin_digest(root),
                    "capability": "algorithm",
                    "entrypoint": f"{name}_plugin:install",
                    "load": "eager",
                }
            ],
        },
        "launch": {"argv": argv, "mode": "direct", "cwd": "", "in_process": False},
    }
    (work / ".tuneplane").mkdir(exist_ok=True)
    (work / ".tuneplane" / "jobspec.json").write_text(json.dumps(spec), encoding="utf-8")


def launch(work: Path, timeout: float = 60) -> Outcome:
    return fenced(
        [sys.executable, "-m", "tuneplane.launcher"], work, env={"TUNEPLANE_WORK_DIR": str(work)}, timeout=timeout
    )


TRAIN = ["python", "-c", "import pathlib; pathlib.Path('TRAINED').write_text('ok')"]
GOOD = "def install(params):\n    import pathlib\n    pathlib.Path('INSTALLED').write_text('good')\n"


def test_launcher_never_reads_a_cached_pyc(tmp_path: Path) -> None:
    root = job_package(tmp_path, GOOD)
    evil_pyc(root / "p_plugin.py", root / "__pycache__" / f"p_plugin.{CACHE_TAG}.pyc")
    write_spec(tmp_path, root, TRAIN)
    result = launch(tmp_path)
    assert result.code == 0, result.output
    assert not (tmp_path / "PWNED").exists(), "the launcher ran the cached bytecode, not the pinned source"
    assert (tmp_path / "INSTALLED").read_text() == "good"
    assert (tmp_path / "TRAINED").exists()


def test_launcher_writes_no_bytecode_into_the_plugin(tmp_path: Path) -> None:
    root = job_package(tmp_path, GOOD + "import p_helper  # noqa\n")
    (root / "p_helper.py").write_text("X = 1\n", encoding="utf-8")
    write_spec(tmp_path, root, TRAIN)
    assert launch(tmp_path).code == 0
    assert not list(root.rglob("*.pyc")) and not (root / "__pycache__").exists()


def test_launcher_refuses_sourceless_bytecode(tmp_path: Path) -> None:
    root = job_package(tmp_path, GOOD + "import p_helper  # noqa\n")
    evil_pyc(root / "p_helper.py", root / "p_helper.pyc")
    write_spec(tmp_path, root, TRAIN)
    result = launch(tmp_path)
    assert_clear(result, says=["p_helper.pyc", "bytecode"], codes=(CONFIG_ERROR_EXIT,))
    assert not (tmp_path / "PWNED").exists() and not (tmp_path / "TRAINED").exists()


# ── a failing install() ────────────────────────────────────────────────────────────────────────────

FAILING = "def install(params):\n    raise RuntimeError('the patch does not apply to this version')\n"


def _last_line(result: Outcome) -> str:
    lines = [line for line in result.err.splitlines() if line.strip()]
    return lines[-1] if lines else ""


def test_failing_install_ends_the_job_with_78_and_one_line(tmp_path: Path) -> None:
    root = job_package(tmp_path, FAILING)
    write_spec(tmp_path, root, TRAIN)
    result = launch(tmp_path)
    assert result.code == CONFIG_ERROR_EXIT, result.output
    last = _last_line(result)
    assert last.startswith("tuneplane-launch: error: plugin me/p@1.0.0") and "does not apply" in last, result.err
    assert not (tmp_path / "TRAINED").exists()


def test_failing_install_writes_the_termination_message(tmp_path: Path) -> None:
    root = job_package(tmp_path, FAILING)
    write_spec(tmp_path, root, TRAIN)
    message = tmp_path / "termination-log"
    result = fenced(
        [sys.executable, "-m", "tuneplane.launcher"],
        tmp_path,
        env={"TUNEPLANE_WORK_DIR": str(tmp_path), "TUNEPLANE_TERMINATION_LOG": str(message)},
    )
    assert result.code == CONFIG_ERROR_EXIT
    text = message.read_text(encoding="utf-8")
    assert text.count("\n") <= 1 and "does not apply" in text and "Traceback" not in text


@pytest.mark.skipif(
    shutil.which("torchrun") is None and not Path(sys.executable).with_name("torchrun").exists(),
    reason="torchrun is not installed",
)
@pytest.mark.process
def test_failing_install_under_torchrun_is_78_and_one_line_on_every_rank(tmp_path: Path) -> None:
    root = job_package(tmp_path, FAILING)
    rank = (
        f"{shlex.quote(sys.executable)} -m torch.distributed.run --standalone --nproc-per-node 2 "
        "-m tuneplane.launcher -c \"import pathlib; pathlib.Path('TRAINED').write_text('ok')\""
    )
    write_spec(tmp_path, root, ["sh", "-c", rank])
    message = tmp_path / "termination-log"
    result = fenced(
        [sys.executable, "-m", "tuneplane.launcher"],
        tmp_path,
        env={"TUNEPLANE_WORK_DIR": str(tmp_path), "TUNEPLANE_TERMINATION_LOG": str(message)},
        timeout=120,
        memory=4 * 1024 * 1024 * 1024,
    )
    assert result.code == CONFIG_ERROR_EXIT, result.output
    last = _last_line(result)
    assert last.startswith("tuneplane-launch: error: plugin me/p@1.0.0") and "does not apply" in last, result.err
    assert "does not apply" in message.read_text(encoding="utf-8")
    assert not (tmp_path / "TRAINED").exists()


# ── entrypoints, checked statically ────────────────────────────────────────────────────────────────

ENTRYPOINTS = {
    "int": ("install = 5\n", "p_plugin:install"),
    "imported-os-system": ("from os import system as install\n", "p_plugin:install"),
    "builtin-alias": ("install = print\n", "p_plugin:install"),
    "class": ("class install:\n    def __init__(self, params):\n        pass\n", "p_plugin:install"),
    "async": ("async def install(params):\n    pass\n", "p_plugin:install"),
    "os-system": ("def install(params):\n    pass\n", "os:system"),
    "subprocess-call": ("def install(params):\n    pass\n", "subprocess:call"),
    "missing-function": ("def setup(params):\n    pass\n", "p_plugin:install"),
    "nested-def": ("if True:\n    def install(params):\n        pass\n", "p_plugin:install"),
}


def _set_entrypoint(lab: Path, source: str, entrypoint: str) -> None:
    (lab / MODULE).write_text(source, encoding="utf-8")
    text = (
        (lab / MANIFEST)
        .read_text(encoding="utf-8")
        .replace("entrypoint: p_plugin:install", f"entrypoint: {entrypoint}")
    )
    (lab / MANIFEST).write_text(text, encoding="utf-8")


@pytest.mark.parametrize("case", list(ENTRYPOINTS))
def test_plugin_validate_refuses_an_entrypoint_that_is_not_its_own_function(lab: Path, case: str) -> None:
    _set_entrypoint(lab, *ENTRYPOINTS[case])
    result = tp("plugin", "validate", "plugins/p", cwd=lab)
    assert_clear(result, says=["entrypoint"], codes=(1,))


@pytest.mark.parametrize("case", ["int", "imported-os-system", "os-system"])
def test_validate_of_the_experiment_catches_a_bad_entrypoint_without_relocking(lab: Path, case: str) -> None:
    """The lock is rewritten to the new digest by hand, as a hostile PR would."""
    _set_entrypoint(lab, *ENTRYPOINTS[case])
    data = json.loads((lab / PLUGINS_LOCK).read_text(encoding="utf-8"))
    data["plugins"][0]["digest"] = plugin_digest(lab / "plugins/p")
    (lab / PLUGINS_LOCK).write_text(json.dumps(data, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    result = validate(lab, "img")
    assert_clear(result, says=["entrypoint"], codes=(1,))


@pytest.mark.parametrize("case", ["int", "os-system"])
def test_plugin_lock_refuses_a_bad_entrypoint(lab: Path, case: str) -> None:
    _set_entrypoint(lab, *ENTRYPOINTS[case])
    assert_clear(tp("plugin", "lock", "img", "me/p", cwd=lab), says=["entrypoint"], codes=(2,))


def test_a_function_defined_in_the_module_is_fine(lab: Path) -> None:
    _set_entrypoint(lab, "def install(params, **ctx):\n    return None\n", "p_plugin:install")
    result = tp("plugin", "validate", "plugins/p", cwd=lab)
    assert result.code == 0, result.output


# ── manifest name against the lock; lock refuses what validate refuses ─────────────────────────────


def test_a_manifest_name_that_differs_from_its_lock_entry_is_refused(lab: Path) -> None:
    text = (lab / MANIFEST).read_text(encoding="utf-8").replace("name: p\n", "name: q\n")
    (lab / MANIFEST).write_text(text, encoding="utf-8")
    data = json.loads((lab / PLUGINS_LOCK).read_text(encoding="utf-8"))
    data["plugins"][0]["digest"] = plugin_digest(lab / "plugins/p")
    (lab / PLUGINS_LOCK).write_text(json.dumps(data, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    result = validate(lab, "img")
    assert_clear(result, file=PLUGINS_LOCK, says=["'q'"], codes=(1,))
    render = tp("render", RUN_REQUEST, "--allow-dirty", cwd=lab, env=ALLOW)
    assert_clear(render, says=["'q'"], codes=(1, 2))


def test_plugin_lock_refuses_a_manifest_name_that_differs(lab: Path) -> None:
    text = (lab / MANIFEST).read_text(encoding="utf-8").replace("name: p\n", "name: q\n")
    (lab / MANIFEST).write_text(text, encoding="utf-8")
    assert_clear(tp("plugin", "lock", "img", "me/p", cwd=lab), says=["'q'"], codes=(2,))


def test_plugin_lock_refuses_an_algorithm_plugin_for_custom(lab: Path) -> None:
    result = tp("plugin", "lock", "byo", "me/p", cwd=lab)
    assert_clear(result, says=["custom"], codes=(2,))
    assert not (lab / "experiments/byo/plugins.lock.json").exists()


def test_plugin_lock_refuses_a_plugin_this_tuneplane_does_not_satisfy(lab: Path) -> None:
    text = (lab / MANIFEST).read_text(encoding="utf-8").replace('core: ">=0.1,<1"', 'core: ">=99"')
    (lab / MANIFEST).write_text(text, encoding="utf-8")
    before = (lab / PLUGINS_LOCK).read_text(encoding="utf-8")
    assert_clear(tp("plugin", "lock", "img", "me/p", cwd=lab), says=[">=99"], codes=(2,))
    assert (lab / PLUGINS_LOCK).read_text(encoding="utf-8") == before


def test_plugin_lock_refuses_a_plugin_for_another_framework(lab: Path) -> None:
    text = (
        (lab / MANIFEST)
        .read_text(encoding="utf-8")
        .replace('core: ">=0.1,<1"\n', 'core: ">=0.1,<1"\n  frameworks: [trl]\n')
    )
    (lab / MANIFEST).write_text(text, encoding="utf-8")
    assert_clear(tp("plugin", "lock", "img", "me/p", cwd=lab), says=["trl"], codes=(2,))


# ── only algorithm plugins travel ──────────────────────────────────────────────────────────────────


def test_a_data_prep_plugin_never_enters_the_job_package(lab: Path) -> None:
    assert tp("plugin", "new", "prep", cwd=lab).code == 0
    manifest = lab / "plugins/prep/plugin.yaml"
    (lab / "tuneplane.yaml").write_text(
        (lab / "tuneplane.yaml")
        .read_text(encoding="utf-8")
        .replace("  backend: local ", "  backend: kubernetes ")
        .replace('    url: ""', '    url: "https://git.example.com/lab.git"'),
        encoding="utf-8",
    )
    text = manifest.read_text(encoding="utf-8").replace(
        "capability: algorithm", "capability: data-prep\nexecution: local"
    )
    manifest.write_text(text, encoding="utf-8")
    relock_prep = tp("plugin", "lock", "img", "me/prep", cwd=lab)
    assert relock_prep.code == 0, relock_prep.output
    git(lab, "add", "-A")
    git(lab, "commit", "-q", "-m", "data prep")
    result = tp("render", RUN_REQUEST, cwd=lab, env=ALLOW)
    assert result.code == 0, result.output
    values = [
        item.get("value")
        for item in _walk(list(yaml.safe_load_all(result.out)))
        if isinstance(item, dict) and item.get("name") == "TUNEPLANE_PLUGINS"
    ]
    assert values == ["plugins/p"], values  # the algorithm plugin travels (by its folder), the data-prep one does not


def _walk(node: object) -> list[object]:
    found: list[object] = [node]
    children = node.values() if isinstance(node, dict) else node if isinstance(node, list) else []
    for child in children:
        found += _walk(child)
    return found
