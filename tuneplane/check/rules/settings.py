"""Rules `profile-*`, `storage-root`, `tool-requirement`: tuneplane.yaml holds only values the cluster and
the lab's CI take. `tp validate` reports them; `resolve` (so `tp render`, `tp submit` and the bot)
refuses with the first error, so nothing validate passes is refused later for these reasons.

Passing: `cpu: "96"`, `memory: 1600Gi`, `shm_size: 64Gi`, `node_selector: {nvidia.com/gpu.product:
NVIDIA-H200}`, `tolerations: [{key: nvidia.com/gpu, operator: Exists, effect: NoSchedule}]`,
`storage.root: /mnt/tuneplane`, `tool.requirement: tuneplane==VERSION`.
Failing: `shm_size: 64GB` (`profile-quantity`: not a Kubernetes quantity), `node_selector: {pool: "gpu a"}`
(`profile-node-selector`), `{key: "", operator: Equal}` or `{operator: Exists, value: x}`
(`profile-toleration`), `storage.root: data/../x` (`storage-root`), a requirement with a line break
(`tool-requirement`: the CI's `pip install` line would read the rest as options); an empty requirement
is a warning (CI stops until it says how to install tp).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import PurePosixPath

from tuneplane import __version__
from tuneplane.check.kube import label_key_error, label_value_error, quantity_error, toleration_errors
from tuneplane.lab.load import Lab
from tuneplane.lab.yamlio import escape
from tuneplane.models.lab import LabFile
from tuneplane.problems import Problem, Severity

MAX_REQUIREMENT = 1000
# How this project installs: its repository at a tag, or a wheel; a bare name only with the team's own index,
# since PyPI's `tuneplane` is another project.
REQUIREMENT_HINT = (
    "write how CI installs tp: 'tuneplane @ git+https://HOST/OWNER/REPO@TAG' (this project's repository at a "
    "release tag), a wheel's URL ('tuneplane @ https://HOST/tuneplane-VERSION-py3-none-any.whl'), or "
    "tuneplane==VERSION with index_url naming your team's index (on PyPI that name is another project)"
)


def check(lab: Lab) -> Iterator[Problem]:
    if lab.settings is None or lab.doc is None:
        return
    for pointer, rule, message, hint, severity in findings(lab.settings):
        yield lab.doc.problem(pointer, rule, message, hint=hint, severity=severity)


def errors(lab: Lab) -> list[Problem]:
    """The errors of `check`, for the commands that refuse to go on (resolve raises the first)."""
    return [p for p in check(lab) if p.is_error]


Finding = tuple[str, str, str, str, Severity]  # (pointer, rule, message, hint, severity)


def findings(settings: LabFile) -> Iterator[Finding]:
    for name, profile in sorted(settings.profiles.items()):
        at = f"/profiles/{escape(name)}"
        yield from _profile_quantities(at, profile.cpu, profile.memory, profile.shm_size)
        for key, value in sorted(profile.node_selector.items()):
            if error := label_key_error(key) or label_value_error(value):
                yield (
                    f"{at}/node_selector/{escape(key)}",
                    "profile-node-selector",
                    f"profile {name}: node_selector: {error}",
                    "node selectors are node labels: write the key and value exactly as "
                    "`kubectl get nodes --show-labels` prints them",
                    Severity.ERROR,
                )
        for i, toleration in enumerate(profile.tolerations):
            for field, error in toleration_errors(toleration.key, toleration.operator, toleration.value):
                yield (
                    f"{at}/tolerations/{i}/{field}",
                    "profile-toleration",
                    f"profile {name}: toleration {i + 1}: {error}",
                    "match a taint by key: {key: nvidia.com/gpu, operator: Exists, effect: NoSchedule}, or "
                    "{key: K, operator: Equal, value: V}",
                    Severity.ERROR,
                )
    yield from _storage(settings)
    yield from _tool(settings)


def _profile_quantities(at: str, cpu: str, memory: str, shm: str) -> Iterator[Finding]:
    for field, text, example in (("cpu", cpu, '"96" or 500m'), ("memory", memory, "1600Gi"), ("shm_size", shm, "64Gi")):
        if not text and field != "shm_size":
            continue  # no request: the scheduler's default
        if error := quantity_error(text):
            yield (
                f"{at}/{field}",
                "profile-quantity",
                f"{field}: {error}",
                f"write a Kubernetes quantity, e.g. {example} (Gi is 2^30 bytes; GB is not a unit there)",
                Severity.ERROR,
            )


def _storage(settings: LabFile) -> Iterator[Finding]:
    root = settings.cluster.storage.root
    parts = PurePosixPath(root).parts
    if not root.startswith("/") or ".." in parts or any(c in root for c in "\n\r\0"):
        yield (
            "/cluster/storage/root",
            "storage-root",
            f"cluster.storage.root {root!r} must be an absolute path without '..'",
            "name the mount point inside the pods, e.g. /mnt/tuneplane: every run directory is made under it",
            Severity.ERROR,
        )


def _tool(settings: LabFile) -> Iterator[Finding]:
    requirement = settings.tool.requirement
    if not requirement.strip():
        yield (
            "/tool/requirement",
            "tool-requirement",
            "tool.requirement is empty: the lab's CI stops before `tp validate`, since it cannot know how to "
            "install tp",
            REQUIREMENT_HINT,
            Severity.WARNING,
        )
    elif len(requirement) > MAX_REQUIREMENT or any(ord(c) < 32 or ord(c) == 127 for c in requirement):
        yield (
            "/tool/requirement",
            "tool-requirement",
            "tool.requirement holds a line break or control character (or is over 1000 characters): the CI "
            "installs it with `pip install`, which would read what follows as more options",
            f"one PEP 508 requirement on one line, e.g. tuneplane=={__version__}",
            Severity.ERROR,
        )
    index = settings.tool.index_url
    if index and (any(ord(c) <= 32 or ord(c) == 127 for c in index) or not index.startswith(("https://", "http://"))):
        yield (
            "/tool/index_url",
            "tool-requirement",
            f"tool.index_url {index[:80]!r} is not one http(s) URL: the CI passes it to `pip install --index-url`",
            "an index URL such as https://pypi.example.com/simple, or empty for PyPI",
            Severity.ERROR,
        )
