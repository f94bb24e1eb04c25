"""`tp migrate` on StarForge labs as people lay them out, then `tp validate` on the result.

Two labs: the StarForge fixtures from `../shared/fixtures/starforge-lab/` (read at run time, copied to a
temporary folder), and a lab built here with two experiment roots (`experiments/` and `smoke/`), shared
code under `common/`, plugins grouped in folders, and train code that still imports `starforge.report`
and reads `FORGE_*`/`STARFORGE_*` variables. Every run is the real CLI in a real git repository.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path
from typing import Any

import pytest
from conftest import write_tree
from support.repos import git

LEGACY_LOCK = "forge/recipe-lock/v3"

RUN_PY = '''"""GRPO with the lab's own reward.

Usage: python run.py --config config.yaml --output-dir --overrides-json (the platform passes both).
"""
import os

from starforge.report import StarForgeCallback, log
from common.rewards import score

CALLBACKS = [StarForgeCallback()]
OUT = os.environ["FORGE_OUT_DIR"]
log({"reward": score("a")}, step=0)
'''

TRAIN_PY = """import os
import starforge.report as sfr

# Writes under FORGE_OUT_DIR; the callback reports the loss.
out_dir = os.environ.get("FORGE_OUT_DIR", "")
token = os.getenv("STARFORGE_TOKEN")
sfr.log({"loss": 1.0}, step=0)
"""

REWARDS_PY = """import os

from starforge.report import log


def score(text: str) -> float:
    prefix = "STARFORGE_"
    judge = os.environ.get(prefix + "JUDGE_URL")  # composed at run time: migrate cannot rewrite this
    log({"judge": float(bool(judge))})
    return float(len(text)) if os.environ.get("STARFORGE_ENABLED") == "1" else 0.0
