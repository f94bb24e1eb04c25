"""`tp init` and `tp new`: every file written, nothing a person wrote ever overwritten, no debris."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml

from tuneplane.backends.kubernetes import rbac
from tuneplane.backends.kubernetes.rbac import RBAC_FILE
from tuneplane.lab.catalog import load_catalog, packaged_catalog_root
from tuneplane.models.lab import LabFile

LAB_FILES = ["tuneplane.yaml", "README.md", ".gitignore", ".pre-commit-config.yaml", ".github/workflows/tuneplane.yml"]
LAB_DIRS = ["experiments", "plugins", "runs", "status"]
CATALOG_IDS = load_catalog(packaged_catalog_root()).ids
IDENTITY_VARS = ["GIT_AUTHOR_NAME", "GIT_AUTHOR_EMAIL", "GIT_COMMITTER_NAME", "GIT_COMMITTER_EMAIL"]


def tree_snapshot(root: Path) -> dict[str, bytes]:
    return {
        p.relative_to(root).as_posix(): p.read_bytes()
        for p in sorted(root.rglob("*"))
        if p.is_file() and ".git" not in p.relative_to(root).parts
    }


# ── tp init ─────────────────────────────────────────────────────────────────────────────────────────


def test_init_writes_every_file_and_folder(tmp_path: Path, tp: Any, git: Any) -> None:
    root = tmp_path / "my-lab"
    result = tp("init", root)
    assert result.code == 0, result.output
    for rel in LAB_FILES:
        assert (root / rel).is_file(), rel
        assert rel in result.out
    for rel in LAB_DIRS:
        assert (root / rel).is_dir(), rel
    settings = LabFile.model_validate(yaml.safe_load((root / "tuneplane.yaml").read_text(encoding="utf-8")))
    assert settings.name == "my-lab"
    assert "local" in settings.profiles
    committed = set(git(root, "ls-files").split())
    assert set(LAB_FILES) <= committed
    assert {f"{d}/.gitkeep" for d in LAB_DIRS} <= committed
    assert git(root, "status", "--porcelain") == ""


def test_a_kubernetes_lab_gets_the_bots_rbac_and_tp_cluster_rbac_follows_its_namespace(
    tmp_path: Path, tp: Any, git: Any
) -> None:
    root = tmp_path / "k-lab"
    result = tp("init", root, "--backend", "kubernetes")
    assert result.code == 0, result.output
    assert RBAC_FILE in result.out and RBAC_FILE in git(root, "ls-files").split()
    written = (root / RBAC_FILE).read_text(encoding="utf-8")
    assert list(yaml.safe_load_all(written)) == rbac.manifests("tuneplane")
    assert tp("cluster", "rbac", cwd=root).out == written

    settings = root / "tuneplane.yaml"
    settings.write_text(settings.read_text(encoding="utf-8").replace("namespace: tuneplane", "namespace: ml-team"))
    printed = tp("cluster", "rbac", cwd=root)
    assert printed.code == 0, printed.output
    assert list(yaml.safe_load_all(printed.out)) == rbac.manifests("ml-team")


def test_a_local_lab_has_no_cluster_rbac(tmp_path: Path, tp: Any) -> None:
    assert tp("init", tmp_path / "l", "--no-git").code == 0
    assert not (tmp_path / "l" / "cluster").exists()


def test_lab_file_explains_itself_with_comments(tmp_path: Path, tp: Any) -> None:
    assert tp("init", tmp_path / "lab", "--no-git").code == 0
    text = (tmp_path / "lab" / "tuneplane.yaml").read_text(encoding="utf-8")
    comments = [line for line in text.splitlines() if line.lstrip().startswith("#") or " # " in line]
    assert len(comments) >= 10
    assert "apiVersion: tuneplane/project/v1" in text and "profiles:" in text


def test_init_writes_valid_workflow_and_pre_commit_config(tmp_path: Path, tp: Any) -> None:
    root = tmp_path / "lab"
    assert tp("init", root, "--no-git").code == 0
    workflow = yaml.safe_load((root / ".github/workflows/tuneplane.yml").read_text(encoding="utf-8"))
    assert workflow["jobs"], workflow
    steps = [s.get("run", "") for job in workflow["jobs"].values() for s in job["steps"]]
    assert any("tp validate" in s and "--format github" in s for s in steps)
    hooks = yaml.safe_load((root / ".pre-commit-config.yaml").read_text(encoding="utf-8"))
    entries = [h["entry"] for repo in hooks["repos"] for h in repo["hooks"]]
    assert any(e.startswith("tp validate") for e in entries)
    ignored = (root / ".gitignore").read_text(encoding="utf-8").splitlines()
    assert "__pycache__/" in ignored


def test_new_lab_validates_clean(tmp_path: Path, tp: Any) -> None:
    root = tmp_path / "lab"
    assert tp("init", root).code == 0
    result = tp("validate", cwd=root)
    assert result.code == 0, result.output


def test_init_commits_with_a_local_identity_when_none_is_configured(
    tmp_path: Path, tp: Any, git: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    for var in IDENTITY_VARS:
        monkeypatch.delenv(var)
    root = tmp_path / "lab"
    result = tp("init", root)
    assert result.code == 0, result.output
    name = git(root, "config", "--local", "user.name").strip()
    email = git(root, "config", "--local", "user.email").strip()
    assert name and email
    assert git(root, "log", "-1", "--format=%an <%ae>").strip() == f"{name} <{email}>"
    assert git(root, "rev-list", "--count", "HEAD").strip() == "1"


def test_init_keeps_a_configured_identity(
    tmp_path: Path, tp: Any, git: Any, monkeypatch: pytest.MonkeyPatch, home: Path
) -> None:
    for var in IDENTITY_VARS:
        monkeypatch.delenv(var)
    (home / ".gitconfig").write_text("[user]\n\tname = Ada Lovelace\n\temail = ada@example.org\n", encoding="utf-8")
    root = tmp_path / "lab"
    assert tp("init", root).code == 0
    assert git(root, "log", "-1", "--format=%an <%ae>").strip() == "Ada Lovelace <ada@example.org>"
    assert "user.name" not in git(root, "config", "--local", "--list")


def test_init_ignores_git_variables_inherited_from_a_hook(
    tmp_path: Path, tp: Any, git: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A hook or CI step exports GIT_DIR / GIT_INDEX_FILE; tp must still create and commit its own repo."""
    outer = tmp_path / "outer"
    outer.mkdir()
    git(outer, "init", "-q")
    monkeypatch.setenv("GIT_DIR", str(outer / ".git"))
    monkeypatch.setenv("GIT_INDEX_FILE", str(outer / ".git" / "index"))
    root = tmp_path / "lab"
    result = tp("init", root)
    monkeypatch.delenv("GIT_DIR")
    monkeypatch.delenv("GIT_INDEX_FILE")
    assert result.code == 0, result.output
    assert git(root, "rev-list", "--count", "HEAD").strip() == "1"
    assert git(outer, "rev-list", "--all").strip() == ""


