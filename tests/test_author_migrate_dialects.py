"""`tp migrate` on a StarForge lab of each dialect StarForge wrote, built here file by file, then
`tp validate` and a real run on the local backend; and what migrate must leave alone.

The dialects: locks `forge/recipe-lock/v2|v3|v4` with `created_by.core_version`/`requires.core`,
the older ones (`forge/recipe-lock/v3`, and `lab/recipe-lock/v3` of StarForge's `lab` CLI) with
`created_by.sdk_version`/`requires.sdk` in the SDK's numbering (2.x), and plugin manifests
`lab-plugin/v1`/`forge/plugin/v1` with `kind:` and a `requires.sdk` or SDK-numbered `requires.core`.
Every lock starts from one `tp new` writes for the current catalog (so no drift is reported) and is
then rewritten into the dialect.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from conftest import run_tp_in_process, write_tree
from support.repos import git

TRAIN_SH = """#!/usr/bin/env bash
set -euo pipefail
exec python "${FORGE_EXP_DIR}/train.py" --output-dir "${FORGE_OUT_DIR}"
"""
TRAIN_PY = """import os
import sys

from starforge.report import finish, init, log

init()
log({"train/loss": 0.5}, step=1)
finish()
out = os.environ["FORGE_OUT_DIR"]
assert sys.argv[-1] == out, sys.argv
os.makedirs(os.path.join(out, "checkpoints", "step-1"), exist_ok=True)
with open(os.path.join(out, "checkpoints", "step-1", "seen.json"), "w") as fh:
    fh.write('{"profile": "%s", "run": "%s"}' % (os.environ["CLUSTER_PROFILE"], os.environ["NRL_RUN_ID"]))
