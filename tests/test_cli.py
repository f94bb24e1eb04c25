"""The `tp` command line: exit codes, output formats, `--changed` in a real git repository, `tp ls`,
`tp methods`."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from support.labs import new_lab

from tuneplane import __version__
from tuneplane.lab.catalog import load_catalog
from tuneplane.runtime.digest import tree_digest

RUN_ID = "20260101-120000-abcdef"
RUN_HEAD = "apiVersion: tuneplane/run/v1\nkind: RunRequest\n"
IMG = "pytorch/image-classification"
PLUGIN_YAML = """\
schema: tuneplane/plugin/v1
name: p
version: 0.1.0
capability: algorithm
summary: scales advantages
entrypoint: p_mod:install
load: eager
requires:
  core: ">=0.1,<1"
scope: entrypoint
"""


def new(tp: Any, name: str, method: str = IMG) -> None:
    result = tp("new", name, "--method", method)
    assert result.code == 0, result.output


def write(root: Path, rel: str, text: str) -> None:
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")


def bad_runs(root: Path, count: int) -> None:
    """`count` run requests for experiment img, each refused (12 GPUs on 8-GPU nodes) on line 5."""
    for i in range(count):
        run_id = f"20260101-1200{i:02d}-abcdef"
        body = f"experiment: img\nrun_id: {run_id}\nprofile: h200:12\n"
        write(root, f"runs/img/{run_id}.yaml", RUN_HEAD + body)


# ── exit codes ──────────────────────────────────────────────────────────────────────────────────────


def test_version_and_help(tp: Any) -> None:
    version = tp("--version")
    assert (version.code, version.out.strip()) == (0, f"tp {__version__}")
    help_ = tp("--help")
    assert help_.code == 0
    for command in ("init", "new", "ls", "methods", "validate"):
        assert re.search(rf"^\s+{command}\s", help_.out, flags=re.M), command


def test_exit_0_when_clean(lab: Path, tp: Any) -> None:
    new(tp, "img")
    result = tp("validate")
    assert result.code == 0, result.output
    assert result.out.startswith("ok: 1 experiment(s)")


def test_exit_1_when_problems_are_found(lab: Path, tp: Any) -> None:
    new(tp, "img")
    bad_runs(lab, 1)
    result = tp("validate")
    assert result.code == 1
    assert "runs/img/20260101-120000-abcdef.yaml:5:" in result.out


def test_exit_2_outside_a_lab(tmp_path: Path, tp_subprocess: Any) -> None:
    result = tp_subprocess("validate", cwd=tmp_path)
    assert result.code == 2
    assert "not inside a TunePlane lab" in result.err and "tp init" in result.err
    assert "Traceback" not in result.output


@pytest.mark.parametrize(
    "content",
    [
        b"apiVersion: tuneplane/project/v1\nname: caf\xe9\n",
        b"apiVersion: tuneplane/project/v1\nname: [lab\n",
        b"\x00\x01binary",
    ],
    ids=["not-utf8", "not-yaml", "binary"],
)
def test_exit_2_when_the_lab_file_cannot_be_read(lab: Path, tp_subprocess: Any, content: bytes) -> None:
    (lab / "tuneplane.yaml").write_bytes(content)
    result = tp_subprocess("validate", cwd=lab)
    assert "Traceback" not in result.output
    assert "tuneplane.yaml:" in result.output
    assert result.code == 2, result.output


def test_a_lab_file_with_schema_problems_is_exit_1(lab: Path, tp: Any) -> None:
    write(lab, "tuneplane.yaml", "apiVersion: tuneplane/project/v1\nname: lab\nprofilez: {}\n")
    result = tp("validate")
    assert result.code == 1
    assert "tuneplane.yaml:3:1: error [lab-schema]" in result.out


def test_strict_makes_warnings_fail(lab: Path, tp: Any) -> None:
    new(tp, "byo", "custom/custom")  # the untouched scaffold is a warning
    assert tp("validate").code == 0
    strict = tp("validate", "--strict")
    assert strict.code == 1 and "[lint-scaffold]" in strict.out


def test_unknown_format_is_a_usage_error(lab: Path, tp: Any) -> None:
    result = tp("validate", "--format", "xml")
    assert result.code == 2 and "xml" in result.output


def test_targets_limit_the_scope(lab: Path, tp: Any) -> None:
    new(tp, "img")
    new(tp, "other")
    write(lab, "experiments/other/config.yaml", "epochs: 0\n")
    assert tp("validate", "img").code == 0
    by_path = tp("validate", "--format", "json", "experiments/other/config.yaml")
    data = json.loads(by_path.out)
    assert data["checked"].startswith("1 experiment")
    assert {p["file"] for p in data["problems"]} == {"experiments/other/config.yaml"}
    assert by_path.code == 1


# ── formats ─────────────────────────────────────────────────────────────────────────────────────────


def test_json_format(lab: Path, tp: Any) -> None:
    new(tp, "img")
    bad_runs(lab, 2)
    data = json.loads(tp("validate", "--format", "json").out)
    assert (data["errors"], data["warnings"]) == (2, 0)
    assert {p["rule"] for p in data["problems"]} == {"run-profile"}


def test_github_format_caps_annotations_and_appends_the_summary(lab: Path, tp: Any, tmp_path: Path) -> None:
    new(tp, "img")
    bad_runs(lab, 15)
    summary = tmp_path / "summary.md"
    summary.write_text("earlier step output\n", encoding="utf-8")
    result = tp("validate", "--format", "github", env={"GITHUB_STEP_SUMMARY": str(summary)})
    assert result.code == 1
    annotations = [line for line in result.out.splitlines() if line.startswith("::error ")]
    assert len(annotations) == 10
    for line in annotations:
        shape = r"^::error file=runs/img/[0-9a-f-]+\.yaml,line=5,col=\d+,title=run-profile::"
        assert re.match(shape, line), line
    text = summary.read_text(encoding="utf-8")
    assert text.startswith("earlier step output\n")
    assert len([row for row in text.splitlines() if "run-profile" in row]) == 15


def test_github_summary_only_for_the_github_format(lab: Path, tp: Any, tmp_path: Path) -> None:
    new(tp, "img")
    summary = tmp_path / "summary.md"
    tp("validate", "--format", "json", env={"GITHUB_STEP_SUMMARY": str(summary)})
    assert not summary.exists()


def test_sarif_format(lab: Path, tp: Any) -> None:
    new(tp, "img")
    bad_runs(lab, 3)
    result = tp("validate", "--format", "sarif")
    doc = json.loads(result.out)
    assert doc["version"] == "2.1.0"
    results = doc["runs"][0]["results"]
    assert len(results) == 3
    assert all(r["level"] == "error" and r["ruleId"] == "run-profile" for r in results)
    assert all(r["locations"][0]["physicalLocation"]["region"]["startLine"] == 5 for r in results)
    assert result.code == 1


# ── --changed in a real repository ──────────────────────────────────────────────────────────────────


@pytest.fixture()
def plugin_lab(lab: Path, tp: Any, git: Any) -> Path:
    """Experiments a (locks plugin alice/p) and b (a committed lint warning), all committed on main."""
    new(tp, "a")
    new(tp, "b")
    train = lab / "experiments/b/train.py"  # a checkpoint folder the container takes with it: a warning
    write(lab, "experiments/b/train.py", train.read_text(encoding="utf-8") + 'SCRATCH = "./checkpoints"\n')
    write(lab, "plugins/p/plugin.yaml", PLUGIN_YAML)
    write(lab, "plugins/p/p_mod.py", "def install(params):\n    pass\n")
    lock = {
        "apiVersion": "tuneplane/plugins-lock/v1",
        "plugins": [{"id": "alice/p", "version": "0.1.0", "digest": tree_digest(lab / "plugins/p")}],
    }
    write(lab, "experiments/a/plugins.lock.json", json.dumps(lock, indent=2) + "\n")
    git(lab, "add", "-A")
    git(lab, "commit", "-q", "-m", "experiments and a plugin")
    return lab


def changed(tp: Any, base: str = "HEAD") -> tuple[int, dict[str, Any]]:
    result = tp("validate", "--changed", "--base", base, "--format", "json")
    assert "Traceback" not in result.output
    return result.code, json.loads(result.out)


def files_of(data: dict[str, Any]) -> set[str]:
    return {p["file"] for p in data["problems"]}


def test_everything_validates_without_changed(plugin_lab: Path, tp: Any) -> None:
    result = tp("validate", "--format", "json")
    assert files_of(json.loads(result.out)) == {"experiments/b/train.py"}  # a is clean, b has its warning
    assert result.code == 0


def test_changed_with_no_changes_checks_nothing(plugin_lab: Path, tp: Any) -> None:
    code, data = changed(tp)
    assert data["checked"].startswith("0 experiment(s), 0 run request(s)")
    assert (code, data["problems"]) == (0, [])


def test_a_plugin_change_revalidates_the_experiments_locking_it(plugin_lab: Path, tp: Any) -> None:
    write(plugin_lab, "plugins/p/p_mod.py", "def install(params):\n    params['changed'] = True\n")
    code, data = changed(tp)
    assert data["checked"].startswith("1 experiment(s)")
    assert "experiments/a/plugins.lock.json" in files_of(data)
    assert not any(f.startswith("experiments/b/") for f in files_of(data))
    digest = [p for p in data["problems"] if p["file"] == "experiments/a/plugins.lock.json"]
    assert digest and all(p["severity"] == "error" for p in digest)
    assert code == 1


def test_a_committed_change_on_a_branch_is_found_against_main(plugin_lab: Path, tp: Any, git: Any) -> None:
    git(plugin_lab, "checkout", "-q", "-b", "feature")
    write(plugin_lab, "plugins/p/p_mod.py", "def install(params):\n    return None\n")
    git(plugin_lab, "commit", "-q", "-am", "tweak the plugin")
    code, data = changed(tp, "main")
    assert "experiments/a/plugins.lock.json" in files_of(data)
    assert code == 1


def test_an_experiment_change_revalidates_only_that_experiment(plugin_lab: Path, tp: Any) -> None:
    write(plugin_lab, "experiments/b/config.yaml", "epochs: 0\n")
    code, data = changed(tp)
    assert data["checked"].startswith("1 experiment(s)")
    assert files_of(data) == {"experiments/b/config.yaml", "experiments/b/train.py"}
    assert code == 1


def test_an_untracked_experiment_is_a_change(plugin_lab: Path, tp: Any) -> None:
    new(tp, "c")
    write(plugin_lab, "experiments/c/config.yaml", "optimizer: adam\n")
    code, data = changed(tp)
    assert files_of(data) == {"experiments/c/config.yaml"}
    assert code == 1


def test_a_new_run_request_is_validated_with_its_experiment(plugin_lab: Path, tp: Any) -> None:
    body = f"experiment: a\nrun_id: {RUN_ID}\nprofile: h200:12\n"
    write(plugin_lab, f"runs/a/{RUN_ID}.yaml", RUN_HEAD + body)
    code, data = changed(tp)
    assert "1 run request(s)" in data["checked"]
    assert files_of(data) == {f"runs/a/{RUN_ID}.yaml"}
    assert code == 1


def test_a_lab_file_change_revalidates_everything(plugin_lab: Path, tp: Any) -> None:
    with (plugin_lab / "tuneplane.yaml").open("a", encoding="utf-8") as fh:
        fh.write("# a comment\n")
    code, data = changed(tp)
    assert data["checked"].startswith("2 experiment(s)")
    assert files_of(data) == {"experiments/b/train.py"}


def test_changed_outside_a_git_repository(tmp_path: Path, tp: Any) -> None:
    result = tp("validate", "--changed", cwd=new_lab(tmp_path / "lab", "lab", use_git=False))
    assert result.code == 2 and "not a git repository" in result.err


# ── tp ls and tp methods ────────────────────────────────────────────────────────────────────────────


def test_ls_shows_method_version_and_lock_state(lab: Path, tp: Any) -> None:
    new(tp, "img")
    new(tp, "byo", "custom/custom")
    new(tp, "broken")
    lock = lab / "experiments/broken/recipe.lock.json"
    data = json.loads(lock.read_text(encoding="utf-8"))
    data["recipe"]["digest"] = "sha256:" + "0" * 64
    lock.write_text(json.dumps(data, indent=2), encoding="utf-8")
    result = tp("ls")
    assert result.code == 0
    rows = {line.split()[0]: line.split(None, 3) for line in result.out.splitlines()[2:]}
    default = load_catalog().recipe(IMG).runtime.default_version
    assert rows["img"] == ["img", IMG, default, "current"]
    assert rows["byo"] == ["byo", "custom/custom", "user-managed", "current"]
    assert rows["broken"][3].startswith("blocked:")
    listed = json.loads(tp("ls", "--json").out)
    assert [r["name"] for r in listed] == ["broken", "byo", "img"]


def test_ls_in_an_empty_lab(lab: Path, tp: Any) -> None:
    result = tp("ls")
    assert result.code == 0 and "tp new" in result.out


def test_methods_lists_the_whole_catalog(tp: Any) -> None:
    result = tp("methods")
    assert result.code == 0
    catalog = load_catalog()
    for method in catalog.ids:
        line = next(x for x in result.out.splitlines() if x.startswith(method + " "))
        assert catalog.recipe(method).runtime.default_version in line


def test_methods_shows_one_recipe_with_its_parameters(tp: Any) -> None:
    result = tp("methods", "trl/sft")
    assert result.code == 0
    recipe = load_catalog().recipe("trl/sft")
    assert "required inputs: --model --train-data --validation-data" in result.out
    header = next(x for x in result.out.splitlines() if x.startswith("param "))
    assert "type" in header and "default" in header
    for name, param in recipe.params.items():
        assert re.search(rf"^{re.escape(name)}\s+{param.type}\b", result.out, flags=re.M), name


def test_methods_for_custom_says_there_are_no_parameters(tp: Any) -> None:
    result = tp("methods", "custom/custom")
    assert result.code == 0 and "no parameters" in result.out


def test_methods_unknown_suggests(tp: Any) -> None:
    result = tp("methods", "trl/sfft")
    assert result.code == 2 and "did you mean 'trl/sft'" in result.err