def test_init_inside_an_existing_repository_commits_only_its_files(tmp_path: Path, tp: Any, git: Any) -> None:
    root = tmp_path / "lab"
    root.mkdir()
    git(root, "init", "-q")
    (root / "notes.txt").write_text("mine\n", encoding="utf-8")
    git(root, "add", "notes.txt")
    assert tp("init", root, "--yes").code == 0
    assert "notes.txt" not in git(root, "show", "--name-only", "--format=", "HEAD").split()
    assert (root / "notes.txt").read_text(encoding="utf-8") == "mine\n"


def test_init_refuses_an_existing_lab(lab: Path, tp: Any) -> None:
    (lab / "tuneplane.yaml").write_text("apiVersion: tuneplane/project/v1\nname: mine  # edited\n", encoding="utf-8")
    before = tree_snapshot(lab)
    result = tp("init", lab, "--name", "other")
    assert result.code == 2
    assert "already a TunePlane lab" in result.err
    assert tree_snapshot(lab) == before


def test_init_refuses_a_starforge_lab(shared_dir: Path, tmp_path: Path, tp: Any) -> None:
    root = tmp_path / "sf"
    shutil.copytree(shared_dir / "fixtures" / "starforge-lab", root)
    before = tree_snapshot(root)
    result = tp("init", root, "--no-git")
    assert result.code == 2 and "tp migrate" in result.err
    assert tree_snapshot(root) == before