print("trained on", os.environ["CLUSTER_PROFILE"], "as", os.environ["NRL_RUN_ID"])
"""
PLUGIN_PY = "def install(params, **ctx):\n    return params\n"
# Not the lab's own code: each must come out of `tp migrate` byte for byte as it went in.
LEFT_ALONE = {
    "vendor/forgekit/__init__.py": 'import os\nOUT = os.environ["FORGE_OUT_DIR"]\n',
    "third_party/sfutil/report.py": "from starforge.report import log\n",
    "site-packages/starforge/report.py": "STARFORGE_TOKEN = None\n",
    "starforge_cli/__init__.py": "",
    "starforge_cli/submit.py": 'import os\nEXP = os.environ["FORGE_EXP_DIR"]\n',
    "tests/test_loop.py": 'import os\n\ndef test_out():\n    assert "FORGE_OUT_DIR" not in os.environ\n',
    "experiments/loop/test_train.py": "from starforge.report import log\n",
    "tests/fixtures/old/recipe.lock.json": '{"apiVersion": "forge/recipe-lock/v3", "recipe": {}}\n',
    "env/pyvenv.cfg": "home = /usr/bin\n",  # a virtual environment under any name
    "env/lib/python3.12/site-packages/starforge/report.py": "import os\nOUT = os.environ['FORGE_OUT_DIR']\n",
}
SUBMIT = ("--profile", "local", "--image", "python:3.12", "--observability-url", "https://track.example.org/p")
SDK_SPEC = ">=2.1,<3"  # StarForge SDK numbering


class Dialect:
    def __init__(self, lock_api: str, sdk: bool, plugin_schema: str, plugin_requires: str) -> None:
        self.lock_api, self.sdk, self.plugin_schema, self.plugin_requires = (
            lock_api,
            sdk,
            plugin_schema,
            plugin_requires,
        )


DIALECTS = {
    "forge-v4-core": Dialect("forge/recipe-lock/v4", False, "lab-plugin/v1", "core"),
    "forge-v2-core": Dialect("forge/recipe-lock/v2", False, "forge/plugin/v1", "core"),
    "forge-v3-sdk": Dialect("forge/recipe-lock/v3", True, "lab-plugin/v1", "sdk"),
    "lab-v3-sdk": Dialect("lab/recipe-lock/v3", True, "forge/plugin/v1", "sdk"),
}


def _current_lock(tmp_path: Path, method: str) -> dict[str, Any]:
    scratch = tmp_path / "scratch"
    if not scratch.exists():
        assert run_tp_in_process("init", scratch, "--name", "scratch").code == 0
    name = "x" + re.sub(r"[^a-z0-9]+", "-", method)
    result = run_tp_in_process("new", name, "--method", method, cwd=scratch)
    assert result.code == 0, result.output
    return dict(json.loads((scratch / "experiments" / name / "recipe.lock.json").read_text(encoding="utf-8")))


def _dialect_lock(lock: dict[str, Any], dialect: Dialect) -> str:
    lock = {k: v for k, v in lock.items() if k != "bindings"}
    lock["apiVersion"] = dialect.lock_api
    if dialect.sdk:
        lock["created_by"] = {"sdk_version": "2.1.0"}
        lock["requires"] = {"sdk": SDK_SPEC}
    else:
        lock["created_by"] = {"core_version": "0.1.6"}
    return json.dumps(lock, indent=2, sort_keys=True) + "\n"


def _plugin_yaml(dialect: Dialect, name: str, kind: str, extra: str = "") -> str:
    return (
        f"schema: {dialect.plugin_schema}\nname: {name}\nversion: 0.1.0\nkind: {kind}  # what it is\n"
        f"summary: a {kind} plugin\n{extra}"
    )


def _starforge_lab(tmp_path: Path, dialect: Dialect) -> Path:
    root = tmp_path / "old-lab"
    custom = _current_lock(tmp_path, "custom/custom")
    write_tree(
        root,
        {
            "starforge.yaml": "# the lab marker\napiVersion: forge/project/v1\nname: old-lab\n",
            "experiments/loop/recipe.lock.json": _dialect_lock(custom, dialect),
            "experiments/loop/train.sh": TRAIN_SH,
            "experiments/loop/train.py": TRAIN_PY,
            "plugins/opsd/plugin.yaml": _plugin_yaml(
                dialect,
                "opsd",
                "algorithm",
                "load: deferred\nentrypoint: opsd_plugin:install\n"
                f'requires:\n  {dialect.plugin_requires}: "{SDK_SPEC}"\n',
            ),
            "plugins/opsd/opsd_plugin.py": PLUGIN_PY,
            "plugins/qa-prep/plugin.yaml": _plugin_yaml(dialect, "qa-prep", "data-prep"),
            **LEFT_ALONE,
        },
    )
    git(root, "init", "-q", "-b", "main")
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "a StarForge lab")
    return root


def _errors(result: Any) -> list[str]:
    assert "Traceback" not in result.output, result.output
    problems = json.loads(result.out)["problems"]
    return [f"{p['file']}:{p['line']}: {p['rule']}: {p['message']}" for p in problems if p["severity"] == "error"]


@pytest.mark.parametrize("name", sorted(DIALECTS))
def test_each_dialect_migrates_with_nothing_unlisted_then_validates_and_runs(
    name: str, tmp_path: Path, tp_subprocess: Any
) -> None:
    dialect = DIALECTS[name]
    root = _starforge_lab(tmp_path, dialect)
    before = {rel: (root / rel).read_bytes() for rel in LEFT_ALONE}

    migrated = tp_subprocess("migrate", cwd=root)
    assert migrated.code == 0, migrated.output
    assert "still wrong" not in migrated.out

    lock = json.loads((root / "experiments/loop/recipe.lock.json").read_text(encoding="utf-8"))
    assert lock["apiVersion"] == "tuneplane/recipe-lock/v1"
    assert list(lock["created_by"]) == ["core_version"] and list(lock["requires"]) == ["core"]
    assert lock["requires"]["core"] == ">=0.1,<1"
    opsd = (root / "plugins/opsd/plugin.yaml").read_text(encoding="utf-8")
    assert "schema: tuneplane/plugin/v1\n" in opsd and re.search(r"\ncapability: algorithm +# what it is\n", opsd)
    assert "requires:\n  core: '>=0.1,<1'\n" in opsd or 'requires:\n  core: ">=0.1,<1"\n' in opsd, opsd
    assert "sdk" not in opsd and "kind" not in opsd
    prep = (root / "plugins/qa-prep/plugin.yaml").read_text(encoding="utf-8")
    assert re.search(r"\ncapability: data-prep +# what it is\nexecution: local\n", prep), prep
    assert re.search(rf"requires\.core '{re.escape(SDK_SPEC)}' is StarForge SDK numbering.*'>=0\.1,<1'", migrated.out)

    # vendored code, StarForge's own sources and the lab's tests: untouched, and named
    assert {rel: (root / rel).read_bytes() for rel in LEFT_ALONE} == before
    for folder in ("vendor/", "third_party/", "site-packages/", "starforge_cli/", "tests/"):
        assert f"  - {folder}: left as it is (" in migrated.out, migrated.out
    assert "  - experiments/loop/test_train.py: left as it is (a test of the lab)" in migrated.out
    assert "env/" not in migrated.out  # an environment is nobody's code: skipped without a word
    assert "FORGE_" not in (root / "experiments/loop/train.sh").read_text(encoding="utf-8")

    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "Migrate from StarForge")
    assert _errors(tp_subprocess("validate", "--format", "json", cwd=root)) == []
    # the plugin's renumbered requirement admits this tp: an experiment could pin it
    from tuneplane import __version__
    from tuneplane.runtime.versions import version_admits

    assert version_admits(">=0.1,<1", __version__)

    ran = tp_subprocess("submit", "loop", *SUBMIT, "--local", cwd=root, timeout=300)
    assert ran.code == 0, ran.output
    run_id = next(line.split()[1].rstrip(":") for line in ran.out.splitlines() if line.startswith("run "))
    status = json.loads(git(root, "show", f"HEAD:status/loop/{run_id}.json"))
    assert status["phase"] == "Succeeded", status
    assert "train/loss" in status["metrics"]
    logs = tp_subprocess("job", "logs", run_id, cwd=root)
    assert f"trained on local as {run_id}" in logs.out, logs.output


def test_a_requirement_in_sdk_numbering_that_cannot_be_mapped_is_listed(tmp_path: Path, tp_subprocess: Any) -> None:
    dialect = DIALECTS["forge-v3-sdk"]
    root = _starforge_lab(tmp_path, dialect)
    manifest = root / "plugins/opsd/plugin.yaml"
    manifest.write_text(manifest.read_text(encoding="utf-8").replace(SDK_SPEC, ">=2.4,<3"), encoding="utf-8")
    git(root, "commit", "-qam", "a plugin for a later SDK")
    migrated = tp_subprocess("migrate", cwd=root)
    assert migrated.code == 0, migrated.output
    assert re.search(
        r"plugins/opsd/plugin\.yaml: requires\.core '>=2\.4,<3' is StarForge SDK numbering and excludes SDK 2\.1\.0"
        r".*no TunePlane version corresponds; write the tuneplane versions",
        migrated.out,
    ), migrated.out
    assert "core: '>=2.4,<3'" in manifest.read_text(encoding="utf-8") or 'core: ">=2.4,<3"' in manifest.read_text(
        encoding="utf-8"
    )


def test_a_lock_format_migrate_cannot_convert_is_listed(tmp_path: Path, tp_subprocess: Any) -> None:
    """`lab/recipe-lock/v2` (StarForge's first CLI) kept no manifest or template digest: it cannot be
    converted, and migrate says so rather than leaving a silent validate error."""
    root = _starforge_lab(tmp_path, DIALECTS["forge-v4-core"])
    write_tree(
        root,
        {
            "experiments/early/recipe.lock.json": json.dumps(
                {
                    "apiVersion": "lab/recipe-lock/v2",
                    "recipe": {"digest": "sha256:" + "1" * 64, "framework": "custom", "name": "custom", "version": "0"},
                    "sdk_version": "2.1.0",
                }
            ),
            "experiments/early/train.sh": TRAIN_SH,
        },
    )
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "an early experiment")
    migrated = tp_subprocess("migrate", "--dry-run", cwd=root)
    assert migrated.code == 0, migrated.output
    assert "experiments/early/recipe.lock.json: a 'lab/recipe-lock/v2' lock, which tp migrate cannot convert" in (
        migrated.out
    )
    assert (root / "starforge.yaml").exists() and not (root / "tuneplane.yaml").exists()


def test_the_lab_s_own_errors_are_listed_after_the_conversion(tmp_path: Path, tp_subprocess: Any) -> None:
    root = _starforge_lab(tmp_path, DIALECTS["forge-v3-sdk"])
    (root / "experiments/loop/train.sh").unlink()  # the lab's own mistake, not a format
    git(root, "commit", "-qam", "no train.sh")
    for args in (("--dry-run",), ()):
        migrated = tp_subprocess("migrate", *args, cwd=root)
        assert migrated.code == 0, migrated.output
        assert re.search(
            r"for you \(tp validate; not StarForge formats\):\n"
            r"  - experiments/loop/recipe\.lock\.json:\d+:\d+: entrypoint: custom entrypoint is missing",
            migrated.out,
        ), migrated.out
    assert not (root / "starforge.yaml").exists()


def test_a_starforge_form_migrate_does_not_know_fails_and_is_named(tmp_path: Path, tp_subprocess: Any) -> None:
    """A manifest key no StarForge dialect we know had: migrate cannot convert it, says where, exits 1."""
    root = _starforge_lab(tmp_path, DIALECTS["lab-v3-sdk"])
    manifest = root / "plugins/qa-prep/plugin.yaml"
    manifest.write_text(manifest.read_text(encoding="utf-8") + "runner: gpu-pool\n", encoding="utf-8")
    git(root, "commit", "-qam", "a key from a StarForge we never saw")
    migrated = tp_subprocess("migrate", cwd=root)
    assert migrated.code == 1, migrated.output
    assert re.search(
        r"not converted \(a StarForge form tp migrate does not know\):\n"
        r"  - plugins/qa-prep/plugin\.yaml:\d+:\d+: plugin-schema: unknown key 'runner'",
        migrated.out,
    ), migrated.out
    assert "1 StarForge form(s) above are not converted (the rest of the lab is converted)" in migrated.err
    assert (root / "tuneplane.yaml").is_file()


@pytest.mark.parametrize(
    ("spec", "written"),
    [
        (">=0.1,<1", ">=0.1,<1"),  # TunePlane's numbering: kept
        (">=0.1,<3", ">=0.1,<3"),  # admits this tp: kept
        (">=2.1,<3", ">=0.1,<1"),
        ("~=2.1", ">=0.1,<1"),
        ("==2.1.0", ">=0.1,<1"),
        (">=2.1", ">=0.1"),
        (">=2.4,<3", None),  # SDK releases after the rename never existed
        (">=3", None),
        (">=0.9,<3", None),  # neither numbering for sure, and this tp is outside it
        ("two point one", None),
    ],
)
def test_starforge_sdk_numbering_maps_to_tuneplane_s_or_says_why_not(spec: str, written: str | None) -> None:
    from tuneplane.lab.starforge import core_requirement

    mapped = core_requirement(spec)
    assert mapped.text == written
    assert bool(mapped.why) == (written != spec), mapped.why


def test_a_migrated_sdk_plugin_can_be_locked(tmp_path: Path, tp_subprocess: Any) -> None:
    """Before, `requires.sdk`/SDK-numbered `requires.core` could never be locked by this tp."""
    dialect = DIALECTS["forge-v3-sdk"]
    root = _starforge_lab(tmp_path, dialect)
    scratch = tmp_path / "scratch"
    assert run_tp_in_process("new", "cls", "--method", "pytorch/image-classification", cwd=scratch).code == 0
    files = {
        p.relative_to(scratch / "experiments/cls").as_posix(): p.read_bytes()
        for p in (scratch / "experiments/cls").rglob("*")
        if p.is_file()
    }
    files["recipe.lock.json"] = _dialect_lock(json.loads(files["recipe.lock.json"]), dialect).encode()
    write_tree(root / "experiments/cls", dict(files.items()))
    manifest = root / "plugins/opsd/plugin.yaml"
    manifest.write_text(manifest.read_text(encoding="utf-8").replace("load: deferred", "load: eager"), encoding="utf-8")
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "an image classifier")
    assert tp_subprocess("migrate", cwd=root).code == 0
    locked = tp_subprocess("plugin", "lock", "cls", "lab/opsd", cwd=root)
    assert locked.code == 0, locked.output
    entry = json.loads((root / "experiments/cls/plugins.lock.json").read_text(encoding="utf-8"))["plugins"]
    assert [p["id"] for p in entry] == ["lab/opsd"]
