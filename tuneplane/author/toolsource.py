"""How the lab's CI and pre-commit install `tp`: read from how this `tp` was installed (PEP 610).

pip records a direct install in the distribution's `direct_url.json`: a VCS checkout (`vcs_info`
with the exact commit), an archive URL (`archive_info`, maybe with a hash) or a local directory
(`dir_info`). No such file means the package came from an index. A local path cannot be reached from
CI, so then the tool looks for the checkout's `origin` remote and commit; failing that it says it
cannot know, and the lab's `tool.requirement` stays empty with a comment saying what to write.
"""

from __future__ import annotations

import json
import os
import re
import textwrap
from collections.abc import Mapping
from pathlib import Path
from urllib.parse import unquote, urlparse

from tuneplane.constants import TOOL_REQUIREMENT_ENV
from tuneplane.runtime.records import FrozenRecord

DIST = "tuneplane"
_REMOTE = re.compile(r"^(https://|ssh://|git@[^:]+:)")
_VCS_REF = re.compile(r"^(?P<name>[A-Za-z0-9._-]+)\s*@\s*git\+(?P<url>[^@\s]+(?:@[^@\s/]+)?)@(?P<rev>[^@\s#]+)$")


class ToolSource(FrozenRecord):
    """`requirement` is what `pip install` gets in CI (empty: unknown); `comment` says where it came from."""

    requirement: str
    comment: str
    hook_repo: str = ""  # the project's git repository, for the pre-commit hook (empty: unknown)
    hook_rev: str = ""

    @property
    def comment_lines(self) -> list[str]:
        return textwrap.wrap(self.comment, width=96, break_long_words=False, break_on_hyphens=False)


def installed_source(version: str) -> ToolSource:
    """The source of the running `tp`: `TUNEPLANE_TOOL_REQUIREMENT` when set (a team's own index or
    fork, for `tp init` and `tp migrate` alike), else its distribution metadata."""
    given = os.environ.get(TOOL_REQUIREMENT_ENV, "").strip()
    if given:
        try:
            return explicit_source(given)
        except ValueError as exc:
            from tuneplane.errors import UsageError  # lazy: only a bad value needs it

            raise UsageError(
                f"{TOOL_REQUIREMENT_ENV}={given!r}: {exc}",
                hint="set it to 'tuneplane @ git+URL@TAG' or a wheel's URL, or unset it",
            ) from None
    from importlib import metadata  # lazy: distribution metadata is read only for the running tp's source

    try:
        dist = metadata.distribution(DIST)
    except metadata.PackageNotFoundError:
        return ToolSource(
            "",
            "tp runs from a source tree that is not installed, so CI cannot install the same; write a requirement here",
        )
    text = dist.read_text("direct_url.json")
    try:
        direct = json.loads(text) if text else None
    except ValueError:
        direct = None
    source_tree = Path(__file__).resolve().parents[2]
    if direct is None and (source_tree / "pyproject.toml").is_file():
        # tp runs from a source tree (its own metadata, e.g. an egg-info, says nothing of an index)
        direct = {"url": source_tree.as_uri(), "dir_info": {}}
    origin = _checkout_origin(direct) if isinstance(direct, dict) and "dir_info" in direct else None
    source = tool_source(direct if isinstance(direct, dict) else None, version, origin=origin)
    return with_release_hook(source, dist.metadata.get_all("Project-URL") or [], version)


def with_release_hook(source: ToolSource, project_urls: list[str], version: str) -> ToolSource:
    """The pre-commit hook installs tp as the workflow does: from `requirement` itself whenever there is one.
    Only when CI cannot know how to install tp does the hook fall back to the project's repository (its
    `Project-URL`) at this release's tag, which beats a hook that needs tp on every PATH."""
    if source.hook_repo or source.requirement:
        return source
    repo = _project_url(project_urls)
    return ToolSource(source.requirement, source.comment, repo, f"v{version}") if repo else source


def tool_source(direct: Mapping[str, object] | None, version: str, origin: tuple[str, str] | None) -> ToolSource:
    """Pure: a PEP 610 record (None: from an index) and a local checkout's (remote URL, commit)."""
    if direct is None:
        return ToolSource(
            f"{DIST}=={version}",
            f"tp {version} was installed from a package index: set index_url to that index (PyPI's "
            f"{DIST} is another project)",
        )
    url = str(direct.get("url", ""))
    vcs = direct.get("vcs_info")
    if isinstance(vcs, dict) and vcs.get("commit_id") and _reachable(url):
        tag = str(vcs.get("requested_revision") or "")
        shown = f" (requested {tag})" if tag else ""
        return ToolSource(
            f"{DIST} @ {vcs.get('vcs', 'git')}+{url}@{vcs['commit_id']}",
            f"tp was installed from {url} at this commit{shown}",
            url,
            str(vcs["commit_id"]),  # the hook at the commit CI installs (a tag can move, or be local only)
        )
    archive = direct.get("archive_info")
    if isinstance(archive, dict) and _reachable(url):
        hashes = archive.get("hashes") or {}
        pin = f"#sha256={hashes['sha256']}" if isinstance(hashes, dict) and hashes.get("sha256") else ""
        return ToolSource(f"{DIST} @ {url}{pin}", "tp was installed from this archive")
    if origin is not None and _reachable(origin[0]):
        remote, commit = origin
        return ToolSource(
            f"{DIST} @ git+{remote}@{commit}",
            f"tp was installed from a local checkout of {remote}; CI installs the same commit (push it first)",
            remote,
            commit,
        )
    where = unquote(urlparse(url).path) or url or "a local file"
    return ToolSource(
        "",
        f"tp was installed from {where}, which CI cannot reach: write how CI installs tp, "
        f"e.g. '{DIST} @ git+https://HOST/OWNER/REPO@v{version}' or a wheel's URL",
    )


def explicit_source(requirement: str) -> ToolSource:
    """`tp init --tool-requirement`: checked as a PEP 508 requirement naming this distribution."""
    from packaging.requirements import InvalidRequirement, Requirement  # lazy: packaging's parser is slow to import

    try:
        parsed = Requirement(requirement)
    except InvalidRequirement as exc:
        raise ValueError(f"not a requirement pip understands: {exc}") from None
    if parsed.name.lower().replace("_", "-") != DIST:
        raise ValueError(f"it installs {parsed.name!r}, not {DIST!r}")
    match = _VCS_REF.match(requirement.strip())
    if match:
        return ToolSource(requirement, "given to tp init", match["url"], match["rev"])
    return ToolSource(requirement, "given to tp init")


def _reachable(url: str) -> bool:
    """A URL a CI runner can fetch from (a local path or file:// URL is this machine's only)."""
    return bool(_REMOTE.match(url))


def _checkout_origin(direct: Mapping[str, object]) -> tuple[str, str] | None:
    """(origin URL, HEAD commit) of the local directory tp was installed from, when it is a checkout."""
    from tuneplane.lab.gitrepo import checkout_origin  # lazy: only a source checkout is asked about git

    path = Path(unquote(urlparse(str(direct.get("url", ""))).path))
    return checkout_origin(path) if (path / ".git").exists() else None


def _project_url(entries: list[str]) -> str:
    for entry in entries:
        label, _, url = entry.partition(",")
        if label.strip().lower() in ("repository", "source", "source code") and _reachable(url.strip()):
            return url.strip()
    return ""