@pytest.mark.parametrize("rel", LAB_FILES)
def test_init_refuses_to_clobber_an_existing_file(tmp_path: Path, tp: Any, rel: str) -> None:
    root = tmp_path / "lab"
    (root / rel).parent.mkdir(parents=True, exist_ok=True)
    (root / rel).write_text("my own content\n", encoding="utf-8")
    result = tp("init", root, "--yes")
    assert result.code == 2, result.output
    assert rel in result.err and "Traceback" not in result.output
    assert (root / rel).read_text(encoding="utf-8") == "my own content\n"
    assert tree_snapshot(root) == {rel: b"my own content\n"}  # nothing else half-written
    assert not (root / ".git").exists()


def test_init_refuses_a_file_where_a_folder_belongs_without_writing_anything(tmp_path: Path, tp: Any) -> None:
    root = tmp_path / "lab"
    root.mkdir()
    (root / "runs").write_text("a file, not a folder\n", encoding="utf-8")
    result = tp("init", root, "--yes", "--no-git")
    assert result.code == 2, result.output
    assert "runs" in result.err
    assert tree_snapshot(root) == {"runs": b"a file, not a folder\n"}


def test_init_into_a_path_that_is_a_file(tmp_path: Path, tp: Any) -> None:
    target = tmp_path / "lab"
    target.write_text("x\n", encoding="utf-8")
    result = tp("init", target)
    assert result.code == 2, result.output
    assert target.read_text(encoding="utf-8") == "x\n"


@pytest.mark.parametrize("name", ["..", ".", "a b", "a/b", "é"])
def test_init_refuses_bad_lab_names(tmp_path: Path, tp: Any, name: str) -> None:
    root = tmp_path / "lab"
    result = tp("init", root, "--name", name, "--no-git")
    assert result.code == 2, result.output
    assert not (root / "tuneplane.yaml").exists()


def test_init_no_git(tmp_path: Path, tp: Any) -> None:
    assert tp("init", tmp_path / "lab", "--no-git").code == 0
    assert not (tmp_path / "lab" / ".git").exists()
    assert (tmp_path / "lab" / "tuneplane.yaml").is_file()


# ── tp new ──────────────────────────────────────────────────────────────────────────────────────────


@pytest.mark.parametrize("method", CATALOG_IDS)
def test_new_for_every_method_locks_the_catalog_and_validates(lab: Path, tp: Any, method: str) -> None:
    name = "exp-" + method.replace("/", "-")
    result = tp("new", name, "--method", method)
    assert result.code == 0, result.output
    exp = lab / "experiments" / name
    catalog = load_catalog()
    lock = json.loads((exp / "recipe.lock.json").read_text(encoding="utf-8"))
    digest, manifest, template = catalog.digests(method)
    assert lock["recipe"]["name"] == method
    pinned = lock["recipe"]
    assert pinned["digest"] == digest
    assert (pinned["manifest_digest"], pinned["template_digest"]) == (manifest, template)
    assert lock["framework"]["version"] == catalog.recipe(method).runtime.default_version
    template_files = {
        p.relative_to(catalog.template_dir(method)).as_posix()
        for p in catalog.template_dir(method).rglob("*")
        if p.is_file() and "__pycache__" not in p.parts and p.suffix not in (".pyc", ".pyo")
    }
    copied = {p.relative_to(exp).as_posix() for p in exp.rglob("*") if p.is_file()}
    assert copied == template_files | {"recipe.lock.json"}
    report = tp("validate", name, "--format", "json")
    data = json.loads(report.out)
    if "reward-source" in {r.id for r in catalog.recipe(method).rules}:
        # an RL scaffold names no reward model (its README asks for one; it cannot be guessed for the
        # user's policy): the one error says which keys to fill, and filled, the scaffold is clean
        [problem] = data["problems"]
        assert problem["rule"] == "config-rule" and "reward.model_name_or_path" in problem["hint"], problem
        config = exp / "config.yaml"
        text = config.read_text(encoding="utf-8")
        config.write_text(
            text.replace('reward:\n  model_name_or_path: ""', "reward:\n  model_name_or_path: rm", 1), encoding="utf-8"
        )
        report = tp("validate", name, "--format", "json")
        data = json.loads(report.out)
    assert data["errors"] == 0, data["problems"]
    assert report.code == 0
    assert not list((lab / "experiments").glob(".tp-new-*"))


def test_new_with_a_framework_version(lab: Path, tp: Any) -> None:
    recipe = load_catalog().recipe("pytorch/image-classification")
    other = next(k for k in sorted(recipe.runtime.versions) if k != recipe.runtime.default_version)
    result = tp("new", "old", "--method", "pytorch/image-classification", "--framework-version", other)
    assert result.code == 0, result.output
    lock = json.loads((lab / "experiments/old/recipe.lock.json").read_text(encoding="utf-8"))
    assert lock["framework"]["version"] == other
    assert lock["framework"]["runtime_id"] == recipe.runtime.versions[other].runtime_id


