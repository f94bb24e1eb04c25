"""Plugins on the developer's side (plugin.yaml, `tp plugin new/validate/lock`, the experiment check)
and the job-side deferred registry."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from support.shared import require_shared

from tuneplane import plugins
from tuneplane.author.plugin_lock import lock_plugin
from tuneplane.check.plugin_dirs import load_plugin_manifest, validate_plugin_dir
from tuneplane.check.plugin_locks import check_experiment_plugins
from tuneplane.cli.main import run
from tuneplane.errors import UsageError
from tuneplane.models.plugin import LOCK_API
from tuneplane.problems import Problem, Severity
from tuneplane.runtime.digest import tree_digest

MANIFEST = """\
schema: tuneplane/plugin/v1
name: {name}
version: {version}
capability: algorithm
summary: scale advantages
entrypoint: {module}:install
load: eager
requires:
  core: "{core}"
scope: entrypoint
"""
INSTALL = "def install(params):\n    pass\n"


def write_tree(root: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    return root


def plugin_files(
    name: str = "opsd-patch", version: str = "1.2.0", core: str = ">=0.1,<1", module: str = "opsd_patch"
) -> dict[str, str]:
    return {
        "plugin.yaml": MANIFEST.format(name=name, version=version, core=core, module=module),
        f"{module}.py": INSTALL,
    }


@pytest.fixture()
def lab(tmp_path: Path) -> Path:
    write_tree(
        tmp_path,
        {
            "tuneplane.yaml": "apiVersion: tuneplane/project/v1\nname: lab\n",
            "experiments/exp1/README.md": "x\n",
        },
    )
    write_tree(tmp_path / "plugins" / "opsd-patch", plugin_files())
    return tmp_path


def rules(problems: list[Problem], severity: Severity | None = None) -> list[str]:
    return [p.rule for p in problems if severity is None or p.severity is severity]


def only(problems: list[Problem], rule: str) -> Problem:
    found = [p for p in problems if p.rule == rule]
    assert len(found) == 1, problems
    return found[0]


# ── deferred registry (job side) ──────────────────────────────────────────────────────────────────


@pytest.fixture()
def registry() -> Iterator[None]:
    plugins.reset()
    yield
    plugins.reset()


def test_install_deferred_passes_params_and_context_once(registry: None) -> None:
    calls: list[tuple[Any, dict[str, Any]]] = []
    plugins.register_deferred(
        "opsd", "alice/opsd@1.0", lambda params, **ctx: calls.append((params, ctx)), {"opsd.scale": 2}
    )
    assert plugins.install_deferred("opsd", tokenizer="tok", max_seq_len=4096) is True
    assert plugins.install_deferred("opsd", tokenizer="other") is False
    assert calls == [({"opsd.scale": 2}, {"tokenizer": "tok", "max_seq_len": 4096})]


def test_install_deferred_unknown_name_lists_registered(registry: None) -> None:
    plugins.register_deferred("zeta", "a/zeta@1", lambda params, **ctx: None, {})
    plugins.register_deferred("alpha", "a/alpha@1", lambda params, **ctx: None, {})
    with pytest.raises(plugins.DeferredPluginError, match=r"'a/alpha'.*registered: alpha, zeta"):
        plugins.install_deferred("a/alpha")


def test_install_deferred_with_nothing_registered_says_so(registry: None) -> None:
    with pytest.raises(LookupError, match="registered: none"):
        plugins.install_deferred("opsd")


def test_deferred_install_failure_names_the_plugin_and_can_be_retried(registry: None) -> None:
    attempts: list[int] = []

    def install(params: Any, **ctx: Any) -> None:
        attempts.append(1)
        if len(attempts) == 1:
            raise KeyError("tokenizer")

    plugins.register_deferred("opsd", "alice/opsd@1.0", install, {})
    with pytest.raises(plugins.PluginInstallError, match="alice/opsd@1.0"):
        plugins.install_deferred("opsd")
    assert plugins.install_deferred("opsd", tokenizer=1) is True


@pytest.mark.parametrize("code", [0, 3])
def test_a_deferred_install_that_exits_fails_instead_of_ending_training(registry: None, code: int) -> None:
    """`sys.exit(0)` inside a deferred install would end the trainer's process as a success, untrained."""

    def install(params: Any, **ctx: Any) -> None:
        raise SystemExit(code)

    plugins.register_deferred("opsd", "alice/opsd@1.0", install, {})
    with pytest.raises(plugins.PluginInstallError, match=r"alice/opsd@1.0 failed to install: SystemExit"):
        plugins.install_deferred("opsd")