"""

OPSD_PY = "def install(params):\n    return float(params.get('opsd.scale', 1.0))\n"
OPSD_YAML = """schema: lab-plugin/v1
name: opsd
version: 0.1.0
kind: algorithm
load: eager
summary: on-policy self-distillation
entrypoint: opsd_plugin:install
"""
PREP_YAML = """schema: lab-plugin/v1
name: tiny-qa-prep
version: 0.1.0
kind: data-prep
summary: makes a tiny QA set
"""


def _legacy_lock(tmp_path: Path, method: str) -> str:
    """A StarForge v3 lock of `method` with digests that match this catalog (so no drift is reported)."""
    scratch = tmp_path / "scratch"
    if not scratch.exists():
        from conftest import run_tp_in_process

        assert run_tp_in_process("init", scratch, "--name", "scratch").code == 0
    from conftest import run_tp_in_process

    name = "x" + re.sub(r"[^a-z0-9]+", "-", method)
    result = run_tp_in_process("new", name, "--method", method, cwd=scratch)
    assert result.code == 0, result.output
    lock = json.loads((scratch / "experiments" / name / "recipe.lock.json").read_text(encoding="utf-8"))
    lock["apiVersion"] = LEGACY_LOCK
    lock.pop("bindings", None)
    return json.dumps(lock, indent=2, sort_keys=True) + "\n"


def _commit(root: Path) -> None:
    if not (root / ".git").exists():
        git(root, "init", "-q", "-b", "main")
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "lab")


def _problems(result: Any) -> list[dict[str, Any]]:
    assert "Traceback" not in result.output, result.output
    return list(json.loads(result.out)["problems"])


def _errors(problems: list[dict[str, Any]]) -> list[str]:
    return [f"{p['file']}:{p['line']}: {p['rule']}: {p['message']}" for p in problems if p["severity"] == "error"]


# ── the StarForge fixtures ────────────────────────────────────────────────────────────────────────


@pytest.fixture()
def fixture_lab(shared_dir: Path, tmp_path: Path) -> Path:
    root = tmp_path / "starforge-lab"
    shutil.copytree(shared_dir / "fixtures" / "starforge-lab", root)
    _commit(root)
    return root


def test_fixture_lab_migrates_every_lock_and_manifest(fixture_lab: Path, tp_subprocess: Any) -> None:
    result = tp_subprocess("migrate", cwd=fixture_lab)
    assert result.code == 0, result.output
    # what the fixtures lack (their own errors, not formats) is listed for the user
    assert "left for you (tp validate; not StarForge formats):" in result.out, result.out
    for lock in fixture_lab.glob("experiments/*/recipe.lock.json"):
        data = json.loads(lock.read_text(encoding="utf-8"))
        assert data["apiVersion"] == "tuneplane/recipe-lock/v1", lock
    for manifest in fixture_lab.glob("plugins/*/plugin.yaml"):
        text = manifest.read_text(encoding="utf-8")
        assert "schema: tuneplane/plugin/v1" in text and "capability:" in text and "\nkind:" not in text
    assert (fixture_lab / "tuneplane.yaml").is_file() and not (fixture_lab / "starforge.yaml").exists()


def test_fixture_lab_errors_after_migrate_are_only_files_the_fixture_lacks(
    fixture_lab: Path, tp_subprocess: Any
) -> None:
    """The fixtures ship locks and configs only: the TRL experiment's train.py and the opsd plugin's
    module are absent, and its GRPO config sets `max_prompt_length`, which TRL 1.10's GRPOConfig no
    longer has (`GRPOConfig(**config)` would fail). Those errors are the user's; nothing else may be,
    and `tp migrate` lists each of them."""
    migrated = tp_subprocess("migrate", cwd=fixture_lab)
    assert migrated.code == 0, migrated.output
    problems = _problems(tp_subprocess("validate", "--format", "json", cwd=fixture_lab))
    errors = [p for p in problems if p["severity"] == "error"]
    assert errors
    for p in errors:
        assert f"{p['file']}:{p['line']}:{p['col']}: {p['rule']}: {p['message']}" in migrated.out, migrated.out
    trl = "experiments/trl-grpo_qwen3.5-9b_qa-tools_v1"
    allowed = {
        (f"{trl}/recipe.lock.json", "entrypoint"),
        ("plugins/opsd/plugin.yaml", "plugin-entrypoint"),
        (f"{trl}/config.yaml", "config-unknown"),
    }
    mine = [p for p in errors if not p["file"].startswith("experiments/sft_qwen3.5-4b_alpaca_v1/")]
    assert {(p["file"], p["rule"]) for p in mine} <= allowed, _errors(mine)
    # the TRL config is closed: every other key the fixture sets is one TRL's GRPOConfig knows
    unknown = [p for p in problems if p["rule"].startswith("config-") and p["file"].startswith(trl)]
    assert [(p["line"], p["message"].split("'")[1]) for p in unknown] == [(22, "max_prompt_length")]


def test_fixture_lab_completed_by_the_user_validates_clean(fixture_lab: Path, tp_subprocess: Any) -> None:
    """Depends on the catalog branch: `nemo-rl/sft` and nemo-rl's built-in run_sft.py entrypoint."""
    assert tp_subprocess("migrate", cwd=fixture_lab).code == 0
    write_tree(
        fixture_lab,
        {
            "experiments/trl-grpo_qwen3.5-9b_qa-tools_v1/train.py": "print('grpo')\n",
            "plugins/opsd/opsd_plugin.py": OPSD_PY,
        },
    )
    config = fixture_lab / "experiments/trl-grpo_qwen3.5-9b_qa-tools_v1/config.yaml"
    config.write_text(config.read_text(encoding="utf-8").replace("max_prompt_length: 1024\n", ""), encoding="utf-8")
    _commit(fixture_lab)
    problems = _problems(tp_subprocess("validate", "--format", "json", cwd=fixture_lab))
    assert _errors(problems) == []


# ── a lab laid out as people do ───────────────────────────────────────────────────────────────────