def test_new_unknown_framework_version_lists_the_known_ones(lab: Path, tp: Any) -> None:
    result = tp("new", "x", "--method", "pytorch/image-classification", "--framework-version", "9.9.9")
    assert result.code == 2
    assert "9.9.9" in result.err
    known = load_catalog().recipe("pytorch/image-classification").runtime.versions
    assert all(v in result.err for v in known)
    assert not (lab / "experiments/x").exists()


def test_new_refuses_an_existing_experiment_and_keeps_it(lab: Path, tp: Any) -> None:
    assert tp("new", "exp", "--method", "custom/custom").code == 0
    (lab / "experiments/exp/train.sh").write_text("exec my-trainer\n", encoding="utf-8")
    before = tree_snapshot(lab / "experiments/exp")
    result = tp("new", "exp", "--method", "pytorch/image-classification")
    assert result.code == 2 and "already exists" in result.err
    assert tree_snapshot(lab / "experiments/exp") == before


def test_new_refuses_a_dangling_symlink_in_the_way(lab: Path, tp: Any) -> None:
    (lab / "experiments/exp").symlink_to(lab / "nowhere")
    result = tp("new", "exp", "--method", "custom/custom")
    assert result.code == 2
    assert not (lab / "nowhere").exists()


def test_new_without_a_method(lab: Path, tp: Any) -> None:
    result = tp("new", "exp")
    assert result.code == 2 and "--method" in result.err


def test_new_outside_a_lab(tmp_path: Path, tp: Any) -> None:
    result = tp("new", "exp", "--method", "custom/custom", cwd=tmp_path)
    assert result.code == 2 and "tp init" in result.err
    assert list(tmp_path.iterdir()) == []


