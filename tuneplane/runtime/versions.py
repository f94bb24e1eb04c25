"""A PEP 440 subset in the standard library: `packaging` may be absent from training images.

The launcher checks each plugin's `requires.core` with it, and `tp validate` checks recipes' and
plugins' `requires.core` with the same code, so the job and the pull-request check never disagree.
"""

from __future__ import annotations

import re
from typing import TypeAlias

from tuneplane.runtime.records import FrozenRecord

_VERSION_RE = re.compile(
    r"v?(?:(?P<epoch>\d+)!)?(?P<release>\d+(?:\.\d+)*)"
    r"(?:[-_.]?(?P<pre_l>alpha|beta|preview|pre|rc|a|b|c)[-_.]?(?P<pre_n>\d*))?"
    r"(?:-(?P<post_n1>\d+)|[-_.]?(?P<post_l>post|rev|r)[-_.]?(?P<post_n2>\d*))?"
    r"(?:[-_.]?dev[-_.]?(?P<dev_n>\d*))?"
    r"(?:\+(?P<local>[a-z0-9]+(?:[-_.][a-z0-9]+)*))?",
    re.IGNORECASE,
)
_PRE_RANK = {"a": 0, "alpha": 0, "b": 1, "beta": 1, "c": 2, "rc": 2, "pre": 2, "preview": 2}
# (epoch, release, pre, post, dev): what versions compare by, PEP 440's order as plain tuples
VersionKey: TypeAlias = tuple[int, tuple[int, ...], tuple[int, ...], tuple[int, ...], tuple[int, ...]]
_SPEC_RE = re.compile(r"\s*(===|~=|==|!=|<=|>=|<|>)\s*(\S+?)\s*")


class Version(FrozenRecord):
    """A parsed PEP 440 version; `key` orders versions as PEP 440 does."""

    __slots__ = ("epoch", "release", "pre", "post", "dev", "local")
    _fields = __slots__
    epoch: int
    release: tuple[int, ...]
    pre: tuple[int, int] | None
    post: int | None
    dev: int | None
    local: str

    def __init__(
        self,
        epoch: int,
        release: tuple[int, ...],
        pre: tuple[int, int] | None,
        post: int | None,
        dev: int | None,
        local: str,
    ) -> None:
        self._set(epoch, release, pre, post, dev, local)

    @property
    def key(self) -> VersionKey:
        release = list(self.release)
        while len(release) > 1 and release[-1] == 0:  # 1.0 == 1.0.0
            release.pop()
        if self.pre is not None:
            pre: tuple[int, ...] = self.pre
        elif self.dev is not None and self.post is None:
            pre = (-1,)  # 1.0.dev0 sorts before 1.0a0
        else:
            pre = (3,)
        post = (-1,) if self.post is None else (self.post,)
        dev = (1, 0) if self.dev is None else (0, self.dev)
        return (self.epoch, tuple(release), pre, post, dev)

    @property
    def is_prerelease(self) -> bool:
        return self.pre is not None or self.dev is not None


def parse_version(text: str) -> Version:
    """Parse a PEP 440 version; ValueError when it is not one."""
    m = _VERSION_RE.fullmatch(text.strip())
    if m is None:
        raise ValueError(f"{text!r} is not a PEP 440 version")
    pre = None
    if m["pre_l"]:
        pre = (_PRE_RANK[m["pre_l"].lower()], int(m["pre_n"] or 0))
    post = None
    if m["post_n1"] is not None or m["post_l"] is not None:
        post = int(m["post_n1"] or m["post_n2"] or 0)
    dev = int(m["dev_n"] or 0) if m["dev_n"] is not None else None
    return Version(
        int(m["epoch"] or 0), tuple(int(p) for p in m["release"].split(".")), pre, post, dev, (m["local"] or "").lower()
    )


def _prefix_match(candidate: Version, prefix: str) -> bool:
    wanted = parse_version(prefix)
    if wanted.epoch != candidate.epoch:
        return False
    size = len(wanted.release)
    padded = candidate.release + (0,) * max(0, size - len(candidate.release))
    return padded[:size] == wanted.release


def _equal(candidate: Version, target: str) -> bool:
    if target.endswith(".*"):
        return _prefix_match(candidate, target[:-2])
    wanted = parse_version(target)
    if not wanted.local:
        candidate = Version(candidate.epoch, candidate.release, candidate.pre, candidate.post, candidate.dev, "")
    return candidate.key == wanted.key and candidate.local == wanted.local


def _base(v: Version) -> VersionKey:
    return Version(v.epoch, v.release, None, None, None, "").key


def _compatible(candidate: Version, target: str) -> bool:
    wanted = parse_version(target)
    if len(wanted.release) < 2:
        raise ValueError(f"~={target} needs at least two release segments")
    prefix = ".".join(str(p) for p in wanted.release[:-1])
    if wanted.epoch:
        prefix = f"{wanted.epoch}!{prefix}"
    return candidate.key >= wanted.key and _prefix_match(candidate, prefix)


def _less(candidate: Version, target: str) -> bool:
    wanted = parse_version(target)
    if candidate.key >= wanted.key:
        return False
    # `<1.0` does not admit 1.0rc1 unless the bound itself is a pre-release (PEP 440).
    return wanted.is_prerelease or not candidate.is_prerelease or _base(candidate) != _base(wanted)


def _greater(candidate: Version, target: str) -> bool:
    wanted = parse_version(target)
    if candidate.key <= wanted.key:
        return False
    # `>1.0` does not admit 1.0.post1 unless the bound itself is a post-release (PEP 440).
    return wanted.post is not None or candidate.post is None or _base(candidate) != _base(wanted)


def _clause_admits(op: str, target: str, v: Version, raw: str) -> bool:
    if op == "===":
        return raw.strip().lower() == target.lower()
    if target.endswith(".*") and op not in ("==", "!="):
        raise ValueError(f"{op}{target}: a wildcard is only allowed with == and !=")
    if op == "==":
        return _equal(v, target)
    if op == "!=":
        return not _equal(v, target)
    if op == "~=":
        return _compatible(v, target)
    wanted = parse_version(target)
    if op == "<=":
        return v.key <= wanted.key
    if op == ">=":
        return v.key >= wanted.key
    return _less(v, target) if op == "<" else _greater(v, target)


def version_admits(specifier: str, version: str) -> bool:
    """True when `version` satisfies the comma-separated PEP 440 `specifier` ("" admits anything).

    Pre-releases are admitted when they satisfy the clauses: a development build of the tool must be
    able to run the plugins its release will run. ValueError for a malformed specifier or version.
    """
    candidate = parse_version(version)
    clauses = [c for c in specifier.split(",")] if specifier.strip() else []
    admitted = True
    for clause in clauses:
        m = _SPEC_RE.fullmatch(clause)
        if m is None:
            raise ValueError(f"{clause.strip()!r} is not a version specifier clause")
        admitted = _clause_admits(m[1], m[2], candidate, version) and admitted
    return admitted
