"""The LaunchPlan: what a FrameworkAdapter compiles a JobSpec and an operation into.

argv is a list (never a shell string); env holds only non-secret values, secrets are named in
`secret_env` and reach the process from a Secret (cluster) or the local backend's memory.
"""

from __future__ import annotations

from typing import Literal

from tuneplane.runtime.records import FrozenRecord, field

LaunchMode = Literal["direct", "process-group", "ray-driver"]


class ArtifactGlob(FrozenRecord):
    kind: Literal["checkpoint", "log", "export", "evaluation"]
    pattern: str  # relative to the out dir
    format: str = ""


class LaunchPlan(FrozenRecord):
    argv: list[str]
    cwd: str
    env: dict[str, str]  # in a fixed order (spec_to_env), no secrets
    mode: LaunchMode = "direct"
    nodes: int = 1
    procs_per_node: int = 1
    secret_env: dict[str, str] = field(default_factory=dict)  # variable → key in the per-run Secret
    artifacts: list[ArtifactGlob] = field(default_factory=list)
    in_process: bool = False  # the launcher may run argv in its own interpreter (python entrypoints)