def test_new_failure_leaves_no_staging_and_no_experiment(lab: Path, tp: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    import tuneplane.author.scaffold

    def disk_full(path: Path, data: object) -> None:
        raise OSError(28, "No space left on device")

    with monkeypatch.context() as patch:
        patch.setattr(tuneplane.author.scaffold, "write_json", disk_full)
        result = tp("new", "exp", "--method", "pytorch/image-classification")
    assert result.code != 0
    assert "Traceback" not in result.output
    leftovers = sorted(p.relative_to(lab).as_posix() for p in (lab / "experiments").rglob("*"))
    assert leftovers == ["experiments/.gitkeep"]
    assert tp("new", "exp", "--method", "pytorch/image-classification").code == 0


def test_new_copies_no_bytecode_or_caches(lab: Path, tp: Any, make_catalog: Any) -> None:
    catalog = make_catalog()
    template = catalog / "pytorch/image-classification/template"
    (template / "__pycache__").mkdir()
    (template / "__pycache__/train.cpython-311.pyc").write_bytes(b"\x00")
    (template / "helper.pyc").write_bytes(b"\x00")
    (template / ".DS_Store").write_bytes(b"\x00")
    assert tp("new", "exp", "--method", "pytorch/image-classification").code == 0
    names = {p.name for p in (lab / "experiments/exp").rglob("*")}
    assert not names & {"__pycache__", "helper.pyc", ".DS_Store", "train.cpython-311.pyc"}
    assert "train.py" in names


def test_new_from_an_existing_experiment(lab: Path, tp: Any) -> None:
    assert tp("new", "first", "--method", "pytorch/image-classification").code == 0
    (lab / "experiments/first/config.yaml").write_text("epochs: 7\n", encoding="utf-8")
    result = tp("new", "second", "--from", "first")
    assert result.code == 0, result.output
    second = lab / "experiments/second"
    schema = "../../.tuneplane/schemas/config/pytorch/image-classification.schema.json"
    assert (second / "config.yaml").read_text(encoding="utf-8") == (
        f"# yaml-language-server: $schema={schema}\nepochs: 7\n"
    )
    lock = json.loads((second / "recipe.lock.json").read_text(encoding="utf-8"))
    assert lock["recipe"]["name"] == "pytorch/image-classification"
    assert tp("validate", "second").code == 0


# ── tp new --root: a lab with several experiment roots ─────────────────────────────────────────────


@pytest.fixture()
def two_roots(lab: Path) -> Path:
    settings = lab / "tuneplane.yaml"
    settings.write_text(
        settings.read_text(encoding="utf-8") + "experiment_roots: [experiments, smoke]\n", encoding="utf-8"
    )
    return lab


@pytest.mark.parametrize("spelling", ["smoke", "smoke/", "./smoke"])
def test_new_into_a_declared_root(two_roots: Path, tp: Any, spelling: str) -> None:
    result = tp("new", "gpu-check", "--method", "trl/sft", "--root", spelling)
    assert result.code == 0, result.output
    exp = two_roots / "smoke" / "gpu-check"
    assert (exp / "recipe.lock.json").is_file() and not (two_roots / "experiments" / "gpu-check").exists()
    assert "created smoke/gpu-check/" in result.out
    first = (exp / "config.yaml").read_text(encoding="utf-8").splitlines()[0]
    schema = first.split("$schema=", 1)[1]
    assert (exp / schema).resolve().is_file(), first  # relative to the file where it now lies
    assert not list((two_roots / "smoke").glob(".tp-new-*"))
    validated = tp("validate", "gpu-check")
    assert validated.code == 0, validated.output
    rendered = tp(
        "render",
        "gpu-check",
        "--profile",
        "local",
        "--model",
        "m",
        "--train-data",
        "t",
        "--validation-data",
        "v",
        "--set",
        "eval_strategy=no",
        "--format",
        "json",
    )
    assert rendered.code == 0, rendered.output


def test_new_defaults_to_the_first_root(two_roots: Path, tp: Any) -> None:
    assert tp("new", "a", "--method", "custom/custom").code == 0
    assert (two_roots / "experiments" / "a" / "recipe.lock.json").is_file()


def test_new_into_a_declared_root_that_is_not_there_yet_creates_it(two_roots: Path, tp: Any) -> None:
    assert not (two_roots / "smoke").exists()
    result = tp("new", "s", "--method", "custom/custom", "--root", "smoke")
    assert result.code == 0, result.output
    assert (two_roots / "smoke" / "s" / "recipe.lock.json").is_file()


@pytest.mark.parametrize("root", ["elsewhere", "smok", "../smoke", "runs", "experiments/nested"])
def test_new_refuses_an_undeclared_root_naming_the_declared_ones(two_roots: Path, tp: Any, root: str) -> None:
    before = tree_snapshot(two_roots)
    result = tp("new", "x", "--method", "custom/custom", "--root", root)
    assert result.code == 2, result.output
    assert f"--root {root!r} is not an experiment root of this lab" in result.output
    assert "experiments, smoke" in result.output and "experiment_roots" in result.output
    assert tree_snapshot(two_roots) == before


def test_new_refuses_a_name_another_root_already_has(two_roots: Path, tp: Any) -> None:
    assert tp("new", "dup", "--method", "custom/custom", "--root", "smoke").code == 0
    result = tp("new", "dup", "--method", "custom/custom")
    assert result.code == 2
    assert "already exists at smoke/dup" in result.output
    assert not (two_roots / "experiments" / "dup").exists()


def test_new_from_an_experiment_in_another_root(two_roots: Path, tp: Any) -> None:
    assert tp("new", "base", "--method", "trl/sft", "--root", "smoke").code == 0
    result = tp("new", "copy", "--from", "base")
    assert result.code == 0, result.output
    assert (
        json.loads((two_roots / "experiments" / "copy" / "recipe.lock.json").read_text())["recipe"]["name"] == "trl/sft"
    )


@pytest.mark.parametrize("args", [("--name", "bad name"), ("--backend", "nosuch")], ids=["name", "backend"])
def test_a_refused_init_leaves_no_folder_behind(tmp_path: Path, tp: Any, args: tuple[str, ...]) -> None:
    target = tmp_path / "new" / "deeper"
    result = tp("init", target, *args)
    assert result.code == 2 and "Traceback" not in result.output, result.output
    assert not (tmp_path / "new").exists()


def test_init_on_a_file_is_refused_and_the_file_kept(tmp_path: Path, tp: Any) -> None:
    target = tmp_path / "notes.txt"
    target.write_text("mine\n", encoding="utf-8")
    result = tp("init", target)
    assert result.code == 2 and "is a file, not a directory" in result.err, result.output
    assert target.read_text(encoding="utf-8") == "mine\n"
