"""Digests of the TunePlane contract (CONTRACT §3). Standard library only: the launcher uses it in jobs.

`manifest_digest` needs a YAML 1.1 parser and takes it lazily (PyYAML), so the job side never imports it.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

SKIP_PARTS = frozenset({"__pycache__", ".git", ".venv", ".mypy_cache", ".ruff_cache"})
SKIP_NAMES = frozenset({".DS_Store"})
SKIP_SUFFIXES = (".pyc", ".pyo")


class DigestError(Exception):
    """A tree cannot be digested safely (a symlink leaves it, a file is unreadable)."""


def canonical_json(value: object) -> bytes:
    """Sorted keys, no spaces, UTF-8 kept as is: the byte form every digest hashes."""
    text = json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return text.encode("utf-8")


def sha256_bytes(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def manifest_digest_of(manifest: object) -> str:
    """Digest of an already parsed (YAML 1.1 safe-load) recipe manifest."""
    return sha256_bytes(canonical_json(manifest))


def manifest_digest(path: Path) -> str:
    """Digest of a recipe.yaml file, parsed with YAML 1.1 safe-load semantics."""
    import yaml  # lazy: PyYAML (the YAML 1.1 semantics the contract names) is absent from training images

    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    data = yaml.load(path.read_bytes(), Loader=loader)  # a safe loader
    return manifest_digest_of({} if data is None else data)


def bundle_digest(manifest_digest_value: str, template_digest_value: str | None = None) -> str:
    """The recipe digest; legacy StarForge locks also folded the template digest in."""
    body: dict[str, str] = {"manifest": manifest_digest_value}
    if template_digest_value is not None:
        body["template"] = template_digest_value
    return sha256_bytes(canonical_json(body))


def _skipped(rel: str) -> bool:
    parts = rel.split("/")
    if any(p in SKIP_PARTS for p in parts):
        return True
    return parts[-1] in SKIP_NAMES or rel.endswith(SKIP_SUFFIXES)


def tree_files(root: Path) -> list[tuple[str, Path]]:
    """Regular files under root as (relative POSIX path, path), sorted by code point, skips applied.

    Symlinks are followed only while they stay inside root; one that leaves it is refused.
    """
    real_root = os.path.realpath(root)
    found: list[tuple[str, Path]] = []
    seen_dirs: set[str] = set()
    for dirpath, dirnames, filenames in os.walk(root, followlinks=True):
        rel_dir = os.path.relpath(dirpath, root)
        real_dir = os.path.realpath(dirpath)
        if real_dir in seen_dirs:  # a symlink cycle inside the tree
            dirnames[:] = []
            continue
        seen_dirs.add(real_dir)
        dirnames[:] = [d for d in dirnames if d not in SKIP_PARTS]
        for name in list(dirnames) + filenames:
            full = os.path.join(dirpath, name)
            if os.path.islink(full):
                target = os.path.realpath(full)
                if not (target == real_root or target.startswith(real_root + os.sep)):
                    rel = name if rel_dir == "." else f"{rel_dir}/{name}"
                    raise DigestError(f"symlink {rel!r} points outside {root}")
        for name in filenames:
            rel = name if rel_dir == "." else f"{rel_dir}/{name}".replace(os.sep, "/")
            full_path = Path(dirpath, name)
            if not _skipped(rel) and full_path.is_file():
                found.append((rel, full_path))
    found.sort(key=lambda item: item[0])
    return found


def tree_digest(root: Path) -> str:
    """Template / plugin directory digest: one running sha256 over `path\\0bytes\\0` per file."""
    h = hashlib.sha256()
    for rel, path in tree_files(root):
        h.update(rel.encode("utf-8"))
        h.update(b"\0")
        with open(path, "rb") as fh:  # in chunks: a big file costs time, never its size in memory
            while chunk := fh.read(1 << 20):
                h.update(chunk)
        h.update(b"\0")
    return "sha256:" + h.hexdigest()


# Folders the digest skips that hold code a job could import or run (a virtual environment, a
# repository): shipped inside a plugin they would travel unpinned, so plugins refuse them. The caches
# (`__pycache__`, `.mypy_cache`, `.ruff_cache`) are tool output, never copied into a job's private tree.
UNPINNED_FOLDERS = frozenset({".venv", ".git"})


def unpinned_folders(root: Path) -> list[str]:
    """Relative paths of UNPINNED_FOLDERS under root, sorted (not walked into)."""
    found = []
    for dirpath, dirnames, _filenames in os.walk(root):
        for name in sorted(dirnames):
            if name in UNPINNED_FOLDERS:
                found.append(os.path.relpath(os.path.join(dirpath, name), root).replace(os.sep, "/"))
        dirnames[:] = [d for d in dirnames if d not in SKIP_PARTS]
    return sorted(found)


def pinned_copy(root: Path, dest: Path) -> str:
    """Copy the files the digest covers from root into dest; return the digest of the bytes written.

    Each file is read once: the bytes hashed are the bytes written, so a file swapped after this call
    cannot reach an import from dest. A NUL byte in a file is refused (DigestError): the contract's
    digest has no length framing, so only NUL-free contents parse back into one tree (see
    docs/plugins.md, "What the digest pins").
    """
    h = hashlib.sha256()
    dest.mkdir(parents=True, exist_ok=False)
    for rel, path in tree_files(root):
        target = dest / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        h.update(rel.encode("utf-8"))
        h.update(b"\0")
        with open(path, "rb") as src, open(target, "xb") as out:
            while chunk := src.read(1 << 20):
                if b"\0" in chunk:
                    raise DigestError(
                        f"{rel} holds a NUL byte; a plugin file must not (the digest cannot "
                        "tell such a file from two files)"
                    )
                h.update(chunk)
                out.write(chunk)
        h.update(b"\0")
    return "sha256:" + h.hexdigest()
