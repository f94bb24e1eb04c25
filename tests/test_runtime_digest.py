"""Digests (CONTRACT §3), checked against a second implementation written here from the contract text.

The reference below is deliberately naive (pure-Python PyYAML loader, `rglob`, one sort) so that a shared
mistake with `tuneplane.runtime.digest` is unlikely. Trees cover every skip rule, nesting, non-ASCII names and
an order where directory-walk order and code-point order disagree.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from tuneplane.lab.catalog import load_catalog
from tuneplane.lab.locks import digest_consistent
from tuneplane.models.lock import RecipeLock
from tuneplane.runtime.digest import (
    DigestError,
    bundle_digest,
    canonical_json,
    manifest_digest,
    pinned_copy,
    tree_digest,
    unpinned_folders,
)

SKIPPED_COMPONENTS = {"__pycache__", ".git", ".venv", ".mypy_cache", ".ruff_cache"}
EMPTY_SHA256 = "sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"


# ── the reference implementation ────────────────────────────────────────────────────────────────────


def ref_canonical(value: object) -> bytes:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


def ref_manifest_digest(text: str) -> str:
    data = yaml.load(text, Loader=yaml.SafeLoader)
    return "sha256:" + hashlib.sha256(ref_canonical({} if data is None else data)).hexdigest()


def ref_bundle(manifest: str, template: str | None = None) -> str:
    body = {"manifest": manifest} if template is None else {"manifest": manifest, "template": template}
    return "sha256:" + hashlib.sha256(ref_canonical(body)).hexdigest()


def ref_skipped(rel: str) -> bool:
    parts = rel.split("/")
    return bool(SKIPPED_COMPONENTS.intersection(parts)) or parts[-1] == ".DS_Store" or rel.endswith((".pyc", ".pyo"))


def ref_tree_digest(root: Path) -> str:
    files = [p for p in root.rglob("*") if p.is_file()]
    rels = sorted(p.relative_to(root).as_posix() for p in files)
    h = hashlib.sha256()
    for rel in rels:
        if ref_skipped(rel):
            continue
        h.update(rel.encode("utf-8") + b"\0" + (root / rel).read_bytes() + b"\0")
    return "sha256:" + h.hexdigest()


# ── trees ───────────────────────────────────────────────────────────────────────────────────────────

TREES: dict[str, dict[str, str | bytes | None]] = {
    "empty": {},
    "only-empty-dirs": {"a": None, "b/c": None},
    "one-file": {"train.sh": "echo hi\n"},
    "empty-file": {"empty": ""},
    "skips-everywhere": {
        "train.py": "print(1)\n",
        "__pycache__/train.cpython-311.pyc": b"\x00junk",
        "pkg/__pycache__/mod.cpython-312.pyc": b"\x01junk",
        "pkg/deep/er/__pycache__/x.txt": "not even bytecode, still skipped\n",
        "pkg/mod.pyc": b"\x02",
        "pkg/mod.pyo": b"\x03",
        ".DS_Store": b"\x00\x00\x00\x01Bud1",
        "pkg/.DS_Store": b"\x00",
        ".git/HEAD": "ref: refs/heads/main\n",
        ".venv/bin/python": "#!/bin/sh\n",
        ".mypy_cache/3.11/x.json": "{}",
        ".ruff_cache/CACHEDIR.TAG": "x",
        "pkg/mod.py": "X = 1\n",
    },
    "near-misses-are-kept": {
        "__pycache__x/kept.txt": "kept\n",
        "my.pyc.txt": "kept\n",
        "DS_Store": "kept\n",
        ".gitignore": "kept\n",
        "venv/lib.py": "kept\n",
        "mod.pycx": "kept\n",
    },
    "code-point-order": {
        "a/z.txt": "1",
        "a.txt": "2",
        "a-b/x.txt": "3",
        "B.txt": "4",
        "b.txt": "5",
        "a/b/c.txt": "6",
        "Z/y": "7",
        "_x": "8",
        "~tilde": "9",
    },
    "non-ascii": {"données/é.txt": "ça\n", "日本/語.md": "# 見出し\n", "ascii.txt": "plain\n", "emoji-😀.txt": "😀"},
    "binary-content": {"weights.bin": bytes(range(256)) * 4, "nul": b"\0\0\0"},
}


@pytest.mark.parametrize("name", sorted(TREES))
def test_tree_digest_matches_reference(tmp_path: Path, build_tree: Any, name: str) -> None:
    root = tmp_path / "tree"
    build_tree(root, TREES[name])
    expected = ref_tree_digest(root)
    assert tree_digest(root) == expected
    assert expected.startswith("sha256:") and len(expected) == 71


def test_empty_tree_is_sha256_of_nothing(tmp_path: Path) -> None:
    (tmp_path / "t").mkdir()
    assert tree_digest(tmp_path / "t") == EMPTY_SHA256


def test_skipped_files_do_not_change_the_digest(tmp_path: Path, build_tree: Any) -> None:
    root = build_tree(tmp_path / "t", {"train.py": "print(1)\n"})
    before = tree_digest(root)
    build_tree(root, {"__pycache__/train.pyc": b"x", "sub/.DS_Store": b"y", "x.pyo": b"z", ".git/config": "[core]\n"})
    assert tree_digest(root) == before


@pytest.mark.parametrize("change", ["content", "rename", "add", "remove"])
def test_every_real_change_changes_the_digest(tmp_path: Path, build_tree: Any, change: str) -> None:
    root = build_tree(tmp_path / "t", {"train.py": "print(1)\n", "sub/config.yaml": "a: 1\n"})
    before = tree_digest(root)
    if change == "content":
        (root / "sub/config.yaml").write_text("a: 2\n", encoding="utf-8")
    elif change == "rename":
        (root / "sub/config.yaml").rename(root / "sub/config.yml")
    elif change == "add":
        (root / "sub/new").write_text("", encoding="utf-8")
    else:
        (root / "train.py").unlink()
    assert tree_digest(root) != before
    assert tree_digest(root) == ref_tree_digest(root)


def test_path_and_content_boundaries_are_unambiguous(tmp_path: Path, build_tree: Any) -> None:
    """`a` holding `b\\0c` and `a\\0b` holding `c` would collide without the separators."""
    one = build_tree(tmp_path / "one", {"ab": "c"})
    two = build_tree(tmp_path / "two", {"a": "bc"})
    assert tree_digest(one) != tree_digest(two)


def test_symlink_inside_the_tree_is_followed(tmp_path: Path, build_tree: Any) -> None:
    root = build_tree(tmp_path / "t", {"real.txt": "data\n"})
    (root / "link.txt").symlink_to("real.txt")
    assert tree_digest(root) == ref_tree_digest(root)


def test_symlink_leaving_the_tree_is_refused(tmp_path: Path, build_tree: Any) -> None:
    build_tree(tmp_path, {"outside/secret.txt": "s\n", "t/ok.txt": "ok\n"})
    (tmp_path / "t" / "leak.txt").symlink_to(tmp_path / "outside" / "secret.txt")
    with pytest.raises(DigestError, match="leak.txt"):
        tree_digest(tmp_path / "t")


def test_symlinked_directory_leaving_the_tree_is_refused(tmp_path: Path, build_tree: Any) -> None:
    build_tree(tmp_path, {"outside/secret.txt": "s\n", "t/ok.txt": "ok\n"})
    (tmp_path / "t" / "sub").mkdir()
    (tmp_path / "t" / "sub" / "escape").symlink_to(tmp_path / "outside", target_is_directory=True)
    with pytest.raises(DigestError):
        tree_digest(tmp_path / "t")


def test_symlink_cycle_terminates(tmp_path: Path, build_tree: Any) -> None:
    root = build_tree(tmp_path / "t", {"d/f.txt": "x"})
    (root / "d" / "loop").symlink_to(root / "d", target_is_directory=True)
    assert tree_digest(root).startswith("sha256:")


# ── manifest and bundle digests ─────────────────────────────────────────────────────────────────────

MANIFESTS = {
    "empty-file": "",
    "only-a-comment": "# nothing here\n",
    "yaml-1.1-booleans": "a: yes\nb: no\nc: on\nd: off\ne: True\n",
    "exponent-without-dot-is-text": "lr: 1e-6\nlr2: 1.0e-6\nlr3: 1E5\n",
    "numbers": "i: 42\nf: 3.5\noct: 0o17\nneg: -3\nbig: 12345678901234567890\n",
    "non-ascii-kept": 'title: Café – 日本語\nsummary: "emoji 😀"\n',
    "nested-and-ordering": "z: 1\na: {y: [3, 2, 1], b: null}\nm:\n  - {k: v}\n",
    "block-scalars": "summary: >-\n  folded\n  text\nscript: |\n  line1\n  line2\n",
    "quoted-strings": 'v: "1.0.0"\nw: \'2\'\nx: "yes"\n',
    "anchors": "base: &b {x: 1}\nuse: *b\n",
}


@pytest.mark.parametrize("name", sorted(MANIFESTS))
def test_manifest_digest_matches_reference(tmp_path: Path, name: str) -> None:
    path = tmp_path / "recipe.yaml"
    path.write_text(MANIFESTS[name], encoding="utf-8")
    assert manifest_digest(path) == ref_manifest_digest(MANIFESTS[name])


def test_manifest_digest_semantics_are_yaml_1_1(tmp_path: Path) -> None:
    """Pin the YAML 1.1 meanings the contract names, not just agreement with the reference."""
    path = tmp_path / "recipe.yaml"
    path.write_text("a: yes\nlr: 1e-6\n", encoding="utf-8")
    expected = hashlib.sha256(b'{"a":true,"lr":"1e-6"}').hexdigest()
    assert manifest_digest(path) == f"sha256:{expected}"


def test_empty_manifest_digests_like_an_empty_mapping(tmp_path: Path) -> None:
    path = tmp_path / "recipe.yaml"
    path.write_text("", encoding="utf-8")
    assert manifest_digest(path) == "sha256:" + hashlib.sha256(b"{}").hexdigest()


def test_canonical_json_keeps_utf8_and_sorts() -> None:
    expected = '{"a":[1,{"c":3,"d":2}],"b":"é"}'.encode()
    assert canonical_json({"b": "é", "a": [1, {"d": 2, "c": 3}]}) == expected


def test_bundle_digest_current_and_legacy_forms() -> None:
    m, t = "sha256:" + "1" * 64, "sha256:" + "2" * 64
    assert bundle_digest(m) == ref_bundle(m)
    assert bundle_digest(m, t) == ref_bundle(m, t)
    assert bundle_digest(m) != bundle_digest(m, t)


@pytest.mark.parametrize("method", load_catalog().ids)
def test_catalog_digests_match_reference(method: str) -> None:
    catalog = load_catalog()
    recipe_dir = catalog.recipe_dir(method)
    digest, manifest, template = catalog.digests(method)
    expected_manifest = ref_manifest_digest((recipe_dir / "recipe.yaml").read_text(encoding="utf-8"))
    assert manifest == expected_manifest
    assert template == ref_tree_digest(recipe_dir / catalog.recipe(method).template)
    assert digest == ref_bundle(expected_manifest)


# ── StarForge legacy locks ──────────────────────────────────────────────────────────────────────────


def _starforge_locks(shared: Path) -> list[Path]:
    locks = sorted((shared / "fixtures" / "starforge-lab" / "experiments").glob("*/recipe.lock.json"))
    assert locks, "the StarForge fixture lab has no locks"
    return locks


def test_starforge_legacy_locks_fold_the_template_into_the_digest(shared_dir: Path) -> None:
    for path in _starforge_locks(shared_dir):
        recipe = json.loads(path.read_text(encoding="utf-8"))["recipe"]
        assert recipe["digest"] == ref_bundle(recipe["manifest_digest"], recipe["template_digest"]), path
        assert recipe["digest"] == bundle_digest(recipe["manifest_digest"], recipe["template_digest"])
        assert recipe["digest"] != bundle_digest(recipe["manifest_digest"])


def test_starforge_legacy_locks_are_consistent_and_legacy(shared_dir: Path) -> None:
    for path in _starforge_locks(shared_dir):
        lock = RecipeLock.model_validate(json.loads(path.read_text(encoding="utf-8")))
        assert lock.legacy
        assert digest_consistent(lock), path


def test_a_tampered_legacy_digest_is_inconsistent(shared_dir: Path) -> None:
    data = json.loads(_starforge_locks(shared_dir)[0].read_text(encoding="utf-8"))
    data["recipe"]["digest"] = "sha256:" + "0" * 64
    assert not digest_consistent(RecipeLock.model_validate(data))


def test_digest_module_is_standard_library_only() -> None:
    """The launcher digests plugins inside jobs, where only the standard library is certain."""
    source = Path(__import__("tuneplane.runtime.digest", fromlist=["x"]).__file__).read_text(encoding="utf-8")
    top_level = [line for line in source.splitlines() if line.startswith(("import ", "from "))]
    allowed = ("__future__", "hashlib", "json", "os", "pathlib", "typing")
    assert all(line.split()[1].split(".")[0] in allowed for line in top_level), top_level


# ── the launcher's private copy ──────────────────────────────────────────────────────────────────────


def test_the_private_copy_digests_like_the_contract_and_holds_only_digested_files(tmp_path: Path) -> None:
    root = tmp_path / "plugin"
    (root / "pkg" / "__pycache__").mkdir(parents=True)
    (root / "plugin.yaml").write_text("name: p\n", encoding="utf-8")
    (root / "pkg" / "mod.py").write_text("X = 'é'\n", encoding="utf-8")
    (root / "pkg" / "__pycache__" / "mod.cpython-312.pyc").write_bytes(b"cached")
    (root / ".DS_Store").write_bytes(b"finder")
    copy = tmp_path / "copy" / "plugin"
    assert pinned_copy(root, copy) == tree_digest(root)
    assert sorted(p.relative_to(copy).as_posix() for p in copy.rglob("*") if p.is_file()) == [
        "pkg/mod.py",
        "plugin.yaml",
    ]
    assert (copy / "pkg" / "mod.py").read_bytes() == (root / "pkg" / "mod.py").read_bytes()


def test_the_private_copy_refuses_a_nul_byte_naming_the_file(tmp_path: Path) -> None:
    root = tmp_path / "plugin"
    root.mkdir()
    (root / "data.bin").write_bytes(b"weights\0zz.py\0code")
    with pytest.raises(DigestError, match="data.bin"):
        pinned_copy(root, tmp_path / "copy")


def test_unpinned_folders_are_named_and_caches_are_not(tmp_path: Path) -> None:
    for rel in (".venv/lib", "sub/.git", "__pycache__", ".mypy_cache", "sub/ok"):
        (tmp_path / rel).mkdir(parents=True)
    assert unpinned_folders(tmp_path) == [".venv", "sub/.git"]