def _people_lab(tmp_path: Path, nemo: bool) -> Path:
    root = tmp_path / "people-lab"
    files: dict[str, Any] = {
        "starforge.yaml": "# our lab\napiVersion: forge/project/v1\nname: people-lab\n",
        "experiments/sft-trl/recipe.lock.json": _legacy_lock(tmp_path, "trl/sft"),
        "experiments/sft-trl/config.yaml": "learning_rate: 1.0e-5\nsave_strategy: steps\n",
        "experiments/sft-trl/train.py": TRAIN_PY,
        "smoke/smoke-custom/recipe.lock.json": _legacy_lock(tmp_path, "custom/custom"),
        "smoke/smoke-custom/train.sh": (
            "#!/usr/bin/env bash\nset -euo pipefail\n"
            'exec python "${FORGE_EXP_DIR}/train.py" --output-dir "${FORGE_OUT_DIR}"\n'
        ),
        "smoke/smoke-custom/train.py": RUN_PY,
        "smoke/smoke-custom/config.yaml": "model: {{ name }}\n",
        "common/__init__.py": "",
        "common/rewards.py": REWARDS_PY,
        "plugins/examples/opsd/plugin.yaml": OPSD_YAML,
        "plugins/examples/opsd/opsd_plugin.py": OPSD_PY,
        "plugins/tiny-qa-prep/plugin.yaml": PREP_YAML,
    }
    if nemo:
        files.update(
            {
                "experiments/grpo-own-run/recipe.lock.json": _legacy_lock(tmp_path, "nemo-rl/grpo"),
                "experiments/grpo-own-run/config.yaml": "grpo:\n  num_prompts_per_step: 8\n",
                "experiments/grpo-own-run/run.py": RUN_PY,
                "smoke/sft-builtin/recipe.lock.json": _legacy_lock(tmp_path, "nemo-rl/sft"),
                "smoke/sft-builtin/config.yaml": "sft:\n  max_num_steps: 10\n",
            }
        )
    write_tree(root, files)
    _commit(root)
    return root


def test_people_lab_migrates_locks_and_manifests_wherever_they_lie(tmp_path: Path, tp_subprocess: Any) -> None:
    root = _people_lab(tmp_path, nemo=False)
    result = tp_subprocess("migrate", cwd=root)
    assert result.code == 0, result.output
    for rel in ("experiments/sft-trl/recipe.lock.json", "smoke/smoke-custom/recipe.lock.json"):
        data = json.loads((root / rel).read_text(encoding="utf-8"))
        assert data["apiVersion"] == "tuneplane/recipe-lock/v1", rel
        assert "bindings" in data, rel
    nested = (root / "plugins/examples/opsd/plugin.yaml").read_text(encoding="utf-8")
    assert "schema: tuneplane/plugin/v1" in nested and "capability: algorithm" in nested
    lab = (root / "tuneplane.yaml").read_text(encoding="utf-8")
    assert re.search(r"^experiment_roots:\s*\[experiments, smoke\]", lab, re.M), lab
    assert re.search(r"^shared_code:\s*\[common\]", lab, re.M), lab


def test_migrate_rewrites_starforge_names_in_code(tmp_path: Path, tp_subprocess: Any) -> None:
    root = _people_lab(tmp_path, nemo=False)
    result = tp_subprocess("migrate", cwd=root)
    assert result.code == 0, result.output
    run_py = (root / "smoke/smoke-custom/train.py").read_text(encoding="utf-8")
    assert "from tuneplane.report import TunePlaneCallback, log" in run_py
    assert "CALLBACKS = [TunePlaneCallback()]" in run_py and 'os.environ["TUNEPLANE_OUT_DIR"]' in run_py
    train_py = (root / "experiments/sft-trl/train.py").read_text(encoding="utf-8")
    assert "import tuneplane.report as sfr" in train_py and '"TUNEPLANE_JOB_TOKEN"' in train_py
    assert "# Writes under TUNEPLANE_OUT_DIR; the callback" in train_py
    train_sh = (root / "smoke/smoke-custom/train.sh").read_text(encoding="utf-8")
    assert '"${TUNEPLANE_EXP_DIR}/train.py" --output-dir "${TUNEPLANE_OUT_DIR}"' in train_sh
    rewards = (root / "common/rewards.py").read_text(encoding="utf-8")
    assert "from tuneplane.report import log" in rewards and '"TUNEPLANE_JOB_ENABLED"' in rewards
    for path in (root / "smoke/smoke-custom/train.py", root / "experiments/sft-trl/train.py"):
        assert not re.search(r"starforge|\bFORGE_", path.read_text(encoding="utf-8"), re.I), path
    # what cannot be rewritten safely is listed with file:line
    assert re.search(r"common/rewards\.py:7:\d+: .*STARFORGE_", result.out), result.out


