"""One line per plugin per job: the launcher names each plugin once, however many ranks install it.

Run for real (`python -m tuneplane.launcher` in a job package in a temp dir, the fake trainer of
`tests/fixtures_plugins`): ranks re-enter the launcher as torchrun's would, with their own `RANK`;
every rank installs the plugins, and only the job's first process (node 0, rank 0) names them. A
data-prep plugin is never loaded in a job, whatever its `execution`.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

from conftest import write_tree
from support.repos import git
from test_launcher import EAGER_SOURCE, FIXTURES, TRAIN, make_plugin, plugin_lines, write_jobspec

APPLIED = "plugin  : alice/opsd-patch@1.2.0 applied in entrypoint process"
SKIPPED = "plugin  : alice/env-tool@1.2.0 skipped (capability environment is not loaded in the entrypoint process)"
RAISES_ON_IMPORT = "raise RuntimeError('a data-prep plugin was imported in the job')\n"


def _rank(rank: int, out: str) -> str:
    """One re-entering rank of the fake trainer, as torchrun starts it (its global RANK set)."""
    return f"RANK={rank} {shlex.quote(sys.executable)} -m tuneplane.launcher -m faketrain.main --out {out}"


def _launch(work: Path, run_dir: Path | None = None, **extra: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, TUNEPLANE_WORK_DIR=str(work), PYTHONPATH=os.pathsep.join([str(FIXTURES)]))
    for name in ("RANK", "TUNEPLANE_NODE_RANK", "TUNEPLANE_RUN_DIR", "TUNEPLANE_JOB_TOKEN"):
        env.pop(name, None)
    if run_dir is not None:  # a node's launcher that records the attempt and watches the trainer
        env.update(TUNEPLANE_RUN_DIR=str(run_dir), TUNEPLANE_OUT_DIR=str(run_dir / "out"))
    env.update(extra)
    return subprocess.run(
        [sys.executable, "-m", "tuneplane.launcher"],
        cwd=work,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        timeout=120,
    )


def _two_ranks(work: Path) -> list[str]:
    script = f"{_rank(0, 'r0.json')} & {_rank(1, 'r1.json')} & wait %1 && wait %2"
    return ["sh", "-c", script]


def test_two_ranks_install_the_plugin_and_the_job_names_it_once(tmp_path: Path) -> None:
    plugin = make_plugin(tmp_path, "opsd-patch", EAGER_SOURCE)
    other = make_plugin(tmp_path, "env-tool", EAGER_SOURCE, capability="environment")
    write_jobspec(tmp_path, [plugin, other], _two_ranks(tmp_path))
    proc = _launch(tmp_path)
    assert proc.returncode == 0, proc.stdout
    assert sorted(plugin_lines(proc)) == [SKIPPED, APPLIED]  # not one per rank
    for out in ("r0.json", "r1.json"):  # yet both ranks run patched
        assert json.loads((tmp_path / out).read_text())["advantages"] == [-2.0, 0.0, 2.0]


def test_a_watched_one_process_run_names_a_skipped_plugin_once(tmp_path: Path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    plugin = make_plugin(work, "opsd-patch", EAGER_SOURCE)
    other = make_plugin(work, "env-tool", EAGER_SOURCE, capability="environment")
    rank = f"exec {shlex.quote(sys.executable)} -m tuneplane.launcher -m faketrain.main --out result.json"
    write_jobspec(work, [plugin, other], ["sh", "-c", rank])
    proc = _launch(work, tmp_path / "run")
    assert proc.returncode == 0, proc.stdout
    assert plugin_lines(proc) == [SKIPPED, APPLIED]


def test_an_in_process_run_watched_by_its_launcher_names_each_plugin_once(tmp_path: Path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    plugin = make_plugin(work, "opsd-patch", EAGER_SOURCE)
    other = make_plugin(work, "env-tool", EAGER_SOURCE, capability="environment")
    write_jobspec(work, [plugin, other], TRAIN)
    proc = _launch(work, tmp_path / "run")
    assert proc.returncode == 0, proc.stdout
    assert plugin_lines(proc) == [SKIPPED, APPLIED]


def test_another_nodes_launcher_installs_without_naming(tmp_path: Path) -> None:
    plugin = make_plugin(tmp_path, "opsd-patch", EAGER_SOURCE)
    write_jobspec(tmp_path, [plugin], TRAIN)
    proc = _launch(tmp_path, TUNEPLANE_NODE_RANK="1")
    assert proc.returncode == 0, proc.stdout
    assert plugin_lines(proc) == []
    assert json.loads((tmp_path / "result.json").read_text())["advantages"] == [-2.0, 0.0, 2.0]


def test_a_data_prep_plugin_for_the_job_is_never_loaded(tmp_path: Path) -> None:
    plugin = make_plugin(tmp_path, "opsd-patch", EAGER_SOURCE)
    prep = make_plugin(tmp_path, "prep", RAISES_ON_IMPORT, capability="data-prep")
    (tmp_path / "tuneplane_plugins" / "prep" / "plugin.yaml").write_text(
        "schema: tuneplane/plugin/v1\nname: prep\nversion: 1.2.0\ncapability: data-prep\nexecution: job\n"
        "entrypoint: prep_plugin:install\n",
        encoding="utf-8",
    )
    write_jobspec(tmp_path, [plugin, prep], TRAIN)
    proc = _launch(tmp_path)
    assert proc.returncode == 0, proc.stdout
    assert plugin_lines(proc) == [
        "plugin  : alice/prep@1.2.0 skipped (a data-prep plugin runs on your machine, never in a job)",
        APPLIED,
    ]


def test_a_data_prep_plugin_for_the_job_locks_and_validates_with_a_warning(lab: Path, tp: Any) -> None:
    assert tp("new", "cls", "--method", "pytorch/image-classification", cwd=lab).code == 0
    write_tree(
        lab,
        {
            "plugins/prep/plugin.yaml": (
                "schema: tuneplane/plugin/v1\nname: prep\nversion: 1.0.0\ncapability: data-prep\n"
                "execution: job\nentrypoint: prep_plugin:run\n"
            ),
            "plugins/prep/prep_plugin.py": "def run(params):\n    pass\n",
        },
    )
    locked = tp("plugin", "lock", "cls", "alice/prep", cwd=lab)
    assert locked.code == 0, locked.output
    git(lab, "add", "-A")
    git(lab, "commit", "-q", "-m", "prep")
    result = tp("validate", "--format", "json", cwd=lab)
    assert result.code == 0, result.output
    problems = json.loads(result.out)["problems"]
    assert [(p["file"], p["rule"], p["severity"]) for p in problems] == [
        ("plugins/prep/plugin.yaml", "plugin-data-prep-job", "warning")
    ]