def test_job_side_modules_import_only_the_standard_library() -> None:
    code = (
        "import sys, tuneplane.launcher, tuneplane.plugins\n"
        "print([m for m in ('yaml', 'pydantic', 'packaging', 'typer', 'ruamel') if m in sys.modules])"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


# ── plugin.yaml and the publish gate ─────────────────────────────────────────────────────────────


def test_a_complete_plugin_validates_clean(lab: Path) -> None:
    assert validate_plugin_dir(lab / "plugins" / "opsd-patch", lab) == []
    manifest = load_plugin_manifest(lab / "plugins" / "opsd-patch")
    got = (manifest.name, manifest.version, manifest.load, manifest.scope)
    assert got == ("opsd-patch", "1.2.0", "eager", "entrypoint")


@pytest.mark.parametrize(
    "entry",
    [
        "torch.py",
        "torch/__init__.py",
        "json.py",
        "json/data.txt",
        "logging.py",
        "yaml.py",
        "common/__init__.py",
        "_thread.so",
        "os.pyc",
    ],
)
def test_names_that_shadow_real_modules_are_refused(tmp_path: Path, entry: str) -> None:
    root = write_tree(tmp_path / "opsd-patch", {**plugin_files(), entry: ""})
    problem = only(validate_plugin_dir(root, tmp_path), "plugin-shadowing")
    module = entry.split("/")[0].split(".")[0]
    assert problem.is_error and f"'{module}'" in problem.message
    assert problem.file == f"opsd-patch/{entry.split('/')[0]}" and "rename" in problem.hint


def test_ordinary_top_level_names_are_fine(tmp_path: Path) -> None:
    root = write_tree(
        tmp_path / "opsd-patch",
        {**plugin_files(), "opsd_helpers/__init__.py": "", "data/sample.txt": "x", "README.md": "x"},
    )
    assert validate_plugin_dir(root, tmp_path) == []


def test_entrypoint_module_named_like_a_dependency_is_refused(tmp_path: Path) -> None:
    root = write_tree(tmp_path / "opsd-patch", plugin_files(module="torch"))
    assert rules(validate_plugin_dir(root)) == ["plugin-shadowing"]


def test_symlink_leaving_the_directory_is_refused(tmp_path: Path) -> None:
    root = write_tree(tmp_path / "opsd-patch", plugin_files())
    (tmp_path / "secret.txt").write_text("x")
    (root / "leak.txt").symlink_to(tmp_path / "secret.txt")
    (root / "inside.py").symlink_to(root / "opsd_patch.py")  # stays inside: still not the file itself
    found = {p.file: p.message for p in validate_plugin_dir(root, tmp_path) if p.rule == "plugin-symlink"}
    assert sorted(found) == ["opsd-patch/inside.py", "opsd-patch/leak.txt"]
    assert "leaves the plugin directory" in found["opsd-patch/leak.txt"]


def test_unknown_key_is_placed_at_its_line_and_column(tmp_path: Path) -> None:
    files = plugin_files()
    files["plugin.yaml"] = files["plugin.yaml"].replace("load: eager\n", "load: eager\n  \nextra_key: 1\n")
    problem = only(validate_plugin_dir(write_tree(tmp_path / "opsd-patch", files), tmp_path), "plugin-schema")
    assert (problem.file, problem.line, problem.col) == ("opsd-patch/plugin.yaml", 9, 1)
    assert "extra_key" in problem.message and "capability" in problem.hint and problem.pointer == "/extra_key"


@pytest.mark.parametrize(
    "old, new, line, col, needle",
    [
        ("version: 1.2.0", "version: 1.0", 3, 10, "quote it"),
        ("load: eager", "load: lazy", 7, 7, "lazy"),
        ("capability: algorithm", "kind: algorithm", 4, 1, "`capability:`"),
        ('core: ">=0.1,<1"', "core: soon", 9, 9, "not a PEP 440"),
        ("scope: entrypoint", "scope: workers", 10, 8, "workers"),
        ("entrypoint: opsd_patch:install", "entrypoint: opsd_patch.install", 6, 13, "module:function"),
        ("schema: tuneplane/plugin/v1", "schema: tuneplane/plugin/v9", 1, 9, "upgrade tuneplane"),
        ("name: opsd-patch\n", "name: opsd-patch\nname: again\n", 3, 1, "duplicate key"),
    ],
)
def test_schema_errors_carry_place_and_fix(
    tmp_path: Path, old: str, new: str, line: int, col: int, needle: str
) -> None:
    files = plugin_files()
    assert old in files["plugin.yaml"]
    files["plugin.yaml"] = files["plugin.yaml"].replace(old, new)
    problems = validate_plugin_dir(write_tree(tmp_path / "opsd-patch", files), tmp_path)
    errors = [p for p in problems if p.is_error]
    assert errors and errors[0].rule == "plugin-schema", problems
    assert (errors[0].line, errors[0].col) == (line, col)
    assert needle in errors[0].message + " " + errors[0].hint


def test_data_prep_needs_execution(tmp_path: Path) -> None:
    text = "schema: tuneplane/plugin/v1\nname: prep\nversion: 0.1.0\ncapability: data-prep\n"
    root = write_tree(tmp_path / "prep", {"plugin.yaml": text})
    problem = only(validate_plugin_dir(root), "plugin-schema")
    assert "execution" in problem.message and problem.line == 4
    write_tree(root, {"plugin.yaml": text + "execution: local\n"})
    assert validate_plugin_dir(root) == []
    write_tree(root, {"plugin.yaml": text.replace("data-prep", "environment") + "execution: job\n"})
    assert "only for data-prep" in only(validate_plugin_dir(root), "plugin-schema").message


def test_missing_entrypoint_module_and_function(tmp_path: Path) -> None:
    root = write_tree(tmp_path / "opsd-patch", {"plugin.yaml": plugin_files()["plugin.yaml"]})
    problem = only(validate_plugin_dir(root), "plugin-entrypoint")
    assert "'opsd_patch'" in problem.message and problem.line == 6
    write_tree(root, {"opsd_patch.py": "def setup(params):\n    pass\n"})
    assert "no top-level 'install'" in only(validate_plugin_dir(root), "plugin-entrypoint").message
    write_tree(root, {"opsd_patch.py": "def install():\n    pass\n"})
    assert "takes no arguments" in only(validate_plugin_dir(root), "plugin-entrypoint").message
    write_tree(root, {"opsd_patch.py": "def install(params:\n"})
    assert "syntax error" in only(validate_plugin_dir(root), "plugin-entrypoint").message


def test_algorithm_plugin_may_not_target_custom_or_evalkit(tmp_path: Path) -> None:
    files = plugin_files()
    files["plugin.yaml"] += "  frameworks: [nemo-rl, custom]\n"
    files["plugin.yaml"] = files["plugin.yaml"].replace("scope: entrypoint\n", "") + "scope: entrypoint\n"
    problem = only(validate_plugin_dir(write_tree(tmp_path / "opsd-patch", files)), "plugin-framework")
    assert "custom" in problem.message


def test_starforge_plugins_are_recognised_with_a_migrate_warning() -> None:
    starforge_plugins = require_shared("fixtures", "starforge-lab", "plugins")
    for name in ("opsd", "tiny-qa-prep"):
        problems = validate_plugin_dir(starforge_plugins / name, starforge_plugins.parent)
        warning = only(problems, "plugin-legacy-schema")
        assert warning.severity is Severity.WARNING and "lab-plugin/v1" in warning.message
        assert "tp migrate" in warning.hint and warning.file == f"plugins/{name}/plugin.yaml"
        assert "plugin-schema" not in rules(problems)  # `kind:` read as `capability:`
    # opsd names a module the fixture does not ship: that stays a real error
    assert rules(validate_plugin_dir(starforge_plugins / "opsd"), Severity.ERROR) == ["plugin-entrypoint"]
    assert validate_plugin_dir(starforge_plugins / "tiny-qa-prep", starforge_plugins)[1:] == []


def test_forge_plugin_v1_with_capability_is_read_too(tmp_path: Path) -> None:
    files = plugin_files()
    files["plugin.yaml"] = files["plugin.yaml"].replace("tuneplane/plugin/v1", "forge/plugin/v1")
    problems = validate_plugin_dir(write_tree(tmp_path / "opsd-patch", files))
    assert rules(problems) == ["plugin-legacy-schema"]


def test_load_plugin_manifest_raises_with_each_error(tmp_path: Path) -> None:
    root = write_tree(tmp_path / "p", {"plugin.yaml": "schema: tuneplane/plugin/v1\nname: p\nbogus: 1\n"})
    with pytest.raises(UsageError) as info:
        load_plugin_manifest(root / "plugin.yaml")
    assert "bogus" in info.value.message and "missing required key 'version'" in info.value.message


# ── `tp plugin` commands ─────────────────────────────────────────────────────────────────────────


def tp(cwd: Path, monkeypatch: pytest.MonkeyPatch, *args: str) -> int:
    monkeypatch.chdir(cwd)
    return run(list(args))


def test_plugin_new_scaffolds_a_valid_plugin_in_the_lab(
    lab: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    assert tp(lab / "experiments" / "exp1", monkeypatch, "plugin", "new", "my-patch") == 0
    root = lab / "plugins" / "my-patch"
    first = (root / "plugin.yaml").read_text().splitlines()[0]
    assert first == "# yaml-language-server: $schema=../../.tuneplane/schemas/plugin.schema.json"
    assert (root / "../../.tuneplane/schemas/plugin.schema.json").resolve().is_file()
    assert validate_plugin_dir(root) == []
    manifest = load_plugin_manifest(root)
    module = manifest.module
    namespace: dict[str, Any] = {}
    exec((root / f"{module}.py").read_text(), namespace)
    namespace["install"]({})
    namespace["install"]({})  # idempotent
    assert tp(lab, monkeypatch, "plugin", "validate", "plugins/my-patch") == 0
    assert tp(lab, monkeypatch, "plugin", "new", "my-patch") == 2  # never overwrites
    assert "already exists" in capsys.readouterr().err


def test_plugin_new_outside_a_lab_needs_dir(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    assert tp(tmp_path, monkeypatch, "plugin", "new", "p1") == 2
    assert "tuneplane.yaml" in capsys.readouterr().err
    assert tp(tmp_path, monkeypatch, "plugin", "new", "p1", "--dir", "out") == 0
    assert validate_plugin_dir(tmp_path / "out" / "p1") == []
    assert tp(tmp_path, monkeypatch, "plugin", "new", "../x", "--dir", "out") == 2


def test_plugin_validate_reports_problems_and_exits_1(
    lab: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    write_tree(lab / "plugins" / "opsd-patch", {"torch.py": ""})
    assert tp(lab, monkeypatch, "plugin", "validate", "plugins/opsd-patch") == 1
    out = capsys.readouterr().out
    assert "plugins/opsd-patch/torch.py: error:" in out and "[plugin-shadowing]" in out


def read_lock(lab: Path) -> tuple[str, Any]:
    text = (lab / "experiments" / "exp1" / "plugins.lock.json").read_text()
    return text, json.loads(text)


def test_plugin_lock_writes_a_sorted_canonical_lock(lab: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    write_tree(lab / "plugins" / "aaa", plugin_files(name="aaa", module="aaa_mod"))
    assert tp(lab, monkeypatch, "plugin", "lock", "exp1", "zed/opsd-patch@1.2.0") == 0
    assert tp(lab, monkeypatch, "plugin", "lock", "exp1", "bob/aaa") == 0
    text, data = read_lock(lab)
    assert text == json.dumps(data, indent=2, sort_keys=True) + "\n"
    assert data == {
        "$schema": "../../.tuneplane/schemas/plugins-lock.schema.json",
        "apiVersion": LOCK_API,
        "plugins": [
            {"id": "bob/aaa", "version": "1.2.0", "digest": tree_digest(lab / "plugins" / "aaa")},
            {
                "id": "zed/opsd-patch",
                "version": "1.2.0",
                "digest": tree_digest(lab / "plugins" / "opsd-patch"),
            },
        ],
    }
    assert sorted(os.listdir(lab / "experiments" / "exp1")) == ["README.md", "plugins.lock.json"]  # no temp


def test_plugin_lock_replaces_the_entry_with_the_same_id(lab: Path) -> None:
    lock_plugin(lab, "exp1", "alice/opsd-patch")
    write_tree(lab / "plugins" / "opsd-patch", plugin_files(version="1.3.0"))
    result = lock_plugin(lab, "exp1", "alice/opsd-patch@1.3.0")
    assert result.previous is not None and result.previous.version == "1.2.0"
    _, data = read_lock(lab)
    assert data["plugins"] == [
        {"id": "alice/opsd-patch", "version": "1.3.0", "digest": tree_digest(lab / "plugins" / "opsd-patch")}
    ]


@pytest.mark.parametrize(
    "ref, needle",
    [
        ("alice/opsd-patch@9.9.9", "not 9.9.9"),
        ("alice/missing", "no plugin 'missing'"),
        ("opsd-patch", "not a plugin reference"),
        ("alice/opsd-patch@", "not a plugin reference"),
    ],
)
def test_plugin_lock_refusals(lab: Path, ref: str, needle: str) -> None:
    with pytest.raises(UsageError, match=needle):
        lock_plugin(lab, "exp1", ref)
    assert not (lab / "experiments" / "exp1" / "plugins.lock.json").exists()


def test_plugin_lock_refuses_an_invalid_plugin_or_experiment(lab: Path) -> None:
    write_tree(lab / "plugins" / "opsd-patch", {"json.py": ""})
    with pytest.raises(UsageError, match="does not validate"):
        lock_plugin(lab, "exp1", "alice/opsd-patch")
    with pytest.raises(UsageError, match="no experiment 'nope'"):
        lock_plugin(lab, "nope", "alice/opsd-patch")


def test_plugin_lock_leaves_a_broken_lock_untouched(lab: Path) -> None:
    lock = lab / "experiments" / "exp1" / "plugins.lock.json"
    lock.write_text('{"apiVersion": "tuneplane/plugins-lock/v1", "plugins": [{"id": "x"}]}\n')
    before = lock.read_bytes()
    with pytest.raises(UsageError, match="left as it is"):
        lock_plugin(lab, "exp1", "alice/opsd-patch")
    assert lock.read_bytes() == before
    assert sorted(os.listdir(lock.parent)) == ["README.md", "plugins.lock.json"]  # no temp file left


# ── check_experiment_plugins (for `tp validate`) ─────────────────────────────────────────────────


def check(
    lab: Path, framework: str = "nemo-rl", recipe_plugins: list[str] | None = None, core: str = "0.5.0"
) -> list[Problem]:
    return check_experiment_plugins(
        lab,
        lab / "experiments" / "exp1",
        framework,
        recipe_plugins if recipe_plugins is not None else ["opsd-patch"],
        core,
    )


def test_a_fresh_lock_satisfies_the_recipe(lab: Path) -> None:
    lock_plugin(lab, "exp1", "alice/opsd-patch")
    assert check(lab) == []
    assert check(lab, core="0.6.0.dev1") == []  # development builds are admitted


def test_tampered_plugin_names_both_digests_and_the_fix(lab: Path) -> None:
    locked = lock_plugin(lab, "exp1", "alice/opsd-patch").entry.digest
    (lab / "plugins" / "opsd-patch" / "opsd_patch.py").write_text(INSTALL + "# sneaky\n")
    problem = only(check(lab), "plugins-lock-digest")
    now = tree_digest(lab / "plugins" / "opsd-patch")
    assert locked in problem.message and now in problem.message
    assert "tp plugin lock exp1 alice/opsd-patch@1.2.0" in problem.hint
    # line 6: "$schema" and "apiVersion" come first
    assert problem.file == "experiments/exp1/plugins.lock.json" and problem.line == 6


def test_version_drift_and_requires_core(lab: Path) -> None:
    lock_plugin(lab, "exp1", "alice/opsd-patch")
    write_tree(lab / "plugins" / "opsd-patch", plugin_files(version="2.0.0", core=">=2.1,<3"))
    problems = check(lab)
    assert sorted(rules(problems)) == ["plugin-requires-core", "plugins-lock-version"]
    assert ">=2.1,<3" in only(problems, "plugin-requires-core").message


@pytest.mark.parametrize("framework", ["custom", "evalkit"])
def test_algorithm_plugins_are_refused_for_custom_and_evalkit(lab: Path, framework: str) -> None:
    lock_plugin(lab, "exp1", "alice/opsd-patch")
    problem = only(check(lab, framework=framework, recipe_plugins=[]), "plugin-framework")
    assert framework in problem.message


def test_recipe_plugins_need_exactly_one_lock_entry(lab: Path) -> None:
    assert rules(check(lab)) == ["plugins-lock-unsatisfied"]  # no lock at all
    assert check(lab, recipe_plugins=[]) == []
    lock_plugin(lab, "exp1", "alice/opsd-patch")
    assert "'grpo-x'" in only(check(lab, recipe_plugins=["opsd-patch", "grpo-x"]), "plugins-lock-unsatisfied").message
    with pytest.raises(UsageError, match="both ship a top-level module"):  # lock refuses what validate does
        lock_plugin(lab, "exp1", "bob/opsd-patch")
    path = lab / "experiments" / "exp1" / "plugins.lock.json"
    data = json.loads(path.read_text(encoding="utf-8"))
    data["plugins"].append(dict(data["plugins"][0], id="bob/opsd-patch"))  # written by hand
    path.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    problems = check(lab)
    ambiguous = only(problems, "plugins-lock-unsatisfied").message
    assert "alice/opsd-patch@1.2.0, bob/opsd-patch@1.2.0" in ambiguous
    assert "plugin-module-collision" in rules(problems)


@pytest.mark.parametrize(
    "body, rule, line",
    [
        ('{"apiVersion": "forge/plugins-lock/v1", "plugins": []}', "plugins-lock-schema", 1),
        (
            '{\n  "apiVersion": "tuneplane/plugins-lock/v1",\n  "plugins": [\n    {"id": "no-owner", '
            '"version": "1", "digest": "sha256:' + "0" * 64 + '"}\n  ]\n}',
            "plugins-lock-schema",
            4,
        ),
        (
            '{"apiVersion": "tuneplane/plugins-lock/v1",\n "plugins": [{"id": "a/b", "version": "1", '
            '"digest": "md5:1", "note": 1}]}',
            "plugins-lock-schema",
            2,
        ),
        ('{"apiVersion": "tuneplane/plugins-lock/v1",\n\n "plugins": [,]}', "plugins-lock-parse", 3),
    ],
)
def test_lock_schema_problems_are_placed(lab: Path, body: str, rule: str, line: int) -> None:
    (lab / "experiments" / "exp1" / "plugins.lock.json").write_text(body)
    problems = check(lab, recipe_plugins=[])
    assert problems and all(p.rule == rule and p.is_error for p in problems), problems
    assert problems[0].line == line


def test_unsorted_lock_is_a_warning_and_missing_plugin_an_error(lab: Path) -> None:
    digest = tree_digest(lab / "plugins" / "opsd-patch")
    (lab / "experiments" / "exp1" / "plugins.lock.json").write_text(
        json.dumps(
            {
                "apiVersion": LOCK_API,
                "plugins": [
                    {"id": "zed/opsd-patch", "version": "1.2.0", "digest": digest},
                    {"id": "alice/gone", "version": "1.0.0", "digest": digest},
                ],
            }
        )
    )
    problems = check(lab)
    assert rules(problems, Severity.WARNING) == ["plugins-lock-order"]
    assert rules(problems, Severity.ERROR) == ["plugins-lock-missing"]


def test_a_starforge_kind_is_one_problem_not_also_a_missing_capability(tmp_path: Path) -> None:
    """`kind:` in place of `capability:` is said once, at `kind:`, with the fix; a plugin.yaml with
    neither still hears that `capability` is missing."""
    files = plugin_files()
    files["plugin.yaml"] = files["plugin.yaml"].replace("capability: algorithm", "kind: algorithm")
    errors = [p for p in validate_plugin_dir(write_tree(tmp_path / "opsd-patch", files), tmp_path) if p.is_error]
    assert [(p.pointer, "`capability:`" in p.hint) for p in errors] == [("/kind", True)], errors
    files["plugin.yaml"] = files["plugin.yaml"].replace("kind: algorithm\n", "")
    errors = [p for p in validate_plugin_dir(write_tree(tmp_path / "bare", files), tmp_path) if p.is_error]
    assert [p.pointer for p in errors] == ["/capability"], errors