def test_migrate_checklist_scan_is_case_insensitive(tmp_path: Path, tp_subprocess: Any) -> None:
    root = _people_lab(tmp_path, nemo=False)
    (root / "experiments/sft-trl/notes.py").write_text(
        "from StarForge.Extras import Thing  # vendored\n", encoding="utf-8"
    )
    _commit(root)
    result = tp_subprocess("migrate", "--dry-run", cwd=root)
    assert result.code == 0, result.output
    assert re.search(r"experiments/sft-trl/notes\.py:1:\d+: StarForge", result.out), result.out


def test_people_lab_validates_strict_after_migrate(tmp_path: Path, tp_subprocess: Any) -> None:
    root = _people_lab(tmp_path, nemo=False)
    assert tp_subprocess("migrate", cwd=root).code == 0
    # how CI installs tp: empty (tp run from a checkout without a remote) is a warning --strict fails on
    marker = root / "tuneplane.yaml"
    text = re.sub(r"(?m)^(\s*requirement:).*$", r"\1 tuneplane==0.5.0", marker.read_text(encoding="utf-8"), count=1)
    marker.write_text(text, encoding="utf-8")
    _commit(root)
    # the one use migrate could not rewrite is flagged (a warning, so --strict fails on it) ...
    problems = _problems(tp_subprocess("validate", "--format", "json", cwd=root))
    assert _errors(problems) == []
    legacy = [p for p in problems if p["rule"] == "lint-legacy-env"]
    assert [(p["file"], p["line"]) for p in legacy] == [("common/rewards.py", 7)], problems
    assert tp_subprocess("validate", "--strict", cwd=root).code == 1
    # ... and once the user fixes it, the migrated lab is clean even under --strict
    rewards = root / "common/rewards.py"
    rewards.write_text(rewards.read_text(encoding="utf-8").replace('"STARFORGE_"', '"TUNEPLANE_"'), encoding="utf-8")
    _commit(root)
    strict = tp_subprocess("validate", "--strict", "--format", "json", cwd=root)
    assert [f"{p['file']}:{p['line']}: {p['rule']}" for p in _problems(strict)] == []
    assert strict.code == 0
    listed = tp_subprocess("ls", cwd=root)
    assert "sft-trl" in listed.out and "smoke-custom" in listed.out


def test_people_lab_with_nemo_rl_experiments_validates_after_migrate(tmp_path: Path, tp_subprocess: Any) -> None:
    """Depends on the catalog branch: nemo-rl/sft, and nemo-rl's image-side entrypoint that an
    experiment's own run.py overrides."""
    root = _people_lab(tmp_path, nemo=True)
    assert tp_subprocess("migrate", cwd=root).code == 0
    problems = _problems(tp_subprocess("validate", "--format", "json", cwd=root))
    assert _errors(problems) == []


@pytest.mark.parametrize(
    ("lock", "said"),
    [
        (
            '{\n  "apiVersion": "forge/recipe-lock/v3"\n  "recipe": {}\n}\n',
            "recipe.lock.json:3:3: cannot read the lock",
        ),
        ("[1]\n", "recipe.lock.json: cannot read the lock: it is a JSON array, not an object"),
        (
            '{"apiVersion": "forge/recipe-lock/v3", "recipe": "trl/sft"}\n',
            "recipe.lock.json: cannot read the lock: its `recipe` is a JSON string, not an object",
        ),
    ],
)
def test_a_lock_migrate_cannot_use_is_named_with_its_place_and_nothing_changes(
    tmp_path: Path, tp_subprocess: Any, lock: str, said: str
) -> None:
    """A person's lock with a missing comma is told at its line and column; one that is JSON but not an
    object (or whose `recipe` is not one) is told as such, not a bug in tp; the lab is left as it was."""
    root = _people_lab(tmp_path, nemo=False)
    (root / "experiments/sft-trl/recipe.lock.json").write_text(lock, encoding="utf-8")
    before = sorted(p.relative_to(root).as_posix() for p in root.rglob("*") if ".git" not in p.parts)
    result = tp_subprocess("migrate", cwd=root)
    assert result.code == 2, result.output
    assert "experiments/sft-trl/" + said in result.output, result.output
    assert "internal error" not in result.output and "Traceback" not in result.output
    assert (root / "starforge.yaml").exists() and not (root / "tuneplane.yaml").exists()
    assert sorted(p.relative_to(root).as_posix() for p in root.rglob("*") if ".git" not in p.parts) == before
